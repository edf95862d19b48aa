"""plait.torch.hooks: DDP communication hooks that compress gradients with plait's
compressors and move them with the process group's own collectives, so they run on the
"plait" backend and on gloo alike.

    import plait.torch
    state, hook = plait.torch.hooks.make("powersgd", rank=4, start_iter=10)
    ddp_model.register_comm_hook(state, hook)

Methods: "fp16", "bf16", "int8", "sign", "topk", "threshold", "randomk", "powersgd", "none"
(plain allreduce) and "auto" (the cheapest by the cost model, see below). Parameters are
plait.compress's (levels, chunk, ratio, k, threshold, rank, rows, seed) and start_iter:
the first start_iter steps allreduce uncompressed (as torch's PowerSGD hook does). Every
bucket keeps its own error-feedback state (and PowerSGD's Q, warm-started).

How each method moves over the group: fp16 and bf16 as one all_reduce of the 16-bit values
(bf16 as an all_gather on gloo, which cannot sum bfloat16);
randomk as one all_reduce of the k values (every rank draws the same indices); powersgd as
torch's hook lays it out (each weight matrix in its own shape, biases uncompressed in one
all_reduce, every matrix's P in one all_reduce and every Q in another); int8, sign, topk and threshold as all_gather of the wires (padded
to the longest for threshold), each decompressed and added in rank order. The result is the
mean, as DDP expects.

A hook returns at once: each bucket's compression and collectives run on the state's own
thread (plait/hook_thread.py), one bucket after another in the order DDP hands them over
(the same on every rank), while backward goes on; DDP waits for the Futures when backward
ends, as it does for its own all-reduce. A failure reaches the bucket's Future, and DDP
raises it from backward. Under a profiler each bucket is a range "plait.hooks: bucket <i>
<method>" from the hook's call until its result is in.

"auto" measures, when made (a collective call on every rank), the group's latency and
bandwidth with timed all_reduces and each candidate's compress + decompress speed, then per
bucket layout (its gradients' shapes) picks the method with the least predicted time: t = a *
messages + wire bytes * 2(w-1)/w / B + values / (compress speed), PowerSGD's wire counted per
matrix as it moves; a compressor only when it is predicted to take at most AUTO_MARGIN (0.8)
of the plain all_reduce's time. Uncompressed is a candidate, so on a fast link it allreduces
plainly.
The choice is printed once per bucket layout when PLAIT_LOG is info or debug; `candidates=`
overrides the set.
"""

import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist

from . import compress as _pc
from . import hook_buckets as _buckets
from .hook_thread import BucketThread as _BucketThread
from ._plait import DeadlineAllreduce as _DeadlineAllreduce
from ._plait import PowerSgdSteps as _PowerSgdSteps

__all__ = ["DeadlineHookState", "HookState", "make", "make_deadline", "METHODS"]

METHODS = _pc.METHODS + ("none", "auto")
# "auto" compresses only when that is predicted to take at most this share of the plain
# all_reduce's time: timings on a shared host are noisy (on loopback, one measurement in
# three put fp16 0.09 ms ahead of none and cost 14 % an epoch), and a near tie does not pay
# for compression's error. On a slow link the winners save far more (PowerSGD: 7x at 1 Gbit/s).
AUTO_MARGIN = 0.8
_COMPRESSOR_PARAMS = ("levels", "chunk", "ratio", "k", "threshold", "rank", "rows", "seed")


def _log_info():
    return os.environ.get("PLAIT_LOG", "").lower() in ("info", "debug")


