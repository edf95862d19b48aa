#!/usr/bin/env python3
"""Where the time of a torch.distributed all_reduce on the "plait" backend goes, layer by layer.

Launch like any torch.distributed job; every rank runs the same calls:

    build/tools/plait/plait run -n 2 .venv/bin/python bench/torch_breakdown.py
    build/tools/plait/plait run -n 1 .venv/bin/python bench/torch_breakdown.py --sizes 8

Layers, each an in-place float32 sum, each timed on its own:

  plait        comm.allreduce(array).wait() through `import plait` (NumPy): plait's own
               call and wait behind a thin binding, the floor for a call made from Python
  pg           ProcessGroupPlait.allreduce([t], opts).wait(): adds torch's binding of
               ProcessGroup.allreduce, the c10d dispatcher, this backend's checks and Work
  dist         dist.all_reduce(t): adds torch.distributed's Python wrapper
  gloo         dist.all_reduce(t, group=<gloo group>), for comparison (--gloo)

Each layer runs --blocks blocks of --calls calls after a warm-up; a block's time is its mean
per call on rank 0 (the ranks run in lockstep); rank 0 prints min / median / max over the
blocks and the step from one layer to the next. With -n 1 nothing is exchanged: the steps are
each layer's fixed cost. Layers are interleaved block by block, so a noisy moment of the
machine lands on all of them.
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np
import torch
import torch.distributed as dist


def import_plait():
    try:
        import plait.torch  # noqa: F401
    except ImportError:
        here = os.path.dirname(os.path.abspath(__file__))
        sys.path.insert(0, os.path.join(os.path.dirname(here), "build", "python"))
        import plait.torch  # noqa: F401
    import plait
    return plait


def parse_size(text):
    t = text.strip().upper().removesuffix("B")
    scale = {"K": 1 << 10, "M": 1 << 20}.get(t[-1:], 1)
    return int(t[:-1] if scale > 1 else t) * scale


def layers(nbytes, comm, gloo):
    count = max(1, nbytes // 4)
    array = np.zeros(count, np.float32)
    tensor = torch.zeros(count)
    pg = dist.distributed_c10d._get_default_group()
    opts = dist.AllreduceOptions()
    calls = {
        "plait": lambda: comm.allreduce(array).wait(),
        "pg": lambda: pg.allreduce([tensor], opts).wait(),
        "dist": lambda: dist.all_reduce(tensor),
    }
    if gloo is not None:
        calls["gloo"] = lambda: dist.all_reduce(tensor, group=gloo)
    return calls


def measure(args, calls):
    blocks = {name: [] for name in calls}
    for fn in calls.values():
        for _ in range(args.warmup):
            fn()
    for _ in range(args.blocks):
        for name, fn in calls.items():
            dist.barrier()
            start = time.perf_counter()
            for _ in range(args.calls):
                fn()
            blocks[name].append((time.perf_counter() - start) / args.calls * 1e6)
    return blocks


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="8,8K,1M", help="comma-separated sizes (default 8,8K,1M)")
    p.add_argument("--calls", type=int, default=2000, help="calls per block (default 2000)")
    p.add_argument("--blocks", type=int, default=7, help="blocks per layer (default 7)")
    p.add_argument("--warmup", type=int, default=500)
    p.add_argument("--gloo", action="store_true", help="also time gloo")
    args = p.parse_args()
    plait = import_plait()
    torch.set_num_threads(1)
    dist.init_process_group("plait")
    rank, world = dist.get_rank(), dist.get_world_size()
    comm = plait.init()
    gloo = dist.new_group(backend="gloo") if args.gloo else None
    if rank == 0:
        print(f"# all_reduce f32 sum, {world} ranks, µs per call: min / median / max over "
              f"{args.blocks} blocks of {args.calls} calls; step = this layer's median minus "
              f"the layer above")
        print("| bytes | layer | min | median | max | step |")
        print("|---:|---|---:|---:|---:|---:|")
    for size in args.sizes.split(","):
        nbytes = parse_size(size)
        blocks = measure(args, layers(nbytes, comm, gloo))
        if rank == 0:
            above = None
            for name, times in blocks.items():
                med = statistics.median(times)
                step = "" if above is None or name == "gloo" else f"{med - above:+.2f}"
                print(f"| {nbytes} | {name} | {min(times):.2f} | {med:.2f} | {max(times):.2f} "
                      f"| {step} |", flush=True)
                above = med
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
