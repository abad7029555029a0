"""A student whose softmax exponentiates the raw inputs."""
import numpy as np


def softmax(x, axis=-1):
    e = np.exp(x)
    return e / np.sum(e, axis=axis, keepdims=True)


def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = Q @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1])
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    e = np.exp(scores)
    weights = e / e.sum(axis=-1, keepdims=True)
    return weights @ V, weights


def self_attention(x, W_q, W_k, W_v, mask=None):
    return scaled_dot_product_attention(x @ W_q, x @ W_k, x @ W_v, mask)[0]
