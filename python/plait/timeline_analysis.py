"""Where each step's time went, from what plait.torch.timeline recorded on every rank.

Pure Python over plain data (no torch), so it runs on rank 0 after the gather and in tests.

Input, one dict per rank, times in ns on that rank's steady clock:
    {"rank": r, "offset_ns": o,            # this clock minus rank 0's
     "spans": [(kind, begin, end)],        # compute: forward, backward, backward_input, ...
     "steps": [(begin, end)],
     "calls": [{"op", "group", "members", "peer", "tag", "bytes", "algorithm",
                "issued", "started", "finished", "waits": [(begin, end)]}]}
"members" are the global ranks of the call's group in group order, "peer" a group rank.

A call's life on rank r: issued (torch handed it over) -> started (plait began it; a
collective waits for the group's earlier ones) -> on the wire (a collective: once every member
has started it; a send or recv: once both ends have) -> finished. Per step and rank:
    compute      the compute spans, less the time this rank's threads waited on calls in them;
    exposed      not computing while a call of this rank was on the wire;
    overlapped   computing while a call of this rank was on the wire;
    bubble       waiting on a call that was not on the wire yet: for a peer to reach it (a
                 pipeline's bubble, a straggler);
    other        the rest: host work outside the compute spans (the framework's own Python,
                 the data), nothing of this rank's on the wire.
A wait that torch makes inside C++ on a call's Future (DDP's reducer) is not seen: it counts as
compute.
"""
import statistics

P2P_OPS = ("send", "recv", "recvAnySource")
SHARDING_OPS = ("all_gather_into_tensor", "all_gather_into_tensor_coalesced", "all_gather",
                "all_gather_coalesced", "reduce_scatter_tensor",
                "reduce_scatter_tensor_coalesced", "reduce_scatter")


# ---- interval sets: sorted lists of disjoint [begin, end) pairs -------------------------------

def union(intervals):
    out = []
    for b, e in sorted(i for i in intervals if i[1] > i[0]):
        if out and b <= out[-1][1]:
            if e > out[-1][1]:
                out[-1][1] = e
        else:
            out.append([b, e])
    return [(b, e) for b, e in out]


def intersect(a, b):
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if lo < hi:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def subtract(a, b):
    out, j = [], 0
    for lo, hi in a:
        while j < len(b) and b[j][1] <= lo:
            j += 1
        k, cur = j, lo
        while k < len(b) and b[k][0] < hi:
            if b[k][0] > cur:
                out.append((cur, b[k][0]))
            cur = max(cur, b[k][1])
            k += 1
        if cur < hi:
            out.append((cur, hi))
    return out


def length(intervals):
    return sum(e - b for b, e in intervals)


# ---- matching calls across ranks -----------------------------------------------------------

def prepare(ranks):
    """Copies of the records with every time on rank 0's clock and every call matched
    (match_calls): what breakdown() and the pictures take."""
    out = _to_rank0_clock(ranks)
    match_calls(out)
    return out


def _to_rank0_clock(ranks):
    out = []
    for r in ranks:
        o = r.get("offset_ns", 0)
        shift = (lambda t, o=o: t - o if t else 0)
        out.append({
            "rank": r["rank"],
            "spans": [(k, b - o, e - o) for k, b, e in r["spans"]],
            "steps": [(b - o, e - o) for b, e in r["steps"]],
            "calls": [dict(c, issued=shift(c["issued"]), started=shift(c["started"]),
                           finished=shift(c["finished"]),
                           waits=[(b - o, e - o) for b, e in c["waits"]])
                      for c in r["calls"]],
        })
    return out


def match_calls(ranks):
    """Sets each call's "wire" (when it went on the wire) and "mismatch" (ops of the same
    collective that differ across ranks, which a correct program never shows)."""
    by_rank = {r["rank"]: r for r in ranks}
    # Collectives: the k-th call of a group on each member is the same call.
    colls = {}
    for r in ranks:
        for c in r["calls"]:
            c["wire"] = c["started"]
            if c["op"] not in P2P_OPS and c["finished"]:
                colls.setdefault(c["group"], {}).setdefault(r["rank"], []).append(c)
    for per_rank in colls.values():
        n = min(len(v) for v in per_rank.values())
        for k in range(n):
            same = [v[k] for v in per_rank.values()]
            wire = max(c["started"] for c in same)
            ops = {c["op"] for c in same}
            for c in same:
                c["wire"] = min(wire, c["finished"])
                c["mismatch"] = len(ops) > 1 or len(same) < len(c["members"])
    # Sends and recvs: the k-th send from a to b with a tag meets the k-th such recv.
    pairs = {}
    for r in ranks:
        for c in r["calls"]:
            if c["op"] in P2P_OPS and c["finished"] and c["peer"] >= 0:
                me = r["rank"]
                other = c["members"][c["peer"]]
                key = (c["group"], me, other, c["tag"]) if c["op"] == "send" else \
                    (c["group"], other, me, c["tag"])
                pairs.setdefault(key, ([], []))[0 if c["op"] == "send" else 1].append(c)
    for sends, recvs in pairs.values():
        for s, rv in zip(sends, recvs):
            wire = max(s["started"], rv["started"])
            s["wire"], rv["wire"] = min(wire, s["finished"]), min(wire, rv["finished"])
    return by_rank


