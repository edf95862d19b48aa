#!/usr/bin/env python3
"""Does gradient compression pay? Time to accuracy on hosts with capped links.

    sudo .venv/bin/python examples/compression_tradeoff.py                 # both link rates
    sudo .venv/bin/python examples/compression_tradeoff.py --rates 1gbit --epochs 1 \\
        --configs default@gloo powersgd@plait torch-powersgd@gloo

Trains Fashion-MNIST with DistributedDataParallel on --ranks ranks, each in its own network
namespace "host" (../shared/peers/netns_lab.sh: a bridge, every host link capped at the rate
with TBF in both directions), once per configuration METHOD@BACKEND:

  default         DDP's own all-reduce of fp32 gradients (the uncompressed baseline)
  torch-fp16      torch's fp16_compress_hook          torch-powersgd  torch's powerSGD_hook
  fp16 bf16 int8 sign topk threshold randomk powersgd auto none
                  plait.torch.hooks: plait's compressors over the group's own collectives

Every configuration runs the same --epochs with the same seed, model and data order, with
DDP's default bucketing (25 MiB buckets, the first up to 1 MiB: the wide model's gradients
go in two buckets from the second step, and the hooks move one while backward computes the
other) but torch-powersgd's, in one bucket (torch's PowerSGD hook starts its second
all_reduce from a future's callback, and with several buckets the ranks may start their
collectives in different orders: gloo aborts, "op.preamble.length <= op.nbytes", or hangs);
--bucket-cap-mb sets every configuration's cap. It evaluates the full test set every --eval-every steps (evaluation time is not counted; with
--budget S a configuration stops at the first evaluation past S training seconds). It
prints, per link rate, a table: seconds per iteration, iterations and training seconds to
--target test accuracy, the final accuracy, the bytes each rank sent per iteration (read
from its namespace's eth0 counters: headers and all), the compression ratio against fp32,
and the seconds per iteration spent compressing (plait's hooks measure it). It writes
accuracy against training time, a line per configuration, to <--out>/tradeoff-<rate>.png
(matplotlib) and every run's record to <--out>/tradeoff.json.

Models: "wide" (784-2048-2048-10, 5.8 M parameters, 23 MB of fp32 gradients a step: on
1 Gbit/s links an uncompressed step moves more than its compute takes) and "small" (the DDP
example's 784-256-128-10). PowerSGD's rank, top-k's ratio and the step compression starts at
apply to plait's and torch's hooks alike.

Needs root (network namespaces) and .venv/bin/python (torch and matplotlib). The
lab's names and addresses follow netns_lab.sh's environment (ANC_NS_PREFIX, ANC_BR_NS,
ANC_SUBNET), so two labs can run side by side.
"""

import argparse
import datetime
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

from ddp_fashion_mnist import (MLP, DEFAULT_DATA_DIR, SetupError, import_plait_torch,  # noqa: E402
                               load_split, run_reporting_errors, standardizer)

