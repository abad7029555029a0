"""A student who divides by the largest exponential, mixing up the stability shift with the normalisation."""
import numpy as np


def softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.max(axis=axis, keepdims=True)


def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = np.einsum("...qd,...kd->...qk", Q, K) / np.sqrt(Q.shape[-1])
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    weights = softmax(scores, axis=-1)
    return weights @ V, weights


def self_attention(x, W_q, W_k, W_v, mask=None):
    out, _weights = scaled_dot_product_attention(x @ W_q, x @ W_k, x @ W_v, mask=mask)
    return out
