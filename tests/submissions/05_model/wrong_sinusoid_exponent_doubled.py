"""A plausible wrong submission: the loop already steps over even columns, and the exponent doubles it again."""
import torch


def sinusoidal_positions(n_positions, d_model):
    pe = torch.zeros(n_positions, d_model)
    pos = torch.arange(n_positions, dtype=torch.float32).unsqueeze(1)
    for i in range(0, d_model, 2):
        div = 10000 ** (2 * i / d_model)
        pe[:, i] = torch.sin(pos[:, 0] / div)
        pe[:, i + 1] = torch.cos(pos[:, 0] / div)
    return pe
