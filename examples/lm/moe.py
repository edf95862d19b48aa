"""The mixture-of-experts parts of examples/moe_lm.py: a decoder block whose feed-forward is a
top-k gated layer of experts spread over the ranks (expert parallelism), the rest of the model
replicated (data parallelism).

Each MoE layer routes every token to its top-k *logical* experts. The gate's logits get a fixed
bias of -S * ln(e + 1) for expert e with --skew zipf:S, which gives expert e a share that falls
like 1/(e + 1)^S, as hot experts do in trained models. The layer's ExpertPlacement maps each
logical expert to slots on the ranks (plait.torch.moe). A Dispatcher (plait) or
AllToAllDispatcher (gloo) moves the rows to the slots' ranks and back. The auxiliary loss is
Switch's load-balancing loss, E * sum_e f_e * P_e. Here f_e is the share of the top-k choices
that go to expert e, and P_e is the mean gate probability of e.

Every slot holding logical expert e starts with the same weights: those drawn from a generator
seeded with (seed, layer, e). So a run's model does not depend on the placement, the backend or
the number of spare slots.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from .model import Attention, Embedding


class Expert(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


def logical_expert_init(seed, layer, e, dim, hidden):
    """Expert e of `layer` as every slot holding it starts."""
    with torch.random.fork_rng():
        torch.manual_seed(seed * 7919 + layer * 131 + e)
        return Expert(dim, hidden).state_dict()


class MoEFeedForward(nn.Module):
    def __init__(self, dim, hidden, num_experts, topk, placement, rank, dispatcher, skew, seed, layer):
        super().__init__()
        self.topk, self.num_experts, self.rank = topk, num_experts, rank
        self.placement, self.dispatcher = placement, dispatcher
        self.gate = nn.Linear(dim, num_experts, bias=False)
        bias = torch.zeros(num_experts)
        if skew > 0:
            bias = -skew * torch.log(torch.arange(1, num_experts + 1, dtype=torch.float32))
        self.register_buffer("skew_bias", bias)
        with torch.random.fork_rng():  # the dense layers draw the same numbers whatever the slots
            self.experts = nn.ModuleList(Expert(dim, hidden) for _ in range(placement.slots_per_rank))
        for slot, e in enumerate(placement.local_experts(rank)):
            self.experts[slot].load_state_dict(logical_expert_init(seed, layer, e, dim, hidden))
        self.balancer = None   # set by the trainer (it holds the optimizer)
        self.recv_rows = 0     # rows this rank's experts got in the last forward

    def forward(self, x):
        b, t, d = x.shape
        h = x.reshape(-1, d)
        probs = (self.gate(h) + self.skew_bias).softmax(-1)
        w, idx = probs.topk(self.topk, dim=-1)
        w = w / w.sum(-1, keepdim=True)
        share = torch.bincount(idx.reshape(-1), minlength=self.num_experts).float() / idx.numel()
        aux = self.num_experts * (share * probs.mean(0)).sum()
        if self.balancer is not None and self.training:
            self.balancer.record(idx)
        placement = self.balancer.placement if self.balancer is not None else self.placement
        slots = placement.route(idx, self.rank)
        recv_x, recv_idx, recv_w, _, handle = self.dispatcher.dispatch(h, slots, w)
        self.recv_rows = recv_x.shape[0]
        y = torch.zeros_like(recv_x)
        for slot, expert in enumerate(self.experts):
            chosen = recv_idx == slot
            rows = chosen.any(1).nonzero().squeeze(1)
            if rows.numel():
                weight = (recv_w * chosen).sum(1)[rows, None]
                y = y.index_add(0, rows, expert(recv_x[rows]) * weight)
        out = self.dispatcher.combine(y, handle)
        return out.view(b, t, d), aux


class MoEBlock(nn.Module):
    def __init__(self, dim, heads, moe):
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.ln2 = nn.LayerNorm(dim)
        self.moe = moe

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        y, aux = self.moe(self.ln2(x))
        return x + y, aux


class MoEGPT(nn.Module):
    """The GPT of examples/lm/model.py with an MoE feed-forward in every block."""

    def __init__(self, make_moe, vocab=256, dim=96, heads=4, layers=4, seq=64):
        super().__init__()
        self.embed = Embedding(vocab, dim, seq)
        self.blocks = nn.ModuleList(MoEBlock(dim, heads, make_moe(i)) for i in range(layers))
        self.ln_f = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, idx):
        x = self.embed(idx)
        aux = 0.0
        for block in self.blocks:
            x, a = block(x)
            aux = aux + a
        return self.head(self.ln_f(x)), aux / len(self.blocks)

    def moe_layers(self):
        return [b.moe for b in self.blocks]

    def dense_parameters(self):
        """The replicated (data-parallel) parameters: all but the experts'."""
        experts = {id(p) for m in self.moe_layers() for p in m.experts.parameters()}
        return [p for p in self.parameters() if id(p) not in experts]


def zipf_share(num_experts, s):
    """The routing share of each expert that the gate's skew bias alone gives."""
    w = [1 / math.pow(e + 1, s) for e in range(num_experts)]
    return [v / sum(w) for v in w]
