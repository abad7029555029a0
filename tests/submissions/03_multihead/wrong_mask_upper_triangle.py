"""A student who builds the causal mask with np.triu: every token reads the future."""

import numpy as np


def softmax(x, axis=-1):
    x = x - np.max(x, axis=axis, keepdims=True)
    return np.exp(x) / np.sum(np.exp(x), axis=axis, keepdims=True)


def split_heads(x, n_heads):
    *lead, n, d_model = x.shape
    return np.swapaxes(x.reshape(*lead, n, n_heads, d_model // n_heads), -3, -2)


def merge_heads(x):
    *lead, n_heads, n, d_head = x.shape
    return np.swapaxes(x, -3, -2).reshape(*lead, n, n_heads * d_head)


def multi_head_attention(x, W_q, W_k, W_v, W_o, n_heads, causal=True):
    q = split_heads(x @ W_q, n_heads)
    k = split_heads(x @ W_k, n_heads)
    v = split_heads(x @ W_v, n_heads)
    d_head = q.shape[-1]
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(d_head)
    if causal:
        n = scores.shape[-1]
        mask = np.triu(np.ones((n, n), dtype=bool))
        scores = np.where(mask, scores, -np.inf)
    return merge_heads(softmax(scores, axis=-1) @ v) @ W_o


def attention_flops(n, d_model, n_heads):
    # four (n, d) @ (d, d) projections, then per head two (n, n)-sized products of width d_head
    d_head = d_model // n_heads
    return 4 * (2 * n * d_model * d_model) + n_heads * 2 * (2 * n * n * d_head)
