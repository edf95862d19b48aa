#!/usr/bin/env python3
"""Data-parallel training with stragglers: a synchronous allreduce against the deadline allreduce.

    build/tools/plait/plait run -n 4 -- .venv/bin/python examples/straggler_fashion_mnist.py \\
        --aggregate deadline --deadline-ms 30 --trace 0.15:3

The elastic example's model, data and step (examples/elastic_fashion_mnist.py): a global batch
(--batch) split among the ranks, each rank's summed gradient, one reduction, SGD with momentum.
What moves the gradients (--aggregate):

    gloo            torch.distributed.all_reduce on gloo (what DDP on gloo does per bucket)
    allreduce       plait's allreduce, synchronous
    deadline        plait.DeadlineAllreduce: the step takes what arrived by --deadline-ms after
                    the first arrival and divides by the samples it covers; late gradients dropped
    deadline-carry  the same, late gradients added to that rank's next contribution
    semi-reliable   deadline, the gradients cut into --chunk-kb chunks: a chunk that misses the
                    deadline is left out of its own mean only (each rank sends its mean
                    gradient, op avg), at most --max-dropped of the values, else the step waits

With --backup B a deadline step also ends as soon as all but B ranks have arrived (backup
workers: with a long --deadline-ms, each step takes the first N - B gradients).

Stragglers, by a real mechanism (the rank sleeps for (FACTOR - 1) times the compute it just
did, so it is FACTOR times slower that step):

    --straggler RANK:FACTOR   that rank, every step
    --trace P:FACTOR          each step, each rank with probability P (a trace drawn from --seed,
                              the same for every method)

and a slow link: started as root without plait run, --slow-link RANK:RATE runs --ranks ranks
on a testbed of network-namespace hosts (examples/netns_testbed.py), that rank's link capped
at RATE, the others at --link-rate:

    sudo .venv/bin/python examples/straggler_fashion_mnist.py --aggregate deadline \
        --slow-link 1:100mbit --trace 0.2:3

A rank that missed a step's deadline skips the next step's compute and joins it without values
(with deadline-carry its late gradient goes then): so it catches up at once instead of staying
one step behind. Rank 0 prints one line per epoch and at the end

    RESULT aggregate=... test_accuracy=... epoch_s=... step_p50_ms=... step_p99_ms=...
           dropped=<mean share of the ranks' gradients a step went without> skipped=<share of
           rank-steps whose compute was skipped to catch up>
"""

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from ddp_fashion_mnist import DEFAULT_DATA_DIR, run_reporting_errors  # noqa: E402
from elastic_fashion_mnist import Trainer, evaluate, import_plait, load_standardized  # noqa: E402
import netns_testbed  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

METHODS = ("gloo", "allreduce", "deadline", "deadline-carry", "semi-reliable")


def parse_pair(text, what, kind):
    try:
        a, b = text.split(":")
        return kind(a), float(b)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{what} takes X:FACTOR, not '{text}'") from None


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--aggregate", choices=METHODS, default="deadline")
    p.add_argument("--deadline-ms", type=float, default=30.0)
    p.add_argument("--backup", type=int, default=0,
                   help="deadline: end a step once all but this many ranks arrived (backup workers)")
    p.add_argument("--chunk-kb", type=int, default=64, help="semi-reliable: chunk size (64 KiB)")
    p.add_argument("--max-dropped", type=float, default=1.0,
                   help="semi-reliable: the largest share of the values a step may go without")
    p.add_argument("--straggler", type=lambda t: parse_pair(t, "--straggler", int))
    p.add_argument("--trace", type=lambda t: parse_pair(t, "--trace", float))
    p.add_argument("--data-dir", default=DEFAULT_DATA_DIR)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch", type=int, default=240)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--hidden", type=int, nargs=2, default=[256, 128])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=120.0)
    netns_testbed.add_arguments(p)
    args = p.parse_args(argv)
    if args.deadline_ms <= 0:
        p.error("--deadline-ms must be more than 0")
    if args.trace and not 0 <= args.trace[0] <= 1:
        p.error("--trace takes a probability from 0 to 1")
    return args


