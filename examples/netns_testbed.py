"""Runs an example's ranks on a testbed of network-namespace "hosts", one rank per host, with
one host's link capped lower than the rest (--slow-link RANK:RATE). Needs root and iproute2.

The testbed: a bridge in a namespace of its own, and per rank a namespace whose eth0 (a veth
into the bridge) has 10.77.0.(rank+1); every link capped both ways by a token bucket (tc tbf:
the host's egress and the bridge port's), at --link-rate and the slow rank's at RATE. Nothing
touches this machine's own network, and the names carry this process's id, so testbeds of
concurrent runs do not meet. An example that takes --slow-link calls run_ranks() when it is
started directly (no RANK in the environment): it builds the testbed, starts itself once per
host with RANK set (the ranks meet at rank 0's address as under torchrun, and plait sees one
host per namespace), and removes the testbed.
"""
import os
import re
import shutil
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SUBNET = "10.77.0"


def parse_link(text):
    """RANK:RATE (tc's syntax: 100mbit, 1gbit)."""
    import argparse

    try:
        rank, rate = text.split(":")
        return int(rank), rate
    except ValueError:
        raise argparse.ArgumentTypeError(f"--slow-link takes RANK:RATE, not '{text}'") from None


def add_arguments(parser):
    parser.add_argument("--slow-link", type=parse_link, metavar="RANK:RATE",
                        help="run each rank on its own namespace host (root), that rank's link "
                             "capped at RATE and every other link at --link-rate")
    parser.add_argument("--link-rate", default="1gbit", help="with --slow-link: the other links (1gbit)")
    parser.add_argument("--ranks", type=int, default=4, help="with --slow-link: how many ranks (4)")


def is_launcher(args):
    """Whether this process should build the testbed and start the ranks."""
    return args.slow_link is not None and "RANK" not in os.environ


def sh(*cmd):
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)


class Testbed:
    """The namespaces of one run; remove() takes them down (and with them the veths)."""

    def __init__(self, hosts):
        tag = f"pl{os.getpid() % 100000}"
        self.bridge = f"{tag}br"
        self.hosts = [f"{tag}h{i}" for i in range(hosts)]
        self.made = []
        try:
            self._make()
        except BaseException:
            self.remove()
            raise

    def _make(self):
        sh("ip", "netns", "add", self.bridge)
        self.made.append(self.bridge)
        sh("ip", "-n", self.bridge, "link", "set", "lo", "up")
        sh("ip", "-n", self.bridge, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", self.bridge, "link", "set", "br0", "up")
        for i, ns in enumerate(self.hosts):
            sh("ip", "netns", "add", ns)
            self.made.append(ns)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            # The pair is born inside the two namespaces: no name ever exists out here.
            sh("ip", "link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name", f"port{i}",
               "netns", self.bridge)
            sh("ip", "-n", ns, "addr", "add", f"{SUBNET}.{i + 1}/24", "dev", "eth0")
            sh("ip", "-n", ns, "link", "set", "eth0", "up")
            sh("ip", "-n", self.bridge, "link", "set", f"port{i}", "master", "br0")
            sh("ip", "-n", self.bridge, "link", "set", f"port{i}", "up")

    def cap(self, host, rate):
        for ns, dev in ((self.hosts[host], "eth0"), (self.bridge, f"port{host}")):
            cap(ns, dev, rate)

    def remove(self):
        for ns in reversed(self.made):
            subprocess.run(["ip", "netns", "del", ns], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.made = []


def cap(ns, dev, rate):
    # A burst of about 5 ms at the rate (at least rate/HZ, so the bucket never starves) and a
    # queue of about 80 ms: a step's gradient (a megabyte) cannot slip through in one burst.
    m = re.fullmatch(r"([0-9.]+)([kmg])bit", rate.lower())
    if not m:
        raise SystemExit(f"--slow-link: rate '{rate}' is not like 100mbit or 1gbit")
    bits = float(m.group(1)) * {"k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)]
    burst = max(64 * 1024, int(bits / 8 * 0.005))
    limit = max(1 << 20, int(bits / 8 * 0.08))
    sh("tc", "-n", ns, "qdisc", "replace", "dev", dev, "root", "tbf", "rate", rate,
       "burst", str(burst), "limit", str(limit))


def run_ranks(args, argv, script, timeout_s=1800):
    """Builds the lab, runs `script argv` once per rank in its own namespace and returns the
    first failing rank's status (0 if all succeeded). Rank 0's output goes to our stdout."""
    if os.geteuid() != 0:
        raise SystemExit("--slow-link needs root (it builds network namespaces)")
    if not shutil.which("ip") or not shutil.which("tc"):
        raise SystemExit("--slow-link: ip and tc (iproute2) are not installed")
    slow_rank, slow_rate = args.slow_link
    if not 0 <= slow_rank < args.ranks:
        raise SystemExit(f"--slow-link: rank {slow_rank} is not one of the {args.ranks} ranks")
    testbed = Testbed(args.ranks)
    procs = []
    try:
        for host in range(args.ranks):
            testbed.cap(host, slow_rate if host == slow_rank else args.link_rate)
        port = 29500 + os.getpid() % 400
        env = {**os.environ, "WORLD_SIZE": str(args.ranks), "MASTER_ADDR": f"{SUBNET}.1",
               "MASTER_PORT": str(port), "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
               "PYTHONPATH": os.pathsep.join(filter(None, [os.path.join(REPO, "build", "python"),
                                                           os.environ.get("PYTHONPATH")])),
               # gloo would take the address the host name resolves to (loopback here).
               "GLOO_SOCKET_IFNAME": "eth0"}
        for r in range(args.ranks):
            cmd = ["ip", "netns", "exec", testbed.hosts[r], "env", f"RANK={r}", sys.executable, script, *argv]
            procs.append(subprocess.Popen(cmd, env=env, stdout=None if r == 0 else subprocess.DEVNULL))
        # A rank that fails ends the run at once: the others would wait for it until their timeout.
        until = time.time() + timeout_s
        while True:
            codes = [p.poll() for p in procs]
            failed = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
            if failed:
                r, c = failed[0]
                print(f"netns testbed: rank {r} exited with status {c}; stopping the others", file=sys.stderr)
                return c
            if all(c == 0 for c in codes):
                return 0
            if time.time() > until:
                print(f"netns testbed: the ranks ran past {timeout_s} s; stopping them", file=sys.stderr)
                return 124
            time.sleep(0.2)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        testbed.remove()
