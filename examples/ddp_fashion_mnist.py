#!/usr/bin/env python3
"""DistributedDataParallel training of a small MLP on Fashion-MNIST, over plait or gloo.

Run it with plait's launcher or with torchrun (both set RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT; the process group is created with init_method env://):

    build/tools/plait/plait run -n 4 .venv/bin/python examples/ddp_fashion_mnist.py
    build/tools/plait/plait run -n 4 .venv/bin/python examples/ddp_fashion_mnist.py --backend gloo
    .venv/bin/python -m torch.distributed.run --nproc_per_node 4 \\
        examples/ddp_fashion_mnist.py --backend gloo

(Debian 12's torchrun, torch 1.13 on Python 3.11, fails before starting any rank with
"AttributeError: 'NoneType' object has no attribute 'get'": it cannot parse its own default
`--redirects 0`. Add `--redirects 1 --tee 1` there; other torchruns need nothing.)

`--backend plait` (the default) imports `plait.torch`, which registers the torch.distributed
backend "plait"; when `plait` is not importable the repository's build/python (found relative
to this file) is added to sys.path first.

Data: the IDX files (gzip) from --data-dir are read with numpy, pixels scaled to [0, 1] and
standardized with the training set's mean and standard deviation. The training set is
sharded with DistributedSampler(shuffle=True, seed=--seed, set_epoch(epoch)), so every rank
sees a disjoint 1/N of the samples each epoch and a run is reproducible for a given --seed
and rank count. The model (784-256-128-10 MLP, ReLU; its fully connected layers computed as
1x1 convolutions, see MLP) is initialized from --seed on every rank and DDP broadcasts rank
0's parameters anyway. Optimizer: Adam, learning rate decayed to 0 on a cosine over the run.
--batch-size is per rank (global batch = N * batch). Each rank uses one intra-op thread
(torch.set_num_threads(1)): ranks share the host's cores. The defaults (3 epochs, 128 per
rank, lr 2e-3) reach ~0.87 test accuracy at 4 ranks (0.848 / 0.864 / 0.869 per epoch with
seed 0), in ~20-30 s wall on a 2-core host.

Test accuracy is computed on the full 10,000-image test set every epoch: rank r evaluates the
contiguous slice [r*10000/N, (r+1)*10000/N) and the correct counts are summed with all_reduce.

What the timings mean (all wall-clock, from time.perf_counter, reported by rank 0):

  epoch_s   seconds of the training loop of one epoch (forward, backward, gradient
            all-reduce, optimizer step), from a barrier before the first batch to a barrier
            after the last; evaluation is not included (it is printed separately as eval_s).
  comm_s    exposed gradient-communication time per epoch on rank 0: for every training step,
            the time from the moment the *last* gradient bucket was handed to the communication
            hook (at that moment every gradient of the step has been computed, so backward
            compute is over) to the moment loss.backward() returned (DDP returns only once every
            bucket's all-reduce has completed and the averaged gradients were written back),
            summed over the epoch's steps. It is the time the step waited for gradient
            communication beyond the backward computation: communication that overlapped with
            backward compute of earlier layers is not counted, waiting for the slowest rank to
            arrive at the all-reduce is counted.
  ar_s      (epoch lines only) summed per-bucket all-reduce durations: for each bucket, from the
            hook call (the bucket is launched) until its all-reduce future completed. Overlapping
            buckets are counted each, so this can exceed comm_s; with a single bucket (this
            model's 0.9 MB of gradients fits DDP's default 25 MB bucket) the two are close.
  samples_per_s  training samples processed by all ranks together per second of training loop:
            (samples in one epoch over all ranks) * epochs / sum(epoch_s).

--hook chooses how gradients move: DDP's own averaging all-reduce (default), one of
plait.torch.hooks' methods (fp16, bf16, int8, sign, topk, threshold, randomk, powersgd, auto,
or none: a plain all-reduce through the hook), or torch's own fp16_compress_hook
(torch-fp16) and powerSGD_hook (torch-powersgd, with error feedback and warm start). The
plait hooks run on either backend. --powersgd-rank, --ratio and --start-iter set their
parameters.

The run ends with exactly one line from rank 0:

    RESULT test_accuracy=<0..1> epoch_s=<mean> comm_s=<mean> samples_per_s=<all ranks>

where test_accuracy is the final epoch's. Errors end the process with a message on stderr and
a non-zero exit status.
"""

