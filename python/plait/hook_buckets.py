"""Where a compressing hook's state lives between DDP's buckets and a checkpoint.

A hook keeps its state per bucket (error feedback over the bucket's flat buffer, PowerSGD's
Q per matrix), but a bucket's layout is not fixed: DDP lays its first iteration out in
parameter order and then rebuilds its buckets in the order the gradients became ready, and a
resumed process starts again from the first layout. So the state is moved through a layout
of its own, per parameter: a parameter is numbered by its first appearance in this process's
first iteration (the same order in every process that builds the same model), and a
bucket's state is cut into per-parameter pieces when its layout changes and when a
checkpoint is taken, and put together again for the layout it has now.
"""

import numpy as np

from . import compress as _pc


def _fits(values, n, pid):
    if values.size != n:
        raise ValueError(f"hook state of parameter {pid} holds {values.size} values, the parameter "
                         f"{n}: a checkpoint of another model")
    return values


def layout_of(state, bucket):
    """[(parameter number, values)] of the bucket, in its buffer's order."""
    return [(state._param_ids.setdefault(p.data_ptr(), len(state._param_ids)), p.numel())
            for p in bucket.parameters()]


def cut(state, key):
    """The bucket's state, per parameter: {number: {"residual": values, "q": values or None}},
    and the call count of its compressor state (or None)."""
    layout = state._layouts.get(key)
    pieces, calls = {}, None
    if layout is None:
        return pieces, calls
    offsets, at = {}, 0
    for pid, n in layout:
        offsets[pid] = (at, n)
        at += n
    st = state._states.get(key)
    if st is not None:
        calls = st.calls
        residual = np.asarray(st.residual, np.float32)
        if residual.size == at:
            for pid, (o, n) in offsets.items():
                pieces.setdefault(pid, {})["residual"] = residual[o:o + n].copy()
    for pid, piece in state._psgd_pieces.get(key, {}).items():  # a plan not built yet
        pieces.setdefault(pid, {}).update(piece)
    plan = state._psgd.get(key)
    if plan is not None:
        q_of = {o: plan.q[qo:qo + steps.rank * steps.cols].copy() for o, _, steps, _, qo in plan.matrices}
        for pid, (o, n) in offsets.items():
            piece = pieces.setdefault(pid, {})
            piece["psgd_residual"] = plan.residual[o:o + n].copy()
            piece["q"] = q_of.get(o)
    return pieces, calls


def paste(state, key, pieces, calls):
    """Builds the bucket's state for its current layout from per-parameter pieces (those of
    parameters not in it are left alone)."""
    layout = state._layouts[key]
    total = sum(n for _, n in layout)
    if any("residual" in pieces.get(pid, {}) for pid, _ in layout):
        residual = np.zeros(total, np.float32)
        at = 0
        for pid, n in layout:
            seg = pieces.get(pid, {}).get("residual")
            if seg is not None:
                residual[at:at + n] = _fits(seg, n, pid)
            at += n
        state._states[key] = _pc.State(residual.tolist(), int(calls or 0))
    if any("psgd_residual" in pieces.get(pid, {}) for pid, _ in layout):
        state._psgd_pieces[key] = pieces  # the plan needs the shapes: _power_sgd builds it


def fill_plan(plan, layout, pieces):
    """A new PowerSGD plan takes the pieces of its parameters."""
    at = 0
    q_at = {o: (qo, steps.rank * steps.cols) for o, _, steps, _, qo in plan.matrices}
    for pid, n in layout:
        piece = pieces.get(pid, {})
        if "psgd_residual" in piece:
            plan.residual[at:at + n] = _fits(piece["psgd_residual"], n, pid)
        q = piece.get("q")
        if q is not None and at in q_at and q_at[at][1] == q.size:
            qo, qn = q_at[at]
            plan.q[qo:qo + qn] = q
        at += n


def relayout(state, key, layout):
    """Called before each bucket's step: a bucket whose layout changed keeps its state."""
    old = state._layouts.get(key)
    if old == layout:
        return
    pieces, calls = cut(state, key)
    # A checkpoint's pieces go to the first bucket that holds their parameter, once.
    for pid, _ in layout:
        if pid in state._saved_pieces:
            pieces.setdefault(pid, state._saved_pieces.pop(pid))
    saved_calls = state._saved_calls.pop(key, None)
    state._layouts[key] = layout
    state._states.pop(key, None)
    state._psgd.pop(key, None)
    state._psgd_pieces.pop(key, None)
    paste(state, key, pieces, calls if calls is not None else saved_calls)


def to_dict(state):
    pieces, calls = dict(state._saved_pieces), dict(state._saved_calls)
    for key in state._layouts:
        p, c = cut(state, key)
        pieces.update(p)
        if c is not None:
            calls[key] = c
    return {"pieces": pieces, "calls": calls}


def from_dict(state, d):
    state._layouts, state._states, state._psgd, state._psgd_pieces = {}, {}, {}, {}
    state._saved_pieces = dict(d["pieces"])
    state._saved_calls = dict(d["calls"])