# ---- the breakdown -----------------------------------------------------------------------

def rank_intervals(r):
    """(compute, wire, sharding wire, waits) interval sets of one rank."""
    waits = union(w for c in r["calls"] for w in c["waits"])
    compute = subtract(union((b, e) for _, b, e in r["spans"]), waits)
    done = [c for c in r["calls"] if c["finished"]]
    wire = union((c["wire"], c["finished"]) for c in done)
    sharding = union((c["wire"], c["finished"]) for c in done if c["op"] in SHARDING_OPS)
    return compute, wire, sharding, waits


def breakdown(ranks):
    """Per rank and step of prepared records: seconds of step, compute, exposed, overlapped,
    bubble and other; and the all-gather/reduce-scatter wire time, and how much of it
    overlapped compute."""
    rows = []
    for r in ranks:
        compute, wire, sharding, waits = rank_intervals(r)
        exposed_all = subtract(wire, compute)
        overlapped_all = intersect(wire, compute)
        bubble_all = subtract(waits, wire)
        for i, (b, e) in enumerate(r["steps"]):
            window = [(b, e)]
            c = length(intersect(compute, window))
            x = length(intersect(exposed_all, window))
            o = length(intersect(overlapped_all, window))
            bb = length(intersect(bubble_all, window))
            s_wire = intersect(sharding, window)
            rows.append({
                "rank": r["rank"], "step": i, "step_s": (e - b) / 1e9, "compute_s": c / 1e9,
                "exposed_s": x / 1e9, "overlapped_s": o / 1e9,
                "bubble_s": bb / 1e9, "other_s": max(0, (e - b) - c - x - bb) / 1e9,
                "sharding_wire_s": length(s_wire) / 1e9,
                "sharding_overlapped_s": length(intersect(s_wire, compute)) / 1e9,
            })
    return rows


def span_medians(ranks):
    """Median seconds of each compute kind over all ranks' spans."""
    kinds = {}
    for r in ranks:
        for k, b, e in r["spans"]:
            kinds.setdefault(k, []).append((e - b) / 1e9)
    return {k: statistics.median(v) for k, v in kinds.items()}


def closed_form_bubble(schedule, p, m, v=1, f=0.0, b=0.0, w=0.0):
    """The schedule's bubble on p ranks with m microbatches, v stages a rank: (seconds idle a
    rank, share of the step). f, b, w: one microbatch's forward, backward (for inputs only where
    the schedule splits it) and backward for weights on one stage, measured. GPipe and 1F1B:
    (p-1)(F+B) idle, (p-1)/(m+p-1) of the step; interleaved 1F1B: (p-1)(F+B)/v idle, (p-1)/(v m)
    of the ideal step; zero-bubble (ZB1P): (p-1)(F+B-2W) idle."""
    if schedule in ("gpipe", "1f1b"):
        return (p - 1) * (f + b), (p - 1) / (m + p - 1)
    if schedule == "interleaved-1f1b":
        return (p - 1) * (f + b) / v, (p - 1) / (v * m + p - 1)
    if schedule == "zero-bubble":
        idle = max(0.0, (p - 1) * (f + b - 2 * w))
        return idle, idle / (idle + m * v * (f + b + w)) if f + b + w else 0.0
    raise ValueError(f"no closed form for schedule {schedule!r}")


def summarize(rows):
    """Medians over steps of the mean over ranks, and the sharding overlap share."""
    steps = sorted({row["step"] for row in rows})
    keys = ("step_s", "compute_s", "exposed_s", "overlapped_s", "bubble_s", "other_s")
    per_step = {k: [] for k in keys}
    for s in steps:
        these = [row for row in rows if row["step"] == s]
        for k in keys:
            per_step[k].append(statistics.mean(row[k] for row in these))
    out = {k: statistics.median(v) if v else 0.0 for k, v in per_step.items()}
    out["steps"] = len(steps)
    out["bubble"] = out["bubble_s"] / out["step_s"] if out["step_s"] else 0.0
    wire = sum(row["sharding_wire_s"] for row in rows)
    out["sharding_overlap"] = (sum(row["sharding_overlapped_s"] for row in rows) / wire
                               if wire else None)
    return out
