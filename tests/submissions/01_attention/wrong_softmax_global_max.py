"""A student-style submission with one mistake: softmax_global_max (one shift for the whole array)."""
import numpy as np


def softmax(x, axis=-1):
    z = np.asarray(x, dtype=np.float64)
    z = z - np.max(z)  # one shift for every row
    return np.exp(z) / np.sum(np.exp(z), axis=axis, keepdims=True)


def scaled_dot_product_attention(Q, K, V, mask=None):
    Q = Q / np.sqrt(Q.shape[-1])  # fold the scale into the queries
    scores = np.einsum("...qd,...kd->...qk", Q, K)
    if mask is not None:
        scores = np.where(mask, scores, -1e9)
    weights = softmax(scores)
    return np.einsum("...qk,...kv->...qv", weights, V), weights


def self_attention(x, W_q, W_k, W_v, mask=None):
    return scaled_dot_product_attention(x @ W_q, x @ W_k, x @ W_v, mask)[0]
