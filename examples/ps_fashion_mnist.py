#!/usr/bin/env python3
"""Parameter-server training of the DDP example's MLP on Fashion-MNIST, over plait.ps.

    build/tools/plait/plait run -n 6 -- .venv/bin/python examples/ps_fashion_mnist.py --servers 2
    ... --mode asp            # every push applied as it arrives
    ... --mode ssp --staleness 4

The last --servers ranks are servers: they hold the model's parameters, one key per tensor,
split into partitions spread over the servers, and run Adam on them. The other ranks are
workers: each computes the gradient of its batch, pushes it and pulls the updated parameters
back (one batched push_pull per step, straight into the model's tensors). --mode picks the
consistency: bsp (every step's gradients of all workers averaged, one Adam step per round:
synchronous SGD), asp (every push is an Adam step of its own, workers never wait), ssp (as
asp, but no worker more than --staleness steps ahead of the slowest).

Data and model are the DDP example's (examples/ddp_fashion_mnist.py: same loader,
standardization and MLP). Each worker takes a disjoint 1/W of a per-epoch shuffle (--seed);
every worker runs the same number of steps. The first worker evaluates its pulled model on the
full test set after every epoch and prints

    epoch E/N train_loss=... test_accuracy=... epoch_s=... version=...

where version is the parameters' version as the last pull returned it (BSP: rounds applied),
and at the end exactly one line

    RESULT mode=<bsp|asp|ssp> test_accuracy=<0..1> epoch_s=<mean> samples_per_s=<all workers>
           step_p50_ms=... step_p99_ms=...

Stragglers as in straggler_fashion_mnist.py (--straggler RANK:FACTOR, --trace P:FACTOR, a
worker index here); --backup B with bsp applies each round with the first workers - B pushes.
A slow link too: started as root without plait run, --slow-link RANK:RATE --ranks N runs the
job on network-namespace hosts (examples/netns_testbed.py), that rank's link capped at RATE.
"""

import argparse
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from ddp_fashion_mnist import (DEFAULT_DATA_DIR, MLP, SetupError, load_split,  # noqa: E402
                               run_reporting_errors, standardizer)
from elastic_fashion_mnist import import_plait  # noqa: E402
import netns_testbed  # noqa: E402
from straggler_fashion_mnist import parse_pair, slow_factor  # noqa: E402

import torch  # noqa: E402  (ddp_fashion_mnist checked that it is there)
import torch.nn.functional as F  # noqa: E402


def import_plait_ps():
    import_plait()  # adds build/python to the path if plait is not installed
    try:
        import plait.ps  # noqa: F401
    except ImportError as e:
        raise SetupError(f"plait.ps is not importable ({e}): build plait (make build)") from e
    return sys.modules["plait.ps"]


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--servers", type=int, default=2, help="server ranks (default: 2)")
    p.add_argument("--mode", choices=["bsp", "asp", "ssp"], default="bsp")
    p.add_argument("--staleness", type=int, default=0, help="ssp's bound (default: 0)")
    p.add_argument("--backup", type=int, default=0,
                   help="bsp: apply each round with the first workers - B pushes (backup workers)")
    p.add_argument("--fold-late", action="store_true",
                   help="with --backup: a late push joins the next round instead of being dropped")
    p.add_argument("--straggler", type=lambda t: parse_pair(t, "--straggler", int),
                   help="RANK:FACTOR: that worker computes FACTOR times slower every step")
    p.add_argument("--trace", type=lambda t: parse_pair(t, "--trace", float),
                   help="P:FACTOR: each step, each worker FACTOR times slower with probability P")
    p.add_argument("--data-dir", default=DEFAULT_DATA_DIR)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=128, help="per worker (default: 128)")
    p.add_argument("--lr", type=float, default=1e-3,
                   help="the servers' Adam learning rate (default: 1e-3)")
    p.add_argument("--hidden", type=int, nargs=2, default=[256, 128], metavar=("H1", "H2"))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=300, help="seconds (default: 300)")
    netns_testbed.add_arguments(p)
    args = p.parse_args(argv)
    if args.staleness and args.mode != "ssp":
        p.error("--staleness needs --mode ssp")
    if (args.backup or args.fold_late) and args.mode != "bsp":
        p.error("--backup and --fold-late need --mode bsp")
    return args


