"""The thread that moves a DDP communication hook's buckets (plait.torch.hooks).

DDP calls a comm hook from the autograd thread as each bucket's gradients are ready, in the
bucket order every rank shares, and waits for the Futures only when backward ends. A hook
that communicates before it returns holds backward up at every bucket: nothing overlaps. So
a hook hands its bucket's work (compress, collectives, decompress) to the state's
BucketThread and returns the Future that thread completes, with the work's result or with
the exception it raised.

One thread runs a state's buckets one at a time, in the order the hook handed them over:
every rank then issues its collectives in the same order. (Two threads, or a collective
started from a Future's callback on whatever thread completes it, could issue two buckets'
collectives in different orders on two ranks, and the collectives would mismatch: torch's
PowerSGD hook does that, and on gloo with several buckets it aborts or hangs.)

A bucket that fails fails the rest of its step's buckets at once (they are not started: a
collective that failed on this rank would leave the next ones waiting for the group's
timeout each). The thread is a daemon. It is stopped when its state is collected, and at exit: buckets
handed over and not started then fail ("exiting"); the one it runs is waited for (its
collectives end by the group's timeout at the latest). A profiler that runs when a bucket
is handed over sees a range, `label`, from then until its Future completes (the work
itself runs on this thread, which torch's thread-local profiler does not see).
"""

import atexit
import queue
import threading
import weakref

import torch

__all__ = ["BucketThread"]


class BucketThread:
    def __init__(self, owner, name):
        """A thread for `owner` (a hook state): stopped when `owner` is collected."""
        self._jobs = queue.SimpleQueue()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=_serve, args=(self._jobs, self._stopping), name=name,
                                        daemon=True)
        self._thread.start()
        # At exit before plait.torch's own handler (registered earlier, so run later), which
        # lets the backend's completion threads run no more jobs.
        atexit.register(self.close)
        finalizer = weakref.finalize(owner, self.close)
        finalizer.atexit = False  # atexit runs close() already

    def submit(self, job, label, ends_step):
        """Runs job() on the thread after the work handed over before it; returns a Future
        of its result (or its exception), not yet complete. `ends_step`: the step's last
        bucket (DDP's bucket.is_last())."""
        if self._stopping.is_set():
            raise RuntimeError("plait hooks: the bucket thread was stopped (the process is exiting)")
        fut = torch.futures.Future()
        # The thread completes `fut` with (True, result) or (False, exception); the Future
        # returned is an error when the work failed. (Future.set_exception would complete
        # it with the exception as its value: DDP then fails to take it for a tensor and
        # says "Unable to cast".)
        result = fut.then(_unwrap)
        if torch.autograd._profiler_enabled():
            with torch.autograd.profiler.record_function(label) as rf:
                result = rf._call_end_callbacks_on_future(result)
        self._jobs.put((job, fut, ends_step))
        return result

    def close(self):
        """Fails the work not started, waits for the work that runs, ends the thread. Safe to
        call more than once, and from the thread itself (then it does not wait)."""
        atexit.unregister(self.close)
        if self._stopping.is_set():
            return
        self._stopping.set()
        self._jobs.put(None)
        if threading.current_thread() is not self._thread:
            self._thread.join()


def _unwrap(fut):
    ok, value = fut.value()
    if not ok:
        raise value
    return value


def _serve(jobs, stopping):
    failed = None  # why an earlier bucket of this step failed
    while True:
        item = jobs.get()
        if item is None:
            return
        job, fut, ends_step = item
        if stopping.is_set():
            fut.set_result((False, RuntimeError("plait hooks: the process is exiting; this bucket was not reduced")))
        elif failed is not None:
            fut.set_result((False, RuntimeError(f"plait hooks: not reduced: an earlier bucket of this step "
                                                f"failed: {failed}")))
        else:
            try:
                result = job()
            except BaseException as e:  # noqa: BLE001  (every failure goes to the bucket's Future)
                failed = f"{type(e).__name__}: {e}"
                fut.set_result((False, e))
            else:
                fut.set_result((True, result))
        if ends_step:
            failed = None
        del job, fut, item  # the state and the bucket go as soon as they are done with
