"""plait.torch: plait as a torch.distributed backend.

    import torch.distributed as dist
    import plait.torch                      # registers the backend "plait"
    dist.init_process_group("plait")       # env:// (plait run, torchrun) or any init_method
    # or plait.torch.init_process_group("plait"): the same, without torch 1.13's second of
    # waiting when a rank dials rank 0's store before it listens
    model = torch.nn.parallel.DistributedDataParallel(model)

Every collective of torch.distributed runs on plait's communicator (shared memory between
ranks of one host, TCP between hosts), asynchronously: a call returns at once, its Work is
finished by wait() or is_completed(), and its Future, once asked for, completes on its own
(DDP consumes results that way). ``new_group`` makes a group that shares the default group's
connections. Timeouts (the group's, or a call's) end with an error that says "Timed out".

``plait.torch.hooks.make(method, **params)`` gives DDP communication hooks that compress with
plait's compressors on any backend (see plait/torch_hooks.py); ``plait.torch.checkpoint``
saves and restores training atomically, with checksums (see plait/torch_checkpoint.py);
``plait.torch.timeline.record(...)`` shows where each training step's time goes, per rank
(see plait/torch_timeline.py); ``plait.torch.moe.Dispatcher`` is expert parallelism's
dispatch and combine (see plait/torch_moe.py).
"""

import atexit as _atexit
import datetime as _datetime
import os as _os
import socket as _socket
import time as _time

import torch as _torch
import torch.distributed as _dist

from . import torch_checkpoint as checkpoint  # noqa: F401  (plait.torch.checkpoint.Checkpointer)
from . import torch_hooks as hooks  # noqa: F401  (plait.torch.hooks.make)
from . import torch_moe as moe  # noqa: F401  (plait.torch.moe.Dispatcher)
from . import torch_timeline as timeline  # noqa: F401  (plait.torch.timeline.record)
from ._plait_torch import ProcessGroupPlait, _finish_completion_jobs_at_exit

__all__ = ["ProcessGroupPlait", "backend_of", "checkpoint", "create_process_group", "hooks",
           "init_process_group", "moe", "timeline"]


def init_process_group(backend="plait", init_method=None, timeout=_datetime.timedelta(minutes=30),
                       **kwargs):
    """torch.distributed.init_process_group (the same arguments), with the env:// rendezvous
    made prompt. A rank that dials rank 0's store before it listens is refused, and torch
    1.13 dials again only a second later: every job whose other ranks start before rank 0
    pays that second. Here such a rank waits until the store accepts, then lets torch dial."""
    if init_method in (None, "env://") and "store" not in kwargs:
        _wait_for_rank0_store(timeout)
    _dist.init_process_group(backend, init_method=init_method, timeout=timeout, **kwargs)


def _wait_for_rank0_store(timeout):
    env = _os.environ
    if env.get("RANK", "0") == "0" or "MASTER_ADDR" not in env or "MASTER_PORT" not in env:
        return
    address = (env["MASTER_ADDR"], int(env["MASTER_PORT"]))
    deadline = _time.monotonic() + timeout.total_seconds()
    while _time.monotonic() < deadline:  # past it, torch's own dial says what failed
        try:
            # Accepted and closed at once: torch's store server drops a connection that
            # closes without a request.
            with _socket.create_connection(address, timeout=1.0):
                return
        except OSError:
            _time.sleep(0.005)


def backend_of(group=None):
    """The ProcessGroupPlait behind a torch ProcessGroup (the default group when None), or
    None when its CPU backend is not plait. torch 2.x hands users a ProcessGroup that
    dispatches each call to its backend by device."""
    group = group or _dist.distributed_c10d._get_default_group()
    try:
        backend = group._get_backend(_torch.device("cpu"))
    except RuntimeError:
        return None
    return backend if isinstance(backend, ProcessGroupPlait) else None


def create_process_group(store, rank, size, timeout):
    """The backend's creator: a plait process group over torch's rendezvous ``store``.

    Collective over the ``size`` ranks that share ``store``; ``timeout`` (a timedelta) bounds
    the creation and every operation that does not set its own.
    """
    return ProcessGroupPlait.create(store, rank, size, timeout)


def _create(options, pg_options=None):
    # torch calls this with the extended argument structure, which names the new group's
    # members: a group made by new_group then shares the default plait group's connections
    # (only the members call here, so this is not a collective over the whole world).
    ranks = list(options.global_ranks_in_group)
    if ranks:
        default = backend_of(_dist.distributed_c10d._get_default_group())
        if default is not None:
            return default.subgroup(ranks, options.timeout)
    return create_process_group(options.store, options.group_rank, options.group_size,
                                options.timeout)


if "PLAIT" not in _dist.Backend._plugins:
    _dist.Backend.register_backend("plait", _create, extended_api=True, devices=["cpu"])

# The groups' completion threads finish calls and run future callbacks, which take the GIL
# (a group destroyed in its own completion thread even leaves the thread to finish its queue
# on its own): the interpreter must not finalize while one runs (a thread that takes the GIL
# then is killed, and the process aborts), and none may start after. Hooks run last
# registered first, so those of the program, registered after this import, still run before
# this one.
_atexit.register(_finish_completion_jobs_at_exit)
