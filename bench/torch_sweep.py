#!/usr/bin/env python3
"""torch.distributed collective benchmark: a size sweep in the style of nccl-tests.

Launch it like any torch.distributed job (init_method env://):

    build/tools/plait/plait run -n 4 .venv/bin/python bench/torch_sweep.py --backend gloo
    build/tools/plait/plait run -n 2 .venv/bin/python bench/torch_sweep.py --op all_gather --max 1M
    .venv/bin/python -m torch.distributed.run --redirects 1 --tee 1 --nproc_per_node 4 \\
        bench/torch_sweep.py --backend gloo --json gloo.json

(`--redirects 1 --tee 1` only works around Debian's torch 1.13 torchrun on Python 3.11, whose
default `--redirects 0` fails to parse; a torchrun that works needs nothing extra.)

`--backend plait` (the default) imports `plait.torch`, which registers the backend "plait";
when `plait` is not importable the repository's build/python (found relative to this file) is
added to sys.path first.

Operations (float32, sum where a reduction is involved):

  all_reduce      in place on a buffer of `bytes`;                  busbw = algbw * 2(n-1)/n
  all_gather      all_gather_into_tensor (_all_gather_base): every rank sends bytes/n and
                  receives `bytes` (for backends without it, e.g. gloo, dist.all_gather into n
                  views of the output tensor);                      busbw = algbw * (n-1)/n
  reduce_scatter  reduce_scatter_tensor (_reduce_scatter_base): every rank sends `bytes` and
                  receives bytes/n (fallback: dist.reduce_scatter with a list of n views; gloo
                  has neither, the run stops with an error);        busbw = algbw * (n-1)/n
  broadcast       from rank 0, `bytes`;                             busbw = algbw

As in nccl-tests, `bytes` is the size of the largest buffer of the operation (the all-reduced
buffer, the gathered output, the reduce-scatter input); the element count is rounded down to a
multiple of n for all_gather and reduce_scatter (at least n elements). algbw = bytes / time,
in GB/s (1e9 bytes per second).

Method, per size: one correctness check unless --no-check (rank-dependent inputs, the result
compared with the exact expected values), a barrier, `warmup` untimed operations, a barrier,
then `iters` operations, each timed on each rank from the call to the completion of its work
(the blocking call returns after work.wait()). The per-iteration times are max-reduced over
the ranks (the slowest rank defines an operation's time) and the reported time is the median
of those maxima over the iterations; min and mean are in the JSON. iters is chosen by size so
that about --target-bytes move per size (between --min-iters and --max-iters, or fixed with
--iters); warmup = max(2, iters / 10).

Rank 0 prints a table and writes --json FILE (a list of rows plus the run's parameters).
"""

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import time
import traceback

try:
    import torch
    import torch.distributed as dist
except ImportError as e:  # pragma: no cover - environment problem
    sys.exit(f"error: PyTorch is required ({e}); use an interpreter with torch, "
             f"e.g. .venv/bin/python (make deps installs it)")

OPS = {
    "all_reduce": "all_reduce", "allreduce": "all_reduce",
    "all_gather": "all_gather", "allgather": "all_gather",
    "_all_gather_base": "all_gather", "all_gather_into_tensor": "all_gather",
    "reduce_scatter": "reduce_scatter", "reducescatter": "reduce_scatter",
    "_reduce_scatter_base": "reduce_scatter", "reduce_scatter_tensor": "reduce_scatter",
    "broadcast": "broadcast", "bcast": "broadcast",
}


class SetupError(Exception):
    """A problem with the environment or the arguments; printed without a traceback."""


def parse_size(text):
    """'8', '8B', '1K', '64M', '1G' (binary multiples) -> bytes."""
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    mult = 1
    if t and t[-1] in "KMG":
        mult = 1024 ** ("KMG".index(t[-1]) + 1)
        t = t[:-1]
    try:
        value = int(float(t) * mult)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 8, 1K, 64M)") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"size must be positive: {text!r}")
    return value


