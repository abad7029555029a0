"""Random weights for the modules the graders build, one recipe for every unit.

Matrices are drawn with standard deviation 1/sqrt(fan_in), so activations keep their scale
through a deep stack and a model's next-token distributions are neither uniform nor
one-hot; 1-D weights (norm gains) sit near 1 and 1-D biases near 0.
"""

from __future__ import annotations

import math

import torch


def random_state(module: torch.nn.Module, seed: int, dtype=torch.float32, gain_spread: float = 0.2,
                 bias_spread: float = 0.1) -> dict:
    """A state dict for `module`'s parameter names and shapes, drawn from `seed`."""
    generator = torch.Generator().manual_seed(seed)
    state = {}
    for name, value in module.state_dict().items():
        noise = torch.randn(value.shape, generator=generator, dtype=torch.float64)
        if value.ndim == 1:
            state[name] = ((1.0 + gain_spread * noise) if name.endswith("weight") else bias_spread * noise).to(dtype)
        else:
            state[name] = (noise / math.sqrt(value.shape[-1])).to(dtype)
    return state
