"""One rank of a torch.distributed job on the "plait" backend, checked against gloo.

Run by test_torch_backend.py under `plait run -n N`. The default group is plait; a gloo group
over the same ranks runs the same calls where gloo has them, and every result must equal
gloo's and a reference computed here from the inputs every rank can derive (integer-valued
data, so sums in any order are exact).
"""
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist

import plait.torch  # noqa: F401  (registers the backend)
import rank_stacks  # noqa: F401  (stacks on SIGTERM)

R = dist.ReduceOp
FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INTS = [torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64]
DTYPES = FLOATS + INTS + [torch.bool, torch.complex64]
checked = {"plait": 0, "gloo": 0}


def data(rank, dtype, n=7, shape=None):
    """Rank `rank`'s input: small integers, so every reduction is exact in every type."""
    base = torch.arange(n, dtype=torch.int64) % 5 + rank + 1
    if dtype == torch.bool:
        t = (base + rank) % 3 == 0
    elif dtype.is_complex:
        t = torch.complex(base.float(), -base.float()).to(dtype)
    else:
        t = base.to(dtype)
    return t.reshape(shape) if shape else t


def reference(op, tensors):
    acc = tensors[0].clone()
    for t in tensors[1:]:
        if op in (R.SUM, R.AVG):
            acc = acc | t if acc.dtype == torch.bool else acc + t
        elif op == R.PRODUCT:
            acc = acc & t if acc.dtype == torch.bool else acc * t
        elif op == R.MIN:
            acc = torch.minimum(acc, t)
        elif op == R.MAX:
            acc = torch.maximum(acc, t)
        elif op == R.BAND:
            acc = acc & t
        elif op == R.BOR:
            acc = acc | t
        elif op == R.BXOR:
            acc = acc ^ t
    if op == R.AVG and acc.dtype != torch.bool:
        acc = torch.div(acc, len(tensors), rounding_mode="floor") if not acc.is_floating_point() \
            and not acc.is_complex() else acc / len(tensors)
    return acc


def same(got, want, what, exact=True):
    if got.dtype != want.dtype or got.shape != want.shape:
        raise AssertionError(f"rank {dist.get_rank()}: {what}: got {got} want {want}")
    if exact and torch.equal(got, want.to(got.dtype)):
        return
    # gloo multiplies 16-bit floats in its own order (torch 2.15, 4 ranks: one ulp of bf16
    # apart from the reference's rank order); plait's results are held to the exact reference.
    if not exact and torch.allclose(got.float(), want.float(), rtol=2 ** -7, atol=0):
        return
    raise AssertionError(f"rank {dist.get_rank()}: {what}: got {got} want {want}")


def both(what, run, want, gloo_group):
    """run(group) returns a tensor (or list); plait must match `want`, and so must gloo."""
    got = run(None)
    for g, w in zip(got if isinstance(got, list) else [got], want if isinstance(want, list) else [want]):
        same(g, w, f"plait {what}")
    checked["plait"] += 1
    try:
        ref = run(gloo_group)
    except RuntimeError:
        return  # gloo lacks it (this dtype, op or collective): the reference stands alone
    for g, w in zip(ref if isinstance(ref, list) else [ref], want if isinstance(want, list) else [want]):
        same(g, w, f"gloo {what} (the test's own reference is wrong)",
             exact=g.dtype not in (torch.bfloat16, torch.float16))
    checked["gloo"] += 1


def reduce_ops(dtype):
    ops = [R.SUM, R.PRODUCT, R.MIN, R.MAX]
    if dtype.is_complex:
        return [R.SUM]
    if dtype != torch.bool and not dtype.is_floating_point:
        ops += [R.BAND, R.BOR, R.BXOR]
    if dtype != torch.bool:
        ops += [R.AVG]
    return ops