def human(n):
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{unit}"
    return str(n)


def import_plait_torch():
    try:
        import plait  # noqa: F401
    except ImportError:
        here = os.path.dirname(os.path.abspath(__file__))
        build_python = os.path.join(os.path.dirname(here), "build", "python")
        if os.path.isdir(build_python):
            sys.path.insert(0, build_python)
    try:
        import plait.torch  # noqa: F401
    except ImportError as e:
        raise SetupError(
            f"--backend plait needs the module plait.torch ({e}). Build plait (make build, "
            f"which puts it into <repo>/build/python) or add the directory that holds the "
            f"plait package to PYTHONPATH; or run with --backend gloo.") from e


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", default="plait",
                   help="torch.distributed backend: plait (default), gloo, ...")
    p.add_argument("--op", default="all_reduce", choices=sorted(OPS), metavar="OP",
                   help="all_reduce (default), all_gather, reduce_scatter or broadcast; also "
                        "all_gather_into_tensor, _all_gather_base, reduce_scatter_tensor, "
                        "_reduce_scatter_base")
    p.add_argument("--min", type=parse_size, default=8, help="smallest size in bytes (default 8)")
    p.add_argument("--max", type=parse_size, default=64 << 20,
                   help="largest size in bytes (default 64M); always included")
    p.add_argument("--factor", type=int, default=4, help="size step factor (default 4)")
    p.add_argument("--iters", type=int, default=0,
                   help="timed iterations per size (default 0: scaled by size)")
    p.add_argument("--min-iters", type=int, default=5)
    p.add_argument("--max-iters", type=int, default=200)
    p.add_argument("--target-bytes", type=parse_size, default=256 << 20,
                   help="bytes to move per size when scaling iterations (default 256M)")
    p.add_argument("--no-check", action="store_true", help="skip the correctness checks")
    p.add_argument("--json", metavar="FILE", help="write the results as JSON (rank 0)")
    p.add_argument("--threads", type=int, default=1,
                   help="torch intra-op threads per rank (default 1)")
    p.add_argument("--timeout", type=float, default=300,
                   help="process group timeout in seconds (default 300)")
    args = p.parse_args(argv)
    args.op = OPS[args.op]
    if args.min > args.max:
        p.error("--min is larger than --max")
    if args.factor < 2:
        p.error("--factor must be at least 2")
    if args.min_iters < 1 or args.max_iters < args.min_iters or args.iters < 0:
        p.error("need 1 <= --min-iters <= --max-iters and --iters >= 0")
    return args


def sizes(args):
    out, s = [], args.min
    while s <= args.max:
        out.append(s)
        s *= args.factor
    if out[-1] != args.max:
        out.append(args.max)
    return out


