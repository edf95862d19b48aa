"""plait.rdma: one-sided communication on NumPy arrays (plait/rdma.h).

    import numpy as np, plait.rdma as rdma
    fabric = rdma.Fabric()                       # collective, from the launcher's environment
    win = rdma.Window(fabric, np.zeros(1024, np.float32))   # collective: every rank's array
    win.put((fabric.rank + 1) % fabric.size, np.ones(16, np.float32), offset=8, imm=7)
    win.fence()                                  # everybody's puts have landed
    counter = rdma.Window(fabric, np.zeros(1, np.int64), access="a")
    old = counter.fetch_add(0, 0, 1)             # atomically, on rank 0's word

A window on memory the fabric allocated (over UCX, memory its shared-memory transports map
into the peers: a put is then a memcpy, not an emulated access) is one call:

    win = rdma.Window.allocate(fabric, 1024, np.float32)

Fabric, CompletionQueue, Completion, Region and RemoteKey are the low-level API: register any
buffer, exchange descriptors, and issue write/read/fetch_add/compare_swap/send/recv with a
completion queue of your own. A refused access (unknown key, out of bounds, no access) fails
the initiator's operation with plait.InvalidUsageError and leaves the target's memory as it was.
"""

from ._plait import Completion, CompletionQueue, Fabric, Memory, Region, RemoteKey  # noqa: F401

__all__ = ["Completion", "CompletionQueue", "Fabric", "Memory", "Region", "RemoteKey", "Window",
           "allocate"]


def allocate(fabric, shape, dtype):
    """A zeroed C-contiguous NumPy array in memory `fabric` allocated (Fabric.allocate).

    The memory lives as long as the array (or a view of it, or a Region registered on it);
    drop it before the fabric, else UCX's memory stays mapped until the process exits.
    """
    import numpy as np

    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.frombuffer(fabric.allocate(max(nbytes, 1)), dtype=np.uint8)[:nbytes]
    return raw.view(dtype).reshape(shape)


class Window:
    """A NumPy array that every rank exposes to the others (creating one is collective).

    Offsets count elements of the array's dtype; atomics take the index of a 64-bit word and
    need an int64 or uint64 window registered with access containing "a". One-sided operations
    go to other ranks (the providers do not connect a rank to itself): use the array directly
    for this rank's own window. Every operation
    waits for its own completion (at most `timeout` seconds) and raises plait.Error if it
    failed. Peers' writes with an immediate are reported to `imm_queue` when one is given.
    """

    def __init__(self, fabric, array, access="rw", imm_queue=None, timeout=60.0):
        if not array.flags["C_CONTIGUOUS"]:
            raise ValueError("a window needs a C-contiguous array")
        self.fabric = fabric
        self.array = array
        self.timeout = timeout
        self.region = fabric.register(array, access)
        self.queue = fabric.completion_queue()
        if imm_queue is not None:  # before the exchange: a peer may write right after it
            fabric.set_imm_queue(imm_queue)
        self.keys = [k[0] for k in fabric.exchange([self.region.key])]

    @classmethod
    def allocate(cls, fabric, shape, dtype, access="rw", imm_queue=None, timeout=60.0):
        """A window on a zeroed array in memory the fabric allocated (collective)."""
        return cls(fabric, allocate(fabric, shape, dtype), access, imm_queue, timeout)

    def _finish(self, what):
        c = self.queue.wait(self.timeout)
        if c is None:
            raise TimeoutError(f"window {what}: no completion within {self.timeout} s")
        c.raise_if_failed()
        return c

    def put(self, peer, data, offset=0, imm=None):
        """Writes data into the peer's window at `offset` elements."""
        self.fabric.write(peer, data, self.keys[peer], offset * self.array.itemsize, imm, self.queue)
        self._finish("put")

    def get(self, peer, out, offset=0):
        """Reads len(out) elements of the peer's window at `offset` into out."""
        self.fabric.read(peer, out, self.keys[peer], offset * self.array.itemsize, self.queue)
        self._finish("get")

    def fetch_add(self, peer, index, value):
        """Adds value to the peer's 64-bit word `index`; returns its old value."""
        self.fabric.fetch_add(peer, self.keys[peer], index * 8, value, self.queue)
        return self._finish("fetch_add").value

    def compare_swap(self, peer, index, expected, desired):
        """Sets the peer's word `index` to desired if it holds expected; returns the old value."""
        self.fabric.compare_swap(peer, self.keys[peer], index * 8, expected, desired, self.queue)
        return self._finish("compare_swap").value

    def fence(self):
        """Collective: returns once every rank called it (so every put before it has landed)."""
        self.fabric.exchange([])

    def close(self):
        """From its return no peer accesses this rank's array."""
        self.region.deregister()
