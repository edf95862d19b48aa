#!/usr/bin/env python3
"""A mixture-of-experts language model on the King James Bible, its experts spread over the ranks
(expert parallelism), over plait or gloo, with hot experts replicated by their measured load.

    build/tools/plait/plait run -n 4 .venv/bin/python examples/moe_lm.py
    build/tools/plait/plait run -n 4 .venv/bin/python examples/moe_lm.py --skew zipf:1.2 \\
        --replicate-every 5
    build/tools/plait/plait run -n 4 .venv/bin/python examples/moe_lm.py --backend gloo

The model is examples/lm/moe.py: the GPT of examples/lm/model.py, with every block's MLP
replaced by --experts logical experts under a top-2 gate and Switch's auxiliary load-balancing
loss. Rank r holds --experts/ranks slots, plus --spare-slots more when replication is on. The
rest of the model is replicated: its gradients are summed over the ranks.

Dispatch and combine go through plait.torch.moe: the Dispatcher on plait, and on gloo the
AllToAllDispatcher (counts first, then all_to_all_single). Both give the same results, so a
run on either backend follows the same loss curve to rounding.

--skew zipf:S biases the gate towards the first experts. Expert e then gets a share like
1/(e+1)^S, and the rank holding the first experts becomes the straggler. --replicate-every K
has each MoE layer measure its experts' load and, every K steps, re-place them by EPLB's plan
(plait.torch.moe.ExpertBalancer). The hottest experts get several slots. Their weights and
AdamW state move over the group, and their gradients are summed among their replicas.

Batches, seed, AdamW at --lr, one intra-op thread per rank, validation over --eval-batches
held-out batches and timing (the slowest rank's step, median after --warmup) are those of
examples/parallel_lm.py. max_over_mean is the busiest rank's received rows over the mean,
averaged over the layers, median over the timed steps. Rank 0's last line:

    RESULT backend=plait skew=zipf:1.2 replicate_every=5 steps=40 val_loss=2.6512 step_s=0.1420
        tokens_per_s=7211 max_over_mean=1.08 path=one-sided moves=23
"""
import argparse
import datetime
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lm.corpus import Corpus, kjv_bytes  # noqa: E402
from lm.model import loss_of  # noqa: E402
from lm.moe import MoEFeedForward, MoEGPT  # noqa: E402


def import_plait_torch():
    try:
        import plait  # noqa: F401
    except ImportError:
        here = os.path.dirname(os.path.abspath(__file__))
        sys.path.insert(0, os.path.join(os.path.dirname(here), "build", "python"))
    import plait.torch  # noqa: F401
    return plait.torch


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", choices=("plait", "gloo"), default="plait")
    p.add_argument("--skew", default="uniform", help="uniform or zipf:S")
    p.add_argument("--replicate-every", type=int, default=0, help="K steps between re-plans (0: off)")
    p.add_argument("--spare-slots", type=int, default=2, help="extra slots per rank when replicating")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--batch", type=int, default=16, help="global batch, in sequences")
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--dim", type=int, default=96)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--experts", type=int, default=16)
    p.add_argument("--topk", type=int, default=2)
    p.add_argument("--expert-hidden", type=int, default=768)
    p.add_argument("--aux", type=float, default=0.01, help="weight of the load-balancing loss")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--eval-batches", type=int, default=4)
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--curve", metavar="FILE", help="rank 0 writes one JSON line per step here")
    p.add_argument("--timeout", type=float, default=120)
    a = p.parse_args(argv)
    if a.skew == "uniform":
        a.zipf = 0.0
    elif a.skew.startswith("zipf:"):
        a.zipf = float(a.skew[5:])
    else:
        p.error("--skew is uniform or zipf:S")
    return a


