"""A student who zeroes the masked weights after the softmax."""
import numpy as np


def softmax(x, axis=-1):
    shifted = x - x.max(axis=axis, keepdims=True)
    return np.exp(shifted) / np.exp(shifted).sum(axis=axis, keepdims=True)


def scaled_dot_product_attention(Q, K, V, mask=None):
    d_k = K.shape[-1]
    weights = softmax(np.matmul(Q, np.swapaxes(K, -2, -1)) / d_k**0.5)
    if mask is not None:
        weights = weights * mask
    return weights @ V, weights


def self_attention(x, W_q, W_k, W_v, mask=None):
    return scaled_dot_product_attention(x @ W_q, x @ W_k, x @ W_v, mask)[0]
