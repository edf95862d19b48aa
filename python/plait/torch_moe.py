"""plait.torch.moe: expert parallelism, a mixture-of-experts layer's dispatch and combine.

    import plait.torch
    moe = plait.torch.moe.Dispatcher(num_experts=16, topk=2, hidden=1024,
                                     dtype=torch.bfloat16, max_tokens=4096)
    recv_x, recv_idx, recv_w, tokens_per_expert, handle = moe.dispatch(x, topk_idx, topk_weights)
    y = experts(recv_x, recv_idx, recv_w)          # this rank's experts, weights applied
    out = moe.combine(y, handle)                   # [tokens, hidden], back in place

The API has DeepEP's shape. Experts sit in blocks: rank r holds experts
[r*E/n, (r+1)*E/n). A token goes to a rank once, however many of its experts live there. The
receiver gets the token's top-k as its own local expert numbers (-1 for experts elsewhere),
with their weights. ``combine`` sums each token's rows from the ranks that hold its experts,
in rank order.

Both calls are differentiable. Dispatch's backward is a combine of the gradients, and
combine's is a dispatch along the same routing; neither exchanges counts.
``async_op=True`` returns a pending call whose ``wait()`` gives the same results, so expert
compute can overlap the transfer.

- ``Dispatcher`` runs on a plait process group. Its rows move by plait's one-sided writes into
  preregistered windows, or by counts then an alltoallv; plait's cost model picks one per call,
  and ``path`` says which ran.
- ``AllToAllDispatcher`` has the same API and results on any backend (gloo). It uses what torch
  users write: counts first, then ``all_to_all_single``.

``ExpertPlacement`` and ``ExpertBalancer`` (plait/torch_moe_balance.py) replicate hot experts
by their measured load, as DeepSeek's EPLB does.
"""

import atexit
import weakref

import torch
import torch.distributed as dist

from .torch_moe_balance import ExpertBalancer, ExpertPlacement, plan  # noqa: F401

__all__ = ["AllToAllDispatcher", "Dispatcher", "ExpertBalancer", "ExpertPlacement", "make_dispatcher",
           "plan"]


def _dtype_name(dtype):
    names = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}
    if dtype not in names:
        raise ValueError(f"plait.torch.moe: rows of {dtype} (float32, float16 or bfloat16)")
    return names[dtype]


class _Pending:
    """A dispatch or combine in flight: ``wait()`` gives what the blocking call returns."""

    def __init__(self, finish, path):
        self._finish = finish
        self._result = None
        self.path = path

    def wait(self):
        if self._finish is not None:
            self._result, self._finish = self._finish(), None
        return self._result


class Handle:
    """A dispatch's routing, for its combine and for backward.

    It also holds the dispatch's received rows as an anchor for combine. Combine's backward
    gives them a zero gradient, so the dispatch's backward runs on every rank. Without that,
    a rank whose experts got no rows would skip it, and the other ranks would wait for it."""

    def __init__(self, routing, anchor):
        self.routing, self.anchor = routing, anchor

    @property
    def num_tokens(self):
        return self.routing.num_tokens

    @property
    def num_recv(self):
        return self.routing.num_recv


class _DispatchFn(torch.autograd.Function):
    # Finishes a dispatch started outside autograd; x and topk_weights are inputs so that the
    # graph reaches them. Backward: combine of the gradients (the weights' too when asked).
    @staticmethod
    def forward(ctx, x, topk_weights, owner, started):
        recv_x, recv_idx, recv_w, counts, handle = started.wait()
        ctx.owner, ctx.handle = owner, handle
        ctx.want_w = topk_weights is not None and topk_weights.requires_grad
        if ctx.want_w:
            ctx.local = recv_idx >= 0  # elsewhere recv_topk_weights is a constant 0
        ctx.mark_non_differentiable(recv_idx, counts)
        owner._last_handle = handle
        return recv_x, recv_idx, recv_w, counts

    @staticmethod
    def backward(ctx, grad_x, _grad_idx, grad_w, _grad_counts):
        if grad_x is None:
            grad_x = torch.zeros(ctx.handle.num_recv, ctx.owner.hidden, dtype=ctx.owner.dtype)
        weights = None
        if ctx.want_w:
            weights = (torch.where(ctx.local, grad_w.float(), 0.0) if grad_w is not None
                       else torch.zeros(ctx.handle.num_recv, ctx.owner.topk))
        out = ctx.owner._combine_raw(grad_x.contiguous(), ctx.handle, weights).wait()
        if weights is None:
            return out, None, None, None
        return out[0], out[1], None, None


class _CombineFn(torch.autograd.Function):
    # Backward: the gradient goes out along the dispatch's routing again; the anchor (the
    # dispatch's rows) gets zeros, which makes the dispatch's backward run.
    @staticmethod
    def forward(ctx, y, anchor, owner, routing, started):
        ctx.owner, ctx.routing = owner, routing
        ctx.anchor_shape = anchor.shape
        return started.wait()

    @staticmethod
    def backward(ctx, grad_out):
        grad_y = ctx.owner._dispatch_again_raw(ctx.routing, grad_out.contiguous()).wait()
        zero = torch.zeros((), dtype=grad_y.dtype).expand(ctx.anchor_shape)
        return grad_y, zero, None, None, None


