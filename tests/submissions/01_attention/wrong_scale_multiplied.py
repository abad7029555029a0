"""A student who multiplies the scores by sqrt(d_k) instead of dividing."""
import math

import numpy as np


def softmax(x, axis=-1):
    z = x - np.max(x, axis=axis, keepdims=True)
    e = np.exp(z)
    return e / np.sum(e, axis=axis, keepdims=True)


def scaled_dot_product_attention(Q, K, V, mask=None):
    scale = math.sqrt(K.shape[-1])
    scores = (Q @ K.swapaxes(-1, -2)) * scale
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    weights = softmax(scores, axis=-1)
    return weights @ V, weights


def self_attention(x, W_q, W_k, W_v, mask=None):
    Q, K, V = x @ W_q, x @ W_k, x @ W_v
    out, _ = scaled_dot_product_attention(Q, K, V, mask=mask)
    return out
