"""A student who forgot the 1/sqrt(d_k) scale."""
import numpy as np


def softmax(x, axis=-1):
    x = x - np.max(x, axis=axis, keepdims=True)
    e = np.exp(x)
    return e / np.sum(e, axis=axis, keepdims=True)


def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = Q @ np.swapaxes(K, -1, -2)
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    w = softmax(scores)
    return w @ V, w


def self_attention(x, W_q, W_k, W_v, mask=None):
    Q, K, V = x @ W_q, x @ W_k, x @ W_v
    scores = Q @ np.swapaxes(K, -1, -2)
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    return softmax(scores) @ V