import argparse
import datetime
import os
import signal
import sys
import time
import traceback
import zlib

PROCESS_START = time.perf_counter()  # before torch's import: a resume's time counts from here

import numpy as np  # noqa: E402

try:
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data.distributed import DistributedSampler
except ImportError as e:  # pragma: no cover - environment problem
    sys.exit(f"error: PyTorch is required ({e}); use an interpreter with torch, "
             f"e.g. .venv/bin/python (make deps installs it)")

DEFAULT_DATA_DIR = "/usr/share/datasets/fashion-mnist"


class SetupError(Exception):
    """A problem with the environment or the arguments; printed without a traceback."""


def import_plait_torch():
    """Imports plait.torch (registers the "plait" backend), adding build/python if needed."""
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
            f"--backend plait needs the module plait.torch ({e}). Build plait "
            f"(make build, which puts it into <repo>/build/python) or add the directory that "
            f"holds the plait package to PYTHONPATH; or run with --backend gloo.") from e


def read_idx(path):
    """Reads an IDX file (optionally gzip-compressed) into a numpy array."""
    try:
        with open(path, "rb") as f:
            data = f.read()
        if path.endswith(".gz"):
            data = zlib.decompress(data, 16 + zlib.MAX_WBITS)  # gzip container
    except (OSError, zlib.error) as e:
        raise SetupError(f"cannot read {path}: {e}") from e
    if len(data) < 4 or data[0] != 0 or data[1] != 0:
        raise SetupError(f"{path}: not an IDX file")
    dtypes = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
    if data[2] not in dtypes:
        raise SetupError(f"{path}: unknown IDX element type 0x{data[2]:02x}")
    ndim = data[3]
    dims = np.frombuffer(data, dtype=">u4", count=ndim, offset=4).astype(np.int64)
    arr = np.frombuffer(data, dtype=dtypes[data[2]], offset=4 + 4 * ndim)
    if arr.size != int(np.prod(dims)):
        raise SetupError(f"{path}: {arr.size} elements, header says {tuple(dims)}")
    return arr.reshape(tuple(dims))


def cached_idx(path):
    """read_idx(path), through an uncompressed copy kept in $PLAIT_DATA_CACHE (default
    ~/.cache/plait): every rank of every run inflates 47 MB otherwise, a quarter of a second
    each, which a resumed job waits for before its first step. Keyed by the file's size and
    time; written atomically, so ranks racing to fill it read whole copies."""
    cache = os.environ.get("PLAIT_DATA_CACHE", os.path.join(os.path.expanduser("~"), ".cache", "plait"))
    try:
        st = os.stat(path)
    except OSError as e:
        raise SetupError(f"cannot read {path}: {e}") from e
    copy = os.path.join(cache, f"{os.path.basename(path)}.{st.st_size}.{st.st_mtime_ns}.npy")
    try:
        return np.load(copy, mmap_mode="r")
    except (OSError, ValueError):
        pass
    arr = read_idx(path)
    try:
        os.makedirs(cache, exist_ok=True)
        tmp = f"{copy}.{os.getpid()}.tmp"
        with open(tmp, "wb") as f:
            np.save(f, arr)
        os.replace(tmp, copy)
    except OSError:
        pass  # no room or a read-only home: read the original each time
    return arr


def load_split(data_dir, prefix):
    images = cached_idx(os.path.join(data_dir, f"{prefix}-images-idx3-ubyte.gz"))
    labels = cached_idx(os.path.join(data_dir, f"{prefix}-labels-idx1-ubyte.gz"))
    if images.shape[0] != labels.shape[0]:
        raise SetupError(f"{prefix}: {images.shape[0]} images but {labels.shape[0]} labels")
    return (torch.from_numpy(images.reshape(images.shape[0], -1).copy()),
            torch.from_numpy(labels.astype(np.int64)))


