"""plait.torch.timeline's pictures: a Chrome/Perfetto trace and a Gantt chart of every rank.

Both take the per-rank records of timeline_analysis (already matched: each call has "wire").
"""
import json

from . import timeline_analysis as ta

COLOURS = {
    "forward": "#4c78a8", "backward": "#f58518", "backward_input": "#f58518",
    "backward_weight": "#e45756", "optimizer": "#54a24b", "loss": "#72b7b2",
    "exposed": "#b22222", "overlapped": "#9d9d9d", "bubble": "#f2e394",
}


def perfetto(ranks, path):
    """Writes a trace that ui.perfetto.dev and chrome://tracing open: one process per rank,
    with a compute track, a track per call kind (from start to finish, the wire time in its
    arguments) and a track of the waits."""
    t0 = min(b for r in ranks for b, _ in r["steps"]) if any(r["steps"] for r in ranks) else 0
    us = (lambda t: (t - t0) / 1e3)
    events = []
    for r in ranks:
        pid = r["rank"]
        events.append({"ph": "M", "name": "process_name", "pid": pid,
                       "args": {"name": f"rank {pid}"}})
        for tid, name in ((0, "compute"), (1, "collectives"), (2, "send/recv"), (3, "waits"),
                          (4, "steps")):
            events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                           "args": {"name": name}})
        for i, (b, e) in enumerate(r["steps"]):
            events.append({"ph": "X", "name": f"step {i}", "pid": pid, "tid": 4, "ts": us(b),
                           "dur": (e - b) / 1e3})
        for kind, b, e in r["spans"]:
            events.append({"ph": "X", "name": kind, "pid": pid, "tid": 0, "ts": us(b),
                           "dur": (e - b) / 1e3})
        for c in r["calls"]:
            if not c["finished"]:
                continue
            p2p = c["op"] in ta.P2P_OPS
            args = {"bytes": c["bytes"], "group": c["group"], "algorithm": c["algorithm"],
                    "queued_us": (c["started"] - c["issued"]) / 1e3,
                    "waiting_for_peers_us": (c["wire"] - c["started"]) / 1e3,
                    "on_wire_us": (c["finished"] - c["wire"]) / 1e3,
                    "waited_us": sum(e - b for b, e in c["waits"]) / 1e3,
                    # What `plait sim train --timeline` replays: the group's global ranks,
                    # when the call was issued and this rank's waits for it.
                    "members": c["members"], "issued": us(c["issued"]),
                    "waits": [[us(b), (e - b) / 1e3] for b, e in c["waits"]]}
            if p2p and c["peer"] >= 0:
                args["peer"] = c["members"][c["peer"]]
                args["tag"] = c["tag"]
            events.append({"ph": "X", "name": c["op"], "pid": pid, "tid": 2 if p2p else 1,
                           "ts": us(c["started"]), "dur": (c["finished"] - c["started"]) / 1e3,
                           "args": args})
            for b, e in c["waits"]:
                events.append({"ph": "X", "name": f"wait {c['op']}", "pid": pid, "tid": 3,
                               "ts": us(b), "dur": (e - b) / 1e3})
    with open(path, "w") as f:
        json.dump({"traceEvents": events, "displayTimeUnit": "ms"}, f)


def gantt(ranks, path, title, steps=2):
    """A PNG of the last `steps` steps: a row per rank; compute coloured by kind, exposed
    communication in red, waiting for a peer (the bubble) in pale yellow, the communication that
    overlapped compute as a grey band under the row, other host work left white."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    t0 = min(r["steps"][-steps][0] if len(r["steps"]) >= steps else r["steps"][0][0]
             for r in ranks if r["steps"])
    t1 = max(e for r in ranks for _, e in r["steps"])
    ms = (lambda t: (t - t0) / 1e6)
    fig, ax = plt.subplots(figsize=(12, 0.45 * len(ranks) + 1.5))
    for r in ranks:
        y = r["rank"]
        compute, wire, _, waits = ta.rank_intervals(r)
        for kind, b, e in r["spans"]:
            # Compute spans less the waits inside them, coloured by kind.
            for lo, hi in ta.subtract([(b, e)], waits):
                ax.broken_barh([(ms(lo), ms(hi) - ms(lo))], (y - 0.35, 0.6),
                               facecolors=COLOURS.get(kind, "#888888"))
        bubble = ta.subtract(waits, wire)
        ax.broken_barh([(ms(b), ms(e) - ms(b)) for b, e in bubble], (y - 0.35, 0.6),
                       facecolors=COLOURS["bubble"])
        exposed = ta.subtract(wire, compute)
        ax.broken_barh([(ms(b), ms(e) - ms(b)) for b, e in exposed], (y - 0.35, 0.6),
                       facecolors=COLOURS["exposed"])
        overlapped = ta.intersect(wire, compute)
        ax.broken_barh([(ms(b), ms(e) - ms(b)) for b, e in overlapped], (y + 0.27, 0.1),
                       facecolors=COLOURS["overlapped"])
        for b, _ in r["steps"]:
            ax.axvline(ms(b), color="#cccccc", linewidth=0.5, zorder=0)
    kinds = sorted({k for r in ranks for k, _, _ in r["spans"]})
    handles = [Patch(color=COLOURS.get(k, "#888888"), label=k) for k in kinds]
    handles += [Patch(color=COLOURS["exposed"], label="exposed communication"),
                Patch(color=COLOURS["overlapped"], label="overlapped communication"),
                Patch(color=COLOURS["bubble"], label="bubble (waiting for a peer)"),
                Patch(facecolor="white", edgecolor="#999999", label="other host work")]
    ax.set_yticks([r["rank"] for r in ranks], [f"rank {r['rank']}" for r in ranks])
    ax.set_ylim(max(r["rank"] for r in ranks) + 0.7, -0.7)
    ax.set_xlim(0, ms(t1))  # earlier steps fall left of 0, out of the picture
    ax.set_xlabel("ms")
    ax.set_title(title)
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8,
              frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
