"""A student whose split is right but whose merge forgets to swap the axes back."""

import numpy as np


def split_heads(x, n_heads):
    *batch, n, d_model = x.shape
    return x.reshape(*batch, n, n_heads, d_model // n_heads).swapaxes(-2, -3)


def merge_heads(x):
    *batch, n_heads, n, d_head = x.shape
    return x.reshape(*batch, n, n_heads * d_head)


def multi_head_attention(x, W_q, W_k, W_v, W_o, n_heads, causal=True):
    *batch, n, d_model = x.shape
    q = split_heads(x @ W_q, n_heads)
    k = split_heads(x @ W_k, n_heads)
    v = split_heads(x @ W_v, n_heads)
    scores = q @ k.swapaxes(-1, -2) / np.sqrt(d_model // n_heads)
    if causal:
        scores[..., np.triu_indices(n, 1)[0], np.triu_indices(n, 1)[1]] = -np.inf
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights /= weights.sum(axis=-1, keepdims=True)
    out = weights @ v
    out = out.reshape(*batch, n, d_model)  # back to (..., n, d_model)
    return out @ W_o


def attention_flops(n, d_model, n_heads):
    # four (n, d) @ (d, d) projections, then per head two (n, n)-sized products of width d_head
    d_head = d_model // n_heads
    return 4 * (2 * n * d_model * d_model) + n_heads * 2 * (2 * n * n * d_head)
