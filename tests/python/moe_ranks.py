"""One rank of plait.torch.moe's tests (test_moe.py runs it under `plait run -n N`).

Every check is against a result each rank can derive alone: with experts that scale each
received row by the sum of its local weights, combine(dispatch(x)) is x times the sum of the
token's weights, and the gradients of sum(out * g) are g * sum(w) for x and <g, x> for each
weight. The plait Dispatcher and the all_to_all_single one (on plait and on gloo) must agree.
"""
import sys

import torch
import torch.distributed as dist

import plait.torch
import rank_stacks  # noqa: F401  (stacks on SIGTERM)

E, K, H = 8, 2, 6


def inputs(rank, tokens, dtype, last_rank_empty=False, n=1):
    g = torch.Generator().manual_seed(100 + rank)
    x = (torch.randint(-8, 8, (tokens, H), generator=g).float() / 4).to(dtype)
    usable = E - E // n if last_rank_empty else E
    scores = torch.rand(tokens, usable, generator=g)
    w, idx = torch.topk(scores.softmax(-1), K)
    if tokens > 2:
        idx[1, 1] = -1  # a token with one expert only
        w[1, 1] = 0.0
    return x, idx, w


def moe_step(d, x, idx, w, async_op=False):
    x = x.clone().requires_grad_()
    w = w.clone().requires_grad_()
    got = d.dispatch(x, idx, w, async_op=async_op)
    recv_x, recv_idx, recv_w, counts, handle = got.wait() if async_op else got
    assert (recv_idx >= -1).all() and (recv_idx < E // d.size).all()
    assert int(counts.sum()) == int((recv_idx >= 0).sum())
    y = recv_x * recv_w.sum(1, keepdim=True).to(recv_x.dtype)
    out = d.combine(y, handle, async_op=async_op)
    out = out.wait() if async_op else out
    gen = torch.Generator().manual_seed(7)
    g = torch.randn(out.shape, generator=gen).to(out.dtype)
    (out.float() * g.float()).sum().backward()
    return out.detach(), x.grad, w.grad, handle


def expect(x, idx, w, out, gx, gw, dtype):
    tol = dict(atol=0, rtol=0) if dtype == torch.float32 else dict(atol=0.05, rtol=0.02)
    wsum = torch.where(idx >= 0, w, 0.0).sum(1, keepdim=True)
    torch.testing.assert_close(out.float(), (x.float() * wsum), **(dict(atol=1e-6, rtol=1e-6) if dtype == torch.float32 else tol))
    gen = torch.Generator().manual_seed(7)
    g = torch.randn(out.shape, generator=gen).to(out.dtype).float()
    torch.testing.assert_close(gx.float(), g * wsum, **(dict(atol=1e-5, rtol=1e-5) if dtype == torch.float32 else tol))
    want_gw = torch.where(idx >= 0, (g * x.float()).sum(1, keepdim=True), 0.0)
    torch.testing.assert_close(gw.float(), want_gw, atol=1e-3 if dtype == torch.float32 else 0.5, rtol=1e-3 if dtype == torch.float32 else 0.05)


def correctness():
    me, n = dist.get_rank(), dist.get_world_size()
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        dispatchers = {p: plait.torch.moe.Dispatcher(E, K, H, dtype, max_tokens=64, path=p, name=f"t{dtype}{p}")
                       for p in ("auto", "one-sided", "alltoallv")}
        ref = plait.torch.moe.AllToAllDispatcher(E, K, H, dtype, max_tokens=64)
        for round_, tokens in enumerate((37, 0 if me == 1 else 20, 5 + me)):
            x, idx, w = inputs(me * 10 + round_, tokens, dtype, last_rank_empty=round_ == 2, n=n)
            results = {}
            for name, d in list(dispatchers.items()) + [("a2a", ref)]:
                out, gx, gw, handle = moe_step(d, x, idx, w, async_op=(round_ == 1))
                expect(x, idx, w, out, gx, gw, dtype)
                if round_ == 2 and me == n - 1:
                    assert handle.num_recv == 0, f"the last rank got {handle.num_recv} rows"
                results[name] = (out, gx, gw)
            for name, r in results.items():  # the same bits, whichever path
                for a, b in zip(r, results["a2a"]):
                    assert torch.equal(a, b), f"{name} differs from all_to_all_single ({dtype})"
        for d in dispatchers.values():
            d.close()
    # layout agrees between the two, and with the routing.
    x, idx, w = inputs(me, 30, torch.float32)
    d = plait.torch.moe.Dispatcher(E, K, H, torch.float32, max_tokens=64, name="layout")
    a = plait.torch.moe.AllToAllDispatcher(E, K, H, torch.float32, max_tokens=64)
    for u, v in zip(d.layout(idx), a.layout(idx)):
        assert torch.equal(u, v), (u, v)
    print(f"rank {me}: cost model {d.cost_summary}")
    print(f"rank {me}: moe correctness ok")


def gloo():
    """The all_to_all_single dispatcher on gloo gives the same results."""
    me, n = dist.get_rank(), dist.get_world_size()
    for dtype in (torch.float32, torch.bfloat16):
        d = plait.torch.moe.make_dispatcher(E, K, H, dtype, max_tokens=64)
        assert isinstance(d, plait.torch.moe.AllToAllDispatcher)
        x, idx, w = inputs(me, 0 if me == 0 else 25, dtype)
        expect(x, idx, w, *moe_step(d, x, idx, w)[:3], dtype)
    print(f"rank {me}: moe gloo ok")


def errors():
    """A dispatch of more tokens than max_tokens is refused before anything moves; a rank
    that calls combine while the others dispatch makes every rank fail, naming the peer."""
    me = dist.get_rank()
    d = plait.torch.moe.Dispatcher(E, K, H, torch.float32, max_tokens=8, path="one-sided", name="err")
    x, idx, w = inputs(me, 9, torch.float32)
    try:
        d.dispatch(x, idx, w)
        raise AssertionError("9 tokens with max_tokens 8 went through")
    except Exception as e:  # noqa: BLE001
        assert "max_tokens" in str(e), e
    x, idx, w = inputs(me, 4, torch.float32)
    _, _, _, _, handle = d.dispatch(x, idx, w)
    try:
        if me == 0:
            d.combine(torch.zeros(handle.num_recv, H), handle)
        else:
            d.dispatch(x, idx, w)
        raise AssertionError("mismatched calls went through")
    except Exception as e:  # noqa: BLE001
        msg = str(e)
        assert "rank" in msg and ("combine" in msg or "dispatch" in msg), msg
        print(f"rank {me}: refused: {msg.splitlines()[0][:200]}")
    print(f"rank {me}: moe errors ok")


def balance():
    """ExpertBalancer: a skewed load re-places the experts; every slot then holds its new
    expert's weights and AdamW state, whichever rank they came from. Replicas' gradients come
    out as the sum over the replicas."""
    me, n = dist.get_rank(), dist.get_world_size()
    moe = plait.torch.moe
    placement = moe.ExpertPlacement(num_logical=2 * n, ranks=n, slots_per_rank=3)
    experts = torch.nn.ModuleList(torch.nn.Linear(3, 2) for _ in range(3))
    opt = torch.optim.AdamW(experts.parameters())

    def fill(slot, e):
        with torch.no_grad():
            for i, prm in enumerate(experts[slot].parameters()):
                prm.fill_(e + 0.5 * i)
                opt.state[prm] = {"step": torch.tensor(3.0), "exp_avg": torch.full_like(prm, 10.0 * e),
                                  "exp_avg_sq": torch.full_like(prm, 100.0 * e)}

    for slot, e in enumerate(placement.local_experts(me)):
        fill(slot, e)
    balancer = moe.ExpertBalancer(placement, experts, opt, every=1)
    # Expert 0 takes most of the load, from every rank.
    balancer.record(torch.tensor([[0, 1]] * 40 + [[2, 3]] * 4))
    assert balancer.step(), "a skewed load did not re-place the experts"
    new = balancer.placement
    assert len(new.replicas[0]) > 1, new.slots
    before, after = balancer.history[-1][1:]
    assert after < before, balancer.history
    for slot, e in enumerate(new.local_experts(me)):
        for i, prm in enumerate(experts[slot].parameters()):
            assert torch.all(prm == e + 0.5 * i), (me, slot, e, prm)
            st = opt.state[prm]
            assert torch.all(st["exp_avg"] == 10.0 * e) and torch.all(st["exp_avg_sq"] == 100.0 * e), (me, slot, e)
            assert float(st["step"]) == 3.0
    # Replicas' gradients: slot s of rank r contributes r * 10 + s; each replica gets the sum.
    for slot, prm_list in enumerate(experts):
        for prm in prm_list.parameters():
            prm.grad = torch.full_like(prm, float(me * 10 + slot))
    balancer.reduce_replica_grads()
    for slot, e in enumerate(new.local_experts(me)):
        want = float(me * 10 + slot)
        if len(new.replicas[e]) > 1:
            want = float(sum((s // 3) * 10 + s % 3 for s in new.replicas[e]))
        for prm in experts[slot].parameters():
            assert torch.all(prm.grad == want), (me, slot, e, prm.grad, want, new.slots)
    # The router spreads an expert's tokens evenly over its replicas.
    slots = new.route(torch.zeros(60, 1, dtype=torch.long), me).reshape(-1)
    counts = torch.bincount(slots, minlength=new.num_slots)[new.replicas[0]]
    assert counts.max() - counts.min() <= 1, counts
    print(f"rank {me}: placement {new.slots} max/mean {before:.2f} -> {after:.2f}")
    print(f"rank {me}: moe balance ok")


if __name__ == "__main__":
    case = sys.argv[1]
    backend = "gloo" if case in ("gloo", "balance-gloo") else "plait"
    case = "balance" if case == "balance-gloo" else case
    dist.init_process_group(backend)
    torch.set_num_threads(1)
    {"correctness": correctness, "gloo": gloo, "errors": errors, "balance": balance}[case]()
    if case != "errors":
        dist.barrier()
        dist.destroy_process_group()
