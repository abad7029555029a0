"""A student who cuts the last axis as (d_head, n_heads): head h gets columns h, h + n_heads, ..."""

import numpy as np


def split_heads(x, n_heads):
    n, d_model = x.shape[-2:]
    d_head = d_model // n_heads
    y = x.reshape(*x.shape[:-1], d_head, n_heads)  # (..., n, d_head, n_heads)
    return np.moveaxis(y, -1, -3)  # (..., n_heads, n, d_head)


def merge_heads(x):
    y = np.moveaxis(x, -3, -1)  # (..., n, d_head, n_heads)
    return y.reshape(*y.shape[:-2], -1)


def multi_head_attention(x, W_q, W_k, W_v, W_o, n_heads, causal=True):
    n = x.shape[-2]
    q, k, v = split_heads(x @ W_q, n_heads), split_heads(x @ W_k, n_heads), split_heads(x @ W_v, n_heads)
    s = q @ k.swapaxes(-1, -2) / np.sqrt(q.shape[-1])
    if causal:
        s = np.where(np.tril(np.ones((n, n), dtype=bool)), s, -np.inf)
    w = np.exp(s - s.max(-1, keepdims=True))
    w = w / w.sum(-1, keepdims=True)
    return merge_heads(w @ v) @ W_o


def attention_flops(n, d_model, n_heads):
    # four (n, d) @ (d, d) projections, then per head two (n, n)-sized products of width d_head
    d_head = d_model // n_heads
    return 4 * (2 * n * d_model * d_model) + n_heads * 2 * (2 * n * n * d_head)
