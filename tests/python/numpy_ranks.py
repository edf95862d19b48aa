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


CASES = {"collectives": collectives, "point_to_point": point_to_point, "split": split,
         "errors": errors, "dropped_work": dropped_work}

if __name__ == "__main__":
    comm = plait.init(timeout=60)
    CASES[sys.argv[1]](comm)
    print(f"rank {comm.rank}: {sys.argv[1]} ok", flush=True)