class HookState:
    """What a hook keeps between calls: the method, the group, per bucket the error-feedback
    state (and PowerSGD's Q), and `stats`: calls, values, sent_bytes (what this rank handed to
    the collectives), comm_s (seconds in them) and hook_s (seconds moving the buckets; the
    rest of it is compressing and decompressing). The stats are the bucket thread's: read
    them after backward."""

    def __init__(self, method, process_group=None, start_iter=0, candidates=None, **params):
        if method not in METHODS:
            raise ValueError(f"unknown method '{method}' ({', '.join(METHODS)})")
        unknown = set(params) - set(_COMPRESSOR_PARAMS)
        if unknown:
            raise ValueError(f"unknown parameters {sorted(unknown)} ({', '.join(_COMPRESSOR_PARAMS)})")
        self.method = method
        self.group = process_group
        self.params = dict(params)
        self.start_iter = int(start_iter)
        self.world = dist.get_world_size(process_group)
        self.rank = dist.get_rank(process_group)
        self.iteration = 0
        self._compressors = {}
        self._states = {}
        self._psgd = {}
        self._choice = {}
        # How the buckets' state survives DDP's rebuild of its buckets and a checkpoint
        # (hook_buckets.py): parameter numbers, each bucket's layout, pieces waiting for a
        # bucket (a plan not built yet; a checkpoint's).
        self._param_ids, self._layouts, self._psgd_pieces = {}, {}, {}
        self._saved_pieces, self._saved_calls = {}, {}
        # Per hook call summed: values in, bytes this rank handed to the collectives, seconds
        # in the collectives, and seconds in the whole hook (compressing is the difference).
        self.stats = {"calls": 0, "values": 0, "sent_bytes": 0, "comm_s": 0.0, "hook_s": 0.0}
        if method == "powersgd" and self.params.get("rank", 4) < 1:
            raise ValueError(f"powersgd needs rank >= 1, not {self.params['rank']}")
        if method not in ("none", "auto", "powersgd"):
            self._compressor(method)  # bad parameters fail here, not in the first backward
        self._model = _measure(self, candidates) if method == "auto" else None
        self._thread = None  # the bucket thread, started by the first bucket

    def state_dict(self):
        """This rank's state between steps (plait.torch.checkpoint saves it with hook=): the
        iteration, every bucket's error feedback, PowerSGD's residuals and warm-start Qs, and
        auto's choices. Without it a resumed run starts the feedback from zero and differs
        from an uninterrupted one."""
        return {"method": self.method, "iteration": self.iteration, "choice": dict(self._choice),
                **_buckets.to_dict(self)}

    def load_state_dict(self, d):
        if d.get("method") != self.method:
            raise ValueError(f"hook state of method '{d.get('method')}' loaded into a '{self.method}' hook")
        self.iteration = int(d["iteration"])
        self._choice = dict(d["choice"])
        _buckets.from_dict(self, d)  # each bucket takes its parameters' state at its next call

    def _compressor(self, method):
        if method not in self._compressors:
            self._compressors[method] = _pc.Compressor(method, **self.params)
        return self._compressors[method]

    def _state(self, key):
        if key not in self._states:
            self._states[key] = _pc.State()
        return self._states[key]


def _all_reduce(state, tensor):
    start = time.perf_counter()
    dist.all_reduce(tensor, group=state.group)
    state.stats["comm_s"] += time.perf_counter() - start
    state.stats["sent_bytes"] += tensor.numel() * tensor.element_size()


def _all_gather(state, outputs, tensor):
    start = time.perf_counter()
    dist.all_gather(outputs, tensor, group=state.group)
    state.stats["comm_s"] += time.perf_counter() - start
    state.stats["sent_bytes"] += tensor.numel() * tensor.element_size()


def _allreduce_mean(state, tensor):
    _all_reduce(state, tensor)
    tensor.div_(state.world)


def _cast(state, method, x, key):
    if method == "bf16" and dist.get_backend(state.group) == "gloo":
        return _gathered(state, method, x, key)  # gloo (torch 1.13) has no bfloat16 sums
    c = state._compressor(method)
    wire = c.compress(x, state._state(key))
    summed = torch.from_numpy(wire).view(torch.float16 if method == "fp16" else torch.bfloat16)
    _all_reduce(state, summed)
    c.decompress(wire, x)


def _random_k(state, x, key):
    c = state._compressor("randomk")
    wire = c.compress(x, state._state(key))
    values = torch.from_numpy(wire[8:]).view(torch.float32)  # after the 8-byte seed
    _all_reduce(state, values)
    c.decompress(wire, x)


def _gathered(state, method, x, key):
    c = state._compressor(method)
    wire = torch.from_numpy(c.compress(x, state._state(key)))
    if method == "threshold":
        size = torch.tensor([wire.numel()], dtype=torch.int64)
        sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(state.world)]
        _all_gather(state, sizes, size)
        sizes = [int(s.item()) for s in sizes]
        padded = torch.zeros(max(sizes), dtype=torch.uint8)
        padded[:wire.numel()] = wire
        wire = padded
    else:
        sizes = [wire.numel()] * state.world
    wires = [torch.empty_like(wire) for _ in range(state.world)]
    _all_gather(state, wires, wire)
    x[:] = 0.0
    for w, n in zip(wires, sizes):
        c.decompress(w.numpy()[:n], x, accumulate=True)


