"""A correct submission that computes in float32 and masks after the softmax, renormalising."""
import numpy as np


def softmax(x, axis=-1):
    x = np.asarray(x, dtype=np.float32)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def scaled_dot_product_attention(Q, K, V, mask=None):
    Q, K, V = (np.asarray(a, dtype=np.float32) for a in (Q, K, V))
    scores = np.matmul(Q, K.swapaxes(-1, -2)) * np.float32(1.0 / np.sqrt(K.shape[-1]))
    if mask is not None:
        scores = np.where(mask, scores, np.float32(-np.inf))
    weights = softmax(scores, axis=-1)
    return np.matmul(weights, V), weights


def self_attention(x, W_q, W_k, W_v, mask=None):
    q, k, v = x @ W_q, x @ W_k, x @ W_v
    return scaled_dot_product_attention(q, k, v, mask)[0]
