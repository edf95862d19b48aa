"""plait.torch.checkpoint: checkpoint and resume of torch training, atomic and checksummed.

    ckpt = plait.torch.checkpoint.Checkpointer("ckpt", every=100, keep=2)
    start, extra = ckpt.restore(model, optimizer)   # 0, None without a checkpoint
    for step in range(start, total):
        ...                                           # one training step
        ckpt.maybe_save(step + 1, model, optimizer, extra={"scheduler": sched.state_dict()})

A checkpoint of step N is the directory <dir>/step-<N>: the state of every rank
(``sharded=True``, the default: rank-<r>.plait each) or of rank 0 with every rank's random
number generators (``sharded=False``: rank-0.plait), and COMPLETE, written by rank 0 once
every rank's file is on disk. Each file is written atomically (temporary file, fsync, rename)
with a SHA-256 of its bytes (plait.checkpoint_write, plait/checkpoint.h). A rank's state is
the model's and optimizer's state_dicts, torch's, NumPy's and Python's RNG states, the step,
``extra`` (the caller's: a scheduler, a data loader's position...) and, with ``hook=``, a comm
hook's state (plait.torch.hooks: the error feedback and PowerSGD's warm start, per rank).

restore() takes the newest step that is COMPLETE and whose files pass their SHA-256 check on
every rank (the ranks agree on it through the default process group), so a checkpoint cut
short by a crash, or corrupted afterwards, is skipped for the one before it. Loading it into
a model of another shape raises plait.InvalidUsageError naming the checkpoint. ``keep`` is
how many complete checkpoints stay; rank 0 removes older ones after a save.

What the checks guarantee: the SHA-256 is unkeyed and stored in the file it covers, so it
detects corruption and torn writes, not tampering (whoever can write the file can write a
matching digest). The payload is a torch pickle that holds only tensors and plain data
(numbers, strings, bytes, lists, tuples, dicts, sets; NumPy arrays, floats and the rest as
tagged tuples of those, see _encode), loaded with torch.load(weights_only=True) where torch
has it (1.13 does): a payload that names any other object is refused, not run
(plait.SystemError). torch's weights-only unpickler had bypasses before 2.6 (CVE-2025-32434)
and memory-safety faults before 2.10 (CVE-2026-24747): load checkpoints only from a
directory no one else can write. save() refuses state it could not read back that way (an
object of another class), naming where it is.
"""

import collections
import inspect
import io
import os
import random
import re
import shutil

import numpy as np
import torch
import torch.distributed as dist

from . import Error, InvalidUsageError, SystemError
from ._plait import checkpoint_read, checkpoint_verify, checkpoint_write

__all__ = ["Checkpointer", "save", "restore", "complete_steps"]

_STEP_DIR = re.compile(r"^step-(\d+)$")


def _world():
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _barrier():
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def _rng_state():
    return {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}


def _set_rng_state(state):
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])


def _step_dir(directory, step):
    return os.path.join(directory, f"step-{step:010d}")


# The payload's format: (_FORMAT, the state encoded by _encode).
_FORMAT = "plait.torch.checkpoint 2"
# torch.load refuses, with weights_only, any pickle that names more than tensors and plain
# containers. Without it (torch before 1.13) a load runs whatever the pickle names.
WEIGHTS_ONLY = "weights_only" in inspect.signature(torch.load).parameters
_LOAD_ARGS = {"weights_only": True} if WEIGHTS_ONLY else {}


def _uint8(data):
    return torch.from_numpy(np.frombuffer(bytes(data), np.uint8).copy())


def _encode(x, where):
    """x as what torch 1.13's weights-only unpickler reads back: tensors, ints, strings,
    booleans, None and lists stay as they are (it cannot even read a float); every other
    value becomes a tuple (tag, ...) of those, so that a tuple in the encoding is always a
    tag. Anything else is refused, naming `where` it is."""
    kind = type(x)
    if x is None or kind in (bool, int, str) or kind in (torch.Tensor, torch.nn.Parameter):
        return x
    if kind is list:
        return [_encode(v, f"{where}[{i}]") for i, v in enumerate(x)]
    if kind is float:
        return ("f", x.hex())  # exact, and nan, inf and -0.0 too
    if kind is tuple:
        return ("t", [_encode(v, f"{where}[{i}]") for i, v in enumerate(x)])
    if kind in (dict, collections.OrderedDict):
        flat = []
        for k, v in x.items():
            flat += [_encode(k, f"{where} key {k!r}"), _encode(v, f"{where}[{k!r}]")]
        if kind is dict:
            return ("d", flat)
        # A module's state_dict carries its layout versions in _metadata (load_state_dict reads it).
        return ("o", flat, _encode(getattr(x, "_metadata", None), f"{where}._metadata"))
    if isinstance(x, np.ndarray) and not x.dtype.hasobject:
        return ("a", _encode(np.lib.format.dtype_to_descr(x.dtype), where), list(x.shape), _uint8(x.tobytes()))
    if isinstance(x, np.generic) and not x.dtype.hasobject:
        return ("g", _encode(np.lib.format.dtype_to_descr(x.dtype), where), _uint8(x.tobytes()))
    if kind in (bytes, bytearray):
        return ("b" if kind is bytes else "B", _uint8(x))
    if kind in (set, frozenset):
        return ("s" if kind is set else "S", [_encode(v, f"{where} element") for v in x])
    if kind is complex:
        return ("c", x.real.hex(), x.imag.hex())
    if isinstance(x, torch.dtype):
        return ("D", str(x).replace("torch.", ""))
    if kind is torch.Size:
        return ("Z", list(x))
    if kind is torch.device:
        return ("V", str(x))
    raise InvalidUsageError(
        f"checkpoint: {where} is a {kind.__module__}.{kind.__qualname__}; a checkpoint holds tensors, "
        "NumPy arrays and plain Python data (numbers, strings, bytes, lists, tuples, dicts, sets), "
        "what torch.load(weights_only=True) can read back")


