"""The ways to split the model over ranks, as torch 2.15 users write them.

  ddp             DistributedDataParallel: every rank the whole model, gradients averaged.
  fsdp            FSDP2 fully_shard per block and at the root, parameters sharded over all
                  ranks, gathered for a block's forward and backward and freed after
                  (reshard_after_forward=True); the next block's all-gather is prefetched in
                  forward and the previous one's in backward.
  fsdp-noreshard  the same, keeping the gathered parameters from forward to backward
                  (reshard_after_forward=False: one all-gather per block per step, more memory).
  tp              tensor parallel over all ranks (parallelize_module): q, k, v and fc1 column-
                  parallel, o and fc2 row-parallel, the LayerNorms and the residual stream
                  sequence-parallel (sharded over the sequence between blocks), the head's
                  input gathered. Every rank trains on the whole batch.
  tp-dp           a 2-D DeviceMesh (dp, tp): tensor parallel within groups of --tp consecutive
                  ranks (one host's, where they are placed together), FSDP2 over the dp
                  dimension across them.

apply_layout() returns the model to train and the rank's data-parallel part of the batch.
"""
from dataclasses import dataclass

import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput,
                                               PrepareModuleOutput, RowwiseParallel,
                                               SequenceParallel, parallelize_module)
from torch.nn.parallel import DistributedDataParallel as DDP

LAYOUTS = ("ddp", "fsdp", "fsdp-noreshard", "tp", "tp-dp")


@dataclass
class Placement:
    model: nn.Module
    dp_rank: int  # this rank's slice of the global batch
    dp_size: int  # the slices


def shard_fully(model, mesh, reshard):
    """FSDP2 on every block and the root, with explicit prefetch one block ahead."""
    blocks = list(model.blocks)
    for block in blocks:
        fully_shard(block, mesh=mesh, reshard_after_forward=reshard)
    fully_shard(model, mesh=mesh, reshard_after_forward=reshard)
    for i, block in enumerate(blocks):
        if i + 1 < len(blocks):
            block.set_modules_to_forward_prefetch([blocks[i + 1]])
        if i > 0:
            block.set_modules_to_backward_prefetch([blocks[i - 1]])
    return model


def tensor_parallel_blocks(blocks, mesh):
    """Megatron-style column/row-parallel blocks with sequence parallelism between them: each
    block takes and gives the residual stream sharded over the sequence."""
    for block in blocks:
        parallelize_module(block, mesh, {
            "ln1": SequenceParallel(),
            "attn": PrepareModuleInput(input_layouts=(Shard(1),),
                                       desired_input_layouts=(Replicate(),)),
            "attn.q": ColwiseParallel(),
            "attn.k": ColwiseParallel(),
            "attn.v": ColwiseParallel(),
            "attn.o": RowwiseParallel(output_layouts=Shard(1)),
            "ln2": SequenceParallel(),
            "mlp": PrepareModuleInput(input_layouts=(Shard(1),),
                                      desired_input_layouts=(Replicate(),)),
            "mlp.fc1": ColwiseParallel(),
            "mlp.fc2": RowwiseParallel(output_layouts=Shard(1)),
        })


def tensor_parallel(model, mesh):
    """The whole model: blocks as above, the embedding whole on every rank, the head's input
    gathered."""
    tensor_parallel_blocks(model.blocks, mesh)
    parallelize_module(model, mesh, {
        # The embedding stays whole on every rank; its output enters the blocks sharded over
        # the sequence (a local slice, no communication).
        "embed": PrepareModuleOutput(output_layouts=(Replicate(),),
                                     desired_output_layouts=(Shard(1),)),
        "ln_f": SequenceParallel(),
        "head": ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate()),
    })
    return model


def tensor_parallel_stage(stage, mesh):
    """A pipeline stage (examples/lm/pipeline.py's StageModule) tensor-parallel over `mesh`.
    Between stages the activations travel whole, as plain tensors: a stage takes its input as
    replicated and keeps its slice of the sequence, and gathers its output."""
    tensor_parallel_blocks(stage.blocks, mesh)
    plan = {}
    if stage.embed is not None:
        plan["embed"] = PrepareModuleOutput(output_layouts=(Replicate(),),
                                            desired_output_layouts=(Shard(1),))
    else:
        # The residual stream between blocks is the local slice, as the embedding's output is.
        stage = parallelize_module(stage, mesh, PrepareModuleInput(
            input_layouts=(Replicate(),), desired_input_layouts=(Shard(1),),
            use_local_output=True))
    if stage.head is not None:
        plan["ln_f"] = SequenceParallel()
        plan["head"] = ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate())
    else:
        stage = parallelize_module(stage, mesh, PrepareModuleOutput(
            output_layouts=(Shard(1),), desired_output_layouts=(Replicate(),),
            use_local_output=True))
    if plan:
        parallelize_module(stage, mesh, plan)
    return stage


def apply_layout(model, layout, tp_size=2):
    rank, world = dist.get_rank(), dist.get_world_size()
    if layout == "ddp":
        return Placement(DDP(model), rank, world)
    if layout in ("fsdp", "fsdp-noreshard"):
        mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("dp",))
        return Placement(shard_fully(model, mesh, layout == "fsdp"), rank, world)
    if layout == "tp":
        mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("tp",))
        return Placement(tensor_parallel(model, mesh), 0, 1)
    if layout == "tp-dp":
        if world % tp_size or world == tp_size:
            raise ValueError(f"tp-dp needs a world size that is a multiple of --tp {tp_size} "
                             f"and larger than it, not {world}")
        mesh = init_device_mesh("cpu", (world // tp_size, tp_size), mesh_dim_names=("dp", "tp"))
        tensor_parallel(model, mesh["tp"])
        shard_fully(model, mesh["dp"], True)
        return Placement(model, mesh["dp"].get_local_rank(), world // tp_size)
    raise ValueError(f"unknown layout {layout!r}: one of {', '.join(LAYOUTS)}")
