"""A working transformer block for unit 05 and later, so they never depend on unit 04's answers.

Unit 05 stacks transformer blocks into a whole GPT. If it used the student's own unit-04
block, a mistake there would cost points again here; so the exercise notebooks and the graders
of units 05-07 import this one instead. It has the unit-04 contract's interface and attribute
names (`ln1`, `attn`, `ln2`, `ffn`; `q_proj`, ..., `out_proj`; `fc1`, `fc2`), so weights load into it
by name, but it is built on PyTorch's own fused attention (`F.scaled_dot_product_attention`) and
`F.gelu`. It therefore does not hand out the unit-04 exercise, which must be written from scratch
with matmuls, a causal mask and `torch.softmax`.

Shapes follow nanoGPT: B = batch, T = sequence length, C = d_model, nh = n_heads, hs = C // nh.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import nn


class CausalSelfAttention(nn.Module):
    """Causal multi-head self-attention, (B, T, C) -> (B, T, C), on PyTorch's fused kernel."""

    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        assert d_model % n_heads == 0, "n_heads must divide d_model"
        self.n_heads = int(n_heads)
        self.q_proj = nn.Linear(d_model, d_model)  # each with a bias, as in GPT-2
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, x):
        B, T, C = x.shape
        nh, hs = self.n_heads, C // self.n_heads
        # project, then split the columns into heads: (B, T, C) -> (B, T, nh, hs) -> (B, nh, T, hs)
        q = self.q_proj(x).view(B, T, nh, hs).transpose(1, 2)
        k = self.k_proj(x).view(B, T, nh, hs).transpose(1, 2)
        v = self.v_proj(x).view(B, T, nh, hs).transpose(1, 2)
        # softmax(q k^T / sqrt(hs) + causal mask) v, fused: (B, nh, T, hs)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # heads side by side again: (B, T, C)
        return self.out_proj(y)


class FeedForward(nn.Module):
    """Position-wise MLP, (B, T, C) -> (B, T, d_ff) -> GELU -> (B, T, C)."""

    def __init__(self, d_model: int, d_ff: int | None = None):
        super().__init__()
        d_ff = 4 * d_model if d_ff is None else d_ff
        self.fc1 = nn.Linear(d_model, d_ff)
        self.fc2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))  # the exact (erf) GELU


class TransformerBlock(nn.Module):
    """Pre-norm block: x + attn(ln1(x)), then x + ffn(ln2(x)); (B, T, C) -> (B, T, C)."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int | None = None):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)  # eps 1e-5, weight and bias (d_model,)
        self.attn = CausalSelfAttention(d_model, n_heads)
        self.ln2 = nn.LayerNorm(d_model)
        self.ffn = FeedForward(d_model, d_ff)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))  # tokens exchange information (causally)
        x = x + self.ffn(self.ln2(x))  # each token computes on its own
        return x


# The unit-04 contract's two norm functions, on PyTorch's own kernels. Unit 04's grader puts
# them (with the classes above) in place of a student's own while it grades `TransformerBlock`,
# so a bug in a sub-part costs that part's points only. They call `F.layer_norm` and
# `F.rms_norm` through the module at call time: a student who imports one into their own
# `layer_norm` still meets the from-scratch rule, which makes those functions raise.


def layer_norm(x, weight, bias, eps: float = 1e-5):
    """LayerNorm over the last dimension: `layer_norm(x, weight, bias, eps=1e-5)`."""
    return F.layer_norm(x, x.shape[-1:], weight, bias, eps)


def rms_norm(x, weight, eps: float = 1e-6):
    """RMSNorm over the last dimension: `rms_norm(x, weight, eps=1e-6)`."""
    return F.rms_norm(x, x.shape[-1:], weight, eps)