def collectives():
    me, n = dist.get_rank(), dist.get_world_size()
    gloo = dist.new_group(backend="gloo")
    for dtype in DTYPES:
        for op in reduce_ops(dtype):
            want = reference(op, [data(r, dtype) for r in range(n)])

            def allreduce(g):
                t = data(me, dtype)
                dist.all_reduce(t, op=op, group=g)
                return t
            both(f"all_reduce {dtype} {op}", allreduce, want, gloo)

            # Non-contiguous: a transposed view is reduced and written back in place.
            def strided(g):
                t = data(me, dtype, 12).reshape(3, 4).t()
                dist.all_reduce(t, op=op, group=g)
                return t.contiguous()
            want2 = reference(op, [data(r, dtype, 12).reshape(3, 4).t() for r in range(n)])
            both(f"all_reduce strided {dtype} {op}", strided, want2, gloo)

            for root in range(n):
                def reduce(g):
                    t = data(me, dtype)
                    dist.reduce(t, root, op=op, group=g)
                    return t if me == root else want
                both(f"reduce {dtype} {op} root {root}", reduce, want, gloo)

            def coalesced(g):
                ts = [data(me, dtype, 3), data(me, dtype, 5)]
                dist.all_reduce_coalesced(ts, op=op, group=g)
                return ts
            wantc = [reference(op, [data(r, dtype, k) for r in range(n)]) for k in (3, 5)]
            both(f"all_reduce_coalesced {dtype} {op}", coalesced, wantc, gloo)

            blocks = [[data(r * n + b, dtype, 3) for b in range(n)] for r in range(n)]
            want_rs = reference(op, [blocks[r][me] for r in range(n)])

            def reduce_scatter(g):
                out = torch.empty_like(blocks[me][me])
                dist.reduce_scatter(out, list(blocks[me]), op=op, group=g)
                return out
            both(f"reduce_scatter {dtype} {op}", reduce_scatter, want_rs, gloo)

            def reduce_scatter_base(g):
                out = torch.empty_like(blocks[me][me])
                dist._reduce_scatter_base(out, torch.cat(blocks[me]), op=op, group=g)
                return out
            both(f"_reduce_scatter_base {dtype} {op}", reduce_scatter_base, want_rs, gloo)

        for root in range(n):
            def broadcast(g):
                t = data(me, dtype)
                dist.broadcast(t, root, group=g)
                return t
            both(f"broadcast {dtype} root {root}", broadcast, data(root, dtype), gloo)

        everyone = [data(r, dtype, 3) for r in range(n)]

        def all_gather(g):
            out = [torch.zeros(3, dtype=dtype) for _ in range(n)]
            dist.all_gather(out, data(me, dtype, 3), group=g)
            return out
        both(f"all_gather {dtype}", all_gather, everyone, gloo)

        def all_gather_base(g):
            out = torch.zeros(3 * n, dtype=dtype)
            dist._all_gather_base(out, data(me, dtype, 3), group=g)
            return out
        both(f"_all_gather_base {dtype}", all_gather_base, torch.cat(everyone), gloo)

        def all_gather_coalesced(g):
            out = [[torch.zeros(2, dtype=dtype), torch.zeros(4, dtype=dtype)] for _ in range(n)]
            dist.all_gather_coalesced(out, [data(me, dtype, 2), data(me + 10, dtype, 4)], group=g)
            return [t for lst in out for t in lst]
        both(f"all_gather_coalesced {dtype}", all_gather_coalesced,
             [t for r in range(n) for t in (data(r, dtype, 2), data(r + 10, dtype, 4))], gloo)

        for root in range(n):
            def gather(g):
                out = [torch.zeros(3, dtype=dtype) for _ in range(n)] if me == root else None
                dist.gather(data(me, dtype, 3), out, dst=root, group=g)
                return out if me == root else everyone
            both(f"gather {dtype} root {root}", gather, everyone, gloo)

            def scatter(g):
                out = torch.zeros(3, dtype=dtype)
                dist.scatter(out, [data(root * n + r, dtype, 3) for r in range(n)] if me == root
                             else None, src=root, group=g)
                return out
            both(f"scatter {dtype} root {root}", scatter, data(root * n + me, dtype, 3), gloo)

        # all_to_all with uneven blocks: rank r sends r+p+1 rows to rank p.
        def rows(src, dst):
            return data(src * 100 + dst, dtype, (src + dst + 1) * 2).reshape(-1, 2)

        def all_to_all_single(g):
            inp = torch.cat([rows(me, p) for p in range(n)])
            out = torch.empty(sum(p + me + 1 for p in range(n)), 2, dtype=dtype)
            dist.all_to_all_single(out, inp, [p + me + 1 for p in range(n)],
                                   [me + p + 1 for p in range(n)], group=g)
            return out
        both(f"all_to_all_single uneven {dtype}", all_to_all_single,
             torch.cat([rows(p, me) for p in range(n)]), gloo)

        def all_to_all_even(g):
            out = torch.empty(2 * n, dtype=dtype)
            dist.all_to_all_single(out, data(me, dtype, 2 * n), group=g)
            return out
        both(f"all_to_all_single {dtype}", all_to_all_even,
             torch.cat([data(p, dtype, 2 * n)[2 * me:2 * me + 2] for p in range(n)]), gloo)

        def all_to_all(g):
            out = [torch.empty((p + me + 1) * 2, dtype=dtype) for p in range(n)]
            dist.all_to_all(out, [rows(me, p).reshape(-1) for p in range(n)], group=g)
            return out
        both(f"all_to_all {dtype}", all_to_all, [rows(p, me).reshape(-1) for p in range(n)], gloo)

    # Sparse COO all_reduce (SUM, as gloo): overlapping and distinct coordinates.
    def coo(r):
        return torch.sparse_coo_tensor(torch.tensor([[r % 5, (r + 1) % 5], [0, 2]]),
                                       torch.tensor([1.0 + r, 2.0]), (5, 3))

    def sparse(g):
        t = coo(me)
        dist.all_reduce(t, group=g)
        return t.to_dense()
    both("sparse all_reduce", sparse, sum(coo(r).to_dense() for r in range(n)), gloo)

    dist.barrier()
    # torch 1.13's dist.monitored_barrier() admits gloo only; the group's own method is the API.
    dist.distributed_c10d._get_default_group().monitored_barrier(datetime.timedelta(seconds=30), True)
    objs = [None] * n
    dist.all_gather_object(objs, {"rank": me, "text": "x" * me})
    assert objs == [{"rank": r, "text": "x" * r} for r in range(n)], objs
    print(f"rank {me}: collectives ok ({checked['plait']} checks, {checked['gloo']} also on gloo)",
          flush=True)


