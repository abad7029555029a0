"""Figures the chapters and exercises share: attention weights as heat maps."""

from __future__ import annotations

import numpy as np


def attention_heatmap(weights, query_labels=None, key_labels=None, ax=None, title=None,
                      annotate=True, cmap="Blues", vmax=1.0, colorbar=True):
    """Draw a `(n_q, n_k)` matrix of attention weights: row i is what query i reads.

    The colour scale is fixed, 0 to `vmax` (1 by default: a weight is a probability), so
    two figures can be compared by eye; a colour bar says so. Masked (zero) weights show as
    white; with `annotate`, each cell prints its weight. Returns the matplotlib Axes.
    """
    import matplotlib.pyplot as plt

    weights = np.asarray(weights, dtype=float)
    if weights.ndim != 2:
        raise ValueError(f"attention_heatmap wants a 2-D (n_q, n_k) array, got shape {weights.shape}")
    n_q, n_k = weights.shape
    if ax is None:
        _, ax = plt.subplots(figsize=(0.6 * n_k + 2.8, 0.5 * n_q + 1.5))
    image = ax.imshow(weights, cmap=cmap, vmin=0.0, vmax=vmax)
    ax.set_xticks(range(n_k), key_labels if key_labels is not None else range(n_k),
                  rotation=45, ha="right")
    ax.set_yticks(range(n_q), query_labels if query_labels is not None else range(n_q))
    ax.set_xlabel("key (attended to)")
    ax.set_ylabel("query (attending)")
    if title:
        ax.set_title(title)
    if colorbar:
        ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label="weight")
    if annotate and n_q * n_k <= 200:
        for i in range(n_q):
            for j in range(n_k):
                w = weights[i, j]
                colour = "white" if w > 0.6 * vmax else "black"
                ax.text(j, i, f"{w:.2f}", ha="center", va="center", fontsize=8, color=colour)
    return ax
