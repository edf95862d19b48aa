#!/usr/bin/env python3
"""A GPT-style language model trained on the King James Bible, split over ranks the ways torch
users split models that do not fit one worker, over plait or gloo.

    build/tools/plait/plait run -n 4 .venv/bin/python examples/parallel_lm.py --layout fsdp
    build/tools/plait/plait run -n 4 .venv/bin/python examples/parallel_lm.py --layout tp-dp \\
        --backend gloo

Layouts: ddp, fsdp, fsdp-noreshard, tp, tp-dp (examples/lm/layouts.py), and pipelines, pp over
all ranks, pp-dp (pipelines of --pp ranks, FSDP2 across them) and pp-tp-dp (each stage tensor
parallel over --tp ranks, pipelines of --pp such groups, FSDP2 across pipelines where the ranks
allow), under --schedule gpipe, 1f1b,
interleaved-1f1b or zero-bubble with --microbatches per step (examples/lm/pipeline.py). The model
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

    RESULT layout=fsdp schedule=- backend=plait ranks=4 microbatches=- steps=40 val_loss=2.4582
        step_s=0.0720 tokens_per_s=14222 exposed_comm_s=0.0121 bubble=- params=...

exposed_comm_s (median seconds a step waited on communication that compute did not hide) and
bubble (the share of a pipeline's step a rank waited for its peers; bubble_s the seconds, and
bubble_closed_s the schedule's closed form from the measured forward and backward times) come
from plait.torch.timeline with --timeline PATH, on the plait backend; "-" otherwise.
"""
import argparse
import contextlib
import datetime
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lm import checkpoint  # noqa: E402
from lm.corpus import Corpus, kjv_bytes  # noqa: E402
from lm.layouts import LAYOUTS, apply_layout, tensor_parallel_stage  # noqa: E402
from lm.model import GPT, loss_of  # noqa: E402
from lm.pipeline import SCHEDULES, Pipeline  # noqa: E402
from torch.distributed.device_mesh import init_device_mesh  # noqa: E402
from torch.distributed.fsdp import fully_shard  # noqa: E402

PIPELINE_LAYOUTS = ("pp", "pp-dp", "pp-tp-dp")


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
    p.add_argument("--layout", choices=LAYOUTS + PIPELINE_LAYOUTS, default="ddp")
    p.add_argument("--schedule", choices=tuple(SCHEDULES), default="1f1b",
                   help="pipelines: the schedule")
    p.add_argument("--microbatches", type=int, default=4, help="pipelines: per step")
    p.add_argument("--pp", type=int, default=2, help="pp-dp, pp-tp-dp: ranks per pipeline")
    p.add_argument("--backend", choices=("plait", "gloo"), default="plait")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--warmup", type=int, default=3, help="steps left out of the timing")
    p.add_argument("--batch", type=int, default=16, help="global batch, in sequences")
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--dim", type=int, default=96)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--tp", type=int, default=2,
                   help="tp-dp, pp-tp-dp: ranks per tensor-parallel group")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--eval-every", type=int, default=0, help="0: after the last step only")
    p.add_argument("--eval-batches", type=int, default=4)
    p.add_argument("--timeout", type=float, default=120, help="seconds, every collective")
    p.add_argument("--checkpoint-dir", help="where --save-at writes and --resume reads "
                   "sharded checkpoints (torch.distributed.checkpoint)")
    p.add_argument("--save-at", type=int, action="append", default=[],
                   help="save a checkpoint after this step (repeatable)")
    p.add_argument("--resume", action="store_true",
                   help="start from the newest checkpoint in --checkpoint-dir")
    p.add_argument("--timeline", metavar="PATH",
                   help="record the steps after --warmup with plait.torch.timeline: "
                        "PATH.json (Perfetto trace), PATH.png (Gantt chart), the breakdown "
                        "per step, and exposed_comm_s and bubble in the RESULT line")
    return p.parse_args(argv)


def validation_loss(model, batches):
    with torch.no_grad():
        return sum(loss_of(model(x), y).item() for x, y in batches) / len(batches)