def point_to_point():
    me, n = dist.get_rank(), dist.get_world_size()
    right, left = (me + 1) % n, (me - 1) % n
    # batch_isend_irecv posts receives before sends; messages of one tag keep their order.
    recvs = [torch.zeros(3) for _ in range(4)]
    ops = [dist.P2POp(dist.irecv, t, left, tag=5) for t in recvs]
    ops += [dist.P2POp(dist.isend, torch.full((3,), float(me * 10 + i)), right, tag=5)
            for i in range(4)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    for i, t in enumerate(recvs):
        same(t, torch.full((3,), float(left * 10 + i)), f"batch message {i}")
    # Tags match by tag, not by arrival; a recv returns before its message exists.
    a, b = torch.zeros(2), torch.zeros(2)
    wb = dist.irecv(b, left, tag=2)
    wa = dist.irecv(a, left, tag=1)
    dist.send(torch.ones(2), right, tag=1)
    dist.send(torch.ones(2) * 2, right, tag=2)
    wa.wait(), wb.wait()
    same(a, torch.ones(2), "tag 1")
    same(b, torch.ones(2) * 2, "tag 2")
    # Any source: rank 0 hears from everyone, each sender named by the Work.
    if me == 0:
        seen = set()
        for _ in range(n - 1):
            t = torch.zeros(1, dtype=torch.int64)
            w = dist.irecv(t)  # no src: any source
            w.wait()
            src = w._source_rank()
            assert t.item() == src * 7, (t, src)
            seen.add(src)
        assert seen == set(range(1, n)), seen
    else:
        dist.send(torch.tensor([me * 7]), 0)
    # Large, non-contiguous receive.
    big = torch.zeros(513, 1024).t()
    if me == 0:
        dist.send(torch.arange(1024 * 513, dtype=torch.float32).reshape(1024, 513), 1)
    elif me == 1:
        dist.recv(big, 0)
        same(big.contiguous(), torch.arange(1024 * 513, dtype=torch.float32).reshape(1024, 513),
             "large strided recv")
    dist.barrier()
    print(f"rank {me}: point_to_point ok", flush=True)


def subgroups():
    me, n = dist.get_rank(), dist.get_world_size()
    evens = [r for r in range(n) if r % 2 == 0]
    odds = [r for r in range(n) if r % 2 == 1]
    ge, go = dist.new_group(evens), dist.new_group(odds)
    group, members = (ge, evens) if me % 2 == 0 else (go, odds)
    t = torch.tensor([me])
    dist.all_reduce(t, group=group)
    assert t.item() == sum(members), (t, members)
    assert dist.get_rank(group) == members.index(me)
    assert dist.get_backend(group) == "plait"
    out = [torch.zeros(1, dtype=torch.int64) for _ in members]
    dist.all_gather(out, torch.tensor([me]), group=group)
    assert [o.item() for o in out] == members
    # A subgroup's point-to-point uses global ranks in torch's API.
    if len(members) > 1:
        if me == members[0]:
            dist.send(torch.tensor([42]), members[1], group=group)
        elif me == members[1]:
            x = torch.zeros(1, dtype=torch.int64)
            dist.recv(x, members[0], group=group)
            assert x.item() == 42
    dist.barrier()
    print(f"rank {me}: subgroups ok", flush=True)


def timeouts():
    """A group whose ranks do not all call: the caller's wait says Timed out, on time."""
    me = dist.get_rank()
    short = dist.new_group(timeout=datetime.timedelta(seconds=2))  # the group's own timeout
    if me == 0:
        t = torch.ones(4)
        start = time.monotonic()
        try:
            dist.all_reduce(t, group=short)
        except RuntimeError as e:
            assert "Timed out" in str(e), e
            print(f"rank 0: timed out as expected after {time.monotonic() - start:.1f}s: {e}",
                  flush=True)
        else:
            raise AssertionError("all_reduce without peers did not time out")
    else:
        time.sleep(6)
    print(f"rank {me}: timeouts ok", flush=True)


def monitored():
    me = dist.get_rank()
    if me == 1:
        time.sleep(4)  # misses rank 0's monitored barrier
        print(f"rank {me}: monitored ok", flush=True)
        return
    try:
        dist.distributed_c10d._get_default_group().monitored_barrier(
            datetime.timedelta(seconds=1), True)
    except RuntimeError as e:
        if me == 0:
            assert "Rank 1 failed to pass monitoredBarrier" in str(e), e
        print(f"rank {me}: monitored ok: {e}", flush=True)
        return
    raise AssertionError("monitored_barrier passed without rank 1")


def mismatch():
    """Ranks that call all_reduce with different counts all get an error, not a hang."""
    me = dist.get_rank()
    try:
        dist.all_reduce(torch.ones(4 + me))
    except RuntimeError as e:
        print(f"rank {me}: mismatch ok: {e}", flush=True)
        return
    raise AssertionError("mismatched all_reduce succeeded")


def ddp():
    """A few DDP steps on plait give the same parameters as on gloo."""
    me = dist.get_rank()
    gloo = dist.new_group(backend="gloo")
    results = []
    for group in (None, gloo):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
        ddp_model = torch.nn.parallel.DistributedDataParallel(model, process_group=group,
                                                              bucket_cap_mb=0.001)
        opt = torch.optim.SGD(ddp_model.parameters(), lr=0.1)
        gen = torch.Generator().manual_seed(100 + me)
        for _ in range(5):
            x, y = torch.randn(8, 16, generator=gen), torch.randint(0, 4, (8,), generator=gen)
            opt.zero_grad()
            torch.nn.functional.cross_entropy(ddp_model(x), y).backward()
            opt.step()
        results.append([p.detach().clone() for p in model.parameters()])
    for a, b in zip(*results):
        assert torch.allclose(a, b, atol=1e-6, rtol=0), (a - b).abs().max()
    # Parameters agree across ranks.
    flat = torch.cat([p.reshape(-1) for p in results[0]])
    top = flat.clone()
    dist.broadcast(top, 0)
    assert torch.allclose(flat, top, atol=1e-6, rtol=0)
    print(f"rank {me}: ddp ok", flush=True)


if __name__ == "__main__":
    case = sys.argv[1]
    timeout = float(os.environ.get("CASE_TIMEOUT_S", "120"))
    dist.init_process_group("plait", timeout=datetime.timedelta(seconds=timeout))
    globals()[case]()
    if case not in ("timeouts", "monitored", "mismatch"):
        dist.destroy_process_group()