class _PowerSgdBucket:
    """PowerSGD's plan for one bucket, as torch's hook lays it out: every gradient of two or
    more dimensions is its own matrix (rows = its first dimension), the others (biases) go
    uncompressed; the matrices' P factors travel in one all_reduce and their Q factors in
    another. Keeps the bucket's error feedback and every matrix's Q (warm start)."""

    def __init__(self, state, shapes, key):
        rank = state.params.get("rank", 4)
        seed = state.params.get("seed", 0x706c616974) + 1000003 * key
        self.matrices, self.vectors = [], []
        offset = p_size = q_size = 0
        for i, shape in enumerate(shapes):
            n = int(np.prod(shape)) if len(shape) else 1
            if len(shape) >= 2 and n > 0:
                steps = _PowerSgdSteps(n, rank, int(shape[0]))
                self.matrices.append((offset, n, steps, p_size, q_size))
                p_size += steps.rank * steps.rows
                q_size += steps.rank * steps.cols
            else:
                self.vectors.append((offset, n))
            offset += n
        self.p = np.empty(p_size, np.float32)
        self.q = np.empty(q_size, np.float32)
        for i, (_, _, steps, _, qo) in enumerate(self.matrices):
            # The same start on every rank: the seed is the parameters', not the rank's.
            steps.initial_q(self.q[qo:qo + steps.rank * steps.cols], seed + i)
        self.residual = np.zeros(offset, np.float32)


def _power_sgd(state, x, key, shapes):
    plan = state._psgd.get(key)
    if plan is None:
        plan = state._psgd[key] = _PowerSgdBucket(state, shapes, key)
        pieces = state._psgd_pieces.pop(key, None)
        if pieces:
            _buckets.fill_plan(plan, state._layouts[key], pieces)
    m = plan.residual  # the biases' part stays zero: they are sent whole
    if plan.vectors:
        flat = np.concatenate([x[o:o + n] for o, n in plan.vectors])
        _all_reduce(state, torch.from_numpy(flat))
        at = 0
        for o, n in plan.vectors:
            x[o:o + n] = flat[at:at + n] / np.float32(state.world)
            at += n
    if not plan.matrices:
        return
    views = [(m[o:o + n], x[o:o + n], steps, plan.p[po:po + steps.rank * steps.rows],
              plan.q[qo:qo + steps.rank * steps.cols]) for o, n, steps, po, qo in plan.matrices]
    for mm, xx, steps, p, q in views:
        steps.mq(mm, q, p, add=xx)  # error feedback (mm += xx) in the same pass
    _all_reduce(state, torch.from_numpy(plan.p))
    for mm, _, steps, p, q in views:
        steps.orthonormalize(p)
        steps.mtp(mm, p, q)  # q is updated in place: the next step's warm start
    _all_reduce(state, torch.from_numpy(plan.q))
    plan.q /= np.float32(state.world)
    for mm, xx, steps, p, q in views:
        steps.reconstruct(p, q, xx, residual=mm)  # xx = P Q^T, and mm keeps what it left out


_PATHS = {"fp16": lambda s, x, k: _cast(s, "fp16", x, k), "bf16": lambda s, x, k: _cast(s, "bf16", x, k),
          "randomk": _random_k}


def _run(state, method, x, key, shapes):
    """x (a float32 NumPy view of the bucket) becomes the group's mean, moved by `method`;
    `shapes`: the bucket's gradients' shapes, in order."""
    if method == "powersgd":
        _power_sgd(state, x, key, shapes)  # its Q was averaged already
        return
    if method == "none":
        t = torch.from_numpy(x)
        _allreduce_mean(state, t)
        return
    path = _PATHS.get(method)
    if path is not None:
        path(state, x, key)
    else:
        _gathered(state, method, x, key)
    x /= np.float32(state.world)


