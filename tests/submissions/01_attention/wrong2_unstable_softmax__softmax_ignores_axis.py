"""Two mistakes in one part: a softmax that never subtracts the maximum and always sums over the
last axis. Each shows in a check of its own (large inputs; axis=1), so both are named there."""

import numpy as np


def softmax(x, axis=-1):
    e = np.exp(x)
    return e / e.sum(axis=-1, keepdims=True)
