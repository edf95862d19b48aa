"""plait: collectives and point-to-point messages for distributed jobs.

    import numpy as np, plait
    comm = plait.init()                  # from the environment (plait run, torchrun, mpirun)
    grad = np.ones(1 << 20, np.float32)
    work = comm.allreduce(grad, op="avg")  # in place, non-blocking
    work.wait()

A Communicator has allreduce, reduce, broadcast, allgather, allgatherv, reduce_scatter,
reduce_scatterv, alltoall, alltoallv, gather, scatter, barrier, send, recv, split, shrink (the
survivors of a dead rank go on without it) and abort.
Every call takes NumPy arrays (or any C-contiguous buffer-protocol object) and returns a Work
at once; the buffers stay pinned until the operation is done, even if the Work is dropped.
Failures raise plait.Error subclasses carrying the same message, category and context (rank,
peer, op) as the C++ library; bad arguments raise plait.InvalidUsageError and start nothing.

plait.DeadlineAllreduce(comm, deadline=0.02) reduces each step over the ranks whose values
reached the aggregator by the deadline (every rank gets the same values and contributor set;
late="carry" adds a late rank's values to its next step). Torch tensors: pass tensor.numpy().

plait.rdma has the one-sided API (registered windows, put/get/atomics, completion queues);
plait.ps the parameter server; plait.compress the gradient compressors and the compressed
allreduce.
"""

from ._plait import (  # noqa: F401
    ANY_SOURCE,
    AbortedError,
    Communicator,
    DeadlineAllreduce,
    Error,
    InvalidUsageError,
    RemoteError,
    SystemError,
    TimeoutError,
    Work,
    init,
)

__all__ = [
    "ANY_SOURCE",
    "AbortedError",
    "Communicator",
    "DeadlineAllreduce",
    "Error",
    "InvalidUsageError",
    "RemoteError",
    "SystemError",
    "TimeoutError",
    "Work",
    "init",
]
