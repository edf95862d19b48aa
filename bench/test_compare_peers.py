"""compare_peers.sh puts plait and its peers side by side alike: the same statistic (the
slowest rank's mean time per call) for every column, results checked for every column.

Runs the script against a stand-in `plait` and a stand-in peers directory, so it needs
neither a build nor MPI:  python3 -m pytest -q bench/test_compare_peers.py
"""
import os
import stat
import subprocess
import tempfile
import textwrap
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))

# Writes the record plait bench would: `wrong` is null unless --check was given.
FAKE_PLAIT = textwrap.dedent("""\
    #!/bin/sh
    echo "PLAIT_TRANSPORT=$PLAIT_TRANSPORT $@" >> "$ARGS_LOG"
    json=""; size=""; check=null
    while [ $# -gt 0 ]; do
      case "$1" in
        --json) json="$2"; shift ;;
        --min) size="$2"; shift ;;
        --check) check="$WRONG" ;;
      esac
      shift
    done
    echo "{\\"bytes\\":$size,\\"time_us\\":10.0,\\"busbw_GBps\\":1.0,\\"wrong\\":$check}" > "$json"
    [ "$check" = null ] || [ "$check" -eq 0 ] || exit 1
    """)

# A peer whose ranks differ: mean 5 us, slowest 20 us.
FAKE_RUN = textwrap.dedent("""\
    #!/bin/sh
    echo "peers PEERS=$PEERS" >> "$ARGS_LOG"
    for size in $SIZES; do
      echo "RESULT label=ompi-shm np=$NP bytes=$size iters=100 avg_us=5.000 max_us=20.000 \\
    algbw_GBps=0.1 busbw_GBps=0.1 check=$PEER_CHECK"
    done
    """)

# bench/oneccl/run.sh NP "SIZES": its own RESULT lines, among oneCCL's warnings on stderr.
FAKE_ONECCL = textwrap.dedent("""\
    #!/bin/sh
    echo "oneccl $1 $2" >> "$ARGS_LOG"
    echo "|CCL_WARN| a warning that is not a result" >&2
    for size in $2; do
      echo "RESULT label=oneccl np=$1 bytes=$size iters=100 avg_us=30.000 max_us=40.000 \\
    algbw_GBps=0.2 busbw_GBps=0.2 check=$ONECCL_CHECK"
    done
    """)


def executable(path, text):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)


class ComparePeers(unittest.TestCase):
    def run_script(self, wrong="0", peer_check="ok", **extra):
        with tempfile.TemporaryDirectory() as tmp:
            plait = os.path.join(tmp, "plait")
            peers = os.path.join(tmp, "peers")
            os.mkdir(peers)
            executable(plait, FAKE_PLAIT)
            executable(os.path.join(peers, "run.sh"), FAKE_RUN)
            oneccl = os.path.join(tmp, "oneccl_run.sh")
            executable(oneccl, FAKE_ONECCL)
            args_log = os.path.join(tmp, "args")
            env = dict(os.environ, NPS="2", SIZES="8 65536", PEERS="ompi-shm",
                       PLAIT=plait, PEERS_DIR=peers, ARGS_LOG=args_log, WRONG=wrong,
                       PEER_CHECK=peer_check, ONECCL_RUN=oneccl, ONECCL_CHECK=peer_check)
            env.update({"REPS": "1", **extra})
            done = subprocess.run([os.path.join(HERE, "compare_peers.sh")], env=env,
                                  capture_output=True, text=True, timeout=60)
            with open(args_log) as f:
                lines = f.read().splitlines()
            # The calls of plait; the peers' runners are asserted apart.
            calls = [c for c in lines if not c.startswith(("peers ", "oneccl "))]
            self.runners = [c for c in lines if c.startswith(("peers ", "oneccl "))]
            return done, calls

    def test_plait_runs_with_check_and_every_column_is_the_slowest_rank(self):
        done, calls = self.run_script()
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(len(calls), 2)
        for call in calls:
            self.assertIn("--check", call.split())
            self.assertIn("PLAIT_TRANSPORT=auto", call.split())
        self.assertIn("slowest rank's mean time per call", done.stdout)
        self.assertIn("| 8 | 10.0 / 1.000 | 20.0 / 0.100 |", done.stdout)
        self.assertIn("| 65536 | 10.0 / 1.000 | 20.0 / 0.100 |", done.stdout)

    def test_transports_add_a_plait_column_each_and_reps_give_the_spread(self):
        done, calls = self.run_script(TRANSPORTS="auto tcp", REPS="2")
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(len(calls), 8)  # 2 reps x 2 transports x 2 sizes
        self.assertEqual(sum("PLAIT_TRANSPORT=tcp" in c.split() for c in calls), 4)
        self.assertIn("| bytes | plait | plait-tcp | ompi-shm |", done.stdout)
        self.assertIn("| 8 | 10.0 (10.0-10.0) / 1.000 | 10.0 (10.0-10.0) / 1.000 | "
                      "20.0 (20.0-20.0) / 0.100 |", done.stdout)

    def test_a_wrong_result_shows_as_fail_for_plait_and_for_a_peer(self):
        done, _ = self.run_script(wrong="3", peer_check="FAIL")
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn("| 8 | FAIL | FAIL |", done.stdout)

    def test_oneccl_runs_through_its_own_runner_and_is_a_column(self):
        done, _ = self.run_script(PEERS="ompi-shm oneccl")
        self.assertEqual(done.returncode, 0, done.stderr)
        # ../shared/peers/run.sh does not know oneccl: it gets the other peers only.
        self.assertEqual(self.runners, ["peers PEERS=ompi-shm", "oneccl 2 8 65536"])
        self.assertIn("| bytes | plait | ompi-shm | oneccl |", done.stdout)
        self.assertIn("| 8 | 10.0 / 1.000 | 20.0 / 0.100 | 40.0 / 0.200 |", done.stdout)

    def test_oneccl_alone_and_its_wrong_result_shows_as_fail(self):
        done, _ = self.run_script(PEERS="oneccl", peer_check="FAIL")
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(self.runners, ["oneccl 2 8 65536"])
        self.assertIn("| bytes | plait | oneccl |", done.stdout)
        self.assertIn("| 8 | 10.0 / 1.000 | FAIL |", done.stdout)


if __name__ == "__main__":
    unittest.main()