def standardizer(train_x):
    """x_u8 -> float pixels standardized with the training set's mean and standard deviation,
    from exact integer sums of the uint8 values (identical on every rank)."""
    pixels = train_x.numpy().ravel()
    s1 = int(pixels.sum(dtype=np.uint64))
    s2 = sum(int((pixels[i:i + (1 << 22)].astype(np.uint32) ** 2).sum(dtype=np.uint64))
             for i in range(0, pixels.size, 1 << 22))
    mean = s1 / pixels.size / 255.0
    std = float(np.sqrt(s2 / pixels.size / 255.0 ** 2 - mean * mean))

    def prepare(x_u8):
        return x_u8.float().div_(255.0).sub_(mean).div_(std)

    return prepare


class MLP(nn.Module):
    """784-H1-H2-10 MLP with ReLU.

    With fc_as_conv, each fully connected layer is a 1x1 convolution over a (batch, features,
    1, 1) input: the same parameters and the same math, but computed by oneDNN instead of BLAS.
    Debian's PyTorch is built against the reference BLAS (torch.__config__.show() says
    BLAS_INFO=generic), where nn.Linear runs at ~3 GFLOP/s; the 1x1 convolution is ~5-10x
    faster per step on one core. Without oneDNN (torch.backends.mkldnn.is_available() false)
    nn.Linear is used.
    """

    def __init__(self, hidden1, hidden2, fc_as_conv):
        super().__init__()
        self.fc_as_conv = fc_as_conv
        layer = (lambda i, o: nn.Conv2d(i, o, kernel_size=1)) if fc_as_conv else nn.Linear
        self.fc1 = layer(784, hidden1)
        self.fc2 = layer(hidden1, hidden2)
        self.fc3 = layer(hidden2, 10)

    def forward(self, x):
        if self.fc_as_conv:
            x = x.view(x.shape[0], -1, 1, 1)
        x = self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))
        return x.view(x.shape[0], 10)


class CommStats:
    """Filled by the comm hook (on the thread that runs backward and gloo's/plait's threads)."""

    def __init__(self, world_size):
        self.world_size = world_size
        self.last_launch = 0.0  # perf_counter() of the latest hook call
        self.allreduce_s = 0.0  # sum over buckets of hook call -> all-reduce completion


def timed_allreduce_hook(stats, bucket):
    """DDP's default averaging all-reduce, timed: same math as default_hooks.allreduce_hook."""
    t0 = time.perf_counter()
    stats.last_launch = t0
    buf = bucket.buffer()
    buf.div_(stats.world_size)
    fut = dist.all_reduce(buf, async_op=True).get_future()

    def done(f):
        f.wait()  # re-raises a communication error
        stats.allreduce_s += time.perf_counter() - t0
        return buf  # reduced in place

    return fut.then(done)


HOOKS = ("default", "none", "fp16", "bf16", "int8", "sign", "topk", "threshold", "randomk",
         "powersgd", "auto", "torch-fp16", "torch-powersgd")


