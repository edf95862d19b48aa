"""One rank of a torch.distributed job on the "plait" backend: the life of its Work objects.

Run by test_torch_backend.py under `plait run -n N` (like torch_ranks.py): futures, calls that
Python drops, groups dropped in their own completion thread (and that thread at exit), bounded
waits.
"""
import atexit
import datetime
import os
import sys
import threading
import time

import torch
import torch.distributed as dist

import plait.torch  # noqa: F401  (registers the backend)
import rank_stacks  # noqa: F401  (stacks on SIGTERM)


def futures():
    """A Work's Future, whenever it is asked for: after the call is over it comes back
    completed, before it completes with the call (after the copy back into a strided tensor),
    and a failed call fails it either way."""
    me, n = dist.get_rank(), dist.get_world_size()
    want = float(n * (n + 1) // 2)
    t = torch.full((3,), float(me + 1))
    work = dist.all_reduce(t, async_op=True)
    work.wait()
    future = work.get_future()
    assert future.done() and torch.equal(future.value()[0], torch.full((3,), want)), \
        future.value()
    assert work.get_future().done()  # asked again: the same, completed Future
    for late in range(n):  # each rank in turn arrives late: the others ask before the end
        if me == late:
            time.sleep(0.2)
        base = torch.zeros(5, 2)
        strided = base[:, 0]
        strided.fill_(float(me + 1))
        work = dist.all_reduce(strided, async_op=True)
        doubled = work.get_future().then(lambda f: f.value()[0] * 2)
        assert torch.equal(doubled.wait(), torch.full((5,), 2 * want)), doubled.value()
        assert work.is_completed() and (base[:, 1] == 0).all()
    # Every rank but 0 stays away: rank 0's calls on the short group time out.
    short = dist.new_group(timeout=datetime.timedelta(seconds=2))
    if me == 0:
        asked_before = dist.irecv(torch.zeros(2), 1, group=short)
        future = asked_before.get_future()
        try:
            future.wait()
        except RuntimeError as e:
            assert "Timed out" in str(e), e
        else:
            raise AssertionError("a call that timed out completed its Future")
        failed = dist.irecv(torch.zeros(2), 1, group=short)
        try:
            failed.wait()
        except RuntimeError:
            pass
        else:
            raise AssertionError("a call on an aborted group succeeded")
        try:
            failed.get_future().wait()  # made after the call failed
        except RuntimeError:
            pass
        else:
            raise AssertionError("the Future of a failed call completed")
        # Nobody waits on this one: the (deprecated) is_success() still sees it fail.
        unwatched = dist.irecv(torch.zeros(2), 1, group=short)
        deadline = time.monotonic() + 30
        while unwatched.is_success():
            assert time.monotonic() < deadline, "a failed call never stopped is_success()"
            time.sleep(0.01)
    else:
        time.sleep(6)
    print(f"rank {me}: futures ok", flush=True)


def dropped_call_keeps_its_buffer():
    """Python drops a call's Work and tensor while the call waits for late ranks: plait writes
    the result into that tensor's memory when they arrive, so the memory must not go back to
    the allocator before (new tensors of the same size, made meanwhile, would be overwritten).
    """
    me, n = dist.get_rank(), dist.get_world_size()
    count = 4096  # small: the allocator hands a freed block of this size out again at once
    for _ in range(10):
        if me == 0:
            dist.all_reduce(torch.full((count,), 1.0), async_op=True)  # Work and tensor dropped
            canaries = [torch.full((count,), -7.0) for _ in range(8)]
        else:
            time.sleep(0.05)  # rank 0 has dropped its call by now
            t = torch.full((count,), 1.0)
            dist.all_reduce(t)
            assert (t == n).all(), t
        dist.barrier()  # after the all_reduce, in issue order: its result has landed
        if me == 0:
            for c in canaries:
                assert (c == -7.0).all(), f"a dropped call wrote into reused memory: {c}"
    print(f"rank {me}: dropped_call_keeps_its_buffer ok", flush=True)


def group_dropped_in_its_completion_thread():
    """A group whose last reference goes in its own completion thread, with calls still queued.

    Each round makes a group, queues several all_reduces whose Work handles Python drops at
    once, and hands the group to the last call's future callback, the only reference left.
    The callback runs in the group's completion thread, so the group is destroyed there, and
    the thread then drops the last PlaitWork, which held the last reference to the
    CompletionThread itself. Ranks take turns to arrive late, so the callbacks are registered
    before the calls complete. test_torch_backend.py runs this with freed memory poisoned
    (MALLOC_PERTURB_, no tcache): a thread that touches its freed mutex then dies of EINVAL.
    """
    me, n = dist.get_rank(), dist.get_world_size()
    default = plait.torch.backend_of()
    rounds, calls = 12, 4
    want = float(n * (n + 1) // 2)
    results, groups_gone, tensors = [], [], []

    class Gone:
        """Dropped right after the group it travels with (a tuple drops its items last first),
        so by the time it says so, the group's destructor has returned."""

        def __del__(self):
            groups_gone.append(1)

    for i in range(rounds):
        pg = default.subgroup(list(range(n)), datetime.timedelta(seconds=60))
        if me == i % n:
            time.sleep(0.1)  # the others' calls wait for this rank
        # Python keeps the tensors, so dropping them in the completion thread needs no GIL.
        tensors.append([torch.full((4096,), float(me + 1)) for _ in range(calls)])
        futures = [pg.allreduce([t]).get_future() for t in tensors[-1]]
        for f in futures[:-1]:
            f.then(lambda f: results.append(f.value()[0][0].item()))
        futures[-1].then(lambda f, keep=(Gone(), pg): results.append(f.value()[0][0].item()))
        del pg, futures, f
    deadline = time.monotonic() + 60
    # Every group is destroyed before this rank moves on to exit: a thread that still runs a
    # group's destructor when the interpreter finalizes cannot take the GIL back.
    while len(results) < rounds * calls or len(groups_gone) < rounds:
        assert time.monotonic() < deadline, \
            f"{len(results)} of {rounds * calls} calls done, {len(groups_gone)} groups gone"
        time.sleep(0.01)
    assert results == [want] * (rounds * calls), results
    print(f"rank {me}: group_dropped_in_its_completion_thread ok", flush=True)


def _pair_group_and_exit_event():
    """(rank, a group of ranks 0 and 1, an Event set when Python's exit begins)."""
    default = plait.torch.backend_of()
    pg = default.subgroup([0, 1], datetime.timedelta(seconds=60))
    exiting = threading.Event()
    atexit.register(exiting.set)  # runs before plait.torch's hook: hooks run last in, first out
    return dist.get_rank(), pg, exiting


def orphan_outlives_main():
    """A group dropped in its own completion thread leaves the thread to finish the calls
    queued behind it on its own, and they run Python: the process must not finalize before.

    Rank 0's call has two future callbacks, run in order in the group's completion thread:
    the first holds the last reference to the group, so the thread destroys the group and goes
    on as an orphan; the second then waits until the main thread is exiting, and only then
    takes the GIL back. Before the fix nothing waited for the orphan: it took the GIL while the
    interpreter finalized, and Python ended it with pthread_exit, which aborted the process
    ("terminate called without an active exception") or left its last line unprinted.
    """
    me, pg, exiting = _pair_group_and_exit_event()
    if me == 0:
        group_gone = threading.Event()

        class Gone:
            """Dropped right after the group it travels with: the group's destructor is over."""

            def __del__(self):
                group_gone.set()

        def after_exit_began(f):
            exiting.wait()
            print(f"rank {me}: the orphan finished its call after exit began", flush=True)

        # Rank 1 sends only once rank 0 has dropped its own reference: the call completes in
        # the completion thread, never in this one.
        future = pg.recv([torch.zeros(4)], 1, 0).get_future()
        # The first callback lets go of the group itself: torch 2.x keeps a future's
        # callbacks (and what they capture) until all of them have run. A list drops its
        # items last first, so Gone goes after the group.
        holder = [Gone(), pg]
        future.then(lambda f: holder.clear())
        future.then(after_exit_began)
        del pg, future
        dist.barrier()
        assert group_gone.wait(timeout=60), "the group was never destroyed"
    else:
        dist.barrier()
        pg.send([torch.ones(4)], 0, 0).wait()
    print(f"rank {me}: orphan_outlives_main ok", flush=True)


_KEEP_TILL_FINALIZE = []


def callback_outlives_main():
    """A future callback still running in a live group's completion thread when the main
    thread exits takes the GIL again after exit began: the process must not finalize before
    it is done. Before the fix only orphans (threads of destroyed groups) were waited for, and
    such a callback aborted the process ("terminate called without an active exception"; CI,
    2026-11-28, after `futures` had printed its "ok").
    """
    me, pg, exiting = _pair_group_and_exit_event()
    # Kept until the interpreter finalizes: destroyed before, it would wait for the callback.
    _KEEP_TILL_FINALIZE.append(pg)
    if me == 0:
        started = threading.Event()

        def after_exit_began(f):
            started.set()
            exiting.wait()
            time.sleep(0.3)  # lets the GIL go and takes it back, well after exit began
            print(f"rank {me}: the callback finished after exit began", flush=True)

        future = pg.recv([torch.zeros(4)], 1, 0).get_future()
        future.then(after_exit_began)
        dist.barrier()
        assert started.wait(timeout=60), "the callback never ran"
    else:
        dist.barrier()
        pg.send([torch.ones(4)], 0, 0).wait()
    print(f"rank {me}: callback_outlives_main ok", flush=True)


def wait_bounded():
    """Work.wait(timeout) gives up on time, with an error naming the rank and the call, even
    while another thread is finishing the call (here the completion thread copies a large
    result into a strided tensor); is_completed() does not block meanwhile.

    Before the fix both calls blocked until the copy was over, then reported the call done,
    so no attempt ever saw "not completed" and a timeout.
    """
    me, n = dist.get_rank(), dist.get_world_size()
    want = float(n * (n + 1) // 2)
    rows = 1 << 24  # 64 MiB of f32 landing through a staging buffer: the copy takes ~30 ms
    caught = 0
    for attempt in range(8):  # as many calls on every rank, whatever each one observes
        base = torch.zeros(rows, 2)
        t = base[:, 0]  # not contiguous: plait reduces a copy, then copies it back into t
        t.fill_(float(me + 1))
        w = dist.all_reduce(t, async_op=True)  # nobody waits: the completion thread finishes it
        deadline = time.monotonic() + 60
        while t[0].item() != want:  # the copy back has begun
            assert time.monotonic() < deadline, "the all_reduce result never arrived"
        if t[-1].item() == want:
            w.wait()
            continue  # the copy was over before we looked: try again
        start = time.monotonic()
        done = w.is_completed()
        probe_s = time.monotonic() - start
        try:
            w.wait(timeout=datetime.timedelta(milliseconds=1))
            outcome = None
        except RuntimeError as e:
            outcome = str(e)
        waited_s = time.monotonic() - start - probe_s
        w.wait()
        assert (t == want).all() and (base[:, 1] == 0).all()
        assert probe_s < 0.5, f"is_completed() blocked for {probe_s:.3f} s"
        assert waited_s < 0.5, f"wait(1 ms) took {waited_s:.3f} s"
        if outcome is not None:
            assert "Timed out" in outcome and f"rank {me}" in outcome and "all_reduce" in outcome, \
                outcome
        if not done and outcome is not None:
            caught += 1
    assert caught > 0, "is_completed() and wait(1 ms) never answered while the copy ran"
    print(f"rank {me}: wait_bounded ok ({caught} probes during the copy)", flush=True)


if __name__ == "__main__":
    case = sys.argv[1]
    timeout = float(os.environ.get("CASE_TIMEOUT_S", "120"))
    dist.init_process_group("plait", timeout=datetime.timedelta(seconds=timeout))
    globals()[case]()
    if case != "futures":  # its short group failed: nothing to shut down in order
        dist.destroy_process_group()
