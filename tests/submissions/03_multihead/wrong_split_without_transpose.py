"""A student who reshapes straight into heads (and straight back): the shapes are right,
so nothing complains, but each 'head' holds pieces of several tokens."""

import numpy as np


def softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def split_heads(x, n_heads):
    n, d_model = x.shape[-2], x.shape[-1]
    return x.reshape(*x.shape[:-2], n_heads, n, d_model // n_heads)


def merge_heads(x):
    n_heads, n, d_head = x.shape[-3:]
    return x.reshape(*x.shape[:-3], n, n_heads * d_head)


def multi_head_attention(x, W_q, W_k, W_v, W_o, n_heads, causal=True):
    q = split_heads(x @ W_q, n_heads)
    k = split_heads(x @ W_k, n_heads)
    v = split_heads(x @ W_v, n_heads)
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    if causal:
        n = x.shape[-2]
        scores = np.where(np.tril(np.ones((n, n), dtype=bool)), scores, -np.inf)
    return merge_heads(softmax(scores) @ v) @ W_o


def attention_flops(n, d_model, n_heads):
    # four (n, d) @ (d, d) projections, then per head two (n, n)-sized products of width d_head
    d_head = d_model // n_heads
    return 4 * (2 * n * d_model * d_model) + n_heads * 2 * (2 * n * n * d_head)