def _power_sgd_wire(shapes, rank):
    """(all_reduces, bytes each rank hands them) of one PowerSGD step over a bucket of these
    gradient shapes, laid out as _PowerSgdBucket does: a P and a Q per matrix, biases whole."""
    matrices = vectors = 0
    wire = 0
    for shape in shapes:
        n = int(np.prod(shape)) if len(shape) else 1
        if len(shape) >= 2 and n > 0:
            steps = _PowerSgdSteps(n, rank, int(shape[0]))
            wire += 4 * steps.rank * (steps.rows + steps.cols)
            matrices += 1
        else:
            vectors += n
    return (2 if matrices else 0) + (1 if vectors else 0), wire + 4 * vectors


def _predict(model, method, n, world, shapes):
    """Seconds for one bucket of n float32 values (gradients of `shapes`) by `method`, from
    the measured model."""
    alpha, beta, speed = model["alpha"], model["beta"], model["speed"]
    share = 2.0 * (world - 1) / world
    if method == "none":
        return alpha + share * 4 * n / beta
    if method == "powersgd":
        messages, wire = _power_sgd_wire(shapes, model["rank"])
        return messages * alpha + share * wire / beta + n / speed[method]
    if method in ("fp16", "bf16"):
        return alpha + share * 2 * n / beta + n / speed[method]
    ratio = model["ratio"][method]  # wire bytes per value
    if method == "randomk":
        return alpha + share * ratio * n / beta + n / speed[method]
    return alpha + (world - 1) * ratio * n / beta + n / speed[method]  # all_gather