class _DispatcherBase:
    """What both dispatchers share: the differentiable, optionally asynchronous API on top of
    raw calls that start a transfer and return something with ``wait()``."""

    def dispatch(self, x, topk_idx, topk_weights=None, async_op=False):
        """Sends each row of x ([tokens, hidden]) to the ranks of its experts (topk_idx
        [tokens, topk] int64, -1 for none). Returns (recv_x, recv_topk_idx, recv_topk_weights,
        tokens_per_expert, handle); recv_topk_idx holds this rank's local expert numbers."""
        started = self._dispatch_raw(x.detach(), topk_idx,
                                     None if topk_weights is None else topk_weights.detach())

        def finish():
            recv_x, recv_idx, recv_w, counts = _DispatchFn.apply(x, topk_weights, self, started)
            return recv_x, recv_idx, recv_w, counts, Handle(self._last_handle, recv_x)

        pending = _Pending(finish, started.path)
        return pending if async_op else pending.wait()

    def combine(self, y, handle, topk_weights=None, async_op=False):
        """Sums every token's rows back from the ranks that received it: [tokens, hidden].
        With ``topk_weights`` ([recv, topk]) given, returns (out, their sums per token) too."""
        routing = handle.routing if isinstance(handle, Handle) else handle
        started = self._combine_raw(y.detach().contiguous(), routing, topk_weights)
        if topk_weights is not None:  # what dispatch's backward uses; not differentiable
            pending = _Pending(started.wait, started.path)
        else:
            anchored = isinstance(handle, Handle) and handle.anchor.requires_grad
            anchor = handle.anchor if anchored else torch.empty(0)
            pending = _Pending(lambda: _CombineFn.apply(y, anchor, self, routing, started), started.path)
        return pending if async_op else pending.wait()


class Dispatcher(_DispatcherBase):
    """Dispatch and combine over a plait process group (the default group when None).
    Creating one is collective over the group. It registers the one-sided windows (two per
    peer, each sized for max_tokens rows) and measures both paths.

    ``path`` is one of:
    - "auto": plait's cost model, per call;
    - "one-sided";
    - "alltoallv".
    """

    def __init__(self, num_experts, topk, hidden, dtype=torch.float32, max_tokens=4096,
                 group=None, path="auto", name="moe"):
        from . import torch as plait_torch
        from ._plait_torch import MoeDispatcher

        backend = plait_torch.backend_of(group)
        if backend is None:
            raise ValueError("plait.torch.moe.Dispatcher needs a plait process group "
                             "(AllToAllDispatcher runs on any backend)")
        self.num_experts, self.topk, self.hidden, self.dtype = num_experts, topk, hidden, dtype
        self.max_tokens = max_tokens
        self._native = MoeDispatcher(backend, num_experts, topk, hidden, _dtype_name(dtype),
                                     max_tokens, path, name)
        self.rank, self.size = self._native.rank, self._native.size
        self.cost_summary = self._native.cost_summary
        _open.add(self)

    def close(self):
        """Releases the windows and their connections (also done at exit)."""
        self._native.close()
        _open.discard(self)

    def chosen_path(self, fresh=True, combine=False):
        """The path the cost model picks for this kind of call."""
        return self._native.chosen_path(fresh, combine)

    def layout(self, topk_idx):
        """(tokens_per_rank, tokens_per_expert, is_token_in_rank), computed locally."""
        return self._native.layout(topk_idx)

    def _dispatch_raw(self, x, topk_idx, topk_weights):
        return self._native.dispatch(x, topk_idx, topk_weights)

    def _dispatch_again_raw(self, handle, x):
        return self._native.dispatch_again(handle, x)

    def _combine_raw(self, y, handle, weights):
        return self._native.combine(handle, y, weights)


_open = weakref.WeakSet()


@atexit.register
def _close_all():
    # Python may skip destructors at exit; the peers would then see this rank's windows
    # vanish without a shutdown.
    for d in list(_open):
        d.close()


class _A2AHandle:
    def __init__(self, num_tokens, send_tokens, send_counts, recv_counts):
        self.num_tokens = num_tokens
        self.send_tokens = send_tokens            # this rank's tokens, grouped by destination
        self.send_counts = send_counts            # list, per rank
        self.recv_counts = recv_counts            # list, per rank
        self.num_recv = sum(recv_counts)


class _A2ACall:
    def __init__(self, works, finish, path="all_to_all_single"):
        self._works, self._finish, self.path = works, finish, path

    def wait(self):
        for w in self._works:
            w.wait()
        return self._finish()


