"""plait.ps: the parameter server on NumPy arrays and torch tensors (plait/ps.h).

    import plait.ps
    kv = plait.ps.KVStore(servers=2)            # the last 2 ranks serve (collective)
    kv.register(7, weights, rule="sgd", lr=0.1, init=weights)   # collective, every rank
    if kv.is_server:
        kv.finalize()                            # serves until every worker is done
    else:
        for step in range(100):
            kv.push_pull(7, grads, weights).wait()
        kv.finalize()

Consistency: "bsp" (a pull after a worker's t-th push sees every worker's t-th push),
"asp" (latest), "ssp" with `staleness` s (no worker more than s pushes ahead of the slowest).
BSP with `backup_workers` b applies each round with the first workers - b pushes; a late push
is dropped, or with `fold_late` added to the next round.
Rules: "sum", "mean" (aggregation only) or "sgd", "momentum", "adam" on the servers.
push, pull and push_pull take one key and one buffer, or a list of each; they return a Work
at once (its `version` says which parameters a pull returned). Torch CPU tensors are used in
place (no copy); bad arguments raise plait.InvalidUsageError before anything is sent.
"""

from ._plait import KVStore as _KVStore

__all__ = ["KVStore"]

_DTYPES = {"float32": "f32", "float64": "f64", "float16": "f16", "bfloat16": "bf16",
           "int8": "i8", "uint8": "u8", "int32": "i32", "int64": "i64"}


def _buffer(x):
    """A buffer-protocol view of x: NumPy arrays as they are, torch CPU tensors shared.
    Never a copy: a pull into a copy would leave the caller's array as it was."""
    if hasattr(x, "flags") and not x.flags["C_CONTIGUOUS"]:
        raise ValueError("plait.ps takes C-contiguous arrays (a pull must land in the caller's memory)")
    if hasattr(x, "__array_interface__") or isinstance(x, (bytearray, memoryview)):
        return x
    if type(x).__module__.startswith("torch"):
        if x.device.type != "cpu" or not x.is_contiguous():
            raise ValueError("plait.ps takes contiguous CPU tensors")
        if str(x.dtype) == "torch.bfloat16":
            raise ValueError("plait.ps: bfloat16 keys are not reachable from Python (NumPy has "
                             "no bfloat16); use float32 or float16, or the C++ API")
        return x.detach().numpy()
    return x


def _dtype(x):
    name = str(x.dtype).replace("torch.", "")
    if name not in _DTYPES:
        raise ValueError(f"plait.ps: no key type for {x.dtype}")
    return _DTYPES[name]


class KVStore:
    def __init__(self, servers=0, consistency="bsp", staleness=0, servers_first=False,
                 name="ps", settings=None, timeout=60.0, backup_workers=0, fold_late=False):
        self._kv = _KVStore(servers, consistency, staleness, servers_first, name,
                            settings or {}, timeout, backup_workers, fold_late)

    is_server = property(lambda self: self._kv.is_server)
    is_worker = property(lambda self: self._kv.is_worker)
    num_servers = property(lambda self: self._kv.num_servers)
    num_workers = property(lambda self: self._kv.num_workers)
    worker_index = property(lambda self: self._kv.worker_index)
    server_index = property(lambda self: self._kv.server_index)
    rank = property(lambda self: self._kv.rank)

    def register(self, key, like, rule="sum", lr=0.01, momentum=0.9, beta1=0.9, beta2=0.999,
                 eps=1e-8, weight_decay=0.0, init=None):
        """Collective: a key shaped like `like` (an array or tensor: its size and dtype)."""
        count = like.numel() if hasattr(like, "numel") else like.size
        self._kv.register_key(key, count, _dtype(like), rule, lr, momentum, beta1, beta2, eps,
                              weight_decay, None if init is None else _buffer(init).reshape(-1))

    def _flat(self, x):
        if isinstance(x, (list, tuple)):
            return [_buffer(v).reshape(-1) for v in x]
        return _buffer(x).reshape(-1)

    def push(self, key, data):
        return self._kv.push(key, self._flat(data))

    def pull(self, key, out):
        return self._kv.pull(key, self._flat(out))

    def push_pull(self, key, data, out):
        return self._kv.push_pull(key, self._flat(data), self._flat(out))

    def finalize(self):
        self._kv.finalize()

    def stats(self):
        return self._kv.stats()
