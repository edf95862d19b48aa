"""plait.torch.timeline: where every training step's time goes, on every rank.

    from plait.torch import timeline
    with timeline.record("out/fsdp", model=model) as tl:   # collective over the default group
        for x, y in batches:
            with tl.step():
                model(x).sum().backward()
                optimizer.step()
    print(tl.summary)   # every rank: medians of compute, exposed comm, overlapped, bubble

Recorded per rank: compute spans (forward and backward of `model`, or of a pipeline's stages:
forward, backward, and backward for inputs and for weights where the schedule splits them;
the optimizer's step), the steps, and every call of every plait process group (op, bytes,
group, peer, algorithm; issued, started, on the wire, finished, and the waits for it). On
leaving, rank 0 gathers them and writes PATH.json (a Chrome/Perfetto trace) and PATH.png (a
Gantt chart, one row per rank), and prints the breakdown per step (timeline_analysis says what
each column means). With `pipeline=Pipeline(schedule, ranks, microbatches, stages_per_rank)`
it also prints the measured bubble beside the schedule's closed form.

Calls are recorded on the plait backend only (gloo tells nothing of its calls' times): on
gloo the breakdown has compute and other, and other holds the communication.
"""
import contextlib
import dataclasses
import statistics
import threading
import time

import torch
import torch.distributed as dist

from . import timeline_analysis as ta
from . import timeline_render as render


@dataclasses.dataclass
class Pipeline:
    schedule: str            # gpipe, 1f1b, interleaved-1f1b, zero-bubble
    ranks: int               # stages p (ranks of one pipeline)
    microbatches: int        # m
    stages_per_rank: int = 1  # v


def _now():
    return time.monotonic_ns()  # CLOCK_MONOTONIC, as plait's steady_clock


class _Spans:
    """Compute spans of this process; nested ones count as their outermost."""

    def __init__(self):
        self.spans = []
        self._local = threading.local()

    @contextlib.contextmanager
    def span(self, kind):
        depth = getattr(self._local, "depth", 0)
        self._local.depth = depth + 1
        begin = _now()
        try:
            yield
        finally:
            self._local.depth = depth
            if depth == 0:
                self.spans.append((kind, begin, _now()))

    def open(self, kind):
        """A span opened by one hook and closed by another (a module's pre- and post-forward
        hooks), in the same thread."""
        cm = self.span(kind)
        cm.__enter__()
        self._local.__dict__.setdefault("open", {})[kind] = cm

    def close(self, kind):
        cm = getattr(self._local, "open", {}).pop(kind, None)
        if cm is not None:
            cm.__exit__(None, None, None)

    def wrap(self, fn, kind_of):
        spans = self

        def wrapped(*args, **kwargs):
            with spans.span(kind_of(*args, **kwargs)):
                return fn(*args, **kwargs)
        wrapped.__wrapped__ = fn
        return wrapped


def _backend_module():
    try:
        from . import _plait_torch
        return _plait_torch
    except ImportError:
        return None


def _groups():
    """{plait group id: (group name, global ranks in group order)} of this rank's groups."""
    from .torch import backend_of
    out = {}
    world = dist.distributed_c10d._world
    for pg, ranks in world.pg_group_ranks.items():
        # torch also keys groups this rank is not in, by an int (GroupMember.NON_GROUP_MEMBER).
        if not isinstance(pg, dist.ProcessGroup):
            continue
        backend = backend_of(pg)
        if backend is None:
            continue
        members = [g for g, _ in sorted(ranks.items(), key=lambda kv: kv[1])]
        out[backend._timeline_id] = (dist.distributed_c10d._get_process_group_name(pg), members)
    return out