class AllToAllDispatcher(_DispatcherBase):
    """The same dispatch and combine with torch.distributed.all_to_all_single, on any backend.
    The counts go first, then the rows and their top-k. Each token goes once per rank, as in
    Dispatcher, so both move the same bytes and return the same results."""

    def __init__(self, num_experts, topk, hidden, dtype=torch.float32, max_tokens=4096,
                 group=None, name=None, path=None):
        self.group = group
        self.size = dist.get_world_size(group)
        self.rank = dist.get_rank(group)
        if num_experts % self.size:
            raise ValueError(f"num_experts {num_experts} is not a multiple of {self.size} ranks")
        self.num_experts, self.topk, self.hidden, self.dtype = num_experts, topk, hidden, dtype
        self.per_rank = num_experts // self.size
        self.max_tokens = max_tokens
        self.cost_summary = "all_to_all_single: counts, then rows"

    def chosen_path(self, fresh=True, combine=False):
        return "all_to_all_single"

    def _route(self, topk_idx):
        dest = torch.where(topk_idx >= 0, topk_idx // self.per_rank, -1)
        in_rank = torch.zeros(topk_idx.shape[0], self.size + 1, dtype=torch.bool)
        in_rank.scatter_(1, torch.where(dest >= 0, dest, self.size), True)
        return dest, in_rank[:, :self.size]

    def layout(self, topk_idx):
        _, in_rank = self._route(topk_idx)
        per_expert = torch.bincount(topk_idx[topk_idx >= 0].flatten(), minlength=self.num_experts)
        return in_rank.sum(0), per_expert, in_rank

    def _dispatch_raw(self, x, topk_idx, topk_weights):
        dest, in_rank = self._route(topk_idx)
        # Tokens in (destination, token) order, as Dispatcher sends them.
        pairs = in_rank.t().nonzero()
        send_dest, send_tokens = pairs[:, 0], pairs[:, 1]
        send_counts = torch.bincount(send_dest, minlength=self.size)
        recv_counts = torch.empty_like(send_counts)
        counts_work = dist.all_to_all_single(recv_counts, send_counts, group=self.group, async_op=True)
        # Each row's top-k as its destination's local experts, and their weights.
        here = dest[send_tokens] == send_dest[:, None]
        local = torch.where(here, topk_idx[send_tokens] - send_dest[:, None] * self.per_rank, -1)
        w = topk_weights[send_tokens] if topk_weights is not None else torch.zeros(len(send_tokens), self.topk)
        meta = torch.cat([local.to(torch.float32), torch.where(here, w.float(), 0.0)], dim=1)
        rows = x[send_tokens]
        counts_work.wait()  # the sizes of what comes
        sc, rc = send_counts.tolist(), recv_counts.tolist()
        recv_x = torch.empty(sum(rc), self.hidden, dtype=x.dtype)
        recv_meta = torch.empty(sum(rc), 2 * self.topk)
        works = [dist.all_to_all_single(recv_x, rows, rc, sc, group=self.group, async_op=True),
                 dist.all_to_all_single(recv_meta, meta, rc, sc, group=self.group, async_op=True)]
        handle = _A2AHandle(x.shape[0], send_tokens, sc, rc)

        def finish():
            recv_idx = recv_meta[:, :self.topk].to(torch.int64)
            recv_w = recv_meta[:, self.topk:].contiguous()
            counts = torch.bincount(recv_idx[recv_idx >= 0], minlength=self.per_rank)
            return recv_x, recv_idx, recv_w, counts, handle

        return _A2ACall(works, finish)

    def _dispatch_again_raw(self, handle, x):
        recv_x = torch.empty(handle.num_recv, self.hidden, dtype=x.dtype)
        work = dist.all_to_all_single(recv_x, x[handle.send_tokens], handle.recv_counts,
                                      handle.send_counts, group=self.group, async_op=True)
        return _A2ACall([work], lambda: recv_x)

    def _combine_raw(self, y, handle, weights):
        back = torch.empty(len(handle.send_tokens), self.hidden, dtype=y.dtype)
        works = [dist.all_to_all_single(back, y, handle.send_counts, handle.recv_counts,
                                        group=self.group, async_op=True)]
        if weights is not None:
            back_w = torch.empty(len(handle.send_tokens), self.topk)
            works.append(dist.all_to_all_single(back_w, weights.float().contiguous(), handle.send_counts,
                                                handle.recv_counts, group=self.group, async_op=True))

        def finish():
            # In rank order, as Dispatcher sums: the rows are grouped by rank already.
            out = torch.zeros(handle.num_tokens, self.hidden, dtype=y.dtype)
            out.index_add_(0, handle.send_tokens, back)
            if weights is None:
                return out
            out_w = torch.zeros(handle.num_tokens, self.topk)
            out_w.index_add_(0, handle.send_tokens, back_w)
            return out, out_w

        return _A2ACall(works, finish)


def make_dispatcher(num_experts, topk, hidden, dtype=torch.float32, max_tokens=4096, group=None,
                    path="auto", name="moe"):
    """Dispatcher on a plait group, AllToAllDispatcher on any other."""
    from . import torch as plait_torch

    cls = Dispatcher if plait_torch.backend_of(group) is not None else AllToAllDispatcher
    return cls(num_experts, topk, hidden, dtype, max_tokens, group=group, path=path, name=name)
