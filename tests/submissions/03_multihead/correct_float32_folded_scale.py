"""A correct submission in float32, with 1/sqrt(d_head) folded into the query weights,
and heads made with np.split / np.stack."""

import numpy as np


def split_heads(x, n_heads):
    return np.stack(np.split(x, n_heads, axis=-1), axis=-3)


def merge_heads(x):
    parts = np.split(x, x.shape[-3], axis=-3)  # each (..., 1, n, d_head)
    return np.concatenate([p.squeeze(-3) for p in parts], axis=-1)


def multi_head_attention(x, W_q, W_k, W_v, W_o, n_heads, causal=True):
    x = x.astype(np.float32)
    d_head = x.shape[-1] // n_heads
    W_q_scaled = (W_q / np.sqrt(d_head)).astype(np.float32)  # a new array: W_q is left alone
    q = split_heads(x @ W_q_scaled, n_heads)
    k = split_heads(x @ W_k.astype(np.float32), n_heads)
    v = split_heads(x @ W_v.astype(np.float32), n_heads)
    scores = q @ k.swapaxes(-1, -2)  # already divided by sqrt(d_head)
    if causal:
        n = x.shape[-2]
        scores = scores + np.triu(np.full((n, n), -np.inf, dtype=np.float32), k=1)
    scores -= scores.max(axis=-1, keepdims=True)  # scores is our own array: fine to change
    weights = np.exp(scores)
    weights /= weights.sum(axis=-1, keepdims=True)
    return merge_heads(weights @ v) @ W_o.astype(np.float32)


def attention_flops(n, d_model, n_heads):
    # four (n, d) @ (d, d) projections, then per head two (n, n)-sized products of width d_head
    d_head = d_model // n_heads
    return 4 * (2 * n * d_model * d_model) + n_heads * 2 * (2 * n * n * d_head)
