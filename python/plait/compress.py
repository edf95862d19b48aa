"""plait.compress: gradient compressors with error feedback (plait/compress.h), and the
compressed allreduce, on float32 NumPy arrays and CPU torch tensors.

    import numpy as np, plait, plait.compress as pc
    c = pc.Compressor("topk", ratio=0.01)   # fp16 bf16 int8 sign topk threshold randomk powersgd
    state = pc.State()                       # one per tensor, kept across steps
    wire = c.compress(grad, state)           # a uint8 array: exactly the wire
    c.decompress(wire, out)                  # out: what the wire carries
    comm = plait.init()
    stats = pc.allreduce(comm, grad, c, state)   # in place: the mean of every rank's compressed grad

With a state, compress keeps what the wire did not carry and adds it to the next call's
values (error feedback). Parameters: levels (int8), chunk (int8, sign), ratio or k (topk,
randomk), threshold, rank and rows (powersgd), seed. Arrays must be C-contiguous float32;
anything else raises plait.InvalidUsageError.
"""

import numpy as np

from ._plait import AutoCompression as _AutoCompression
from ._plait import CompressState as State
from ._plait import Compressor as _Compressor

__all__ = ["METHODS", "AutoCompression", "Compressor", "State", "allreduce"]

METHODS = ("fp16", "bf16", "int8", "sign", "topk", "threshold", "randomk", "powersgd")


def _floats(x):
    """A float32 buffer view of x sharing its memory: NumPy arrays as they are, CPU torch
    tensors through .numpy(). Never a copy: a result written into a copy would be lost."""
    if type(x).__module__.startswith("torch"):
        if x.device.type != "cpu" or not x.is_contiguous():
            raise ValueError("plait.compress takes contiguous CPU tensors")
        return x.detach().numpy()
    return x


class Compressor:
    def __init__(self, method, **params):
        self._c = _Compressor(method, **params)
        self.method = method
        self.params = dict(params)

    def max_wire_bytes(self, count):
        return self._c.max_wire_bytes(count)

    def compress(self, data, state=None):
        """The wire of data's values, as a uint8 array (with state: error feedback)."""
        view = _floats(data)
        n = view.size if hasattr(view, "size") else len(view)
        wire = np.empty(self._c.max_wire_bytes(n), np.uint8)
        used = self._c.compress(view, wire, state)
        return wire[:used]

    def decompress(self, wire, out, accumulate=False):
        """Writes (or adds) the values wire carries into out."""
        self._c.decompress(wire, len(wire), _floats(out), accumulate)
        return out


def allreduce(comm, data, compressor, state=None, average=True):
    """Collective: data becomes, on every rank, the sum (mean, with average) of what the ranks'
    compressed values carry. Returns how it moved: path, wire_bytes and seconds spent
    compressing, communicating and decompressing."""
    return compressor._c.allreduce(comm, _floats(data), state, average)


class AutoCompression:
    """Whether compressing pays, by the cost model (plait/compress_auto.h). Collective when
    made: times the communicator's allreduces (alpha, bandwidth) and each candidate's compress
    + decompress on this core, the same figures on every rank. Then choose(count) is the
    method with the least predicted time, or "none" (an uncompressed allreduce), alike on
    every rank; PLAIT_LOG=info prints each choice once with its predictions. force="none"
    or force=<a candidate> overrides the model.

        auto = pc.AutoCompression(comm, candidates=("fp16", "powersgd"), rank=4)
        stats = auto.allreduce(comm, grad, state)   # stats["path"]: "auto: powersgd, ..."
    """

    def __init__(self, comm, candidates=("fp16", "powersgd"), force="", **params):
        self._a = _AutoCompression(comm, list(candidates), force, **params)

    def choose(self, count):
        return self._a.choose(count)

    def predict(self, method, count):
        return self._a.predict(method, count)

    @property
    def alpha_seconds(self):
        return self._a.alpha_seconds

    @property
    def bytes_per_second(self):
        return self._a.bytes_per_second

    def allreduce(self, comm, data, state=None, average=True):
        """Collective: data (in place) moved by choose(its length); returns the stats."""
        return self._a.allreduce(comm, _floats(data), state, average)
