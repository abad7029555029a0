"""A plausible wrong submission: the weights drawn as GPT-2 does, the biases left as
nn.Linear draws them."""
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
        std = 0.02
        for name, module in self.named_modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                scale = (2 * config.n_layers) ** -0.5 if name.endswith(("out_proj", "fc2")) else 1.0
                nn.init.normal_(module.weight, mean=0.0, std=std * scale)

    def forward(self, idx):
        B, T = idx.shape
        if T > self.config.context_length:
            raise ValueError(f"sequence length {T} exceeds context_length {self.config.context_length}")
        x = self.token_emb(idx) + self.pos_emb(torch.arange(T, device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))
