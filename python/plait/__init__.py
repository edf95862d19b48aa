"""plait: collectives and point-to-point messages for distributed jobs.

    import numpy as np, plait
    comm = plait.init()                  # from the environment (plait run, torchrun, mpirun)
    grad = np.ones(1 << 20, np.float32)
    work = comm.allreduce(grad, op="avg")  # in place, non-blocking
    work.wait()

Every collective takes NumPy arrays (or any C-contiguous buffer-protocol object) and returns
a Work; failures raise plait.Error subclasses carrying the same message, category and
context (rank, peer, op) as the C++ library.
"""

from ._plait import (  # noqa: F401
    ANY_SOURCE,
    AbortedError,
    Communicator,
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
    "Error",
    "InvalidUsageError",
    "RemoteError",
    "SystemError",
    "TimeoutError",
    "Work",
    "init",
]
