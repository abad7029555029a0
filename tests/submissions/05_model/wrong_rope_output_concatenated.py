"""A plausible wrong submission: neighbouring pairs rotated, but the results concatenated instead of interleaved."""
import torch


def rope(x, positions=None, base=10000.0):
    T, d = x.shape[-2:]
    if positions is None:
        positions = torch.arange(T)
    freqs = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    ang = positions[:, None].double() * freqs
    cos, sin = torch.cos(ang).to(x.dtype), torch.sin(ang).to(x.dtype)
    a, b = x[..., ::2], x[..., 1::2]
    return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)