def _measure(state, candidates):
    """The cost model's inputs: the group's latency and bandwidth, and each candidate's
    compress + decompress speed (values per second) on this CPU."""
    candidates = list(candidates or ("none", "fp16", "powersgd"))
    for c in candidates:
        if c not in METHODS or c == "auto":
            raise ValueError(f"auto: unknown candidate '{c}'")

    def timed_allreduce(n, reps=5):
        t = torch.ones(n)
        dist.all_reduce(t, group=state.group)
        times = []
        for _ in range(reps):
            dist.barrier(group=state.group)
            start = time.perf_counter()
            dist.all_reduce(t, group=state.group)
            times.append(time.perf_counter() - start)
        # The slowest rank's median: every rank decides alike.
        med = torch.tensor([sorted(times)[len(times) // 2]], dtype=torch.float64)
        dist.all_reduce(med, op=dist.ReduceOp.MAX, group=state.group)
        return float(med.item())

    small = timed_allreduce(1)
    big_n = 1 << 20
    big = timed_allreduce(big_n)
    share = 2.0 * (state.world - 1) / max(1, state.world)
    beta = share * 4 * big_n / max(1e-9, big - small)
    sample = np.random.default_rng(0).standard_normal(big_n).astype(np.float32)
    speed, ratio = {}, {}
    for method in candidates:
        if method == "none":
            continue
        start = time.perf_counter()
        if method == "powersgd":
            steps = _PowerSgdSteps(big_n, state.params.get("rank", 4), 0)
            q = np.empty(steps.rank * steps.cols, np.float32)
            p = np.empty(steps.rank * steps.rows, np.float32)
            steps.initial_q(q, 1)
            steps.mq(sample, q, p)
            steps.orthonormalize(p)
            steps.mtp(sample, p, q)
            steps.reconstruct(p, q, sample.copy())
        else:
            c = state._compressor(method)
            wire = c.compress(sample, _pc.State())
            c.decompress(wire, sample.copy())
            ratio[method] = wire.size / big_n
        speed[method] = big_n / max(1e-9, time.perf_counter() - start)
    # Every rank decides alike: the slowest rank's compression speeds.
    speeds = torch.tensor([speed.get(m, 0.0) for m in candidates], dtype=torch.float64)
    dist.all_reduce(speeds, op=dist.ReduceOp.MIN, group=state.group)
    speed = {m: float(v) for m, v in zip(candidates, speeds) if m != "none"}
    return {"alpha": small, "beta": beta, "speed": speed, "ratio": ratio, "candidates": candidates,
            "rank": state.params.get("rank", 4)}


def _choose(state, n, shapes):
    key = (n, tuple(shapes))
    if key not in state._choice:
        model = state._model
        predicted = {m: _predict(model, m, n, state.world, shapes) for m in model["candidates"]}
        best = min(predicted, key=predicted.get)
        if best != "none" and "none" in predicted and predicted[best] > AUTO_MARGIN * predicted["none"]:
            best = "none"  # a near tie, within the measurements' noise: not worth the error
        state._choice[key] = best
        if _log_info() and state.rank == 0:
            costs = ", ".join(f"{m} {1e3 * t:.2f} ms" for m, t in predicted.items())
            print(f"plait[rank 0] info: hooks auto: {best} for a bucket of {n} values "
                  f"(predicted: {costs}; alpha {1e6 * model['alpha']:.0f} us, "
                  f"bandwidth {model['beta'] / 1e9:.2f} GB/s)", file=sys.stderr, flush=True)
    return state._choice[key]


def _hook(state, bucket):
    buf = bucket.buffer()
    if buf.dtype != torch.float32:
        raise TypeError(f"plait hooks compress float32 gradients, not {buf.dtype}")
    key = bucket.index()
    _buckets.relayout(state, key, _buckets.layout_of(state, bucket))
    shapes = [tuple(g.shape) for g in bucket.gradients()]
    method = state.method
    if method == "auto":
        method = _choose(state, buf.numel(), shapes)
    if state.iteration < state.start_iter:
        method = "none"
    last = bucket.is_last()
    if last:
        state.iteration += 1

    def move():  # on the bucket thread; buf stays referenced until it is done
        start = time.perf_counter()
        _run(state, method, buf.numpy(), key, shapes)
        state.stats["hook_s"] += time.perf_counter() - start
        state.stats["calls"] += 1
        state.stats["values"] += buf.numel()
        return buf

    return _thread_of(state, "plait-hooks").submit(move, f"plait.hooks: bucket {key} {method}", last)


def _thread_of(state, name):
    if state._thread is None:
        state._thread = _BucketThread(state, name)
    return state._thread


def make(method, process_group=None, **params):
    """(state, hook) for DistributedDataParallel.register_comm_hook."""
    return HookState(method, process_group, **params), _hook


class DeadlineHookState:
    """The deadline hook's state: a plait.DeadlineAllreduce over `comm` and what it saw."""

    def __init__(self, comm, deadline, late="drop", **options):
        self.dl = _DeadlineAllreduce(comm, deadline=deadline, late=late, **options)
        self.steps = 0             # buckets reduced
        self.dropped = 0.0         # sum over buckets of the share of ranks it went without
        self.missed = 0            # buckets this rank's gradient missed
        self.skipped = 0           # buckets this rank joined without its gradient (catch_up)
        self.slow = []             # the latest slow ranks, as the aggregator reports them
        self.behind = False        # this rank's last bucket missed its deadline
        self._joining = False
        self._thread = None        # the bucket thread, started by the first bucket

    def catch_up(self):
        """Call at the start of each step. True when this rank fell behind (its last bucket
        missed the deadline): this step's buckets then join without their gradients, so run
        the step on as little data as you like (one sample) and be on time for the next one.
        Without it a late rank stays late: the others wait only the deadline for it."""
        self._joining = self.behind
        return self._joining


def _deadline_hook(state, bucket):
    buf = bucket.buffer()
    key, last, joining = bucket.index(), bucket.is_last(), state._joining

    def move():  # on the bucket thread, as _hook's buckets
        info = state.dl.allreduce(buf.numpy(), op="avg", key=key, contribute=not joining)
        state.steps += 1
        state.dropped += info["dropped_fraction"]
        state.missed += 1 if info["late"] else 0
        state.skipped += 1 if joining else 0
        state.slow = info["slow"]
        if last:
            state.behind = info["late"]  # read by catch_up(), after backward
        return buf

    return _thread_of(state, "plait-deadline-hook").submit(move, f"plait.hooks: bucket {key} deadline", last)


def make_deadline(comm, deadline, late="drop", **options):
    """(state, hook) for DistributedDataParallel.register_comm_hook: each bucket averaged over
    the ranks whose gradients reached the aggregator by `deadline` seconds after the first
    (plait.DeadlineAllreduce over the plait communicator `comm`, whatever DDP's backend). Every
    rank applies the same average, so the replicas stay identical. late="carry" adds a late
    bucket to that rank's next one; options: start, min_contributors, backup, report_after,
    root (as plait.DeadlineAllreduce)."""
    return DeadlineHookState(comm, deadline, late, **options), _deadline_hook
