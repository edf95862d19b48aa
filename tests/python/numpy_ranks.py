"""One rank of the NumPy API tests (started by test_numpy_api.py through `plait run`).

Usage: numpy_ranks.py <case>; exits 0 when every check of the case holds on this rank.
"""
import gc
import sys
import time
import weakref

import numpy as np

import plait

DTYPES = [np.float32, np.float64, np.float16, np.int8, np.uint8, np.int32, np.int64]


def collectives(c):
    n, r = c.size, c.rank
    for dt in DTYPES:
        a = np.full(37, r + 1, dt)
        c.allreduce(a).wait()  # in place
        assert (a == dt(n * (n + 1) // 2)).all(), (dt, a[:3])
        out = np.zeros(37, dt)
        c.allreduce(np.full(37, r + 1, dt), out, op="max").wait()
        assert (out == dt(n)).all(), (dt, out[:3])
    a = np.full(5, float(r), np.float64)
    c.allreduce(a, op="avg").wait()
    assert np.allclose(a, (n - 1) / 2), a
    b = np.arange(10, dtype=np.int32) if r == n - 1 else np.zeros(10, np.int32)
    c.broadcast(b, root=n - 1).wait()
    assert (b == np.arange(10)).all(), b
    out = np.zeros(n * 4, np.int64)
    c.allgather(np.full(4, r, np.int64), out).wait()
    assert (out == np.repeat(np.arange(n), 4)).all(), out
    rs = np.zeros(3, np.float32)
    c.reduce_scatter(np.ones(3 * n, np.float32) * (r + 1), rs).wait()
    assert (rs == n * (n + 1) / 2).all(), rs
    send = np.array([r * 100 + p for p in range(n)], np.int32)
    recv = np.zeros(n, np.int32)
    c.alltoall(send, recv).wait()
    assert (recv == np.array([p * 100 + r for p in range(n)])).all(), recv
    c.barrier().wait()
    # A bytearray works too (u8).
    ba = bytearray([r + 1] * 8)
    c.allreduce(ba).wait()
    assert list(ba) == [n * (n + 1) // 2] * 8, list(ba)


def point_to_point(c):
    n, r = c.size, c.rank
    right, left = (r + 1) % n, (r - 1) % n
    got = [np.zeros(1, np.int32) for _ in range(4)]
    works = [c.recv(g, left, tag=5) for g in got]  # posted before the sends
    for i in range(4):
        c.send(np.array([r * 10 + i], np.int32), right, tag=5).wait()
    for w in works:
        w.wait()
    assert [int(g[0]) for g in got] == [left * 10 + i for i in range(4)], got
    if r == 0:
        seen = set()
        for _ in range(n - 1):
            buf = np.zeros(2, np.int64)
            w = c.recv(buf, plait.ANY_SOURCE, tag=9)
            w.wait()
            assert buf[0] == w.source and w.bytes == 16, (buf, w.source, w.bytes)
            seen.add(w.source)
        assert seen == set(range(1, n)), seen
    else:
        c.send(np.array([r, r], np.int64), 0, tag=9).wait()


def split(c):
    r = c.rank
    sub = c.split(r % 2, key=-r)
    a = np.ones(4, np.float32)
    sub.allreduce(a).wait()
    assert (a == sub.size).all(), a
    assert sub.rank == (sub.size - 1 - r // 2), (sub.rank, sub.size)
    none = c.split(-1 if r == 0 else 0)
    assert (none is None) == (r == 0)


def errors(c):
    try:
        c.allreduce(np.zeros((4, 4), np.float32)[:, 1])
        raise AssertionError("a strided array was accepted")
    except plait.InvalidUsageError as e:
        assert e.category == "invalid usage" and "C-contiguous" in str(e), e
    try:
        c.allreduce(np.zeros(3, np.complex64))
        raise AssertionError("complex64 was accepted")
    except plait.Error as e:
        assert "data type" in str(e), e
    if c.rank == 0:
        w = c.recv(np.zeros(1, np.int32), 1, tag=77, timeout=0.3)  # nobody sends it
        try:
            w.wait()
            raise AssertionError("the receive completed")
        except plait.TimeoutError as e:
            assert "Timed out" in str(e) and e.rank == 0 and e.op == "recv", (str(e), e.op)
            assert isinstance(e, TimeoutError)
    else:
        # Rank 0's timeout aborts the communicator, and the abort reaches this rank.
        try:
            c.recv(np.zeros(1, np.int32), 0, tag=78).wait(timeout=30)
            raise AssertionError("the receive completed")
        except plait.AbortedError as e:
            assert "Timed out" in str(e), str(e)


def dropped_work(c):
    """An operation whose Work object Python dropped keeps its buffer alive until it is done.

    The buffers are referenced only through weakrefs, so the check sees exactly what plait
    holds: before the fix the array was freed while the transport still wrote into it.
    """
    n, r = c.size, c.rank
    count = 1 << 22  # 16 MiB of f32: large enough for the rendezvous path
    sub = c.split(0, key=r)  # this case's own communicator, dropped at the end
    if r == 0:
        a = np.full(count, 1.0, np.float32)
        ref = weakref.ref(a)
        sub.allreduce(a)  # the Work is dropped at once
        del a
        gc.collect()
        assert ref() is not None, "the array was released while its allreduce was in flight"
        wait_for(lambda: (ref() == n).all(), "the allreduce result in the dropped array")
        # Collectives complete in issue order: once the barrier is done, so is the allreduce,
        # and plait lets go of its array.
        sub.barrier().wait()
        gc.collect()
        assert ref() is None, "the array stayed pinned after its allreduce completed"
    else:
        time.sleep(1.0)  # rank 0's allreduce waits for this rank meanwhile
        b = np.full(count, 1.0, np.float32)
        sub.allreduce(b).wait()
        assert (b == n).all(), b[:3]
        sub.barrier().wait()

    # A receive into a dropped buffer-protocol object (a bytearray subclass can be weakly
    # referenced), while the sender holds back.
    class Landing(bytearray):
        pass

    pattern = bytes((i * 7 + 3) % 256 for i in range(1 << 20))
    if r == 0:
        buf = Landing(len(pattern))
        ref = weakref.ref(buf)
        sub.recv(buf, 1, tag=7)
        del buf
        gc.collect()
        assert ref() is not None, "the bytearray was released while its recv was in flight"
        sub.barrier().wait()  # the sender starts only now
        wait_for(lambda: bytes(ref()) == pattern, "the message in the dropped bytearray")
    elif r == 1:
        sub.barrier().wait()
        time.sleep(0.3)
        sub.send(np.frombuffer(pattern, np.uint8), 0, tag=7).wait()
    else:
        sub.barrier().wait()
    # Dropping the communicator ends whatever it still ran; every buffer is let go.
    del sub
    gc.collect()
    if r == 0:
        assert ref() is None, "the bytearray stayed pinned after its communicator was dropped"

    # A receive that never completes: dropping its communicator cancels it in the transport
    # first (no byte lands afterwards) and then releases the buffer.
    sub = c.split(0, key=r)
    if r == 0:
        buf = Landing(64)
        ref = weakref.ref(buf)
        sub.recv(buf, 1, tag=9)  # nobody sends it
        del buf
        gc.collect()
        assert ref() is not None, "the bytearray was released while its recv was pending"
    sub.barrier().wait()
    del sub
    gc.collect()
    if r == 0:
        assert ref() is None, "the pending recv's bytearray outlived its communicator"


def wait_for(check, what, limit_s=60):
    deadline = time.monotonic() + limit_s
    while not check():
        assert time.monotonic() < deadline, f"{what} did not arrive within {limit_s} s"
        time.sleep(0.005)


# Data every rank can derive for every rank: small integers, so every reduction is exact.
FLOAT_DTYPES = [np.float32, np.float64, np.float16]


def values(rank, count, dt, salt=0):
    return ((np.arange(count) * 3 + salt) % 7 + rank + 1).astype(dt)


def reference(op, arrays):
    stack = np.stack(arrays).astype(np.float64)
    got = {"sum": stack.sum(0), "prod": stack.prod(0), "min": stack.min(0), "max": stack.max(0),
           "avg": stack.mean(0)}[op]
    return got.astype(arrays[0].dtype)


def same(op, got, want):
    # avg divides in the data type: allow its last bit of rounding.
    if op == "avg":
        return np.allclose(got.astype(np.float64), want.astype(np.float64), rtol=2e-3)
    return np.array_equal(got, want)


def ops_for(dt):
    # prod and avg only where they are exact and in range (small floats); every type has the rest.
    return ["sum", "min", "max"] + (["prod", "avg"] if dt in FLOAT_DTYPES else [])


def rooted(c):
    """reduce, gather and scatter from every root against a NumPy reference."""
    n, r = c.size, c.rank
    for root in range(n):
        me_root = r == root
        for dt in DTYPES:
            for op in ops_for(dt):
                a = values(r, 11, dt)
                out = np.full(11, 99, dt) if me_root else None
                c.reduce(a, out, op=op, root=root).wait()
                if me_root:
                    want = reference(op, [values(p, 11, dt) for p in range(n)])
                    assert same(op, out, want), (root, dt, op, out, want)
                assert np.array_equal(a, values(r, 11, dt)), "reduce changed its input"
        # In place on the root (out omitted); the other ranks' inputs are only read.
        a = values(r, 6, np.float64, salt=root)
        c.reduce(a, op="avg", root=root).wait()
        if me_root:
            assert np.allclose(a, reference("avg", [values(p, 6, np.float64, salt=root)
                                                    for p in range(n)])), a
        for dt in (np.int32, np.float16, np.uint8):
            g = np.full(n * 4, 7, dt) if me_root else None
            c.gather(values(r, 4, dt, salt=1), g, root=root).wait()
            if me_root:
                want = np.concatenate([values(p, 4, dt, salt=1) for p in range(n)])
                assert np.array_equal(g, want), (root, dt, g)
            src = np.concatenate([values(p, 3, dt, salt=2) for p in range(n)]) if me_root else None
            dst = np.zeros(3, dt)
            c.scatter(src, dst, root=root).wait()
            assert np.array_equal(dst, values(r, 3, dt, salt=2)), (root, dt, dst)
        # Zero elements: nothing moves, every rank still takes part.
        e = np.zeros(0, np.float32)
        c.reduce(e, np.zeros(0, np.float32) if me_root else None, root=root).wait()
        c.gather(e, np.zeros(0, np.float32) if me_root else None, root=root).wait()
        c.scatter(np.zeros(0, np.float32) if me_root else None, e, root=root).wait()
    # A bytearray on the root gathers u8.
    g = bytearray(n * 2) if r == n - 1 else None
    c.gather(bytearray([r, r + 100]), g, root=n - 1).wait()
    if r == n - 1:
        assert list(g) == [v for p in range(n) for v in (p, p + 100)], list(g)


def offsets(counts):
    return [int(x) for x in np.concatenate([[0], np.cumsum(counts)[:-1]])] if counts else []


def v_collectives(c):
    """allgatherv, reduce_scatterv and alltoallv with uneven and zero counts."""
    n, r = c.size, c.rank
    # Count patterns: uneven, with zeros on some ranks, all zero, and one rank holding all.
    patterns = [[(p * 3 + 1) % 4 for p in range(n)], [p % 2 * 5 for p in range(n)],
                [0] * n, [9 if p == n - 1 else 0 for p in range(n)]]
    for counts in patterns:
        total, offs = sum(counts), offsets(counts)
        for dt in (np.float32, np.int64, np.int8, np.float16):
            mine = values(r, counts[r], dt, salt=total)
            out = np.full(total, -1, dt)
            c.allgatherv(mine, out, counts).wait()
            want = np.concatenate([values(p, counts[p], dt, salt=total) for p in range(n)])
            assert np.array_equal(out, want), (counts, dt, out, want)
            # In place: data=None and this rank's block already at its offset.
            inplace = np.full(total, -1, dt)
            inplace[offs[r]:offs[r] + counts[r]] = mine
            c.allgatherv(None, inplace, counts).wait()
            assert np.array_equal(inplace, want), (counts, dt, inplace)
            for op in ops_for(dt):
                full = values(r, total, dt, salt=1)
                got = np.full(counts[r], -1, dt)
                c.reduce_scatterv(full, got, counts, op=op).wait()
                want = reference(op, [values(p, total, dt, salt=1) for p in range(n)])
                assert same(op, got, want[offs[r]:offs[r] + counts[r]]), (counts, dt, op, got)
    # alltoallv: rank s sends (s + 2d + k) % 4 elements to rank d, so counts differ per pair and
    # some are zero; the values name sender, receiver and position.
    for k in range(3):
        def amount(s, d):
            return (s + 2 * d + k) % 4

        def block(s, d):
            return np.arange(amount(s, d), dtype=np.int64) + 1000 * s + 100 * d

        send_counts = [amount(r, d) for d in range(n)]
        recv_counts = [amount(s, r) for s in range(n)]
        data = np.concatenate([block(r, d) for d in range(n)])
        out = np.full(sum(recv_counts), -1, np.int64)
        c.alltoallv(data, out, send_counts, recv_counts).wait()
        assert np.array_equal(out, np.concatenate([block(s, r) for s in range(n)])), (k, out)
        # Explicit displacements: send blocks spaced by one spare element, received blocks laid
        # out in reverse rank order with a one-element gap that must stay untouched.
        send_displs, pos = [], 0
        spaced = np.full(sum(send_counts) + n, -5, np.int64)
        for d in range(n):
            send_displs.append(pos)
            spaced[pos:pos + send_counts[d]] = block(r, d)
            pos += send_counts[d] + 1
        recv_displs, pos = [0] * n, 0
        for s in reversed(range(n)):
            recv_displs[s] = pos
            pos += recv_counts[s] + 1
        out = np.full(pos, -1, np.int64)
        c.alltoallv(spaced, out, send_counts, recv_counts, send_displs=send_displs,
                    recv_displs=recv_displs).wait()
        want = np.full(pos, -1, np.int64)
        for s in range(n):
            want[recv_displs[s]:recv_displs[s] + recv_counts[s]] = block(s, r)
        assert np.array_equal(out, want), (k, out, want)
    # Every count zero.
    z = np.zeros(0, np.float32)
    c.alltoallv(z, np.zeros(0, np.float32), [0] * n, [0] * n).wait()


def expect_invalid(c, op, fn, *words):
    try:
        fn()
    except plait.InvalidUsageError as e:
        text = str(e)
        assert e.op == op, (op, e.op, text)
        assert e.rank == c.rank, (e.rank, text)
        for w in words:
            assert w in text, (w, text)
        return
    raise AssertionError(f"{op}: the bad arguments were accepted ({words})")


def argument_errors(c):
    """Bad arguments to the new collectives raise InvalidUsageError naming rank and op, and
    start nothing: the communicator still works afterwards."""
    n, r = c.size, c.rank
    f32 = np.zeros(4, np.float32)

    def f32s(count):
        return np.zeros(count, np.float32)

    bad = expect_invalid
    bad(c, "reduce", lambda: c.reduce(f32, np.zeros(4, np.int32), root=r), "f32", "i32")
    bad(c, "reduce", lambda: c.reduce(f32, f32s(5), root=r), "4", "5")
    bad(c, "reduce", lambda: c.reduce(f32, root=n), "root")
    bad(c, "gather", lambda: c.gather(f32, None, root=r), "out")
    bad(c, "gather", lambda: c.gather(f32, f32s(4 * n + 1), root=r), str(4 * n))
    bad(c, "scatter", lambda: c.scatter(None, f32, root=r), "data")
    bad(c, "scatter", lambda: c.scatter(f32s(3), f32, root=r), str(4 * n))
    bad(c, "allgatherv", lambda: c.allgatherv(f32, f32s(4 * n), [4] * (n + 1)), str(n))
    bad(c, "allgatherv", lambda: c.allgatherv(f32, f32s(9 * n), [9] * n), "9", "4")
    bad(c, "allgatherv", lambda: c.allgatherv(f32, f32s(4 * n), [-4] + [4] * (n - 1)),
        "negative")
    bad(c, "allgatherv", lambda: c.allgatherv(f32, f32s(3), [4] * n), str(4 * n))
    bad(c, "reduce_scatterv", lambda: c.reduce_scatterv(f32s(2 * n), f32, [2] * n), "2", "4")
    bad(c, "reduce_scatterv", lambda: c.reduce_scatterv(f32, f32s(1), [1] * n, op="xor"), "xor")
    ones = [1] * n
    bad(c, "alltoallv", lambda: c.alltoallv(f32s(n), f32s(n), ones, ones,
                                            send_displs=[0] * (n - 1) + [n]),
        "send", f"rank {n - 1}")
    bad(c, "alltoallv", lambda: c.alltoallv(f32s(n), f32s(n - 1), ones, ones), "recv")
    bad(c, "alltoallv", lambda: c.alltoallv(f32s(n), np.zeros(n, np.float64), ones, ones), "f64")
    a = f32s(n)
    bad(c, "alltoallv", lambda: c.alltoallv(a, a, ones, ones), "distinct")
    ro = f32s(4)
    ro.flags.writeable = False
    bad(c, "allreduce", lambda: c.allreduce(ro), "writable")
    bad(c, "allreduce", lambda: c.allreduce([1.0, 2.0]), "buffer")
    bad(c, "allreduce", lambda: c.allreduce(b"abcd"), "writable")
    bad(c, "broadcast", lambda: c.broadcast(f32, root=-1), "root")
    # Nothing was started above: the next collective pairs up normally on every rank.
    out = np.zeros(n, np.int32)
    c.allgatherv(np.array([r], np.int32), out, ones).wait()
    assert (out == np.arange(n)).all(), out


def shrink_healthy(c):
    # Nobody died: every rank is a survivor, in its old place, and the result works.
    sub, survivors = c.shrink()
    assert survivors == list(range(c.size)), survivors
    assert (sub.rank, sub.size) == (c.rank, c.size), (sub.rank, sub.size)
    a = np.full(6, c.rank + 1, np.int64)
    sub.allreduce(a).wait()
    assert (a == c.size * (c.size + 1) // 2).all(), a


def deadline(c):
    # Random lateness: every rank gets the same contributors and the exact sum over them.
    rng = np.random.default_rng(c.rank)
    dl = plait.DeadlineAllreduce(c, deadline=0.01)
    partial = 0
    for step in range(20):
        time.sleep(rng.uniform(0, 0.03))
        a = np.full(1000, 100 * (c.rank + 1) + step, np.int64)
        info = dl.allreduce(a)
        assert info["step"] == step, info
        expect = sum(100 * (r + 1) + step for r in info["contributors"])
        assert (a == expect).all(), (a[:3], expect, info)
        assert info["contributed"] == (c.rank in info["contributors"]), info
        partial += len(info["contributors"]) < c.size
        seen = np.zeros(c.size * c.size, np.int64)
        mine = np.zeros(c.size, np.int64)
        mine[info["contributors"]] = 1
        c.allgather(mine, seen).wait()
        assert (seen.reshape(c.size, c.size) == mine).all(), seen
    dl.close()
    # Semi-reliable: 1000 values in chunks of 100 (800 bytes), no value may go missing.
    dl = plait.DeadlineAllreduce(c, deadline=0.001, chunk_bytes=800, max_dropped=0.0)
    a = np.full(1000, c.rank + 1, np.int64)
    info = dl.allreduce(a)
    assert len(info["chunk_contributors"]) == 10 and info["dropped_fraction"] == 0, info
    assert (a == c.size * (c.size + 1) // 2).all(), a[:3]
    dl.close()
    try:
        plait.DeadlineAllreduce(c, deadline=0)
        raise AssertionError("a deadline of 0 was accepted")
    except plait.InvalidUsageError as e:
        assert "the deadline must be more than 0" in str(e), e
    print(f"rank {c.rank}: partial steps {partial}", flush=True)


CASES = {"collectives": collectives, "shrink_healthy": shrink_healthy, "deadline": deadline, "point_to_point": point_to_point, "split": split,
         "errors": errors, "dropped_work": dropped_work, "rooted": rooted,
         "v_collectives": v_collectives, "argument_errors": argument_errors}

if __name__ == "__main__":
    comm = plait.init(timeout=60)
    CASES[sys.argv[1]](comm)
    print(f"rank {comm.rank}: {sys.argv[1]} ok", flush=True)
