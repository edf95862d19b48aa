"""Pipeline parallelism with torch.distributed.pipelining: the model cut into stages of
consecutive blocks (the first stage also embeds, the last also normalizes and projects), run
by one of torch's schedules over --microbatches microbatches of each batch.

  gpipe             ScheduleGPipe: every microbatch forward, then every backward.
  1f1b              Schedule1F1B: one forward, one backward in the steady state.
  interleaved-1f1b  ScheduleInterleaved1F1B: v = 2 stages per rank (rank r holds stages r and
                    r + p), so a bubble is a shorter stage's time.
  zero-bubble       ScheduleInterleavedZeroBubble: as interleaved, with each backward split
                    into the gradient for the input (on the critical path) and the gradient
                    for the weights (scheduled into what would be bubbles).

Stages are cut from the same GPT every rank builds from the seed, so a pipeline trains the
parameters the other layouts train. The schedule scales gradients by 1/microbatches (its
default), which makes a step's gradient the whole batch's mean as elsewhere. Validation runs
the whole model on every rank after the owners of its stages have shared their parameters.
"""
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.pipelining import (PipelineStage, Schedule1F1B, ScheduleGPipe,
                                          ScheduleInterleaved1F1B,
                                          ScheduleInterleavedZeroBubble)

from .model import loss_of

SCHEDULES = {
    "gpipe": (ScheduleGPipe, 1),
    "1f1b": (Schedule1F1B, 1),
    "interleaved-1f1b": (ScheduleInterleaved1F1B, 2),
    "zero-bubble": (ScheduleInterleavedZeroBubble, 2),
}


class StageModule(nn.Module):
    """Blocks [begin, end) of `model`, with its embedding in front of the first stage and its
    final LayerNorm and head after the last."""

    def __init__(self, model, begin, end, first, last):
        super().__init__()
        self.embed = model.embed if first else None
        self.blocks = nn.ModuleList(model.blocks[begin:end])
        self.ln_f = model.ln_f if last else None
        self.head = model.head if last else None

    def forward(self, x):
        if self.embed is not None:
            x = self.embed(x)
        for block in self.blocks:
            x = block(x)
        if self.head is not None:
            x = self.head(self.ln_f(x))
        return x


class Pipeline:
    """One rank's stages and schedule; train_step() runs one step of the whole pipeline."""

    def __init__(self, model, schedule, microbatches, group, wrap=None, microbatch_shape=None):
        """`microbatch_shape` (sequences, bytes): the stages' inputs and outputs are declared
        rather than inferred by a trial forward, which tensor-parallel stages cannot run (their
        collectives would see meta tensors)."""
        kind, per_rank = SCHEDULES[schedule]
        self.model, self.group = model, group
        p, r = dist.get_world_size(group), dist.get_rank(group)
        stages = p * per_rank
        layers = len(model.blocks)
        if layers < stages:
            raise ValueError(f"{schedule} on {p} pipeline ranks needs {stages} stages: "
                             f"at least as many blocks (--layers), not {layers}")
        self.indices = [r + i * p for i in range(per_rank)]
        self.first = 0 in self.indices
        self.last = stages - 1 in self.indices
        self.modules, pipeline_stages = [], []
        for s in self.indices:
            module = StageModule(model, s * layers // stages, (s + 1) * layers // stages,
                                 s == 0, s == stages - 1)
            if wrap:
                module = wrap(module)
            self.modules.append(module)
            shapes = {}
            if microbatch_shape:
                shapes = self.declared_shapes(model, microbatch_shape, s == 0, s == stages - 1)
            pipeline_stages.append(PipelineStage(module, s, stages, torch.device("cpu"),
                                                 group=group, **shapes))
        self.schedule = kind(pipeline_stages[0] if per_rank == 1 else pipeline_stages,
                             microbatches, loss_fn=loss_of)
        # This rank's stages under names no other stage has ("stage3.blocks.0.attn..."):
        # what the optimizer trains and a checkpoint saves, every rank its own.
        self.owned = nn.ModuleDict({f"stage{s}": m for s, m in zip(self.indices, self.modules)})

    @staticmethod
    def declared_shapes(model, microbatch_shape, first, last):
        b, t = microbatch_shape
        dim, vocab = model.head.in_features, model.head.out_features
        meta = torch.device("meta")
        # A stage's activations carry gradients back: declared as requiring them.
        return {"input_args": torch.empty(b, t, dtype=torch.long, device=meta) if first
                else torch.empty(b, t, dim, device=meta, requires_grad=True),
                "output_args": torch.empty(b, t, vocab if last else dim, device=meta,
                                           requires_grad=True)}

    def train_step(self, x, y):
        """The step's mean training loss on the rank that holds the last stage, else None."""
        losses = [] if self.last else None
        args = (x,) if self.first else ()
        kwargs = {"target": y, "losses": losses} if self.last else {}
        self.schedule.step(*args, **kwargs)
        return torch.stack(losses).mean() if self.last else None

    def share_parameters(self, whole):
        """`whole`, a plain copy of the model, takes the stage owners' current parameters."""
        names = {id(q): n for n, q in self.model.named_parameters()}
        mine = {names[id(q)]: q.detach().full_tensor() if hasattr(q, "full_tensor")
                else q.detach() for m in self.modules for q in m.parameters()}
        everyone = [None] * dist.get_world_size(self.group)
        dist.all_gather_object(everyone, mine, group=self.group)
        with torch.no_grad():
            params = dict(whole.named_parameters())
            for part in everyone:
                for name, value in part.items():
                    params[name].copy_(value)
