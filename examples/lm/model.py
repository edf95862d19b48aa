"""A GPT-style decoder: byte embeddings plus learned positions, pre-LN blocks of causal
self-attention and a GELU MLP, a final LayerNorm and a linear head over the 256 bytes.

The layers are named the way the layouts address them (layouts.py): blocks.<i>.ln1, .attn
(.q, .k, .v, .o), .ln2, .mlp (.fc1, .fc2). Attention infers its number of heads from its
input's width, so that a tensor-parallel rank holding a slice of q, k and v runs its heads.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Embedding(nn.Module):
    def __init__(self, vocab, dim, seq):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(seq, dim)

    def forward(self, idx):
        positions = torch.arange(idx.shape[1], device=idx.device)
        return self.tok(idx) + self.pos(positions)


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.head_dim = dim // heads
        self.q = nn.Linear(dim, dim, bias=False)
        self.k = nn.Linear(dim, dim, bias=False)
        self.v = nn.Linear(dim, dim, bias=False)
        self.o = nn.Linear(dim, dim, bias=False)

    def forward(self, x):
        b, t, _ = x.shape

        def heads(y):
            return y.view(b, t, -1, self.head_dim).transpose(1, 2)

        y = F.scaled_dot_product_attention(heads(self.q(x)), heads(self.k(x)), heads(self.v(x)),
                                           is_causal=True)
        return self.o(y.transpose(1, 2).reshape(b, t, -1))


class MLP(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = MLP(dim)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab=256, dim=96, heads=4, layers=4, seq=64):
        super().__init__()
        self.embed = Embedding(vocab, dim, seq)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, idx):
        x = self.embed(idx)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def loss_of(logits, targets):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