def _decode(x):
    if type(x) is list:
        return [_decode(v) for v in x]
    if type(x) is not tuple:
        return x
    tag = x[0]
    if tag == "f":
        return float.fromhex(x[1])
    if tag == "t":
        return tuple(_decode(v) for v in x[1])
    if tag in ("d", "o"):
        flat = x[1]
        pairs = [(_decode(flat[i]), _decode(flat[i + 1])) for i in range(0, len(flat), 2)]
        if tag == "d":
            return dict(pairs)
        out = collections.OrderedDict(pairs)
        meta = _decode(x[2])
        if meta is not None:
            out._metadata = meta
        return out
    if tag == "a":
        dtype = np.lib.format.descr_to_dtype(_decode(x[1]))
        return np.frombuffer(x[3].numpy().tobytes(), dtype).reshape(x[2]).copy()
    if tag == "g":
        return np.frombuffer(x[2].numpy().tobytes(), np.lib.format.descr_to_dtype(_decode(x[1])))[0]
    if tag in ("b", "B"):
        data = x[1].numpy().tobytes()
        return data if tag == "b" else bytearray(data)
    if tag in ("s", "S"):
        return (set if tag == "s" else frozenset)(_decode(v) for v in x[1])
    if tag == "c":
        return complex(float.fromhex(x[1]), float.fromhex(x[2]))
    if tag == "D":
        return getattr(torch, x[1])
    if tag == "Z":
        return torch.Size(x[1])
    if tag == "V":
        return torch.device(x[1])
    raise ValueError(f"unknown tag {tag!r}")


def _to_bytes(obj, where="the state"):
    buf = io.BytesIO()
    torch.save((_FORMAT, _encode(obj, where)), buf)
    return buf.getbuffer()


def _load(path):
    """The state in checkpoint file `path` (whole: its SHA-256 checked), read back with
    weights_only where torch has it; plait.SystemError when the payload is refused or is not
    a checkpoint of this format."""
    data = checkpoint_read(path)
    try:
        payload = torch.load(io.BytesIO(data), **_LOAD_ARGS)
    except Exception as e:  # noqa: BLE001  (the unpickler's refusal, whatever its class)
        why = str(e).rsplit("WeightsUnpickler error: ", 1)[-1]
        raise SystemError(f"checkpoint {path}: its payload is refused by torch.load(weights_only=True) "
                          f"({why}): altered, or not written by plait.torch.checkpoint") from None
    if type(payload) is not tuple or len(payload) != 2 or payload[0] != _FORMAT:
        raise SystemError(f"checkpoint {path}: not a {_FORMAT} payload (written by an older plait, or altered)")
    try:
        return _decode(payload[1])
    except (ValueError, TypeError, IndexError, AttributeError) as e:
        raise SystemError(f"checkpoint {path}: its payload does not decode ({e}): altered") from None


def complete_steps(directory):
    """The steps with a COMPLETE marker under directory, newest first (files not checked)."""
    if not os.path.isdir(directory):
        return []
    steps = []
    for name in os.listdir(directory):
        m = _STEP_DIR.match(name)
        if m and os.path.exists(os.path.join(directory, name, "COMPLETE")):
            steps.append(int(m.group(1)))
    return sorted(steps, reverse=True)


