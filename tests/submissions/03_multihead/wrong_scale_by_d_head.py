"""A student who divides each head's scores by d_head, forgetting the square root."""

import numpy as np


def split_heads(x, n_heads):
    d_head = x.shape[-1] // n_heads
    return np.stack([x[..., i * d_head:(i + 1) * d_head] for i in range(n_heads)], axis=-3)


def merge_heads(x):
    return np.concatenate(list(np.moveaxis(x, -3, 0)), axis=-1)


def multi_head_attention(x, W_q, W_k, W_v, W_o, n_heads, causal=True):
    Q = split_heads(x @ W_q, n_heads)
    K = split_heads(x @ W_k, n_heads)
    V = split_heads(x @ W_v, n_heads)
    n = x.shape[-2]
    d_head = Q.shape[-1]
    scores = Q @ np.swapaxes(K, -1, -2) / d_head
    if causal:
        scores = np.where(np.tril(np.ones((n, n))) > 0, scores, -1e30)
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights = weights / weights.sum(axis=-1, keepdims=True)
    return merge_heads(weights @ V) @ W_o


def attention_flops(n, d_model, n_heads):
    # four (n, d) @ (d, d) projections, then per head two (n, n)-sized products of width d_head
    d_head = d_model // n_heads
    return 4 * (2 * n * d_model * d_model) + n_heads * 2 * (2 * n * n * d_head)