MODELS = {"wide": (2048, 2048), "small": (256, 128)}
CONFIGS = ["default@gloo", "default@plait", "fp16@plait", "int8@plait", "sign@plait", "topk@plait",
           "powersgd@plait", "auto@plait", "torch-fp16@gloo", "torch-powersgd@gloo"]


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rates", nargs="+", default=["1gbit", "100mbit"], help="link rates (tc syntax)")
    p.add_argument("--configs", nargs="+", default=CONFIGS, help="METHOD@BACKEND, run in this order")
    p.add_argument("--ranks", type=int, default=4, help="ranks, one per namespace host (default: 4)")
    p.add_argument("--model", choices=sorted(MODELS), default="wide")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=32, help="per rank (default: 32)")
    p.add_argument("--lr", type=float, default=1e-3, help="Adam, cosine decay to 0 (default: 1e-3)")
    p.add_argument("--target", type=float, default=0.85, help="test accuracy to time (default: 0.85)")
    p.add_argument("--eval-every", type=int, default=50, help="steps between evaluations")
    p.add_argument("--budget", type=float, default=0,
                   help="training seconds a configuration may take: it stops at the first evaluation "
                        "past them (0: no limit). Its table row says where it stopped")
    p.add_argument("--powersgd-rank", type=int, default=4)
    p.add_argument("--ratio", type=float, default=0.01, help="topk / randomk share")
    p.add_argument("--bucket-cap-mb", type=float, default=0,
                   help="DDP's bucket_cap_mb for every configuration (default 0: DDP's default, and "
                        "torch-powersgd in one bucket)")
    p.add_argument("--start-iter", type=int, default=10,
                   help="steps all-reduced uncompressed first, by every compressing hook (default: 10)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data-dir", default=DEFAULT_DATA_DIR)
    p.add_argument("--out", default="tradeoff-out", help="directory for the PNGs and the JSON")
    p.add_argument("--lab", default=os.path.join(REPO, "..", "shared", "peers", "netns_lab.sh"))
    p.add_argument("--timeout", type=float, default=600, help="per run, seconds")
    p.add_argument("--reuse", action="store_true",
                   help="take a configuration's record from --out when a run left one there")
    # Set by the orchestrator for the ranks it starts.
    p.add_argument("--worker", metavar="CONFIG", help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    p.add_argument("--rate", help=argparse.SUPPRESS)
    return p.parse_args(argv)


# --- a rank ---

def tx_bytes():
    """Bytes this namespace's eth0 sent so far (loopback's, outside a lab host)."""
    for dev in ("eth0", "lo"):
        try:
            with open(f"/sys/class/net/{dev}/statistics/tx_bytes") as f:
                return int(f.read())
        except OSError:
            continue
    return 0


def compute_path(model):
    """What the layers' products run on: torch takes fully connected layers to the BLAS behind
    libblas.so.3 (Debian's reference one, unless OpenBLAS is installed) and 1x1 convolutions
    to oneDNN."""
    if model.fc_as_conv:
        return "oneDNN (layers as 1x1 convolutions)"
    return "BLAS " + os.path.realpath("/usr/lib/x86_64-linux-gnu/libblas.so.3")


def make_hook(args, method, world):
    """(state, hook, plait_stats) for `method`; hook None for DDP's own all-reduce."""
    if method == "default":
        return None, None, None
    if method == "torch-fp16":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        return None, default_hooks.fp16_compress_hook, None
    if method == "torch-powersgd":
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook
        state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=args.powersgd_rank,
                                            start_powerSGD_iter=max(2, args.start_iter),
                                            use_error_feedback=True, warm_start=True)
        return state, powerSGD_hook.powerSGD_hook, None
    import plait.torch_hooks as hooks
    params = {}
    if method in ("powersgd", "auto"):
        params["rank"] = args.powersgd_rank
    if method in ("topk", "randomk"):
        params["ratio"] = args.ratio
    state, hook = hooks.make(method, start_iter=args.start_iter, **params)
    return state, hook, state.stats


