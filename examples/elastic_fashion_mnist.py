#!/usr/bin/env python3
"""Data-parallel training that survives a dead rank in the job: Communicator.shrink().

    build/tools/plait/plait run -n 4 --enable-recovery -- \\
        .venv/bin/python examples/elastic_fashion_mnist.py --kill 2:60

The DDP example's MLP on Fashion-MNIST, with plait's own communicator instead of
torch.distributed (whose process group cannot shrink). Every step takes the next --batch
samples of a per-epoch shuffle (--seed) and splits them among the ranks that are alive; each
rank sums its share's loss gradients, one allreduce adds them up, and every rank divides by the
batch and steps SGD with momentum. So a step's update does not depend on how many ranks share
the batch.

--kill RANK:STEP (repeatable) makes that rank of the starting job SIGKILL itself at that step.
The survivors' allreduce fails, naming the dead rank; they call comm.shrink(), which gives each
the same list of survivors, take the parameters, momentum and step of the first survivor (a
rank may have finished the failed step's allreduce before the others learnt of the death) and
go on from there with the batch split among fewer ranks. The job must run under
`plait run --enable-recovery` (or any launcher that leaves the survivors running and keeps the
store alive).

The first rank evaluates on the test set after each epoch. Every survivor prints one line per
recovery

    RECOVERED step=S survivors=[...] shrink_s=... resync_s=...

and the first survivor at the end exactly one line

    RESULT ranks_start=N ranks_end=M recoveries=K test_accuracy=<0..1> train_s=... params_crc=...
"""

import argparse
import os
import signal
import sys
import time
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from ddp_fashion_mnist import (DEFAULT_DATA_DIR, MLP, SetupError, load_split,  # noqa: E402
                               run_reporting_errors, standardizer)

import numpy as np  # noqa: E402
import torch  # noqa: E402  (ddp_fashion_mnist checked that it is there)
import torch.nn.functional as F  # noqa: E402


def import_plait():
    try:
        import plait  # noqa: F401
    except ImportError:
        sys.path.insert(0, os.path.join(os.path.dirname(HERE), "build", "python"))
        try:
            import plait  # noqa: F401
        except ImportError as e:
            raise SetupError(f"plait is not importable ({e}): build plait (make build) or add "
                             f"its build/python to PYTHONPATH") from e
    return sys.modules["plait"]


def parse_kill(text):
    try:
        rank, step = (int(v) for v in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--kill takes RANK:STEP, not '{text}'") from None
    if rank < 0 or step < 0:
        raise argparse.ArgumentTypeError(f"--kill takes a rank and step of at least 0, not '{text}'")
    return rank, step


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", default=DEFAULT_DATA_DIR)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch", type=int, default=240, help="global batch (split among the ranks)")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--hidden", type=int, nargs=2, default=[256, 128])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--kill", type=parse_kill, action="append", default=[],
                   help="RANK:STEP: that rank (of the starting job) dies by SIGKILL at STEP")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds for any one operation")
    args = p.parse_args(argv)
    if args.batch < 1 or args.epochs < 1:
        p.error("--batch and --epochs must be at least 1")
    return args


class Trainer:
    """The model, its momentum and the step counter, as one flat float32 vector each, so one
    allreduce moves the gradient and one broadcast resynchronizes a survivor."""

    def __init__(self, args):
        torch.manual_seed(args.seed)  # the same initial parameters on every rank
        fc_as_conv = torch.backends.mkldnn.is_available()
        self.model = MLP(args.hidden[0], args.hidden[1], fc_as_conv)
        self.params = list(self.model.parameters())
        self.numel = sum(p.numel() for p in self.params)
        self.grad = torch.zeros(self.numel)
        # parameters, momentum, step: what a survivor takes from the first one
        self.state = torch.zeros(2 * self.numel + 1, dtype=torch.float64)
        self.momentum = torch.zeros(self.numel)
        self.args = args

    def local_gradient(self, x, y):
        """Sum (not mean) of the loss gradients over this rank's share, flattened."""
        self.model.zero_grad(set_to_none=False)
        if x.shape[0] > 0:
            F.cross_entropy(self.model(x), y, reduction="sum").backward()
        at = 0
        for p in self.params:
            n = p.numel()
            if p.grad is None:
                self.grad[at:at + n].zero_()
            else:
                self.grad[at:at + n].copy_(p.grad.flatten())
            at += n
        return self.grad

    def apply(self, summed_grad, batch):
        with torch.no_grad():
            self.momentum.mul_(self.args.momentum).add_(summed_grad, alpha=1.0 / batch)
            at = 0
            for p in self.params:
                n = p.numel()
                p.sub_(self.momentum[at:at + n].view_as(p), alpha=self.args.lr)
                at += n

    def pack(self, step):
        with torch.no_grad():
            flat = torch.cat([p.detach().flatten() for p in self.params])
            self.state[:self.numel].copy_(flat)
            self.state[self.numel:2 * self.numel].copy_(self.momentum)
            self.state[-1] = step
        return self.state

    def unpack(self):
        with torch.no_grad():
            at = 0
            for p in self.params:
                n = p.numel()
                p.copy_(self.state[at:at + n].view_as(p))
                at += n
            self.momentum.copy_(self.state[self.numel:2 * self.numel])
        return int(self.state[-1].item())

    def crc(self):
        flat = torch.cat([p.detach().flatten() for p in self.params]).numpy()
        return zlib.crc32(flat.tobytes())