def pipeline_layout(model, args, world, val):
    """pp: one pipeline over all ranks; pp-dp: pipelines of --pp consecutive ranks, FSDP2 over
    the ranks that hold the same stages; pp-tp-dp: a (dp, pp, tp) mesh, each stage tensor
    parallel over its --tp consecutive ranks. Returns (step, evaluate, dp rank, dp size, the module
    of this rank's stages, a function of the whole model's digest)."""
    eval_model = GPT(dim=args.dim, heads=args.heads, layers=args.layers, seq=args.seq)
    if args.layout == "pp":
        group, wrap, dp_rank, dp_size = dist.group.WORLD, None, 0, 1
    elif args.layout == "pp-tp-dp":
        if world % (args.pp * args.tp):
            raise SystemExit(f"pp-tp-dp needs a world size that is a multiple of --pp {args.pp}"
                             f" x --tp {args.tp}, not {world}")
        dp_size = world // (args.pp * args.tp)
        mesh = init_device_mesh("cpu", (dp_size, args.pp, args.tp),
                                mesh_dim_names=("dp", "pp", "tp"))
        group, dp_rank = mesh["pp"].get_group(), mesh["dp"].get_local_rank()

        def wrap(module):
            module = tensor_parallel_stage(module, mesh["tp"])
            if dp_size > 1:
                module = fully_shard(module, mesh=mesh["dp"], reshard_after_forward=False)
            return module
    else:
        if world % args.pp or world == args.pp:
            raise SystemExit(f"pp-dp needs a world size that is a multiple of --pp {args.pp} "
                             f"and larger than it, not {world}")
        mesh = init_device_mesh("cpu", (world // args.pp, args.pp), mesh_dim_names=("dp", "pp"))
        group = mesh["pp"].get_group()
        dp_rank, dp_size = mesh["dp"].get_local_rank(), world // args.pp

        def wrap(module):
            return fully_shard(module, mesh=mesh["dp"], reshard_after_forward=False)
    shape = None
    if args.layout == "pp-tp-dp":
        shape = (args.batch // dp_size // args.microbatches, args.seq)
    pipe = Pipeline(model, args.schedule, args.microbatches, group, wrap, shape)

    def evaluate():
        pipe.share_parameters(eval_model)
        return validation_loss(eval_model, val)

    def digest():
        pipe.share_parameters(eval_model)
        return checkpoint.parameters_digest(eval_model)
    return pipe.train_step, evaluate, dp_rank, dp_size, pipe.owned, digest


def record_timeline(args, model, world):
    from plait.torch import timeline
    pipeline = None
    if args.layout in PIPELINE_LAYOUTS:
        p = world if args.layout == "pp" else args.pp
        pipeline = timeline.Pipeline(args.schedule, p, args.microbatches,
                                     SCHEDULES[args.schedule][1])
    return timeline.record(args.timeline, model=model, pipeline=pipeline,
                           title=f"{args.layout} {args.schedule if pipeline else ''} "
                                 f"{args.backend}, {world} ranks".replace("  ", " "))


def exposed_comm(tl):
    """Median seconds a step spent in communication not hidden behind compute (plait only:
    gloo does not say when its calls run)."""
    if tl is None or not tl.summary["has_calls"]:
        return "-"
    return f"{tl.summary['exposed_s']:.4f}"


def bubble(tl):
    """A pipeline's measured bubble: the share of a step a rank waited for its peers."""
    if tl is None or not tl.summary.get("closed_form") or not tl.summary["has_calls"]:
        return "-"
    return f"{tl.summary['closed_form']['measured_share']:.3f}"


def bubble_seconds(tl, which):
    """A pipeline's bubble a rank a step, measured or the schedule's closed form from the
    measured forward and backward times."""
    if tl is None or not tl.summary.get("closed_form") or not tl.summary["has_calls"]:
        return "-"
    return f"{tl.summary['closed_form'][which]:.5f}"


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(1)
    if args.backend == "plait" or args.timeline:
        import_plait_torch()
    dist.init_process_group(args.backend, init_method="env://",
                            timeout=datetime.timedelta(seconds=args.timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(args.seed)
    model = GPT(dim=args.dim, heads=args.heads, layers=args.layers, seq=args.seq)
    corpus = Corpus(kjv_bytes())
    val = corpus.val_batches(args.eval_batches, args.batch, args.seq)
    if args.layout in PIPELINE_LAYOUTS:
        step, evaluate, dp_rank, dp_size, model, digest = pipeline_layout(model, args, world,
                                                                           val)
    else:
        placement = apply_layout(model, args.layout, args.tp)
        model, dp_rank, dp_size = placement.model, placement.dp_rank, placement.dp_size

        def digest():
            return checkpoint.parameters_digest(model)

        def step(x, y):
            loss = loss_of(model(x), y)
            loss.backward()
            return loss

        def evaluate():
            return validation_loss(model, val)
    if args.batch % dp_size:
        raise SystemExit(f"--batch {args.batch} does not split over {dp_size} "
                         f"data-parallel ranks")
    # model: what this rank holds and trains (a pipeline's: its stages).
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    if (args.save_at or args.resume) and not args.checkpoint_dir:
        raise SystemExit("--save-at and --resume need --checkpoint-dir")
    first = checkpoint.load(args.checkpoint_dir, model, optimizer) if args.resume else 0
    if rank == 0 and args.resume:
        print(f"resumed from step {first}", flush=True)

    times, v, tl = [], None, None
    stack = contextlib.ExitStack()
    for i in range(first, args.steps):
        if args.timeline and tl is None and i >= args.warmup:
            tl = stack.enter_context(record_timeline(args, model, world))
        x, y = corpus.train_batch(args.seed, i, args.batch, args.seq, dp_rank, dp_size)
        with tl.step() if tl else contextlib.nullcontext():
            start = time.perf_counter()
            loss = step(x, y)
            optimizer.step()
            optimizer.zero_grad()
            times.append(time.perf_counter() - start)
        if i + 1 in args.save_at:
            checkpoint.save(args.checkpoint_dir, i + 1, model, optimizer)
        last = i + 1 == args.steps
        if (args.eval_every and (i + 1) % args.eval_every == 0) or last:
            v = evaluate()
            if rank == 0:
                shown = f"{loss.item():.4f}" if loss is not None else "-"
                print(f"step {i + 1} train_loss {shown} val_loss {v:.4f}", flush=True)

    stack.close()  # the timeline's end: collective, so before anything else is
    if v is None:  # resumed at or past --steps
        v = evaluate()
    slowest = torch.tensor(times or [0.0], dtype=torch.float64)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    timed = slowest[args.warmup:].tolist() or slowest.tolist()
    step_s = statistics.median(timed)
    digest_of_params = digest()
    if rank == 0:
        schedule = args.schedule if args.layout in PIPELINE_LAYOUTS else "-"
        print(f"RESULT layout={args.layout} schedule={schedule} backend={args.backend} "
              f"ranks={world} microbatches={args.microbatches if schedule != '-' else '-'} "
              f"steps={args.steps} val_loss={v:.4f} step_s={step_s:.4f} "
              f"tokens_per_s={args.batch * args.seq / step_s:.0f} "
              f"exposed_comm_s={exposed_comm(tl)} bubble={bubble(tl)} "
              f"bubble_s={bubble_seconds(tl, 'measured_s')} "
              f"bubble_closed_s={bubble_seconds(tl, 'closed_s')} params={digest_of_params}",
              flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