def run(args):
    ps = import_plait_ps()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    kv = ps.KVStore(servers=args.servers, consistency=args.mode, staleness=args.staleness,
                    backup_workers=args.backup, fold_late=args.fold_late,
                    settings={"PLAIT_TIMEOUT": str(int(args.timeout * 1000))})
    model = MLP(*args.hidden, fc_as_conv=torch.backends.mkldnn.is_available())
    params = [p.data for p in model.parameters()]
    # One key per tensor, initialised from the first worker's model, updated by Adam on the
    # servers (every rank registers the same keys in the same order).
    for key, p in enumerate(params):
        kv.register(key, p, rule="adam", lr=args.lr, init=p)
    if kv.is_server:
        kv.finalize()
        return
    keys = list(range(len(params)))
    workers, me = kv.num_workers, kv.worker_index
    kv.pull(keys, params).wait()  # every worker starts from the same parameters

    train_x, train_y = load_split(args.data_dir, "train")
    test_x, test_y = load_split(args.data_dir, "t10k")
    prepare = standardizer(train_x)
    test_xs = prepare(test_x)
    steps = len(train_x) // workers // args.batch_size
    if me == 0:
        print(f"mode={args.mode} staleness={args.staleness} servers={kv.num_servers} "
              f"workers={workers} params={sum(p.numel() for p in params)} "
              f"batch={args.batch_size}/worker lr={args.lr} steps/epoch={steps}", flush=True)
    epoch_times, step_times, accuracy = [], [], 0.0
    for epoch in range(args.epochs):
        order = np.random.default_rng(args.seed + epoch).permutation(len(train_x))[me::workers]
        loss_sum, version = 0.0, 0
        t0 = time.perf_counter()
        for step in range(steps):
            s0 = time.perf_counter()
            bi = torch.from_numpy(order[step * args.batch_size:(step + 1) * args.batch_size])
            model.zero_grad(set_to_none=False)
            loss = F.cross_entropy(model(prepare(train_x[bi])), train_y[bi])
            loss.backward()
            factor = slow_factor(args, me, epoch * steps + step)
            if factor > 1:
                time.sleep((factor - 1) * (time.perf_counter() - s0))
            work = kv.push_pull(keys, [p.grad for p in model.parameters()], params)
            work.wait()
            version = work.version
            loss_sum += loss.item()
            step_times.append(time.perf_counter() - s0)
        epoch_times.append(time.perf_counter() - t0)
        if me == 0:
            with torch.no_grad():
                accuracy = (model(test_xs).argmax(dim=1) == test_y).float().mean().item()
            print(f"epoch {epoch + 1}/{args.epochs} train_loss={loss_sum / steps:.4f} "
                  f"test_accuracy={accuracy:.4f} epoch_s={epoch_times[-1]:.2f} "
                  f"version={version}", flush=True)
    if me == 0:
        samples_per_s = steps * args.batch_size * workers * args.epochs / sum(epoch_times)
        t = np.array(step_times) * 1e3
        print(f"RESULT mode={args.mode} test_accuracy={accuracy:.4f} "
              f"epoch_s={np.mean(epoch_times):.3f} samples_per_s={samples_per_s:.0f} "
              f"step_p50_ms={np.percentile(t, 50):.1f} step_p99_ms={np.percentile(t, 99):.1f}",
              flush=True)
    kv.finalize()


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if netns_testbed.is_launcher(args):
        return netns_testbed.run_ranks(args, argv, os.path.abspath(__file__))
    return run_reporting_errors(lambda: run(args))


if __name__ == "__main__":
    sys.exit(main())
