"""A small GPT already trained on the course corpus, for the chapters that need a real
next-token distribution (generation, sampling) without training one first.

The weights (`coursekit/data/tiny_gpt.pt`, float16, about 1 MB) are made by
`python3 course.py build --checkpoint` (`autograder/pretrain.py`), which also records how
they were made and the held-out loss they reached. Nothing is downloaded.
"""

from __future__ import annotations

from pathlib import Path

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
