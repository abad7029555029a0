"""A plausible wrong submission: the frequencies multiplied by base ** (2i / d) instead of divided."""
import torch


def rope(x, positions=None, base=10000.0):
    T, d = x.shape[-2], x.shape[-1]
    if positions is None:
        positions = torch.arange(T)
    i = torch.arange(0, d, 2, dtype=torch.float64)
    angle = positions.double()[:, None] * base ** (i / d)
    cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)
