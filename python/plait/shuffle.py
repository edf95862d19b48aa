"""plait.shuffle: move records between the ranks of a job by key (plait/shuffle.h).

    import numpy as np, plait.shuffle
    sh = plait.shuffle.Shuffle()                    # collective, from the launcher's environment
    rows = np.zeros(1000, dtype=[("key", "u8"), ("value", "f4", 3)])
    mine = sh.by_key(rows, "key")                   # every row whose key hashes to this rank
    mine = sh.exchange(rows, destinations)          # or say where each row goes (int array)

Records are the elements of a 1-D NumPy array of any fixed-size dtype (structured arrays
included), or the records_bytes-byte pieces of a bytes-like object. Data moves with one-sided
reads of each mapper's registered memory ("pull", the default) or writes into the reducer's
("push"). Every rank must call exchange() (or by_key()) the same number of times. A rank that
dies fails the others' exchange with plait.RemoteError naming it.

More data than memory: give exchange() a list of runs (arrays, e.g. chunks read from a file)
with a list of destination arrays, and the Shuffle a memory_bytes budget: runs past it are
spilled to an unlinked file in spill_dir and served from there, and reducers merge within it.
With key_bytes=K each run is sorted by the first K bytes of its records (memcmp order: byte
strings, or big-endian integers such as dtype ">u8") and every rank receives its records
merged in that order:

    sh = plait.shuffle.Shuffle(memory_bytes=64 << 20)
    mine = sh.exchange(runs, [range_of(r["key"]) for r in runs], key_bytes=8)  # sorted
"""

import numpy as np

from . import _plait

__all__ = ["Shuffle", "hash_partitions"]


def hash_partitions(keys, parts):
    """The partition (0 .. parts-1) of each key: a fixed hash, the same on every rank and run.

    keys: a 1-D NumPy array (integers, or any fixed-size dtype, hashed by its bytes).
    """
    keys = np.ascontiguousarray(keys)
    if keys.dtype.kind in "iub":
        h = keys.astype(np.uint64)
    else:  # FNV-1a over each key's bytes, column by column
        raw = keys.view(np.uint8).reshape(len(keys), keys.dtype.itemsize)
        h = np.full(len(keys), 0xCBF29CE484222325, dtype=np.uint64)
        with np.errstate(over="ignore"):
            for col in range(raw.shape[1]):
                h ^= raw[:, col].astype(np.uint64)
                h *= np.uint64(0x100000001B3)
    with np.errstate(over="ignore"):
        h = (h * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(32)
    return (h % np.uint64(parts)).astype(np.int32)


class Shuffle:
    """A shuffle among the ranks of the fabric (created from the environment if not given).

    mode: "pull" (reducers read) or "push" (mappers write).
    memory_bytes: > 0, the most bytes of map output a rank keeps in memory; runs past it go to
    a spill file in spill_dir (default $TMPDIR, else /tmp). With push, only for keyed runs
    (exchange(..., key_bytes=K)): the reducer merges windows it gives the mappers credits for.
    """

    def __init__(self, fabric=None, mode="pull", name="shuffle", timeout=60.0,
                 memory_bytes=0, spill_dir=None):
        if fabric is None:
            fabric = _plait.Fabric(name=name, timeout=timeout)
        self.fabric = fabric
        self.mode = mode
        self.memory_bytes = int(memory_bytes)
        self.spill_dir = spill_dir or ""
        self._cores = {}  # by (record size, key bytes): a shuffle carries one kind of record

    @property
    def rank(self):
        return self.fabric.rank

    @property
    def size(self):
        return self.fabric.size

    def _core(self, record_bytes, key_bytes=0):
        core = self._cores.get((record_bytes, key_bytes))
        if core is None:
            core = _plait.Shuffle(self.fabric, record_bytes, self.mode, key_bytes,
                                  self.memory_bytes, self.spill_dir)
            self._cores[(record_bytes, key_bytes)] = core
        return core

    def exchange(self, records, destinations, record_bytes=None, key_bytes=0):
        """Collective: sends records[i] to rank destinations[i]; returns what came to this rank.

        records may also be a list of runs (arrays of one dtype, or bytes-like objects) with
        destinations a list of one array per run. The result has the records' dtype (NumPy
        input) or is a uint8 array (bytes input): mapper 0's records first, each mapper's in
        their order; with key_bytes, merged by the records' first key_bytes bytes.
        """
        if isinstance(records, (list, tuple)):
            runs, dests = list(records), list(destinations)
            if len(runs) != len(dests):
                raise ValueError(f"{len(runs)} runs of records but {len(dests)} arrays of destinations")
        else:
            runs, dests = [records], [destinations]
        raws, size, out_dtype = [], None, None
        for run in runs:
            if isinstance(run, np.ndarray):
                arr = np.ascontiguousarray(run)
                if arr.ndim != 1:
                    raise ValueError("records must be a 1-D array (one element per record)")
                if out_dtype is not None and arr.dtype != out_dtype:
                    raise ValueError(f"runs of different dtypes: {out_dtype} and {arr.dtype}")
                out_dtype, run_size = arr.dtype, arr.dtype.itemsize
                raws.append(arr.view(np.uint8).reshape(-1) if len(arr) else np.zeros(0, np.uint8))
            else:
                if not record_bytes:
                    raise ValueError("record_bytes is needed for records that are not a NumPy array")
                run_size = record_bytes
                raws.append(np.frombuffer(run, dtype=np.uint8))
            if size is not None and run_size != size:
                raise ValueError(f"runs of {size}- and {run_size}-byte records")
            size = run_size
        if size is None:
            if not record_bytes:
                raise ValueError("record_bytes is needed for an empty list of runs")
            size = record_bytes
        dests = [np.ascontiguousarray(d, dtype=np.int32) for d in dests]
        got = self._core(size, int(key_bytes)).exchange(raws, dests)
        return got.view(out_dtype) if out_dtype is not None else got

    def by_key(self, records, key):
        """exchange() with each record sent to the rank its key hashes to (hash_partitions).

        key: a field name of a structured array, or an array of one key per record.
        """
        keys = records[key] if isinstance(key, str) else key
        return self.exchange(records, hash_partitions(keys, self.size))

    def stats(self, record_bytes, key_bytes=0):
        """Counters and times of the shuffles of records of this size (map_s, exchange_s,
        bytes_spilled, ...)."""
        return self._core(record_bytes, key_bytes).stats()