def worker(args):
    method, backend = args.worker.split("@")
    if backend == "plait" or method not in ("default", "torch-fp16", "torch-powersgd"):
        import_plait_torch()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    dist.init_process_group(backend, init_method="env://", timeout=datetime.timedelta(seconds=args.timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    train_x, train_y = load_split(args.data_dir, "train")
    test_x, test_y = load_split(args.data_dir, "t10k")
    prepare = standardizer(train_x)
    lo, hi = rank * len(test_x) // world, (rank + 1) * len(test_x) // world
    test_xs, test_ys = prepare(test_x[lo:hi]), test_y[lo:hi]
    model = MLP(*MODELS[args.model], fc_as_conv=torch.backends.mkldnn.is_available())
    n_params = sum(p.numel() for p in model.parameters())
    if args.bucket_cap_mb:
        ddp = DDP(model, bucket_cap_mb=args.bucket_cap_mb)
    elif method == "torch-powersgd":
        # One bucket (see the module's doc): with DDP's default, gloo aborts or hangs.
        dist._DEFAULT_FIRST_BUCKET_BYTES = 1 << 30
        ddp = DDP(model, bucket_cap_mb=1024)
    else:
        ddp = DDP(model)  # DDP's default bucketing
    state, hook, plait_stats = make_hook(args, method, world)
    if hook is not None:
        ddp.register_comm_hook(state, hook)
    opt = torch.optim.Adam(ddp.parameters(), lr=args.lr)
    gen = torch.Generator().manual_seed(args.seed)
    per_rank = len(train_x) // world
    steps_per_epoch = per_rank // args.batch_size
    total = steps_per_epoch * args.epochs
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5 * (1 + np.cos(np.pi * min(s, total) / total)))

    def evaluate():
        ddp.eval()
        with torch.no_grad():
            correct = (model(test_xs).argmax(dim=1) == test_ys).sum().item()
        ddp.train()
        counts = torch.tensor([correct, len(test_ys)], dtype=torch.float64)
        dist.all_reduce(counts)
        return counts[0].item() / counts[1].item()

    curve, train_s, step, sent, over_budget = [], 0.0, 0, 0, False
    dist.barrier()
    for epoch in range(args.epochs):
        if over_budget:
            break
        order = torch.randperm(len(train_x), generator=gen)[rank * per_rank:(rank + 1) * per_rank]
        for b in range(steps_per_epoch):
            idx = order[b * args.batch_size:(b + 1) * args.batch_size]
            tx0, t0 = tx_bytes(), time.perf_counter()
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(ddp(prepare(train_x[idx])), train_y[idx]).backward()
            opt.step()
            sched.step()
            train_s += time.perf_counter() - t0
            sent += tx_bytes() - tx0
            step += 1
            if step % args.eval_every == 0 or step == total:
                acc = evaluate()
                slowest = torch.tensor([train_s], dtype=torch.float64)
                dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
                curve.append((step, slowest.item(), acc))
                if rank == 0:
                    print(f"{args.worker} {args.rate}: step {step}/{total} train_s={slowest.item():.1f} "
                          f"test_accuracy={acc:.4f}", flush=True)
                # Every rank sees the same slowest time, so all stop at the same step.
                if args.budget and slowest.item() >= args.budget and step < total:
                    over_budget = True
                    break
    # Means over the ranks: bytes sent and seconds compressing per step.
    hook_s = comm_s = 0.0
    if plait_stats:
        hook_s, comm_s = plait_stats["hook_s"], plait_stats["comm_s"]
    totals = torch.tensor([sent, hook_s - comm_s], dtype=torch.float64)
    dist.all_reduce(totals)
    if rank == 0:
        reached = [(s, t) for s, t, a in curve if a >= args.target]
        record = {
            "config": args.worker, "method": method, "backend": backend, "rate": args.rate,
            "ranks": world, "model": args.model, "params": n_params, "epochs": args.epochs,
            "batch_per_rank": args.batch_size, "steps": step, "planned_steps": total,
            "s_per_iter": curve[-1][1] / step, "compute": compute_path(model),
            "final_accuracy": curve[-1][2], "target": args.target,
            "steps_to_target": reached[0][0] if reached else None,
            "seconds_to_target": reached[0][1] if reached else None,
            "sent_bytes_per_iter": totals[0].item() / world / step,
            "fp32_bytes_per_iter": 4 * n_params,
            "compress_s_per_iter": totals[1].item() / world / step if plait_stats else None,
            # DDP lays the buckets out again after the first step (the first one up to 1 MiB).
            "bucket_bytes": ddp._get_ddp_logging_data().get("rebuilt_bucket_sizes")
            or ddp._get_ddp_logging_data().get("bucket_sizes", "?"),
            "curve": curve,
        }
        with open(args.result, "w") as f:
            json.dump(record, f)
    if backend == "gloo":
        # torch 1.13: destroying DDP's Reducer joins a gloo thread that waits for the GIL this
        # thread holds (the rank hangs at exit, its store watcher spinning). The work is done.
        dist.barrier()
        sys.stdout.flush()
        os._exit(0)
    dist.destroy_process_group()


# --- the orchestrator ---

# netns_lab.sh's names: its hosts are <prefix>0.. with addresses <subnet>.1..
_NS_PREFIX = os.environ.get("ANC_NS_PREFIX", "plns")
_SUBNET = os.environ.get("ANC_SUBNET", "192.168.77")

def sh(*cmd):
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)


def run_config(args, config, rate, out, port):
    result = os.path.join(out, f"{config.replace('@', '-')}-{rate}.json")
    if os.path.exists(result):
        if args.reuse:
            with open(result) as f:
                return json.load(f)
        os.unlink(result)
    env = {**os.environ, "WORLD_SIZE": str(args.ranks), "MASTER_ADDR": f"{_SUBNET}.1",
           "MASTER_PORT": str(port), "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
           "PYTHONPATH": os.environ.get("PYTHONPATH") or os.path.join(REPO, "build", "python"),
           # gloo would take the address the host name resolves to (loopback, in a namespace).
           "GLOO_SOCKET_IFNAME": "eth0"}
    forwarded = ["--model", args.model, "--epochs", str(args.epochs), "--batch-size", str(args.batch_size),
                 "--lr", str(args.lr), "--target", str(args.target), "--eval-every", str(args.eval_every),
                 "--powersgd-rank", str(args.powersgd_rank), "--ratio", str(args.ratio),
                 "--start-iter", str(args.start_iter), "--seed", str(args.seed), "--data-dir", args.data_dir,
                 "--budget", str(args.budget), "--bucket-cap-mb", str(args.bucket_cap_mb),
                 "--timeout", str(args.timeout)]
    procs = []
    for r in range(args.ranks):
        cmd = ["ip", "netns", "exec", f"{_NS_PREFIX}{r}", "env", f"RANK={r}", sys.executable, os.path.abspath(__file__),
               "--worker", config, "--rate", rate, "--result", result] + forwarded
        procs.append(subprocess.Popen(cmd, env=env, stdout=None if r == 0 else subprocess.DEVNULL))
    # A rank that fails ends the run at once: the others would wait for it until the timeout.
    deadline = time.time() + args.timeout + 60
    status = None
    while status is None:
        codes = [p.poll() for p in procs]
        failed = [c for c in codes if c not in (None, 0)]
        if failed:
            status = failed[0]
        elif all(c == 0 for c in codes):
            status = 0
        elif time.time() > deadline:
            status = 124
        else:
            time.sleep(0.2)
    if status != 0 or not os.path.exists(result):
        for p in procs:
            p.kill()
            p.wait()
        raise RuntimeError(f"{config} at {rate}: a rank failed (status {status})")
    with open(result) as f:
        return json.load(f)