def make_hook(args, world):
    """(state, hook) for --hook: DDP's default all-reduce (timed), one of plait.torch.hooks'
    (plait's compressors over the group's own collectives, so also on gloo), or torch's own
    fp16_compress_hook / powerSGD_hook; each timed like the default one."""
    stats = CommStats(world)
    if args.hook == "default":
        return stats, stats, timed_allreduce_hook
    if args.hook == "torch-fp16":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        inner_state, inner = None, default_hooks.fp16_compress_hook
    elif args.hook == "torch-powersgd":
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook
        inner_state = powerSGD_hook.PowerSGDState(
            process_group=None, matrix_approximation_rank=args.powersgd_rank,
            start_powerSGD_iter=max(2, args.start_iter), use_error_feedback=True, warm_start=True)
        inner = powerSGD_hook.powerSGD_hook
    else:
        import plait.torch_hooks as hooks
        params = {"rank": args.powersgd_rank} if args.hook in ("powersgd", "auto") else {}
        if args.hook in ("topk", "randomk"):
            params["ratio"] = args.ratio
        inner_state, inner = hooks.make(args.hook, start_iter=args.start_iter, **params)

    def timed(pair, bucket):
        t0 = time.perf_counter()
        pair[0].last_launch = t0

        def done(f):
            pair[0].allreduce_s += time.perf_counter() - t0
            return f.value()

        return inner(pair[1], bucket).then(done)

    return stats, (stats, inner_state), timed


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", choices=["plait", "gloo"], default="plait",
                   help="torch.distributed backend (default: plait)")
    p.add_argument("--data-dir", default=DEFAULT_DATA_DIR,
                   help=f"directory with the Fashion-MNIST IDX .gz files (default: {DEFAULT_DATA_DIR})")
    p.add_argument("--epochs", type=int, default=3, help="training epochs (default: 3)")
    p.add_argument("--batch-size", type=int, default=128,
                   help="batch size per rank (default: 128)")
    p.add_argument("--lr", type=float, default=2e-3, help="Adam learning rate (default: 2e-3)")
    p.add_argument("--hidden", type=int, nargs=2, default=[256, 128], metavar=("H1", "H2"),
                   help="hidden layer widths (default: 256 128)")
    p.add_argument("--fc", choices=["conv", "linear"],
                   default="conv" if torch.backends.mkldnn.is_available() else "linear",
                   help="compute the fully connected layers as 1x1 convolutions (oneDNN; the "
                        "default where available) or with nn.Linear (BLAS)")
    p.add_argument("--seed", type=int, default=0, help="seed for init and shuffling (default: 0)")
    p.add_argument("--threads", type=int, default=1,
                   help="torch intra-op threads per rank (default: 1)")
    p.add_argument("--hook", choices=HOOKS, default="default",
                   help="gradient communication: DDP's all-reduce (default), a plait.torch.hooks "
                        "method (none = plain all-reduce through the hook), or torch's own "
                        "fp16 / PowerSGD hooks")
    p.add_argument("--powersgd-rank", type=int, default=4, help="PowerSGD rank (default: 4)")
    p.add_argument("--ratio", type=float, default=0.01, help="topk / randomk share (default: 0.01)")
    p.add_argument("--start-iter", type=int, default=0,
                   help="steps that all-reduce uncompressed before the hook compresses (default: 0; "
                        "torch's PowerSGD needs at least 2)")
    p.add_argument("--timeout", type=float, default=300,
                   help="process group timeout in seconds (default: 300)")
    p.add_argument("--checkpoint-dir", metavar="DIR",
                   help="plait.torch.checkpoint directory: resume from its newest whole checkpoint "
                        "(if any), and save there every --checkpoint-every steps")
    p.add_argument("--checkpoint-every", type=int, default=0, metavar="STEPS",
                   help="steps between checkpoints (default: 0, only at the end)")
    p.add_argument("--checkpoint-gathered", action="store_true",
                   help="one checkpoint file written by rank 0 instead of one per rank")
    p.add_argument("--max-steps", type=int, default=0,
                   help="stop after this many steps of the run, as if interrupted (default: 0, run all)")
    p.add_argument("--kill-at-step", type=int, default=0, metavar="N",
                   help="a crash, to try restarts: rank 1 (rank 0 alone) kills itself with SIGKILL "
                        "after step N on the job's first start (PLAIT_RESTART_COUNT or "
                        "TORCHELASTIC_RESTART_COUNT 0)")
    p.add_argument("--save-params", metavar="FILE",
                   help="rank 0 writes the final parameters to FILE (torch.save of one flat tensor)")
    args = p.parse_args(argv)
    if args.epochs < 1 or args.batch_size < 1 or args.threads < 1 or args.lr <= 0:
        p.error("--epochs, --batch-size, --threads and --lr must be positive")
    if args.checkpoint_every < 0 or args.max_steps < 0:
        p.error("--checkpoint-every and --max-steps must not be negative")
    return args


