"""A correct submission: np.tri, an additive -1e9 mask with einsum, np.delete, all-later-positions detector."""

import numpy as np


def softmax(x, axis=-1):
    m = np.max(x, axis=axis, keepdims=True)
    z = np.exp(x - m)
    return z / z.sum(axis=axis, keepdims=True)


def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = np.einsum("...qd,...kd->...qk", Q, K) / np.sqrt(Q.shape[-1])
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    weights = softmax(scores, axis=-1)
    return np.einsum("...qk,...kd->...qd", weights, V), weights


def self_attention(x, W_q, W_k, W_v, mask=None):
    return scaled_dot_product_attention(x @ W_q, x @ W_k, x @ W_v, mask=mask)[0]


def causal_mask(n):
    return np.tri(n, n, dtype=bool)


def causal_self_attention(x, W_q, W_k, W_v):
    n = x.shape[-2]
    q = np.einsum("...nd,dk->...nk", x, W_q)
    k = np.einsum("...nd,dk->...nk", x, W_k)
    v = np.einsum("...nd,dk->...nk", x, W_v)
    bias = np.where(np.tri(n, dtype=bool), 0.0, -1e9)  # additive mask: 0 allowed, -1e9 forbidden
    scores = np.einsum("...ik,...jk->...ij", q, k) / np.sqrt(q.shape[-1]) + bias
    weights = softmax(scores, axis=-1)
    return np.einsum("...ij,...jk->...ik", weights, v)


def next_token_pairs(tokens):
    inputs = np.delete(tokens, -1, axis=-1)
    targets = np.delete(tokens, 0, axis=-1)
    return inputs, targets


def looks_causal(attn_fn, n=8, d=4, trials=3, seed=0):
    rng = np.random.default_rng(seed)
    leak = False
    for _ in range(trials):
        x = rng.uniform(-3.0, 3.0, size=(n, d))
        reference = np.array(attn_fn(x.copy()), dtype=float)
        for i in range(n - 1):
            y = x.copy()
            y[i + 1:] = rng.uniform(-3.0, 3.0, size=(n - i - 1, d))
            diff = np.abs(np.array(attn_fn(y), dtype=float)[: i + 1] - reference[: i + 1])
            leak = leak or bool(diff.max() > 1e-9)
    return not leak
