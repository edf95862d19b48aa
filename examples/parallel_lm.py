#!/usr/bin/env python3
"""A GPT-style language model trained on the King James Bible, split over ranks the ways torch
users split models that do not fit one worker, over plait or gloo.

    build/tools/plait/plait run -n 4 .venv/bin/python examples/parallel_lm.py --layout fsdp
    build/tools/plait/plait run -n 4 .venv/bin/python examples/parallel_lm.py --layout tp-dp \\
        --backend gloo

Layouts (examples/lm/layouts.py): ddp, fsdp, fsdp-noreshard, tp, tp-dp. The model
(examples/lm/model.py: 4 pre-LN blocks of width 96, 4 heads, 64-byte context, 0.5 M
parameters) starts from --seed on every rank, and every layout and backend trains on the same
batches in the same order (examples/lm/corpus.py): a data-parallel rank takes its slice of
each step's global batch of --batch sequences; a tensor-parallel group shares its slice. So a
layout on plait and on gloo follow the same loss curve, to floating-point tolerance (the sums
of their collectives run in different orders).

Optimizer: AdamW at a constant --lr. Each rank uses one intra-op thread (ranks share the
host's cores). Validation loss: the mean over --eval-batches fixed batches of the held-out
tenth of the text, every --eval-every steps and after the last.

Timing: a step is forward, backward and the optimizer step, from the moment its batch is in
hand; its time is the slowest rank's; step_s is the median over the steps after --warmup.
tokens_per_s is the global batch's tokens over step_s. Rank 0's last line:

    RESULT layout=fsdp backend=plait ranks=4 steps=40 val_loss=2.4104 step_s=0.0312 tokens_per_s=32820
"""
import argparse
import datetime
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lm.corpus import Corpus, kjv_bytes  # noqa: E402
from lm.layouts import LAYOUTS, apply_layout  # noqa: E402
from lm.model import GPT, loss_of  # noqa: E402


def import_plait_torch():
    """Imports plait.torch (registers the "plait" backend), adding build/python if needed."""
    try:
        import plait  # noqa: F401
    except ImportError:
        here = os.path.dirname(os.path.abspath(__file__))
        sys.path.insert(0, os.path.join(os.path.dirname(here), "build", "python"))
    import plait.torch  # noqa: F401


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layout", choices=LAYOUTS, default="ddp")
    p.add_argument("--backend", choices=("plait", "gloo"), default="plait")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--warmup", type=int, default=3, help="steps left out of the timing")
    p.add_argument("--batch", type=int, default=16, help="global batch, in sequences")
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--dim", type=int, default=96)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--tp", type=int, default=2, help="tp-dp: ranks per tensor-parallel group")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--eval-every", type=int, default=0, help="0: after the last step only")
    p.add_argument("--eval-batches", type=int, default=4)
    p.add_argument("--timeout", type=float, default=120, help="seconds, every collective")
    return p.parse_args(argv)


def validation_loss(model, batches):
    with torch.no_grad():
        return sum(loss_of(model(x), y).item() for x, y in batches) / len(batches)


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(1)
    if args.backend == "plait":
        import_plait_torch()
    dist.init_process_group(args.backend, init_method="env://",
                            timeout=datetime.timedelta(seconds=args.timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(args.seed)
    model = GPT(dim=args.dim, heads=args.heads, layers=args.layers, seq=args.seq)
    placement = apply_layout(model, args.layout, args.tp)
    if args.batch % placement.dp_size:
        raise SystemExit(f"--batch {args.batch} does not split over {placement.dp_size} "
                         f"data-parallel ranks")
    model = placement.model
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    corpus = Corpus(kjv_bytes())
    val = corpus.val_batches(args.eval_batches, args.batch, args.seq)

    times = []
    for step in range(args.steps):
        x, y = corpus.train_batch(args.seed, step, args.batch, args.seq,
                                  placement.dp_rank, placement.dp_size)
        start = time.perf_counter()
        loss = loss_of(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        times.append(time.perf_counter() - start)
        last = step + 1 == args.steps
        if (args.eval_every and (step + 1) % args.eval_every == 0) or last:
            v = validation_loss(model, val)
            if rank == 0:
                print(f"step {step + 1} train_loss {loss.item():.4f} val_loss {v:.4f}",
                      flush=True)

    slowest = torch.tensor(times, dtype=torch.float64)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    timed = slowest[args.warmup:].tolist() or slowest.tolist()
    step_s = statistics.median(timed)
    if rank == 0:
        print(f"RESULT layout={args.layout} backend={args.backend} ranks={world} "
              f"steps={args.steps} val_loss={v:.4f} step_s={step_s:.4f} "
              f"tokens_per_s={args.batch * args.seq / step_s:.0f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
