"""Figures the chapters and exercises share: attention weights as heat maps."""

from __future__ import annotations

import numpy as np


def attention_heatmap(weights, query_labels=None, key_labels=None, ax=None, title=None,
                      annotate=True, cmap="Blues"):
    """Draw a `(n_q, n_k)` matrix of attention weights: row i is what query i reads.

    Masked (zero) weights show as white; with `annotate`, each cell prints its weight.
    Returns the matplotlib Axes.
    """
    import matplotlib.pyplot as plt

    weights = np.asarray(weights, dtype=float)
    if weights.ndim != 2:
        raise ValueError(f"attention_heatmap wants a 2-D (n_q, n_k) array, got shape {weights.shape}")
    n_q, n_k = weights.shape
    if ax is None:
        _, ax = plt.subplots(figsize=(0.6 * n_k + 2, 0.5 * n_q + 1.5))
    ax.imshow(weights, cmap=cmap, vmin=0.0, vmax=max(1e-12, float(weights.max())))
    ax.set_xticks(range(n_k), key_labels if key_labels is not None else range(n_k),
                  rotation=45, ha="right")
    ax.set_yticks(range(n_q), query_labels if query_labels is not None else range(n_q))
    ax.set_xlabel("key (attended to)")
    ax.set_ylabel("query (attending)")
    if title:
        ax.set_title(title)
    if annotate and n_q * n_k <= 200:
        for i in range(n_q):
            for j in range(n_k):
                w = weights[i, j]
                colour = "white" if w > 0.6 * weights.max() else "black"
                ax.text(j, i, f"{w:.2f}", ha="center", va="center", fontsize=7, color=colour)
    return ax