def save(directory, step, model, optimizer=None, extra=None, sharded=True, keep=2, hook=None):
    """Collective over the default process group (when there is one): writes step's
    checkpoint and returns its directory. ``hook``: a comm hook's state (state_dict(), as
    plait.torch.hooks' HookState has), this rank's own like its RNGs."""
    rank, world = _world()
    if step < 0:
        raise InvalidUsageError(f"checkpoint: step {step} (at least 0)")
    where = _step_dir(directory, step)
    state = {"step": step, "world": world, "rank": rank,
             "model": model.state_dict(), "optimizer": optimizer.state_dict() if optimizer else None,
             "extra": extra}
    hook_state = hook.state_dict() if hook is not None else None
    if sharded:
        state["rng"] = _rng_state()
        state["hook"] = hook_state
        payload = _to_bytes(state)  # state it could not read back is refused before any file
        os.makedirs(where, exist_ok=True)
        checkpoint_write(os.path.join(where, f"rank-{rank}.plait"), payload)
    else:
        mine = (_rng_state(), hook_state)
        _encode((state, mine), "the state")  # refused on every rank alike, not on rank 0 alone
        os.makedirs(where, exist_ok=True)
        every = [None] * world
        if world > 1:
            dist.all_gather_object(every, mine)
        else:
            every = [mine]
        if rank == 0:
            state["rng_of_rank"] = [rng for rng, _ in every]
            state["hook_of_rank"] = [h for _, h in every]
            checkpoint_write(os.path.join(where, "rank-0.plait"), _to_bytes(state))
    _barrier()  # every rank's file is on disk before the checkpoint counts
    if rank == 0:
        files = [f"rank-{r}.plait" for r in range(world)] if sharded else ["rank-0.plait"]
        marker = {"step": step, "world": world, "sharded": sharded, "files": files}
        checkpoint_write(os.path.join(where, "COMPLETE"), _to_bytes(marker))
        for old in complete_steps(directory)[keep:]:
            shutil.rmtree(_step_dir(directory, old), ignore_errors=True)
    _barrier()
    return where


def _valid_here(directory, step, rank, world):
    """(ok, why): whether step's checkpoint is whole for this rank."""
    where = _step_dir(directory, step)
    try:
        marker = _load(os.path.join(where, "COMPLETE"))
    except Error as e:
        return False, str(e)
    if marker["world"] != world:
        return False, f"saved by {marker['world']} ranks, this job has {world}"
    mine = f"rank-{rank}.plait" if marker["sharded"] else "rank-0.plait"
    if not marker["sharded"] and rank != 0:
        return True, ""  # rank 0 reads and sends it
    return checkpoint_verify(os.path.join(where, mine))


def restore(directory, model, optimizer=None, hook=None):
    """Collective over the default process group (when there is one): loads the newest
    checkpoint that is whole on every rank into model (and optimizer, and hook: a comm
    hook's state, load_state_dict()) and the RNGs; returns (step, extra), or (0, None) when
    there is none."""
    rank, world = _world()
    valid = []
    for step in complete_steps(directory):
        ok, _ = _valid_here(directory, step, rank, world)
        if ok:
            valid.append(step)
    if world > 1:
        everyone = [None] * world
        dist.all_gather_object(everyone, valid)
        common = set(everyone[0]).intersection(*map(set, everyone[1:]))
    else:
        common = set(valid)
    if not common:
        return 0, None
    step = max(common)
    where = _step_dir(directory, step)
    marker = _load(os.path.join(where, "COMPLETE"))
    if marker["sharded"]:
        state = _load(os.path.join(where, f"rank-{rank}.plait"))
        rng, hook_state = state["rng"], state.get("hook")
    else:
        box = [_load(os.path.join(where, "rank-0.plait"))] if rank == 0 else [None]
        if world > 1:
            dist.broadcast_object_list(box, src=0)
        state = box[0]
        rng = state["rng_of_rank"][rank]
        hook_state = state.get("hook_of_rank", [None] * world)[rank]
    try:
        model.load_state_dict(state["model"])
        if optimizer is not None and state["optimizer"] is not None:
            optimizer.load_state_dict(state["optimizer"])
        if hook is not None:
            if hook_state is None:
                raise ValueError("it holds no comm hook state")
            hook.load_state_dict(hook_state)
    except (RuntimeError, ValueError, KeyError) as e:
        raise InvalidUsageError(f"checkpoint {where} does not fit this model, optimizer or hook: {e}") from e
    _set_rng_state(rng)
    return step, state["extra"]


class Checkpointer:
    """Saves every `every` steps (and on request) under `directory`, keeps `keep`, and
    restores the newest whole one; ``sharded`` as in save()."""

    def __init__(self, directory, every=0, keep=2, sharded=True):
        if every < 0 or keep < 1:
            raise InvalidUsageError(f"checkpoint: every={every} (>= 0), keep={keep} (>= 1)")
        self.directory, self.every, self.keep, self.sharded = directory, every, keep, sharded

    def restore(self, model, optimizer=None, hook=None):
        return restore(self.directory, model, optimizer, hook)

    def save(self, step, model, optimizer=None, extra=None, hook=None):
        return save(self.directory, step, model, optimizer, extra, self.sharded, self.keep, hook)

    def maybe_save(self, step, model, optimizer=None, extra=None, hook=None):
        """Saves when step is a multiple of `every`; returns the directory written, or None."""
        if self.every and step > 0 and step % self.every == 0:
            return self.save(step, model, optimizer, extra, hook)
        return None
