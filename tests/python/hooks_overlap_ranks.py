"""Rank program for test_torch_hooks.py's overlap cases (2 ranks): plait.torch.hooks' hooks
return before their bucket is reduced, so backward goes on while buckets move, and DDP ends
with the right values.

Usage: hooks_overlap_ranks.py <backend> <method> [error]. A model of several buckets:
- Gated steps: one rank starts its backward only once every hook of the other rank's
  backward has returned, so none of that rank's buckets can be reduced before its hooks all
  returned: each hook's Future must be pending when it returns (the hooks once reduced
  before returning, and the gated rank waited for them in vain). A rank that waits for the
  other's hooks longer than GATE_S goes on, so that such a hook fails the check, not the
  test's time limit.
- Values: every step's gradients equal those of the same hook made synchronous (it waits
  for its Future before returning) on a second DDP copy, bit for bit, and for "none" and
  "deadline" the mean of both ranks' gradients.
- Profile: rank 0 profiles a gated step (torch.profiler); the first bucket's range (from its
  hook's call until its Future completes) contains backward ranges of earlier layers, which
  ran while it was reduced. The trace goes to OUT_DIR/overlap-<backend>-<method>.json.
With "error" (plait backend): rank 1 skips a step; rank 0's backward raises the timeout that
its first bucket's collective ended with, the rest of the step's buckets fail at once, and
both ranks exit.
"""
import copy
import datetime
import json
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import plait
import plait.torch  # noqa: F401  (the "plait" backend, and plait.torch.hooks)
import rank_stacks  # noqa: F401  (stacks on SIGTERM)

GATE_S = 5.0
TIMEOUT_S = 15.0
METHOD_PARAMS = {"none": {}, "fp16": {}, "int8": {"chunk": 64}, "powersgd": {"rank": 2}, "topk": {"ratio": 0.1}}


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, 128), torch.nn.ReLU(), torch.nn.Linear(128, 128),
                               torch.nn.ReLU(), torch.nn.Linear(128, 10))


def batch(step, rank):
    gen = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(16, 32, generator=gen), torch.randint(0, 10, (16,), generator=gen)


def loss_of(net, step, rank):
    x, y = batch(step, rank)
    return torch.nn.functional.cross_entropy(net(x), y)


def grads(net):
    return [p.grad.clone() for p in net.parameters()]


def mean_grads(net, step, world):
    """The mean over the ranks of their gradients, computed here from every rank's batch."""
    ref = copy.deepcopy(net)
    total = None
    for r in range(world):
        ref.zero_grad()
        loss_of(ref, step, r).backward()
        g = grads(ref)
        total = g if total is None else [a + b for a, b in zip(total, g)]
    return [t / world for t in total]


def make_hook(method, comm):
    if method == "deadline":
        return plait.torch.hooks.make_deadline(comm.split(0, comm.rank), deadline=30.0)
    return plait.torch.hooks.make(method, **METHOD_PARAMS[method])


def waiting(hook):
    """The hook, made synchronous: it waits for its Future before returning."""
    def wait_then_return(state, bucket):
        fut = hook(state, bucket)
        fut.wait()
        return fut
    return wait_then_return


class Spy:
    """Wraps a hook (DDP takes functions only: `spy.hook`): records whether each Future was
    pending when the hook returned, and on a gated step tells the other rank once the step's
    last bucket was handed over."""

    def __init__(self, hook, store):
        self.pending, self.buckets, self.gate_key = [], set(), None

        def spying(state, bucket):
            fut = hook(state, bucket)
            self.buckets.add(bucket.index())
            if self.gate_key:
                self.pending.append(not fut.done())
                if bucket.is_last():
                    store.set(self.gate_key, "returned")
            return fut
        self.hook = spying


def gated_step(ddp, spy, store, step, rank, gated_rank, opt):
    """One step in which `gated_rank`'s hooks all return before the other rank starts its
    backward."""
    key = f"hooks-returned-{step}"
    spy.gate_key = key if rank == gated_rank else None
    spy.pending = []
    opt.zero_grad()
    loss = loss_of(ddp, step, rank)
    if rank != gated_rank:
        try:
            store.wait([key], datetime.timedelta(seconds=GATE_S))
        except RuntimeError:
            print(f"rank {rank}: step {step}: rank {gated_rank}'s hooks did not all return in {GATE_S} s",
                  flush=True)
    loss.backward()
    spy.gate_key = None
    if rank == gated_rank:
        assert spy.pending and all(spy.pending), \
            f"step {step}: a hook's Future was complete when the hook returned: pending={spy.pending}"


