"""A student who counts the four weight matrices' products and nothing else."""

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
    scores = Q @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1])
    if causal:
        scores = np.where(np.tril(np.ones((n, n))) > 0, scores, -1e30)
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights = weights / weights.sum(axis=-1, keepdims=True)
    return merge_heads(weights @ V) @ W_o


def attention_flops(n, d_model, n_heads):
    # the four (n, d) @ (d, d) projections: the weights are where the work is
    return 4 * (2 * n * d_model * d_model)
