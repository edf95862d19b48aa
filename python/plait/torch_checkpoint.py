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

restore() takes the newest step that is COMPLETE and whose files are whole and unaltered on
every rank (the ranks agree on it through the default process group), so a checkpoint cut
short by a crash, or altered afterwards, is skipped for the one before it. Loading it into a
model of another shape raises plait.InvalidUsageError naming the checkpoint. ``keep`` is
how many complete checkpoints stay; rank 0 removes older ones after a save.
"""

import io
import os
import random
import re
import shutil

import numpy as np
import torch
import torch.distributed as dist

from . import Error, InvalidUsageError
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


def _to_bytes(obj):
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getbuffer()


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
    os.makedirs(where, exist_ok=True)
    state = {"step": step, "world": world, "rank": rank,
             "model": model.state_dict(), "optimizer": optimizer.state_dict() if optimizer else None,
             "extra": extra}
    hook_state = hook.state_dict() if hook is not None else None
    if sharded:
        state["rng"] = _rng_state()
        state["hook"] = hook_state
        checkpoint_write(os.path.join(where, f"rank-{rank}.plait"), _to_bytes(state))
    else:
        mine = (_rng_state(), hook_state)
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
        marker = torch.load(io.BytesIO(checkpoint_read(os.path.join(where, "COMPLETE"))))
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
    marker = torch.load(io.BytesIO(checkpoint_read(os.path.join(where, "COMPLETE"))))
    if marker["sharded"]:
        state = torch.load(io.BytesIO(checkpoint_read(os.path.join(where, f"rank-{rank}.plait"))))
        rng, hook_state = state["rng"], state.get("hook")
    else:
        box = [torch.load(io.BytesIO(checkpoint_read(os.path.join(where, "rank-0.plait"))))] if rank == 0 else [None]
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