def check_profile(prof, out_dir, backend, method):
    path = os.path.join(out_dir, f"overlap-{backend}-{method}.json")
    prof.export_chrome_trace(path)
    events = [(e.name, e.time_range.start, e.time_range.end) for e in prof.events()]
    spans = sorted((s, e, n) for n, s, e in events if n.startswith("plait.hooks: bucket"))
    backward = [(s, e, n) for n, s, e in events if "Backward" in n]
    assert len(spans) >= 2, f"bucket ranges: {spans}"
    first_s, first_e, first = spans[0]
    inside = [n for s, e, n in backward if first_s < s and e < first_e]
    assert inside, f"no backward range ran while {first} moved ({first_s}-{first_e}): {sorted(backward)}"
    return path, first, inside


def main():
    backend, method = sys.argv[1], sys.argv[2]
    error_case = len(sys.argv) > 3 and sys.argv[3] == "error"
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=TIMEOUT_S))
    rank, world = dist.get_rank(), dist.get_world_size()
    assert world == 2, world
    store = dist.distributed_c10d._get_default_store()
    comm = plait.init() if method == "deadline" else None
    out_dir = os.environ["OUT_DIR"]

    net, twin = model(), model()
    # DDP's first bucket takes up to 1 MiB whatever bucket_cap_mb says: all of this model.
    dist._DEFAULT_FIRST_BUCKET_BYTES = 20000
    ddp = DDP(net, bucket_cap_mb=0.02)
    ref = DDP(twin, bucket_cap_mb=0.02)
    state, hook = make_hook(method, comm)
    spy = Spy(hook, store)
    ddp.register_comm_hook(state, spy.hook)
    ref_state, ref_hook = make_hook(method, comm)
    ref.register_comm_hook(ref_state, waiting(ref_hook))
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)

    if error_case:
        opt.zero_grad()
        loss = loss_of(ddp, 0, rank)
        if rank == 0:
            start = time.monotonic()
            try:
                loss.backward()
                raise AssertionError("a step without rank 1 ended without an error")
            except RuntimeError as e:
                took = time.monotonic() - start
                assert "imed out" in str(e), e
                assert took < 1.5 * TIMEOUT_S, took  # one collective's timeout, not one per bucket
                print(f"rank 0: backward raised after {took:.1f} s: {str(e).splitlines()[0][:200]}", flush=True)
            store.set("rank0-failed", "1")
            store.wait(["rank1-done"], datetime.timedelta(seconds=120))  # rank 0 holds the store
        else:
            store.wait(["rank0-failed"], datetime.timedelta(seconds=120))
            store.set("rank1-done", "1")
        print(f"rank {rank}: hooks overlap {backend} {method} error ok", flush=True)
        sys.stdout.flush()
        os._exit(0)  # the group saw a collective time out: it is not torn down

    for step in range(6):
        # Steps 1 and 3: rank 1 waits for rank 0's hooks; step 2: rank 0 for rank 1's; step 3
        # profiled on rank 0. Steps 0, 4 and 5 ungated (step 0: DDP's first layout).
        gated = {1: 0, 2: 1, 3: 0}.get(step)
        if gated is None:
            opt.zero_grad()
            loss_of(ddp, step, rank).backward()
        elif step == 3 and rank == 0:
            with torch.profiler.profile() as prof:
                gated_step(ddp, spy, store, step, rank, gated, opt)
            path, first, inside = check_profile(prof, out_dir, backend, method)
            print(f"rank 0: profile {path}: {first} spans {len(inside)} backward ranges: "
                  f"{', '.join(sorted(set(inside)))}", flush=True)
        else:
            gated_step(ddp, spy, store, step, rank, gated, opt)
        ref_opt.zero_grad()
        loss_of(ref, step, rank).backward()
        got, want = grads(net), grads(twin)
        for i, (g, w) in enumerate(zip(got, want)):
            assert torch.equal(g, w), f"step {step} parameter {i}: {(g - w).abs().max()} from the waiting hook's"
        if method in ("none", "deadline"):
            mean = mean_grads(twin, step, world)
            for i, (g, m) in enumerate(zip(got, mean)):
                assert torch.allclose(g, m, rtol=1e-6, atol=1e-7), f"step {step} parameter {i}: {(g - m).abs().max()}"
        opt.step()
        ref_opt.step()
    assert len(spy.buckets) >= 2, f"buckets {sorted(spy.buckets)}: the model must have several"
    if rank == 0:
        with open(os.path.join(out_dir, f"buckets-{backend}-{method}.json"), "w") as f:
            json.dump(sorted(spy.buckets), f)
    print(f"rank {rank}: hooks overlap {backend} {method} ok ({len(spy.buckets)} buckets)", flush=True)
    dist.barrier()
    if backend == "gloo":  # as hooks_ranks.py: gloo's teardown can hang at exit (pytorch#75097)
        sys.stdout.flush()
        os._exit(0)
    if comm is not None:
        state.dl.close()
        ref_state.dl.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