def _clock_offsets(rounds=8):
    """This rank's clock minus rank 0's, in ns (NTP's estimate at the quickest round trip);
    rank 0 gets everyone's. Ranks on one host share the clock: the offsets come out ~0."""
    rank, world = dist.get_rank(), dist.get_world_size()
    t = torch.zeros(1, dtype=torch.float64)
    offsets = [0] * world
    for peer in range(1, world):
        if rank == 0:
            best = None
            for _ in range(rounds):
                sent = _now()
                dist.send(t, peer)
                dist.recv(t, peer)
                back = _now()
                if best is None or back - sent < best[0]:
                    best = (back - sent, int(t.item()) - (sent + back) // 2)
            offsets[peer] = best[1]
        elif rank == peer:
            for _ in range(rounds):
                dist.recv(t, 0)
                t.fill_(float(_now()))
                dist.send(t, 0)
    return offsets


class Timeline:
    def __init__(self, path=None, model=None, pipeline=None, title=None, quiet=False):
        self.path, self.model, self.pipeline = path, model, pipeline
        self.title = title or (path.rsplit("/", 1)[-1] if path else "timeline")
        self.quiet = quiet
        self.summary = None     # every rank, after the context: timeline_analysis.summarize()
        self.rows = None        # rank 0: the breakdown per rank and step
        self.bubble = None      # rank 0, pipelines: measured and closed-form bubble
        self._spans = _Spans()
        self._steps = []
        self._undo = []

    # ---- recording ---------------------------------------------------------------------

    @contextlib.contextmanager
    def step(self):
        begin = _now()
        try:
            yield
        finally:
            self._steps.append((begin, _now()))

    def span(self, kind):
        """A compute span of the caller's own (nested spans count as the outermost)."""
        return self._spans.span(kind)

    def __enter__(self):
        self._offsets = _clock_offsets()
        self._instrument()
        dist.barrier()
        plait = _backend_module()
        if plait is not None:
            plait._timeline_start()
        return self

    def __exit__(self, *exc):
        plait = _backend_module()
        calls = plait._timeline_stop() if plait is not None else []
        for undo in reversed(self._undo):
            undo()
        if exc[0] is not None:
            return False
        self._finish(calls)
        return False

    def _patch(self, owner, name, kind_of):
        original = getattr(owner, name)
        setattr(owner, name, self._spans.wrap(original, kind_of))
        self._undo.append(lambda: setattr(owner, name, original))

    def _instrument(self):
        spans = self._spans
        if self.pipeline is not None:
            from torch.distributed.pipelining import schedules, stage
            base = stage._PipelineStageBase
            self._patch(base, "forward_one_chunk", lambda *a, **k: "forward")
            self._patch(base, "backward_one_chunk", lambda self_, chunk, loss=None,
                        full_backward=True, **k: "backward" if full_backward else
                        "backward_input")
            self._patch(base, "backward_weight_one_chunk", lambda *a, **k: "backward_weight")
            self._patch(schedules._PipelineSchedule, "_compute_loss", lambda *a, **k: "loss")
        else:
            self._patch(torch.autograd, "backward", lambda *a, **k: "backward")
            if self.model is not None:
                h1 = self.model.register_forward_pre_hook(
                    lambda *a: spans.open("forward"), prepend=True)
                h2 = self.model.register_forward_hook(lambda *a: spans.close("forward"),
                                                      always_call=True)
                self._undo += [h1.remove, h2.remove]
        from torch.optim.optimizer import (register_optimizer_step_post_hook,
                                           register_optimizer_step_pre_hook)
        h3 = register_optimizer_step_pre_hook(lambda *a: spans.open("optimizer"))
        h4 = register_optimizer_step_post_hook(lambda *a: spans.close("optimizer"))
        self._undo += [h3.remove, h4.remove]

    # ---- the end: gather, analyse, write -----------------------------------------------

    def _finish(self, calls):
        rank = dist.get_rank()
        groups = _groups()
        mine = {"rank": rank, "spans": self._spans.spans, "steps": self._steps, "calls": []}
        for op, group, peer, tag, nbytes, algorithm, issued, started, finished, waits in calls:
            name, members = groups.get(group, (f"#{group}", [rank]))
            mine["calls"].append({"op": op, "group": name, "members": members, "peer": peer,
                                  "tag": tag, "bytes": nbytes, "algorithm": algorithm,
                                  "issued": issued, "started": started,
                                  "finished": finished, "waits": list(waits)})
        gathered = [None] * dist.get_world_size() if rank == 0 else None
        dist.gather_object(mine, gathered, dst=0)
        summary = [None]
        if rank == 0:
            for r in gathered:
                r["offset_ns"] = self._offsets[r["rank"]]
            ranks = ta.prepare(gathered)
            self.rows = ta.breakdown(ranks)
            summary[0] = ta.summarize(self.rows)
            summary[0]["has_calls"] = any(r["calls"] for r in ranks)
            if self.pipeline is not None:
                self.bubble = self._bubble(ranks, summary[0])
                summary[0]["closed_form"] = self.bubble
            if self.path:
                render.perfetto(ranks, self.path + ".json")
                render.gantt(ranks, self.path + ".png", self.title)
            if not self.quiet:
                print(self.report(), flush=True)
        dist.broadcast_object_list(summary, src=0)
        self.summary = summary[0]

    def _bubble(self, ranks, summary):
        p = self.pipeline
        kinds = ta.span_medians(ranks)
        f, w = kinds.get("forward", 0.0), kinds.get("backward_weight", 0.0)
        b = kinds.get("backward_input", kinds.get("backward", 0.0))
        closed_s, closed_share = ta.closed_form_bubble(p.schedule, p.ranks, p.microbatches,
                                                       p.stages_per_rank, f, b, w)
        return {"closed_s": closed_s, "closed_share": closed_share,
                "measured_s": summary["bubble_s"], "measured_share": summary["bubble"],
                "F": f, "B": b, "W": w}

    def report(self):
        """The breakdown as text (rank 0)."""
        lines = [f"timeline {self.title}: medians over {self.summary_steps()} steps, ms"]
        keys = ("step_s", "compute_s", "exposed_s", "overlapped_s", "bubble_s", "other_s")
        lines.append(f"{'rank':>5}" + "".join(f"{k[:-2]:>11}" for k in keys))
        for rank in sorted({row['rank'] for row in self.rows}):
            mine = [row for row in self.rows if row["rank"] == rank]
            lines.append(f"{rank:>5}" + "".join(
                f"{statistics.median(row[k] for row in mine) * 1e3:11.2f}" for k in keys))
        s = ta.summarize(self.rows)
        if s["sharding_overlap"] is not None:
            lines.append(f"all-gather/reduce-scatter time overlapped with compute: "
                         f"{100 * s['sharding_overlap']:.0f} %")
        if self.bubble:
            bb = self.bubble
            lines.append(f"bubble a rank: measured {1e3 * bb['measured_s']:.2f} ms "
                         f"({100 * bb['measured_share']:.1f} % of the step), closed form "
                         f"{1e3 * bb['closed_s']:.2f} ms ({100 * bb['closed_share']:.1f} %) "
                         f"from F {1e3 * bb['F']:.2f}, B {1e3 * bb['B']:.2f}, "
                         f"W {1e3 * bb['W']:.2f} ms")
        return "\n".join(lines)

    def summary_steps(self):
        return len({row["step"] for row in self.rows}) if self.rows else 0


def record(path=None, model=None, pipeline=None, title=None, quiet=False):
    """A Timeline to use as a context manager (see the module's text)."""
    return Timeline(path, model, pipeline, title, quiet)
