"""A plausible wrong submission: n_heads before n_layers."""
from dataclasses import dataclass


@dataclass
class GPTConfig:
    vocab_size: int
    context_length: int
    d_model: int
    n_heads: int
    n_layers: int
    d_ff: int | None = None
    tie_weights: bool = True
