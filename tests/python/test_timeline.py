"""plait.torch.timeline's arithmetic (plait/timeline_analysis.py) on hand-made records: what
counts as compute, exposed and overlapped communication, bubble and other; how calls are
matched across ranks; the schedules' closed forms. The recording itself, on real ranks, is
tested in test_parallel_lm.py."""
import pytest

from plait import timeline_analysis as ta


def call(op, group_members, issued, started, finished, waits=(), peer=-1, tag=0):
    return {"op": op, "group": "g", "members": list(group_members), "peer": peer, "tag": tag,
            "bytes": 4, "algorithm": "", "issued": issued, "started": started,
            "finished": finished, "waits": list(waits)}


def test_interval_arithmetic():
    assert ta.union([(5, 7), (0, 2), (1, 3), (7, 8), (9, 9)]) == [(0, 3), (5, 8)]
    assert ta.intersect([(0, 10)], [(2, 3), (5, 12)]) == [(2, 3), (5, 10)]
    assert ta.subtract([(0, 10), (20, 30)], [(2, 3), (8, 22)]) == [(0, 2), (3, 8), (22, 30)]
    assert ta.length([(0, 2), (3, 8)]) == 7


def two_stage_pipeline():
    """Rank 0 computes a forward for 10 and sends; rank 1 waits from 0 for it (its recv goes
    on the wire only when rank 0's send starts, at 10), then computes for 10."""
    rank0 = {"rank": 0, "spans": [("forward", 0, 10)], "steps": [(0, 22)],
             "calls": [call("send", [0, 1], 10, 10, 12, peer=1)]}
    rank1 = {"rank": 1, "spans": [("forward", 12, 22)], "steps": [(0, 22)],
             "calls": [call("recv", [0, 1], 0, 0, 12, waits=[(0, 12)], peer=0)]}
    return [rank0, rank1]


def test_a_recv_waits_for_its_sender_as_bubble_then_for_the_wire_as_exposed():
    rows = {r["rank"]: r for r in ta.breakdown(ta.prepare(two_stage_pipeline()))}
    ns = 1e-9
    assert rows[1]["compute_s"] == pytest.approx(10 * ns)
    assert rows[1]["bubble_s"] == pytest.approx(10 * ns)    # before rank 0 sent
    assert rows[1]["exposed_s"] == pytest.approx(2 * ns)    # on the wire, not computing
    assert rows[1]["other_s"] == pytest.approx(0)
    assert rows[0]["compute_s"] == pytest.approx(10 * ns)
    assert rows[0]["exposed_s"] == pytest.approx(2 * ns)
    assert rows[0]["bubble_s"] == pytest.approx(0)
    assert rows[0]["other_s"] == pytest.approx(10 * ns)     # after its send: nothing recorded


def test_clock_offsets_move_a_rank_onto_rank_0s_clock():
    ranks = two_stage_pipeline()
    r1 = ranks[1]
    shift = 1000
    r1["offset_ns"] = shift  # rank 1's clock reads 1000 more than rank 0's
    r1["spans"] = [(k, b + shift, e + shift) for k, b, e in r1["spans"]]
    r1["steps"] = [(b + shift, e + shift) for b, e in r1["steps"]]
    c = r1["calls"][0]
    c.update(issued=c["issued"] + shift, started=c["started"] + shift,
             finished=c["finished"] + shift, waits=[(b + shift, e + shift) for b, e in c["waits"]])
    rows = {r["rank"]: r for r in ta.breakdown(ta.prepare(ranks))}
    assert rows[1]["bubble_s"] == pytest.approx(10e-9)


def test_a_collective_is_on_the_wire_once_its_last_member_started_it():
    # Rank 1 starts the all-gather 6 late: rank 0's wait until then is bubble, not transfer.
    ranks = [
        {"rank": 0, "spans": [], "steps": [(0, 10)],
         "calls": [call("all_gather_into_tensor", [0, 1], 0, 0, 8, waits=[(0, 8)])]},
        {"rank": 1, "spans": [("backward", 0, 6)], "steps": [(0, 10)],
         "calls": [call("all_gather_into_tensor", [0, 1], 6, 6, 8, waits=[(6, 8)])]},
    ]
    prepared = ta.prepare(ranks)
    assert [c["wire"] for r in prepared for c in r["calls"]] == [6, 6]
    rows = {r["rank"]: r for r in ta.breakdown(prepared)}
    assert rows[0]["bubble_s"] == pytest.approx(6e-9)
    assert rows[0]["exposed_s"] == pytest.approx(2e-9)
    assert rows[0]["sharding_wire_s"] == pytest.approx(2e-9)