def slow_factor(args, rank, step):
    """How many times slower this rank computes this step."""
    factor = 1.0
    if args.straggler and args.straggler[0] == rank:
        factor = max(factor, args.straggler[1])
    if args.trace:
        p, f = args.trace
        draw = np.random.default_rng([args.seed, step, rank]).random()
        if draw < p:
            factor = max(factor, f)
    return factor


def train(args):
    plait = import_plait()
    torch.set_num_threads(1)
    comm = plait.init(args.timeout)
    rank, n = comm.rank, comm.size
    if args.aggregate == "gloo":
        import datetime

        import torch.distributed as dist
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.timeout))
    dl = None
    semi = args.aggregate == "semi-reliable"
    if args.aggregate.startswith("deadline") or semi:
        dl = plait.DeadlineAllreduce(comm, deadline=args.deadline_ms / 1e3, backup=args.backup,
                                     late="carry" if args.aggregate == "deadline-carry" else "drop",
                                     chunk_bytes=args.chunk_kb * 1024 if semi else 0,
                                     max_dropped=args.max_dropped)

    train_x, train_y, test_x, test_y = load_standardized(args.data_dir)
    trainer = Trainer(args)
    steps_per_epoch = train_x.shape[0] // args.batch
    # The samples each rank's share covers travel with the gradient (one more element), so a
    # step that goes without a rank divides by the samples it did get.
    flat = torch.zeros(trainer.numel + 1)
    step_times, dropped, skipped = [], [], 0
    behind = False
    comm.barrier().wait()
    started = time.perf_counter()
    for step in range(steps_per_epoch * args.epochs):
        epoch = step // steps_per_epoch
        if step % steps_per_epoch == 0:
            order = torch.randperm(train_x.shape[0],
                                   generator=torch.Generator().manual_seed(args.seed + epoch))
        t0 = time.perf_counter()
        first = (step % steps_per_epoch) * args.batch
        lo, hi = first + rank * args.batch // n, first + (rank + 1) * args.batch // n
        if behind:
            skipped += 1  # catch up: no compute this step (a carried gradient still goes)
        else:
            idx = order[lo:hi]
            c0 = time.perf_counter()
            flat[:-1].copy_(trainer.local_gradient(train_x[idx], train_y[idx]))
            flat[-1] = hi - lo
            if semi:  # a mean per chunk: each rank's mean gradient, averaged over the chunk's senders
                flat /= hi - lo
            factor = slow_factor(args, rank, step)
            if factor > 1:
                time.sleep((factor - 1) * (time.perf_counter() - c0))
        if args.aggregate == "gloo":
            torch.distributed.all_reduce(flat)
        elif args.aggregate == "allreduce":
            comm.allreduce(flat.numpy(), op="sum").wait()
        else:
            info = dl.allreduce(flat.numpy(), op="avg" if semi else "sum", contribute=not behind)
            behind = info["late"]
            dropped.append(info["dropped_fraction"])
        samples = float(flat[-1])
        if samples > 0:
            trainer.apply(flat[:-1], samples)
        step_times.append(time.perf_counter() - t0)
        if (step + 1) % steps_per_epoch == 0 and rank == 0:
            acc = evaluate(trainer.model, test_x, test_y)
            print(f"epoch {(step + 1) // steps_per_epoch}/{args.epochs} test_accuracy={acc:.4f} "
                  f"elapsed_s={time.perf_counter() - started:.1f}", flush=True)
    train_s = time.perf_counter() - started
    skipped_all = np.array([skipped], np.int64)
    comm.allreduce(skipped_all).wait()
    if dl is not None:
        dl.close()
    comm.barrier().wait()
    if rank == 0:
        acc = evaluate(trainer.model, test_x, test_y)
        t = np.array(step_times) * 1e3
        print(f"RESULT aggregate={args.aggregate} ranks={n} test_accuracy={acc:.4f} "
              f"epoch_s={train_s / args.epochs:.2f} step_p50_ms={np.percentile(t, 50):.1f} "
              f"step_p99_ms={np.percentile(t, 99):.1f} "
              f"dropped={np.mean(dropped) if dropped else 0:.4f} "
              f"skipped={int(skipped_all[0]) / (n * len(step_times)):.4f}", flush=True)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if netns_testbed.is_launcher(args):
        return netns_testbed.run_ranks(args, argv, os.path.abspath(__file__))
    return run_reporting_errors(lambda: train(args))


if __name__ == "__main__":
    sys.exit(main())
