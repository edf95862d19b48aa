"""One rank of a torch.distributed job on the "plait" backend: what torch 2.x added to c10d.

Run by test_torch2_api.py under `plait run -n N`. Results are checked against gloo's in the
same job and against references every rank derives from the inputs.
"""
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.distributed.distributed_c10d import _coalescing_manager

import plait.torch
import rank_stacks  # noqa: F401  (stacks on SIGTERM)


def coalesced():
    """The coalescing manager's fast paths (FSDP's primitives) give gloo's results, for mixed
    dtypes; a non-contiguous output gets its blocks in place."""
    me, n = dist.get_rank(), dist.get_world_size()
    gloo = dist.new_group(backend="gloo")
    results = {}
    for name, group in (("plait", None), ("gloo", gloo)):
        ins = [torch.arange(3, dtype=torch.float32) + me, torch.full((2,), me + 1, dtype=torch.bfloat16)]
        outs = [torch.empty(3 * n), torch.empty(2 * n, dtype=torch.bfloat16)]
        with _coalescing_manager(group=group, async_ops=True) as cm:
            for i, o in zip(ins, outs):
                dist.all_gather_into_tensor(o, i, group=group)
        cm.wait()
        rs_in = [torch.arange(2 * n, dtype=torch.float64) * (me + 1), torch.ones(n, dtype=torch.float16)]
        rs_out = [torch.empty(2, dtype=torch.float64), torch.empty(1, dtype=torch.float16)]
        with _coalescing_manager(group=group, async_ops=True) as cm:
            for i, o in zip(rs_in, rs_out):
                dist.reduce_scatter_tensor(o, i, group=group)
        cm.wait()
        ar = [torch.full((5,), float(me)), torch.full((1,), float(2 * me))]
        with _coalescing_manager(group=group, async_ops=True) as cm:
            for t in ar:
                dist.all_reduce(t, group=group)
        cm.wait()
        results[name] = [o.contiguous() for o in outs] + rs_out + ar
    # A non-contiguous output (gloo refuses any output that is not flat).
    strided = torch.empty(2, n, dtype=torch.bfloat16).t()
    with _coalescing_manager(async_ops=True) as cm:
        dist.all_gather_into_tensor(torch.empty(3 * n), torch.zeros(3))
        dist.all_gather_into_tensor(strided, torch.full((2,), me + 1, dtype=torch.bfloat16))
    cm.wait()
    want = torch.arange(1, n + 1, dtype=torch.bfloat16).repeat_interleave(2).reshape(n, 2)
    assert torch.equal(strided, want), (strided, want)
    want_rs0 = torch.arange(2 * n, dtype=torch.float64)[2 * me:2 * me + 2] * (n * (n + 1) // 2)
    assert torch.equal(results["plait"][2], want_rs0), results["plait"][2]
    assert torch.equal(results["plait"][3], torch.full((1,), float(n), dtype=torch.float16))
    for p, g in zip(results["plait"], results["gloo"]):
        assert p.dtype == g.dtype and torch.equal(p, g), (p, g)
    print(f"rank {me}: coalesced ok", flush=True)


def split():
    """split_group and new_subgroups make plait groups over the members."""
    me, n = dist.get_rank(), dist.get_world_size()
    halves = [list(range(0, n // 2)), list(range(n // 2, n))]
    pg = dist.split_group(split_ranks=halves, timeout=datetime.timedelta(seconds=30))
    assert dist.get_backend(pg) == "plait"
    mine = halves[0] if me in halves[0] else halves[1]
    t = torch.full((3,), float(me))
    dist.all_reduce(t, group=pg)
    assert torch.equal(t, torch.full((3,), float(sum(mine)))), t
    assert pg._get_backend(torch.device("cpu")).timeout == datetime.timedelta(seconds=30)
    sub, _ = dist.new_subgroups(group_size=2)
    t = torch.ones(2)
    dist.all_reduce(t, group=sub)
    assert torch.equal(t, torch.full((2,), 2.0)), t
    print(f"rank {me}: split ok", flush=True)


def errors():
    """A timeout surfaces as DistBackendError naming the rank and the operation; a group's
    timeout can be changed for later calls."""
    me = dist.get_rank()
    group = dist.new_group(timeout=datetime.timedelta(seconds=60))
    dist.set_timeout(datetime.timedelta(seconds=2), group=group)
    if me == 0:
        try:
            dist.all_reduce(torch.ones(4), group=group)
        except dist.DistBackendError as e:
            assert "Timed out" in str(e) and "rank 0" in str(e) and "allreduce" in str(e), e
            print(f"rank 0: DistBackendError: {e}", flush=True)
        else:
            raise AssertionError("all_reduce without peers did not time out")
    else:
        time.sleep(5)
    print(f"rank {me}: errors ok", flush=True)


def abort():
    """abort() fails the aborting rank's call in flight and tells the peers: rank 1, waiting
    for rank 0's data that never comes, fails at once instead of after the timeout."""
    me = dist.get_rank()
    group = dist.new_group(timeout=datetime.timedelta(seconds=120))
    start = time.monotonic()
    if me == 0:
        work = group.recv([torch.empty(4)], 1, 7)
        time.sleep(0.5)
        group.abort()
        try:
            work.wait()
        except dist.DistBackendError as e:
            assert "aborted" in str(e), e
        else:
            raise AssertionError("a receive survived abort()")
    else:
        try:
            dist.all_reduce(torch.ones(4), group=group)
        except dist.DistBackendError as e:
            assert time.monotonic() - start < 60, "rank 1 waited for its timeout"
            print(f"rank 1: peer's abort: {e}", flush=True)
        else:
            raise AssertionError("all_reduce succeeded with an aborted peer")
    print(f"rank {me}: abort ok", flush=True)


def shutdown():
    """After destroy_process_group the backend refuses calls, naming the rank."""
    me = dist.get_rank()
    backend = plait.torch.backend_of()
    t = torch.ones(2)
    dist.all_reduce(t)
    dist.destroy_process_group()
    try:
        backend.allreduce([t])
    except RuntimeError as e:
        assert "shut down" in str(e) and f"rank {me}" in str(e), e
    else:
        raise AssertionError("a call on a shut-down group ran")
    print(f"rank {me}: shutdown ok", flush=True)


def exit_after_destroy():
    """Ranks that destroy the process group and exit leave cleanly even if the group object
    is never freed (DDP's reducer holds it until the process ends, and Python need not free
    it at exit): no rank is taken for dead. Both hold the group past destroy_process_group;
    rank 1 ends with os._exit, which frees nothing, and rank 0 outlives it by 2 s."""
    me = dist.get_rank()
    held = dist.distributed_c10d._get_default_group()  # as DDP's reducer holds it
    t = torch.ones(4)
    dist.all_reduce(t)
    dist.destroy_process_group()
    print(f"rank {me}: exit_after_destroy ok", flush=True)
    if me == 1:
        os._exit(0)
    time.sleep(2)
    del held


def debug_detail():
    """Under TORCH_DISTRIBUTED_DEBUG=DETAIL torch wraps the backend in its ProcessGroupWrapper,
    whose fingerprints name a collective that differs across ranks before plait runs it."""
    me = dist.get_rank()
    t = torch.ones(4)
    dist.all_reduce(t)
    assert torch.equal(t, torch.full((4,), 2.0)), t
    try:
        dist.all_reduce(torch.ones(4 + me))
    except RuntimeError as e:
        assert "Detected mismatch between collectives" in str(e), e
    else:
        raise AssertionError("a mismatched all_reduce passed the wrapper")
    print(f"rank {me}: debug_detail ok", flush=True)


if __name__ == "__main__":
    case = sys.argv[1]
    timeout = float(os.environ.get("CASE_TIMEOUT_S", "120"))
    dist.init_process_group("plait", timeout=datetime.timedelta(seconds=timeout))
    globals()[case]()
    if case in ("coalesced", "split", "debug_detail"):
        dist.destroy_process_group()
