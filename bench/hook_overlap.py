#!/usr/bin/env python3
"""Does a DDP comm hook overlap backward? A profile of one step, and seconds per step.

    build/tools/plait/plait run -n 2 -- .venv/bin/python bench/hook_overlap.py --method fp16
    build/tools/plait/plait run -n 2 -- .venv/bin/python bench/hook_overlap.py --method fp16 --wait

Trains the compression trade-off's wide model (784-2048-2048-10, 5.8 M parameters, as 1x1
convolutions where torch has oneDNN) on random data with DDP's default bucketing (25 MiB
buckets, the first up to 1 MiB: two buckets, the last two layers' 16.9 MB and the first
layer's 6.4 MB), its gradients moved by --method: "default" (DDP's own all-reduce) or a
plait.torch.hooks method. --wait makes the hook wait for its bucket before returning, as the
hooks did before they returned pending Futures. Rank 0 prints the seconds per step (the
slowest rank's, min / median / max over --steps after --warmup) and the profile of the last
step: every backward node and every communication range (the hooks' "plait.hooks: bucket"
ranges, DDP's own "<backend>:all_reduce"), in ms from the step's first backward node, and
which backward nodes ran inside each communication range. --trace writes the Chrome trace.
"""
import argparse
import datetime
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))
from ddp_fashion_mnist import MLP, import_plait_torch  # noqa: E402


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", choices=["plait", "gloo"], default="plait")
    p.add_argument("--method", default="fp16", help="default, or a plait.torch.hooks method")
    p.add_argument("--wait", action="store_true", help="the hook waits for its bucket before returning")
    p.add_argument("--powersgd-rank", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--trace", help="Chrome trace of the profiled step (rank 0)")
    return p.parse_args(argv)


def make_hook(args):
    if args.method == "default":
        return None, None
    import plait.torch_hooks as hooks
    params = {"rank": args.powersgd_rank} if args.method in ("powersgd", "auto") else {}
    state, hook = hooks.make(args.method, **params)
    if not args.wait:
        return state, hook

    def waiting(s, bucket):
        fut = hook(s, bucket)
        fut.wait()
        return fut
    return state, waiting


def timeline(prof, backend):
    """(backward nodes, communication ranges) as (start, end, name), ms from the first node."""
    events = [(e.time_range.start, e.time_range.end, e.name) for e in prof.events()]
    nodes = [(s, e, n.split(": ", 1)[1]) for s, e, n in events
             if n.startswith("autograd::engine::evaluate_function: ")]
    comm = [(s, e, n) for s, e, n in events if n.startswith("plait.hooks: bucket") or n == f"{backend}:all_reduce"]
    t0 = min(s for s, _, _ in nodes)
    ms = lambda rows: sorted(((s - t0) / 1e3, (e - t0) / 1e3, n) for s, e, n in rows)  # noqa: E731
    return ms(nodes), ms(comm)


def main(argv=None):
    args = parse_args(argv)
    if args.backend == "plait" or args.method != "default":
        import_plait_torch()
    torch.set_num_threads(1)
    dist.init_process_group(args.backend, timeout=datetime.timedelta(seconds=120))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = MLP(2048, 2048, fc_as_conv=torch.backends.mkldnn.is_available())
    ddp = DDP(model)  # DDP's default bucketing
    state, hook = make_hook(args)
    if hook is not None:
        ddp.register_comm_hook(state, hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(rank)
    x = torch.randn(args.batch_size, 784, generator=gen)
    y = torch.randint(0, 10, (args.batch_size,), generator=gen)

    def step():
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(ddp(x), y).backward()
        opt.step()

    times = []
    for i in range(args.warmup + args.steps):
        dist.barrier()
        t = time.perf_counter()
        step()
        if i >= args.warmup:
            times.append(time.perf_counter() - t)
    slowest = torch.tensor(times, dtype=torch.float64)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    dist.barrier()
    with torch.profiler.profile() as prof:
        step()
    if rank == 0:
        s = sorted(slowest.tolist())
        how = "waiting hook" if args.wait else "hook returns at once"
        print(f"# {args.method} on {args.backend}{'' if args.method == 'default' else ', ' + how}: "
              f"s/step min {s[0]:.4f} median {statistics.median(s):.4f} max {s[-1]:.4f} ({len(s)} steps)")
        nodes, comm = timeline(prof, args.backend)
        for start, end, name in comm:
            inside = [n for s0, e0, n in nodes if start < s0 and e0 < end]
            print(f"comm {start:8.2f} {end:8.2f} ms  {name}: {len(inside)} backward nodes inside"
                  + (f" ({', '.join(inside)})" if inside else ""))
        for start, end, name in nodes:
            print(f"node {start:8.2f} {end:8.2f} ms  {name}")
        if args.trace:
            prof.export_chrome_trace(args.trace)
    dist.barrier()
    if args.backend == "gloo":  # torch 1.13: gloo's teardown can hang at exit (pytorch#75097)
        sys.stdout.flush()
        os._exit(0)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
