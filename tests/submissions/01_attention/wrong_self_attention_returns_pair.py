"""A student whose self_attention hands back everything scaled_dot_product_attention returned."""
import numpy as np


def softmax(x, axis=-1):
    x = x - x.max(axis=axis, keepdims=True)
    return np.exp(x) / np.exp(x).sum(axis=axis, keepdims=True)


def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = Q @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1])
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    weights = softmax(scores)
    return weights @ V, weights


def self_attention(x, W_q, W_k, W_v, mask=None):
    q = x @ W_q
    k = x @ W_k
    v = x @ W_v
    return scaled_dot_product_attention(q, k, v, mask=mask)