def test_communication_under_compute_is_overlapped_and_counted_for_sharding():
    # An all-gather on the wire 2..8 while the rank computes 0..10 (a prefetch): overlapped.
    ranks = [{"rank": 0, "spans": [("forward", 0, 10)], "steps": [(0, 10)],
              "calls": [call("all_gather_into_tensor", [0], 2, 2, 8)]}]
    summary = ta.summarize(ta.breakdown(ta.prepare(ranks)))
    assert summary["overlapped_s"] == pytest.approx(6e-9)
    assert summary["exposed_s"] == 0
    assert summary["sharding_overlap"] == pytest.approx(1.0)


def test_a_wait_inside_a_compute_span_is_not_compute():
    # FSDP's unshard waits inside the forward: 3..7 is exposed, not compute.
    ranks = [{"rank": 0, "spans": [("forward", 0, 10)], "steps": [(0, 10)],
              "calls": [call("all_gather_into_tensor", [0], 3, 3, 7, waits=[(3, 7)])]}]
    row = ta.breakdown(ta.prepare(ranks))[0]
    assert row["compute_s"] == pytest.approx(6e-9)
    assert row["exposed_s"] == pytest.approx(4e-9)


def test_closed_forms_of_the_schedules():
    idle, share = ta.closed_form_bubble("1f1b", p=4, m=8, f=1.0, b=2.0)
    assert share == pytest.approx(3 / 11)
    assert idle == pytest.approx(9.0)
    _, share = ta.closed_form_bubble("gpipe", p=2, m=4)
    assert share == pytest.approx(1 / 5)
    idle, share = ta.closed_form_bubble("interleaved-1f1b", p=4, m=8, v=2, f=1.0, b=2.0)
    assert share == pytest.approx(3 / 19)
    assert idle == pytest.approx(4.5)
    idle, _ = ta.closed_form_bubble("zero-bubble", p=4, m=8, v=2, f=1.0, b=1.0, w=0.75)
    assert idle == pytest.approx(3 * 0.5)
    with pytest.raises(ValueError):
        ta.closed_form_bubble("nonsense", 2, 2)


def test_plait_sim_train_replays_what_the_trace_records(tmp_path):
    """render.perfetto names each call's members, issue time and waits, which is what
    `plait sim train --timeline` replays: rank 1 waits 10 ms for rank 0's activations, then
    computes 10 ms; rank 0 computes 10 ms and sends; on a fast link the step is what they
    recorded, 22 ms."""
    import os
    import re
    import subprocess

    from plait import timeline_render as render
    ms = 1_000_000
    rank0 = {"rank": 0, "spans": [("forward", 0, 10 * ms)], "steps": [(0, 22 * ms)],
             "calls": [call("send", [0, 1], 10 * ms, 10 * ms, 12 * ms, peer=1)]}
    rank1 = {"rank": 1, "spans": [("forward", 12 * ms, 22 * ms)], "steps": [(0, 22 * ms)],
             "calls": [call("recv", [0, 1], 0, 0, 12 * ms, waits=[(0, 12 * ms)], peer=0)]}
    trace = tmp_path / "pp.json"
    render.perfetto(ta.prepare([rank0, rank1]), str(trace))
    out = subprocess.run([os.environ.get("PLAIT_BIN", "plait"), "sim", "train", "--timeline",
                          str(trace), "--topology", "star:hosts=2,rate=100gbit,latency=0us"],
                         capture_output=True, text=True, check=True).stdout
    measured, replayed = map(float, re.search(r"measured ([\d.]+) ms, replayed ([\d.]+) ms",
                                              out).groups())
    assert measured == pytest.approx(22.0)
    assert replayed == pytest.approx(22.0, rel=0.01)
    assert "bubble" in out
