"""One rank of the plait.rdma and plait.ps tests (started by test_ps_rdma.py via `plait run`).

Usage: ps_rdma_ranks.py <case>; exits 0 when every check of the case holds on this rank.
"""
import sys
import time

import numpy as np

import plait
import plait.ps
import plait.rdma as rdma


def window():
    fabric = rdma.Fabric(name="py-window")
    n, me = fabric.size, fabric.rank
    right, left = (me + 1) % n, (me - 1) % n
    imms = fabric.completion_queue()
    win = rdma.Window(fabric, np.zeros(1024, np.float32), imm_queue=imms)
    win.put(right, np.arange(16, dtype=np.float32) + me, offset=8, imm=100 + me)
    c = imms.wait(20)
    assert c is not None and c.op == "remote write_imm" and c.imm == 100 + left, c
    assert c.peer == left and c.offset == 32 and c.bytes == 64, (c.peer, c.offset, c.bytes)
    win.fence()
    assert (win.array[8:24] == np.arange(16) + left).all(), win.array[:30]
    got = np.zeros(16, np.float32)
    win.get(left, got, offset=8)
    assert (got == np.arange(16) + (left - 1) % n).all(), got
    # Atomics on rank 0's counter (rank 0 adds its share locally: the providers do not
    # connect a rank to itself).
    counter = rdma.Window(fabric, np.zeros(2, np.int64), access="a")
    if me == 0:
        counter.array[1] += 1  # not atomic: before anyone else adds, not beside them
    counter.fence()
    if me != 0:
        old = counter.fetch_add(0, 1, me + 1)
        assert old >= 0
    counter.fence()
    if me == 0:
        assert counter.array[1] == n * (n + 1) // 2, counter.array
    counter.fence()
    # Refused: out of bounds and read-only leave the target's window unchanged.
    ro = rdma.Window(fabric, np.full(8, 5, np.int32), access="r")
    before = win.array.copy()
    win.fence()
    for bad in (lambda: win.put(right, np.ones(8, np.float32), offset=1020),
                lambda: ro.put(right, np.ones(2, np.int32))):
        try:
            bad()
            raise AssertionError("a refused access succeeded")
        except plait.InvalidUsageError as e:
            assert "rank" in str(e), e
    win.fence()
    assert (win.array == before).all() and (ro.array == 5).all()
    for w in (win, counter, ro):
        w.close()
    print(f"rank {me}: window ok", flush=True)


def allocated_window():
    """Windows on memory the fabric allocated (over UCX: UCX's own, mapped into the peers)."""
    fabric = rdma.Fabric(name="py-allocated")
    n, me = fabric.size, fabric.rank
    right, left = (me + 1) % n, (me - 1) % n
    grid = rdma.allocate(fabric, (4, 8), np.int64)
    assert grid.shape == (4, 8) and grid.dtype == np.int64 and (grid == 0).all(), grid
    assert grid.flags["C_CONTIGUOUS"] and grid.flags["WRITEABLE"]
    # Zero before the window exists: once it does, the left neighbour may write into it.
    array = rdma.allocate(fabric, 4096, np.float32)
    assert array.shape == (4096,) and (array == 0).all()
    win = rdma.Window(fabric, array)
    del array
    win.put(right, np.arange(1000, dtype=np.float32) + me, offset=24)
    win.fence()
    assert (win.array[24:1024] == np.arange(1000) + left).all(), win.array[:30]
    assert (win.array[:24] == 0).all() and (win.array[1024:] == 0).all()
    got = np.zeros(1000, np.float32)
    win.get(left, got, offset=24)
    assert (got == np.arange(1000) + (left - 1) % n).all(), got[:8]
    counter = rdma.Window.allocate(fabric, 2, np.int64, access="a")
    assert counter.array.shape == (2,) and (counter.array == 0).all()  # nobody adds before the fence
    counter.fence()
    if me != 0:
        counter.fetch_add(0, 1, me)
    counter.fence()
    if me == 0:
        assert counter.array[1] == n * (n - 1) // 2, counter.array
    counter.fence()
    win.close()
    counter.close()
    del win, counter, grid  # the memory goes with the arrays, before the fabric
    print(f"rank {me}: allocated window ok", flush=True)


def pushes_in(values, mine, theirs, most):
    """(j, k): a value made of j pushes of `mine` and k of `theirs` (at most `most` each), the
    same for every element; fails when the values are anything else."""
    first = float(values[0])
    for j in range(most + 1):
        for k in range(most + 1):
            if abs(first - (j * mine + k * theirs)) < 1e-3:
                assert np.allclose(values, j * mine + k * theirs, atol=1e-3), (j, k, values[:3])
                return j, k
    raise AssertionError(f"values {values[:3]} are no sum of pushes {mine} and {theirs}")


