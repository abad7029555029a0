"""A plausible wrong submission: the table computed in float64 and returned without converting."""
import torch


def sinusoidal_positions(n_positions, d_model):
    p = torch.arange(n_positions, dtype=torch.float64)[:, None]
    w = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    pe = torch.zeros(n_positions, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(p * w)
    pe[:, 1::2] = torch.cos(p * w)
    return pe
