"""A small GPT already trained on the course corpus, for the chapters that need a real
next-token distribution (generation, sampling) or real learned attention heads (chapter 03)
without training one first.

The weights (`coursekit/data/tiny_gpt.pt`, float16, about 1 MB) are made by
`python3 course.py build --checkpoint` (`autograder/release/pretrain.py`), which also records how
they were made and the held-out loss they reached. Nothing is downloaded.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch

from .gpt import GPT, GPTConfig

CHECKPOINT = Path(__file__).resolve().parent / "data" / "tiny_gpt.pt"


def load_tiny_gpt(path: Path = CHECKPOINT) -> tuple[GPT, dict]:
    """(model in eval mode, float32; the checkpoint's record: config, steps, losses, seconds)."""
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: run `python3 course.py build --checkpoint` to make it")
    saved = torch.load(path, map_location="cpu", weights_only=True)
    model = GPT(GPTConfig(**saved["config"]))
    model.load_state_dict({name: value.float() for name, value in saved["state"].items()})
    return model.eval(), saved["record"]


def _byte_label(byte: int) -> str:
    # Printable ASCII (and the space) as itself; anything else as an escape such as '\n' or '\xc3'.
    return chr(byte) if 32 <= byte < 127 else repr(bytes([byte]))[2:-1]


@torch.no_grad()
def attention_maps(model: GPT, text: str) -> tuple[list[str], np.ndarray]:
    """The causal attention weights of every head of every layer of `model` on `text`.

    The text is read as UTF-8 bytes (one token per byte, as the model was trained) and must
    fit the model's context length. Returns `(tokens, weights)`: `tokens` is one label per
    byte (the character for printable ASCII, an escape such as '\\n' otherwise), and
    `weights` is a float64 NumPy array `(n_layers, n_heads, T, T)` whose `[l, h, i, j]` is
    how much query position `i` of head `h` in layer `l` reads key position `j` (rows sum to
    1, zero above the diagonal).

    The model's own attention layers never hand out their weights (they run a fused kernel),
    so a forward hook on each block's `attn` takes its input, the output of `ln1`, and
    recomputes the weights from the layer's query and key projections. The model's output
    and its training/eval mode are left untouched.
    """
    ids = list(text.encode("utf-8"))
    T, limit = len(ids), model.config.context_length
    if not 1 <= T <= limit:
        raise ValueError(f"the text is {T} bytes; it must be 1 to {limit} (the model's context length)")
    captured: list[torch.Tensor] = []

    def record(attn, inputs, _output):
        h = inputs[0]  # (1, T, C): what the block fed its attention, i.e. ln1(x)
        B, T_, C = h.shape
        nh = attn.n_heads
        hs = C // nh
        q = attn.q_proj(h).view(B, T_, nh, hs).transpose(1, 2)  # (1, nh, T, hs)
        k = attn.k_proj(h).view(B, T_, nh, hs).transpose(1, 2)
        scores = q @ k.transpose(-1, -2) / math.sqrt(hs)  # (1, nh, T, T)
        future = torch.ones(T_, T_, dtype=torch.bool, device=h.device).triu(1)
        captured.append(torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)[0])

    hooks = [block.attn.register_forward_hook(record) for block in model.blocks]
    was_training = model.training
    try:
        model.eval()
        model(torch.tensor([ids], dtype=torch.long, device=next(model.parameters()).device))
    finally:
        for hook in hooks:
            hook.remove()
        model.train(was_training)
    weights = torch.stack(captured).double().cpu().numpy()  # (n_layers, n_heads, T, T)
    return [_byte_label(b) for b in ids], weights