class Op:
    """One collective at one size: buffers, the call, the check, the bandwidth factor."""

    def __init__(self, name, nbytes, rank, world):
        self.name, self.rank, self.world = name, rank, world
        count = max(1, nbytes // 4)
        if name in ("all_gather", "reduce_scatter"):
            count = max(world, count // world * world)
        self.count = count
        self.bytes = count * 4
        self.impl = None
        n = world
        if name == "all_reduce":
            self.busfactor = 2.0 * (n - 1) / n
            self.buf = torch.zeros(count)
        elif name == "broadcast":
            self.busfactor = 1.0
            self.buf = torch.zeros(count)
        elif name == "all_gather":
            self.busfactor = (n - 1) / n
            self.out = torch.zeros(count)
            self.inp = torch.zeros(count // n)
            self.views = list(self.out.chunk(n))
        elif name == "reduce_scatter":
            self.busfactor = (n - 1) / n
            self.inp = torch.zeros(count)
            self.out = torch.zeros(count // n)
            self.views = list(self.inp.chunk(n))
        else:
            raise ValueError(name)

    # Whether the backend has the tensor forms; decided by the first call of the process (the
    # same on every rank), so a later error is raised, never hidden by a fallback.
    has_tensor_api = {}

    def _tensor_or_list(self, tensor_fn, list_fn, name):
        supported = Op.has_tensor_api.get(self.name)
        if supported is None:
            try:
                tensor_fn()
                Op.has_tensor_api[self.name] = True
            except RuntimeError as e:
                Op.has_tensor_api[self.name] = False
                self.fallback_reason = str(e).splitlines()[0]
                list_fn()
        elif supported:
            tensor_fn()
        else:
            list_fn()
        self.impl = name if Op.has_tensor_api[self.name] else f"{self.name}(list)"

    def _all_gather(self):
        fn = getattr(dist, "all_gather_into_tensor", None) or dist._all_gather_base
        self._tensor_or_list(lambda: fn(self.out, self.inp),
                             lambda: dist.all_gather(self.views, self.inp),
                             "all_gather_into_tensor")

    def _reduce_scatter(self):
        fn = getattr(dist, "reduce_scatter_tensor", None) or dist._reduce_scatter_base

        def list_form():
            try:
                dist.reduce_scatter(self.out, self.views)
            except RuntimeError as e:
                raise SetupError(f"backend {dist.get_backend()} supports neither "
                                 f"reduce_scatter_tensor nor reduce_scatter: "
                                 f"{str(e).splitlines()[0]}") from e

        self._tensor_or_list(lambda: fn(self.out, self.inp), list_form, "reduce_scatter_tensor")

    def run(self):
        if self.name == "all_reduce":
            dist.all_reduce(self.buf)
            self.impl = "all_reduce"
        elif self.name == "broadcast":
            dist.broadcast(self.buf, src=0)
            self.impl = "broadcast"
        elif self.name == "all_gather":
            self._all_gather()
        else:
            self._reduce_scatter()

    def check(self):
        """Runs the op once on rank-dependent data; returns an error text or None."""
        r, n = self.rank, self.world
        total = n * (n + 1) / 2.0  # sum of (rank + 1) over ranks, exact in float32
        ramp = torch.arange(self.count, dtype=torch.float32).remainder_(251.0)  # < 2^24 / n
        if self.name == "all_reduce":
            self.buf.copy_(ramp).add_(r + 1)
            self.run()
            expected = ramp * n + total
            got = self.buf
        elif self.name == "broadcast":
            self.buf.copy_(ramp + 7.0 if r == 0 else torch.full_like(ramp, -1.0))
            self.run()
            expected, got = ramp + 7.0, self.buf
        elif self.name == "all_gather":
            self.inp.copy_(ramp[:self.inp.numel()]).add_(1000.0 * (r + 1))
            self.out.fill_(-1.0)
            self.run()
            m = self.inp.numel()
            expected = torch.cat([ramp[:m] + 1000.0 * (i + 1) for i in range(n)])
            got = self.out
        else:
            self.inp.copy_(ramp).add_(r + 1)
            self.out.fill_(-1.0)
            self.run()
            m = self.out.numel()
            expected = ramp[r * m:(r + 1) * m] * n + total
            got = self.out
        bad = (got != expected).nonzero()
        self.zero()
        if bad.numel():
            i = int(bad[0, 0])
            return (f"{self.name} of {self.bytes} bytes: {bad.shape[0]} wrong elements, "
                    f"first at {i}: got {got[i].item()}, expected {expected[i].item()}")
        return None

    def zero(self):
        for t in ("buf", "inp", "out"):
            if hasattr(self, t):
                getattr(self, t).zero_()


def iterations(args, nbytes):
    if args.iters:
        return args.iters
    return max(args.min_iters, min(args.max_iters, args.target_bytes // max(nbytes, 1)))


def run(args):
    for var in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        if var not in os.environ:
            raise SetupError(f"{var} is not set: start this script with `plait run -n N` or "
                             f"torchrun (it uses init_method env://)")
    if args.backend == "plait":
        import_plait_torch()
    torch.set_num_threads(args.threads)
    dist.init_process_group(backend=args.backend, init_method="env://",
                            timeout=datetime.timedelta(seconds=args.timeout))
    try:
        sweep(args, dist.get_rank(), dist.get_world_size())
    finally:
        dist.destroy_process_group()


def sweep(args, rank, world):
    header = (f"# torch.distributed {args.op}  backend={args.backend}  world_size={world}  "
              f"float32  torch {torch.__version__}  host {platform.node()}\n"
              f"# time: median over iterations of the max over ranks; "
              f"algbw/busbw in GB/s (1e9 B/s)")
    widths = [("bytes", 10), ("count", 10), ("iters", 5), ("time_us", 11),
              ("algbw_GB/s", 10), ("busbw_GB/s", 10), ("check", 5)]
    if rank == 0:
        print(header)
        print("| " + " | ".join(f"{name:>{w}}" for name, w in widths) + " |")
        print("|" + "|".join("-" * (w + 2) for _, w in widths) + "|", flush=True)
    rows = []
    failures = 0
    for nbytes in sizes(args):
        op = Op(args.op, nbytes, rank, world)
        check = "-"
        if not args.no_check:
            err = op.check()
            flag = torch.tensor([0.0 if err is None else 1.0])
            dist.all_reduce(flag)
            if err is not None:
                print(f"rank {rank}: check failed: {err}", file=sys.stderr, flush=True)
            check = "ok" if flag.item() == 0 else "FAIL"
            failures += int(flag.item() != 0)
        iters = iterations(args, op.bytes)
        warmup = max(2, iters // 10)
        dist.barrier()
        for _ in range(warmup):
            op.run()
        dist.barrier()
        times = torch.zeros(iters, dtype=torch.float64)
        for i in range(iters):
            t0 = time.perf_counter()
            op.run()
            times[i] = time.perf_counter() - t0
        dist.all_reduce(times, op=dist.ReduceOp.MAX)
        t = times.tolist()
        median = statistics.median(t)
        algbw = op.bytes / median / 1e9
        row = {
            "bytes": op.bytes, "count": op.count, "iters": iters, "warmup": warmup,
            "time_us": median * 1e6, "min_us": min(t) * 1e6,
            "mean_us": statistics.fmean(t) * 1e6,
            "algbw_GBps": algbw, "busbw_GBps": algbw * op.busfactor,
            "check": check, "impl": op.impl,
        }
        rows.append(row)
        if rank == 0:
            print(f"| {op.bytes:>10} | {op.count:>10} | {iters:>5} | {row['time_us']:>11.1f} | "
                  f"{algbw:>10.4f} | {row['busbw_GBps']:>10.4f} | {check:>5} |", flush=True)
    if rank == 0:
        impls = sorted({r["impl"] for r in rows})
        print(f"# implementation: {', '.join(impls)}", flush=True)
        if args.json:
            doc = {"backend": args.backend, "op": args.op, "world_size": world,
                   "dtype": "float32", "torch": torch.__version__, "host": platform.node(),
                   "time": "median over iterations of max over ranks", "rows": rows}
            with open(args.json, "w") as f:
                json.dump(doc, f, indent=1)
                f.write("\n")
    if failures:
        raise RuntimeError(f"{failures} size(s) failed the correctness check")


def main(argv=None):
    args = parse_args(argv)
    rank = os.environ.get("RANK", "?")
    try:
        run(args)
    except SetupError as e:
        print(f"error: rank {rank}: {e}", file=sys.stderr, flush=True)
        return 2
    except KeyboardInterrupt:
        print(f"error: rank {rank}: interrupted", file=sys.stderr, flush=True)
        return 130
    except Exception as e:  # noqa: BLE001
        traceback.print_exc()
        print(f"error: rank {rank}: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