def load_standardized(data_dir):
    """(train_x, train_y, test_x, test_y), pixels standardized by the training set."""
    train_x, train_y = load_split(data_dir, "train")
    test_x, test_y = load_split(data_dir, "t10k")
    prepare = standardizer(train_x)
    return prepare(train_x), train_y, prepare(test_x), test_y


def evaluate(model, x, y):
    model.eval()
    with torch.no_grad():
        correct = sum(int((model(x[i:i + 2000]).argmax(1) == y[i:i + 2000]).sum())
                      for i in range(0, x.shape[0], 2000))
    model.train()
    return correct / x.shape[0]


def train(args):
    plait = import_plait()
    torch.set_num_threads(1)
    comm = plait.init(args.timeout)
    ranks_start = comm.size
    world_of = list(range(comm.size))  # current rank -> rank in the starting job
    me = comm.rank
    kill_at = {step for rank, step in args.kill if rank == me}

    train_x, train_y, test_x, test_y = load_standardized(args.data_dir)
    trainer = Trainer(args)
    steps_per_epoch = train_x.shape[0] // args.batch
    total = steps_per_epoch * args.epochs
    recoveries = 0
    started = time.perf_counter()
    step = 0
    while step < total:
        epoch = step // steps_per_epoch
        if step % steps_per_epoch == 0 or step == 0:
            order = torch.randperm(train_x.shape[0],
                                   generator=torch.Generator().manual_seed(args.seed + epoch))
        if step in kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        n, r = comm.size, comm.rank
        first = (step % steps_per_epoch) * args.batch
        lo, hi = first + r * args.batch // n, first + (r + 1) * args.batch // n
        idx = order[lo:hi]
        grad = trainer.local_gradient(train_x[idx], train_y[idx])
        try:
            comm.allreduce(grad.numpy(), op="sum").wait()
        except plait.Error as e:
            t0 = time.perf_counter()
            comm, survivors = comm.shrink()
            world_of = [world_of[s] for s in survivors]
            t1 = time.perf_counter()
            # The first survivor's state is everyone's: the step, parameters and momentum.
            state = trainer.pack(step)
            comm.broadcast(state.numpy(), root=0).wait()
            step = trainer.unpack()
            recoveries += 1
            print(f"RECOVERED step={step} survivors={world_of} shrink_s={t1 - t0:.3f} "
                  f"resync_s={time.perf_counter() - t1:.3f} after: {type(e).__name__}: "
                  f"{str(e).splitlines()[0][:200]}", flush=True)
            continue
        trainer.apply(grad, args.batch)
        step += 1
        if step % steps_per_epoch == 0 and comm.rank == 0:
            acc = evaluate(trainer.model, test_x, test_y)
            print(f"epoch {step // steps_per_epoch}/{args.epochs} ranks={comm.size} "
                  f"test_accuracy={acc:.4f} elapsed_s={time.perf_counter() - started:.1f}",
                  flush=True)
    train_s = time.perf_counter() - started
    comm.barrier().wait()
    if comm.rank == 0:
        acc = evaluate(trainer.model, test_x, test_y)
        print(f"RESULT ranks_start={ranks_start} ranks_end={comm.size} recoveries={recoveries} "
              f"test_accuracy={acc:.4f} train_s={train_s:.1f} params_crc={trainer.crc():08x}",
              flush=True)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    return run_reporting_errors(lambda: train(args))


if __name__ == "__main__":
    sys.exit(main())
