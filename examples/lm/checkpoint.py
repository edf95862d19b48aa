"""Sharded checkpoints with torch.distributed.checkpoint (DCP): every rank writes its own shards
of the model and the optimizer (FSDP2's and DTensor's shards as they are, DDP's replica once),
and a job of the same layout reads them back and goes on from the step after it, as if it had
not stopped: the batches are a function of the step, so a resumed run computes what the
uninterrupted one computes, bit for bit (on the same backend, whose sums keep their order).

A checkpoint is the directory <dir>/step-<k>, written to step-<k>.tmp and renamed by rank 0
once every rank's shards are in (DCP's metadata is the last file it writes), so an
interrupted save leaves no step-<k> behind. A pipeline rank saves its own stages (the
Pipeline's `owned` module: names that no other stage has) and its optimizer's state for them.
"""
import hashlib
import os
import re

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict,
                                                     get_state_dict, set_state_dict)


# The optimizer's state flattened to one entry per parameter name, its param_groups' settings
# too: a pipeline rank's param_groups name other parameters than another rank's, and DCP would
# save one list for all as if it were replicated (the ranks that then load a list naming none
# of their parameters lose lr, betas and the rest).
OPTIONS = StateDictOptions(flatten_optimizer_state_dict=True)


def save(directory, step, model, optimizer):
    model_sd, optim_sd = get_state_dict(model, optimizer, options=OPTIONS)
    final = os.path.join(directory, f"step-{step}")
    tmp = final + ".tmp"
    dcp.save({"model": model_sd, "optim": optim_sd, "step": torch.tensor(step)},
             checkpoint_id=tmp)
    dist.barrier()
    if dist.get_rank() == 0:
        os.replace(tmp, final)
    dist.barrier()
    return final


def latest(directory):
    """The newest complete checkpoint's step in `directory`, or None."""
    steps = [int(m.group(1)) for name in (os.listdir(directory) if os.path.isdir(directory)
                                          else []) if (m := re.fullmatch(r"step-(\d+)", name))]
    return max(steps) if steps else None


def load(directory, model, optimizer):
    """Loads the newest checkpoint into model and optimizer; returns its step (0: none)."""
    step = latest(directory)
    if step is None:
        return 0
    model_sd, optim_sd = get_state_dict(model, optimizer, options=OPTIONS)
    state = {"model": model_sd, "optim": optim_sd, "step": torch.tensor(0)}
    dcp.load(state, checkpoint_id=os.path.join(directory, f"step-{step}"))
    set_state_dict(model, optimizer, model_state_dict=state["model"],
                   optim_state_dict=state["optim"], options=OPTIONS)
    return int(state["step"])


def parameters_digest(model):
    """SHA-256 of every parameter, whole (gathered from its shards), in name order."""
    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))
    h = hashlib.sha256()
    for name in sorted(full):
        h.update(name.encode())
        h.update(full[name].detach().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]