def first_start():
    """Whether this is the job's first start (not a restart by plait run or torchrun)."""
    count = os.environ.get("PLAIT_RESTART_COUNT", os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    return count == "0"


def log0(rank, msg):
    if rank == 0:
        print(msg, flush=True)


def run(args):
    for var in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        if var not in os.environ:
            raise SetupError(f"{var} is not set: start this script with `plait run -n N` or "
                             f"torchrun (it uses init_method env://)")
    if (args.backend == "plait" or args.hook not in ("default", "torch-fp16", "torch-powersgd")
            or args.checkpoint_dir):
        import_plait_torch()
    elif not dist.is_gloo_available():
        raise SetupError("this PyTorch build has no gloo backend")

    torch.set_num_threads(args.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass  # already set
    torch.manual_seed(args.seed)

    # plait.torch's is torch's without its second of waiting when a rank dials rank 0's
    # store before it listens (a resume's first step comes that much sooner).
    init = sys.modules["plait.torch"].init_process_group if "plait.torch" in sys.modules else dist.init_process_group
    init(backend=args.backend, init_method="env://", timeout=datetime.timedelta(seconds=args.timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    try:
        train(args, rank, world)
    finally:
        dist.destroy_process_group()


def train(args, rank, world):
    t_start = time.perf_counter()
    train_x, train_y = load_split(args.data_dir, "train")
    test_x, test_y = load_split(args.data_dir, "t10k")
    prepare = standardizer(train_x)
    lo, hi = rank * len(test_x) // world, (rank + 1) * len(test_x) // world
    test_xs, test_ys = prepare(test_x[lo:hi]), test_y[lo:hi]

    model = MLP(*args.hidden, fc_as_conv=args.fc == "conv")
    ddp = DDP(model)
    stats, hook_state, hook = make_hook(args, world)
    ddp.register_comm_hook(hook_state, hook)
    sampler = DistributedSampler(range(len(train_x)), num_replicas=world, rank=rank,
                                 shuffle=True, seed=args.seed, drop_last=False)
    opt = torch.optim.Adam(ddp.parameters(), lr=args.lr)
    steps_per_epoch = -(-len(sampler) // args.batch_size)
    total_steps = steps_per_epoch * args.epochs
    # Cosine decay of the learning rate from --lr to 0 over all steps of the run.
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda step: 0.5 * (1.0 + np.cos(np.pi * min(step, total_steps) / total_steps)))
    samples_per_epoch = len(sampler) * world  # every rank processes len(sampler) samples
    n_params = sum(p.numel() for p in model.parameters())
    log0(rank, f"backend={args.backend} hook={args.hook} world_size={world} params={n_params} "
               f"fc={args.fc} batch={args.batch_size}/rank lr={args.lr} epochs={args.epochs} "
               f"seed={args.seed} data_load_s={time.perf_counter() - t_start:.2f}")

    ckpt, step, resumed_at = None, 0, None
    # A plait hook's state (error feedback, PowerSGD's warm start) is checkpointed too.
    hook_ckpt = getattr(hook_state[1], "state_dict", None) and hook_state[1] if isinstance(hook_state, tuple) else None
    if args.checkpoint_dir:
        from plait.torch import checkpoint
        ckpt = checkpoint.Checkpointer(args.checkpoint_dir, every=args.checkpoint_every,
                                       sharded=not args.checkpoint_gathered)
        t_restore = time.perf_counter()
        step, extra = ckpt.restore(model, opt, hook=hook_ckpt)
        if step:
            resumed_at = step
            sched.load_state_dict(extra["scheduler"])
            log0(rank, f"resumed from {args.checkpoint_dir} at step {step} "
                       f"(restore_s={time.perf_counter() - t_restore:.2f})")
    last_step = min(total_steps, args.max_steps) if args.max_steps else total_steps

    def save_checkpoint(force):
        t = time.perf_counter()
        extra = {"scheduler": sched.state_dict()}
        where = (ckpt.save(step, model, opt, extra, hook=hook_ckpt) if force
                 else ckpt.maybe_save(step, model, opt, extra, hook=hook_ckpt))
        if where:
            log0(rank, f"checkpoint {where} save_s={time.perf_counter() - t:.2f}")

    epoch_times, comm_times = [], []
    accuracy = 0.0
    for epoch in range(step // steps_per_epoch, args.epochs):
        if step >= last_step:
            break
        sampler.set_epoch(epoch)
        # A resumed epoch goes on from the batch after the checkpoint's step.
        first = (step - epoch * steps_per_epoch) * args.batch_size
        idx = torch.tensor(list(iter(sampler)), dtype=torch.int64)[first:]
        ddp.train()
        stats.allreduce_s = 0.0
        comm_s = 0.0
        loss_sum = torch.zeros(2, dtype=torch.float64)  # sum of batch losses * n, n
        dist.barrier()
        t0 = time.perf_counter()
        for b in range(0, len(idx), args.batch_size):
            bi = idx[b:b + args.batch_size]
            x, y = prepare(train_x[bi]), train_y[bi]
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(ddp(x), y)
            loss.backward()
            comm_s += time.perf_counter() - stats.last_launch
            opt.step()
            sched.step()
            loss_sum[0] += loss.item() * len(bi)
            loss_sum[1] += len(bi)
            step += 1
            if resumed_at is not None and step == resumed_at + 1:
                log0(rank, f"first step after the resume done {time.perf_counter() - PROCESS_START:.2f} s "
                           f"after the process started")
            if step == args.kill_at_step and rank == min(1, world - 1) and first_start():
                print(f"rank {rank}: killing itself at step {step} (--kill-at-step)", flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
            if ckpt:
                save_checkpoint(force=step == total_steps)
            if step >= last_step:
                break
        dist.barrier()
        epoch_s = time.perf_counter() - t0

        t1 = time.perf_counter()
        ddp.eval()
        with torch.no_grad():
            pred = model(test_xs).argmax(dim=1)
        counts = torch.tensor([(pred == test_ys).sum().item(), len(test_ys)], dtype=torch.float64)
        dist.all_reduce(counts)
        dist.all_reduce(loss_sum)
        accuracy = counts[0].item() / counts[1].item()
        eval_s = time.perf_counter() - t1
        if int(counts[1].item()) != len(test_y):
            raise RuntimeError(f"evaluated {int(counts[1].item())} test images, expected {len(test_y)}")
        epoch_times.append(epoch_s)
        comm_times.append(comm_s)
        log0(rank, f"epoch {epoch + 1}/{args.epochs} train_loss={loss_sum[0] / loss_sum[1]:.4f} "
                   f"test_accuracy={accuracy:.4f} epoch_s={epoch_s:.2f} comm_s={comm_s:.2f} "
                   f"ar_s={stats.allreduce_s:.2f} eval_s={eval_s:.2f}")

    if args.save_params and rank == 0:
        torch.save(torch.cat([p.detach().flatten() for p in model.parameters()]), args.save_params)
    if step < total_steps:
        log0(rank, f"stopped at step {step} of {total_steps} (--max-steps)")
    if not epoch_times:
        return
    samples_per_s = samples_per_epoch * len(epoch_times) / sum(epoch_times)
    log0(rank, f"total_s={time.perf_counter() - t_start:.2f}")
    log0(rank, f"RESULT test_accuracy={accuracy:.4f} epoch_s={np.mean(epoch_times):.3f} "
               f"comm_s={np.mean(comm_times):.3f} samples_per_s={samples_per_s:.0f}")


def run_reporting_errors(body):
    """Runs body(); returns the exit status, with any error reported on stderr naming the
    rank (SetupError without a traceback)."""
    rank = os.environ.get("RANK", "?")
    try:
        body()
    except SetupError as e:
        print(f"error: rank {rank}: {e}", file=sys.stderr, flush=True)
        return 2
    except KeyboardInterrupt:
        print(f"error: rank {rank}: interrupted", file=sys.stderr, flush=True)
        return 130
    except Exception as e:  # noqa: BLE001 - report anything with the rank, then fail
        traceback.print_exc()
        print(f"error: rank {rank}: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        return 1
    return 0


def main(argv=None):
    args = parse_args(argv)
    return run_reporting_errors(lambda: run(args))


if __name__ == "__main__":
    sys.exit(main())
