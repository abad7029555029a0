"""A correct submission written differently from the reference: the sinusoid table and the
rotation filled in with loops over column pairs, the initialisation parameter by parameter, and
the count summed term by term."""
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
        self.token_emb = nn.Embedding(config.vocab_size, config.d_model)
        self.pos_emb = nn.Embedding(config.context_length, config.d_model)
        self.blocks = nn.ModuleList(
            TransformerBlock(config.d_model, config.n_heads, config.d_ff) for _ in range(config.n_layers))
        self.ln_f = nn.LayerNorm(config.d_model)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        if config.tie_weights:
            self.lm_head.weight = self.token_emb.weight
        for name, p in self.named_parameters():  # GPT-2's initialisation, parameter by parameter
            if name.startswith("blocks.") and ".ln" in name:
                continue  # the LayerNorms keep weight 1, bias 0
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif name.endswith(("out_proj.weight", "fc2.weight")):
                nn.init.normal_(p, std=0.02 / (2 * config.n_layers) ** 0.5)
            elif not name.startswith("ln_f"):
                nn.init.normal_(p, std=0.02)

    def forward(self, idx):
        T = idx.shape[1]
        if T > self.config.context_length:
            raise ValueError(f"{T} tokens, but the context length is {self.config.context_length}")
        x = self.token_emb(idx) + self.pos_emb(torch.arange(T, device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))


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