def ps_numpy(consistency):
    kv = plait.ps.KVStore(servers=1, consistency=consistency, staleness=1 if consistency == "ssp" else 0)
    n = 70000
    weights = np.linspace(-1, 1, n).astype(np.float32)
    kv.register(1, weights, rule="sgd", lr=0.5, init=weights)
    kv.register(2, np.zeros(5, np.float64))
    kv.register(4, np.zeros(7, np.int32))
    if kv.is_server:
        kv.finalize()
        return
    w_count, me = kv.num_workers, kv.worker_index
    out = np.zeros(n, np.float32)
    work = kv.pull(1, out)
    work.wait()
    # Under BSP nothing is applied before every worker pushed. Under ASP and SSP other
    # workers' pushes may be in already, and the version (the pushes of the slowest worker:
    # this one, with none) still says 0; every element then moved by the same whole number
    # of steps of lr 0.5 x a gradient of whole numbers. (The test once took version 0 for
    # "nothing applied", and failed under CI's load.)
    assert work.version == 0, work.version
    if consistency == "bsp":
        assert np.array_equal(out, weights), out[:3]
    else:
        moved = (weights - out) / 0.5
        assert np.allclose(moved, moved[0], atol=1e-3) and moved[0] > -1e-3, moved[:3]
        assert abs(moved[0] - round(moved[0])) < 1e-3, moved[:3]
    # Worker w pushes 10^w, so that a value says how many pushes of each worker it holds.
    assert w_count == 2, w_count
    mine, theirs = 10 ** me, 10 ** (1 - me)
    grads = np.full(n, mine, np.float32)
    for step in range(1, 4):
        work = kv.push_pull(1, grads, out)
        work.wait()
        if consistency == "bsp":
            assert work.version == step, work.version
            assert np.allclose(out, weights - 0.5 * (mine + theirs) / 2 * step, atol=1e-5), (step, out[:3])
        else:
            # One SGD step of lr 0.5 per push, as it arrives: the value holds j of this
            # worker's pushes and k of the other's, the same within a chunk, and the
            # version is the fewer of the two (SSP, staleness 1: at least step - 1). j may be
            # step - 1: the pull's request goes out before its push, and on shared memory the
            # reply never held this call's own push (j = step - 1 in every run, 2026-12-06).
            # The key is 2 chunks (PLAIT_PS_CHUNK 256K): each chunk of the reply may be sent
            # after another push of the other worker was applied to it (one element 11, the
            # first, and others not, seen once under load), so the pushes held are counted per distinct value; where the whole reply
            # holds the same pushes, the version is the fewer of the two.
            moved = (weights - out) / 0.5
            held = {pushes_in(moved[np.isclose(moved, v, atol=1e-3)], mine, theirs, 3)
                    for v in np.unique(np.round(moved, 2))}
            assert all(j <= step for j, _ in held), (step, held)
            if len(held) == 1:
                j, k = next(iter(held))
                assert work.version == min(j, k), (step, j, k, work.version)
            assert work.version <= step, (step, held, work.version)
            if consistency == "ssp":
                assert work.version >= step - 1, (step, work.version)
    # Many keys in one call (f64 and i32, rule sum): each key's value, and the version is the
    # smaller of the keys'.
    totals = np.zeros(5, np.float64)
    ints = np.zeros(7, np.int32)
    work = kv.push_pull([2, 4], [np.full(5, float(mine)), np.full(7, mine, np.int32)], [totals, ints])
    work.wait()
    if consistency == "bsp":
        assert (totals == mine + theirs).all() and (ints == mine + theirs).all(), (totals, ints)
        assert work.version == 1, work.version
    else:
        # Each push is added as it arrives.
        versions = [min(pushes_in(v, mine, theirs, 1)) for v in (totals, ints)]
        assert work.version == min(versions), (totals, ints, work.version)
    if consistency != "bsp":
        # Once the version says every worker's pushes are in, the values are exact.
        def pull_at(version, keys, outs):
            deadline = time.monotonic() + 30
            while True:
                work = kv.pull(keys, outs)
                work.wait()
                if work.version == version or time.monotonic() > deadline:
                    return work.version
                time.sleep(0.01)

        assert pull_at(3, 1, out) == 3
        assert np.allclose(out, weights - 0.5 * 3 * (mine + theirs), atol=1e-5), out[:3]
        assert pull_at(1, [2, 4], [totals, ints]) == 1
        assert (totals == mine + theirs).all() and (ints == mine + theirs).all(), (totals, ints)
    try:
        kv.push(1, np.zeros(10, np.float32))
        raise AssertionError("a wrong count was accepted")
    except plait.InvalidUsageError as e:
        assert "holds 70000 elements" in str(e), e
    try:
        kv.pull(1, np.zeros(2 * n, np.float32)[::2])  # a strided view: no pull into a copy
        raise AssertionError("a non-contiguous pull buffer was accepted")
    except ValueError as e:
        assert "C-contiguous" in str(e), e
    kv.finalize()
    print(f"worker {me}: ps {consistency} ok", flush=True)


def ps_torch():
    import torch

    kv = plait.ps.KVStore(servers=1)
    w = torch.zeros(1000)
    kv.register(3, w, rule="sum")
    if kv.is_server:
        kv.finalize()
        return
    g = torch.full((10, 100), float(kv.worker_index + 1))
    out = torch.zeros(10, 100)
    kv.push_pull(3, g, out).wait()
    want = kv.num_workers * (kv.num_workers + 1) / 2
    assert torch.all(out == want), out.flatten()[:3]
    kv.finalize()
    print(f"worker {kv.worker_index}: ps torch ok", flush=True)


if __name__ == "__main__":
    case = sys.argv[1]
    if case == "window":
        window()
    elif case == "allocated_window":
        allocated_window()
    elif case.startswith("ps_numpy_"):
        ps_numpy(case[len("ps_numpy_"):])
    elif case == "ps_torch":
        ps_torch()
    else:
        sys.exit(f"unknown case {case}")