def main(argv=None):
    a = parse_args(argv)
    torch.set_num_threads(1)
    plait_torch = import_plait_torch()
    moe = plait_torch.moe
    dist.init_process_group(a.backend, init_method="env://", timeout=datetime.timedelta(seconds=a.timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    if a.experts % world or a.batch % world:
        raise SystemExit(f"--experts {a.experts} and --batch {a.batch} must split over {world} ranks")
    spare = a.spare_slots if a.replicate_every else 0
    slots_per_rank = a.experts // world + spare
    local_tokens = a.batch // world * a.seq
    dtype = torch.float32

    dispatchers = []

    def make_moe(layer):
        placement = moe.ExpertPlacement(a.experts, world, slots_per_rank)
        d = moe.make_dispatcher(world * slots_per_rank, a.topk, a.dim, dtype, max_tokens=local_tokens,
                                name=f"moe-lm-{layer}")
        dispatchers.append(d)
        return MoEFeedForward(a.dim, a.expert_hidden, a.experts, a.topk, placement, rank, d, a.zipf,
                              a.seed, layer)

    torch.manual_seed(a.seed)
    model = MoEGPT(make_moe, dim=a.dim, heads=a.heads, layers=a.layers, seq=a.seq)
    optimizer = torch.optim.AdamW(model.parameters(), lr=a.lr)
    for layer in model.moe_layers():
        layer.balancer = moe.ExpertBalancer(layer.placement, layer.experts, optimizer, every=a.replicate_every)
    dense = model.dense_parameters()
    corpus = Corpus(kjv_bytes())
    val = corpus.val_batches(a.eval_batches * world, a.batch // world, a.seq)[rank::world]

    curve = open(a.curve, "w") if a.curve and rank == 0 else None
    times, balance = [], []
    for i in range(a.steps):
        x, y = corpus.train_batch(a.seed, i, a.batch, a.seq, rank, world)
        start = time.perf_counter()
        model.train()
        logits, aux = model(x)
        ce = loss_of(logits, y)
        ((ce + a.aux * aux) / world).backward()
        flat = torch.cat([p.grad.reshape(-1) for p in dense])  # data-parallel sum
        dist.all_reduce(flat)
        offset = 0
        for p in dense:
            p.grad.copy_(flat[offset:offset + p.numel()].view_as(p))
            offset += p.numel()
        for layer in model.moe_layers():
            layer.balancer.reduce_replica_grads()
        optimizer.step()
        optimizer.zero_grad()
        moved = sum(layer.balancer.step() for layer in model.moe_layers())
        times.append(time.perf_counter() - start)
        rows = torch.tensor([float(layer.recv_rows) for layer in model.moe_layers()])
        all_rows = [torch.zeros_like(rows) for _ in range(world)]
        dist.all_gather(all_rows, rows)
        stacked = torch.stack(all_rows)  # [world, layers]
        step_balance = float((stacked.max(0).values / stacked.mean(0)).mean())
        balance.append(step_balance)
        losses = torch.tensor([ce.item(), aux.item()])
        dist.all_reduce(losses)
        if curve:
            curve.write(json.dumps({"step": i + 1, "train_loss": losses[0].item() / world,
                                    "aux": losses[1].item() / world, "max_over_mean": step_balance,
                                    "step_s": times[-1], "moved": moved}) + "\n")
        if rank == 0 and (i + 1) % a.log_every == 0:
            print(f"step {i + 1} train_loss {losses[0].item() / world:.4f} "
                  f"max_over_mean {step_balance:.2f}" + (f" re-placed {moved} layer(s)" if moved else ""),
                  flush=True)

    model.eval()
    with torch.no_grad():
        v = torch.tensor([sum(loss_of(model(vx)[0], vy).item() for vx, vy in val) / len(val)])
    dist.all_reduce(v)
    v = v.item() / world
    slowest = torch.tensor(times, dtype=torch.float64)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    step_s = statistics.median(slowest[a.warmup:].tolist() or slowest.tolist())
    moves = torch.tensor([sum(layer.balancer.moves for layer in model.moe_layers())])
    dist.all_reduce(moves)
    paths = sorted({d.chosen_path(True, False) for d in dispatchers})
    if rank == 0:
        print(f"RESULT backend={a.backend} skew={a.skew} replicate_every={a.replicate_every} steps={a.steps} "
              f"val_loss={v:.4f} step_s={step_s:.4f} tokens_per_s={a.batch * a.seq / step_s:.0f} "
              f"max_over_mean={statistics.median(balance[a.warmup:] or balance):.2f} "
              f"path={','.join(paths)} moves={int(moves.item())}", flush=True)
    if curve:
        curve.close()
    for d in dispatchers:
        if hasattr(d, "close"):
            d.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
