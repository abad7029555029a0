"""A correct submission whose GPT keeps its position ids in a persistent buffer
(`register_buffer("pos_ids", torch.arange(context_length))`): the contract neither asks for nor
forbids one, so it must get full marks (issue 18). The other parts as in correct_loops.py."""
import math
from dataclasses import dataclass

import torch
from torch import nn

from coursekit.blocks import TransformerBlock


@dataclass
class GPTConfig:
    vocab_size: int
    context_length: int
    d_model: int
    n_layers: int
    n_heads: int
    d_ff: int | None = None
    tie_weights: bool = True


def sinusoidal_positions(n_positions, d_model):
    table = torch.zeros(n_positions, d_model)
    position = torch.arange(n_positions, dtype=torch.float64)
    for i in range(0, d_model, 2):
        angle = position / (10000.0 ** (i / d_model))
        table[:, i] = torch.sin(angle).float()
        table[:, i + 1] = torch.cos(angle).float()
    return table


class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        V, T, d = config.vocab_size, config.context_length, config.d_model
        self.token_emb = nn.Embedding(V, d)
        self.pos_emb = nn.Embedding(T, d)
        # The position ids kept in a (persistent) buffer: in the state_dict, but not a parameter.
        self.register_buffer("pos_ids", torch.arange(T))
        self.blocks = nn.ModuleList([TransformerBlock(d, config.n_heads, config.d_ff) for _ in range(config.n_layers)])
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, V, bias=False)
        if config.tie_weights:
            self.lm_head.weight = self.token_emb.weight
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith(("out_proj.weight", "fc2.weight")):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layers))

    @staticmethod
    def _init_weights(module):
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx):
        T = idx.size(1)
        if T > self.config.context_length:
            raise ValueError(f"cannot forward {T} tokens: context_length is {self.config.context_length}")
        return self.lm_head(self.ln_f(self._stream(idx, self.pos_ids[:T])))

    def _stream(self, idx, positions):
        x = self.token_emb(idx) + self.pos_emb(positions)
        for block in self.blocks:
            x = block(x)
        return x


def count_parameters(config):
    return sum(parameter_breakdown(config).values())


def parameter_breakdown(config):
    d, L = config.d_model, config.n_layers
    d_ff = config.d_ff if config.d_ff is not None else 4 * d
    per_block_attention = 4 * (d * d + d)
    per_block_ffn = (d * d_ff + d_ff) + (d_ff * d + d)
    per_block_norms = 2 * (2 * d)
    return {
        "embeddings": config.vocab_size * d + config.context_length * d,
        "attention": L * per_block_attention,
        "ffn": L * per_block_ffn,
        "norms": L * per_block_norms + 2 * d,
        "lm_head": 0 if config.tie_weights else config.vocab_size * d,
    }


def rope(x, positions=None, base=10000.0):
    T, d = x.shape[-2], x.shape[-1]
    if positions is None:
        positions = torch.arange(T)
    out = x.clone()
    for i in range(0, d, 2):
        theta = positions.to(torch.float64) * base ** (-i / d)
        cos, sin = torch.cos(theta).to(x.dtype), torch.sin(theta).to(x.dtype)
        a, b = x[..., :, i], x[..., :, i + 1]
        out[..., :, i] = a * cos - b * sin
        out[..., :, i + 1] = a * sin + b * cos
    return out


