"""A plausible wrong submission: pos_emb drawn at 0.01, as GPT-2's TensorFlow code did."""
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


class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.token_emb = nn.Embedding(config.vocab_size, config.d_model)
        self.pos_emb = nn.Embedding(config.context_length, config.d_model)
        self.blocks = nn.ModuleList(
            [TransformerBlock(config.d_model, config.n_heads, config.d_ff) for _ in range(config.n_layers)])
        self.ln_f = nn.LayerNorm(config.d_model)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        if config.tie_weights:
            self.lm_head.weight = self.token_emb.weight
        self.apply(self._init)
        nn.init.normal_(self.pos_emb.weight, std=0.01)  # as in GPT-2's released code
        for block in self.blocks:
            for layer in (block.attn.out_proj, block.ffn.fc2):
                nn.init.normal_(layer.weight, std=0.02 / (2 * config.n_layers) ** 0.5)

    @staticmethod
    def _init(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def forward(self, idx):
        B, T = idx.shape
        if T > self.config.context_length:
            raise ValueError(f"sequence length {T} exceeds context_length {self.config.context_length}")
        x = self.token_emb(idx) + self.pos_emb(torch.arange(T, device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))
