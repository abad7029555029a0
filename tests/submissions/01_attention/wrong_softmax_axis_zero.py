"""A student who normalises down the columns: the max and the sum are taken along axis 0."""
import numpy as np


def softmax(x, axis=-1):
    e = np.exp(x - np.max(x, axis=0, keepdims=True))
    return e / np.sum(e, axis=0, keepdims=True)


def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = Q @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1])
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    weights = softmax(scores, axis=-1)
    return weights @ V, weights


def self_attention(x, W_q, W_k, W_v, mask=None):
    out, _ = scaled_dot_product_attention(x @ W_q, x @ W_k, x @ W_v, mask=mask)
    return out
