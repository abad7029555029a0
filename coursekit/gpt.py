"""A working GPT for units 06 and 07, so that they never depend on unit 05's answers.

It has the unit-05 contract's interface and attribute names (`config`, `token_emb`, `pos_emb`,
`blocks`, `ln_f`, `lm_head`), built from `coursekit.blocks.TransformerBlock`, so weights load
into it by name and the generation exercise can read its parts. Unit 05's exercise asks the
student to write this model; its grader refuses a `GPT` that merely subclasses or re-exports
this one (see `autograder/units/model.py`).

Shapes: B = batch, T = sequence length, C = d_model, V = vocab_size.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from .blocks import TransformerBlock


@dataclass
class GPTConfig:
    vocab_size: int
    context_length: int
    d_model: int
    n_layers: int
    n_heads: int
    d_ff: int | None = None
    tie_weights: bool = True


class GPT(nn.Module):
    """Token ids (B, T) -> next-token logits (B, T, V)."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.token_emb = nn.Embedding(config.vocab_size, config.d_model)
        self.pos_emb = nn.Embedding(config.context_length, config.d_model)
        self.blocks = nn.ModuleList(
            TransformerBlock(config.d_model, config.n_heads, config.d_ff) for _ in range(config.n_layers))
        self.ln_f = nn.LayerNorm(config.d_model)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        if config.tie_weights:
            self.lm_head.weight = self.token_emb.weight  # one Parameter, two uses
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module):
        # GPT-2's: small normal weights, so the first logits are near uniform (PyTorch's
        # default N(0, 1) embeddings, tied to the output layer, would give logits of ~sqrt(d)).
        if isinstance(module, nn.Linear | nn.Embedding):
            nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, idx):
        B, T = idx.shape
        if T > self.config.context_length:
            raise ValueError(f"a sequence of {T} tokens is longer than context_length "
                             f"{self.config.context_length}")
        positions = torch.arange(T, device=idx.device)  # (T,)
        x = self.token_emb(idx) + self.pos_emb(positions)  # (B, T, C)
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))  # (B, T, V)
