"""A student-style submission with one mistake: seq_len_from_first_axis (len(x) as the sequence length)."""

import numpy as np


def split_heads(x, n_heads):
    d_head = x.shape[-1] // n_heads
    grouped = x.reshape(x.shape[:-1] + (n_heads, d_head))  # (..., n, h, d_head)
    return np.einsum("...nhd->...hnd", grouped)


def merge_heads(x):
    tokens_first = np.einsum("...hnd->...nhd", x)
    return tokens_first.reshape(tokens_first.shape[:-2] + (-1,))


def multi_head_attention(x, W_q, W_k, W_v, W_o, n_heads, causal=True):
    q = split_heads(np.einsum("...nd,de->...ne", x, W_q), n_heads)
    k = split_heads(np.einsum("...nd,de->...ne", x, W_k), n_heads)
    v = split_heads(np.einsum("...nd,de->...ne", x, W_v), n_heads)
    d_head = q.shape[-1]
    scores = np.einsum("...qd,...kd->...qk", q, k) / np.sqrt(d_head)
    if causal:
        n = len(x)
        future = np.arange(n)[None, :] > np.arange(n)[:, None]
        scores = np.where(future, -1e9, scores)
    scores = scores - scores.max(axis=-1, keepdims=True)
    weights = np.exp(scores)
    weights = weights / weights.sum(axis=-1, keepdims=True)
    heads = np.einsum("...qk,...kd->...qd", weights, v)
    return np.einsum("...nd,de->...ne", merge_heads(heads), W_o)


def attention_flops(n, d_model, n_heads):
    # four (n, d) @ (d, d) projections, then per head two (n, n)-sized products of width d_head
    d_head = d_model // n_heads
    return 4 * (2 * n * d_model * d_model) + n_heads * 2 * (2 * n * n * d_head)
