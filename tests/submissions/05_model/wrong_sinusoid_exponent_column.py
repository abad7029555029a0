"""A plausible wrong submission: the exponent taken from the column j itself, so each cosine
turns at (j / d_model), a little slower than the sine beside it."""
import math

import torch


def sinusoidal_positions(n_positions, d_model):
    table = torch.zeros(n_positions, d_model)
    for pos in range(n_positions):
        for j in range(d_model):
            angle = pos / 10000 ** (j / d_model)
            table[pos, j] = math.sin(angle) if j % 2 == 0 else math.cos(angle)
    return table
