"""A correct submission: masks from np.arange comparisons, float32 attention, a finite-difference detector."""

import numpy as np


def softmax(x, axis=-1):
    shifted = x - np.max(x, axis=axis, keepdims=True)
    e = np.exp(shifted)
    return e / np.sum(e, axis=axis, keepdims=True)


def scaled_dot_product_attention(Q, K, V, mask=None):
    s = np.matmul(Q, np.swapaxes(K, -1, -2)) / np.sqrt(Q.shape[-1])
    if mask is not None:
        s = np.where(mask, s, -np.inf)
    w = softmax(s)
    return np.matmul(w, V), w


def self_attention(x, W_q, W_k, W_v, mask=None):
    out, _ = scaled_dot_product_attention(x @ W_q, x @ W_k, x @ W_v, mask=mask)
    return out


def causal_mask(n):
    rows = np.arange(n)[:, None]
    cols = np.arange(n)[None, :]
    return cols <= rows


def causal_self_attention(x, W_q, W_k, W_v):
    x32 = x.astype(np.float32)
    q = x32 @ W_q.astype(np.float32)
    k = x32 @ W_k.astype(np.float32)
    v = x32 @ W_v.astype(np.float32)
    s = q @ np.swapaxes(k, -1, -2) / np.float32(np.sqrt(q.shape[-1]))
    s = np.where(causal_mask(x.shape[-2]), s, np.float32(-np.inf))
    w = softmax(s)
    return w @ v


def next_token_pairs(tokens):
    n = tokens.shape[-1]
    inputs = tokens[..., np.arange(n - 1)]
    targets = tokens[..., np.arange(1, n)]
    return inputs, targets


def looks_causal(attn_fn, n=8, d=4, trials=3, seed=0):
    # Finite differences: nudge each later input entry and estimate d out[:i+1] / d x[j, k].
    rng = np.random.default_rng(seed)
    eps = 1e-3
    for _ in range(trials):
        x = rng.normal(size=(n, d))
        for j in range(1, n):
            for k in range(d):
                plus, minus = x.copy(), x.copy()
                plus[j, k] += eps
                minus[j, k] -= eps
                slope = (np.asarray(attn_fn(plus)) - np.asarray(attn_fn(minus))) / (2 * eps)
                if np.abs(slope[:j]).max() > 1e-7:  # round-off gives ~1e-13 here
                    return False
        # finite differences only see the slope near x: also try a big jump of all later inputs
        for i in range(n - 1):
            far = x.copy()
            far[i + 1:] = rng.normal(size=(n - i - 1, d)) * 3.0
            if not np.allclose(np.asarray(attn_fn(far))[: i + 1], np.asarray(attn_fn(x))[: i + 1], rtol=0, atol=1e-9):
                return False
    return True