def table(records, rate):
    base = next((r for r in records if r["method"] == "default" and r["backend"] == "gloo"), records[0])
    planned = base.get("planned_steps", base["steps"])
    lines = [f"# {rate} links, {base['ranks']} hosts, {base['model']} model ({base['params']} parameters), "
             f"{base['epochs']} epochs of {planned} steps, target {base['target']:.2f}, "
             f"compute on {base.get('compute', '?')}",
             "| config | s/iter | iters to target | s to target | vs fp32 gloo | final accuracy "
             "| MB sent/iter/rank | ratio | compress s/iter | buckets (MB) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in records:
        to = r["seconds_to_target"]
        vs = f"{to / base['seconds_to_target']:.2f}x" if to and base["seconds_to_target"] else "-"
        ratio = 2 * (r["ranks"] - 1) / r["ranks"] * r["fp32_bytes_per_iter"] / max(1, r["sent_bytes_per_iter"])
        comp = f"{r['compress_s_per_iter']:.4f}" if r["compress_s_per_iter"] is not None else "-"
        final = f"{r['final_accuracy']:.4f}"
        buckets = " + ".join(f"{int(b) / 1e6:.1f}" for b in str(r.get("bucket_bytes", "")).replace(",", " ").split()
                             if b.isdigit()) or "?"
        if r["steps"] < r.get("planned_steps", r["steps"]):
            final += f" (budget: step {r['steps']})"
        lines.append(f"| {r['config']} | {r['s_per_iter']:.3f} | {r['steps_to_target'] or '-'} | "
                     f"{to:.1f} | {vs} | {final} | {r['sent_bytes_per_iter'] / 1e6:.2f} | "
                     f"{ratio:.1f}x | {comp} | {buckets} |" if to else
                     f"| {r['config']} | {r['s_per_iter']:.3f} | - | - | - | {final} | "
                     f"{r['sent_bytes_per_iter'] / 1e6:.2f} | {ratio:.1f}x | {comp} | {buckets} |")
    return "\n".join(lines)


def plot(records, rate, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 5))
    colors = plt.get_cmap("tab20").colors  # a colour per configuration: the default cycle has 10
    for i, r in enumerate(records):
        # Solid on plait, dashed on gloo.
        ax.plot([t for _, t, _ in r["curve"]], [a for _, _, a in r["curve"]], label=r["config"],
                color=colors[(2 * i) % 20 + (2 * i) // 20], linestyle="-" if r["backend"] == "plait" else "--")
    ax.axhline(records[0]["target"], color="grey", linestyle=":", linewidth=1)
    ax.set_xlabel("training seconds (evaluation excluded)")
    ax.set_ylabel("test accuracy")
    ax.set_title(f"Fashion-MNIST, {records[0]['ranks']} hosts on {rate} links")
    ax.set_ylim(0.6, 0.92)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def orchestrate(args):
    if os.geteuid() != 0:
        raise SetupError("needs root: each rank runs in a network namespace of its own")
    if not os.path.exists(args.lab):
        raise SetupError(f"no netns lab script at {args.lab} (--lab)")
    os.makedirs(args.out, exist_ok=True)
    everything, port = [], 29800 + os.getpid() % 100
    for rate in args.rates:
        subprocess.run([args.lab, "down"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        sh(args.lab, "up", str(args.ranks))
        try:
            sh(args.lab, "shape", rate, "tbf")
            records = []
            for config in args.configs:
                port += 2
                try:
                    records.append(run_config(args, config, rate, args.out, port))
                except RuntimeError as e:  # the table says so; the other configs still run
                    print(f"# {e}", flush=True)
        finally:
            subprocess.run([args.lab, "down"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        print(table(records, rate), flush=True)
        png = os.path.join(args.out, f"tradeoff-{rate}.png")
        plot(records, rate, png)
        print(f"# accuracy against training time: {png}", flush=True)
        everything += records
    with open(os.path.join(args.out, "tradeoff.json"), "w") as f:
        json.dump(everything, f, indent=1)


def main(argv=None):
    args = parse_args(argv)
    return run_reporting_errors(lambda: worker(args) if args.worker else orchestrate(args))


if __name__ == "__main__":
    sys.exit(main())
