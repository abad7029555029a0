"""The course's training text: CPython's own help pages (`pydoc_data.topics`), about 465 KB
of English prose and code that ships with every Python, so nothing is downloaded.

Tokens are the text's UTF-8 bytes (vocabulary 256). The first 90% is for training and the
last 10% is held out, as unit 07's contract says.
"""

from __future__ import annotations

import functools

import torch

VOCAB_SIZE = 256
TRAIN_FRACTION = 0.9


@functools.cache
def corpus_bytes() -> bytes:
    from pydoc_data.topics import topics

    return "\n\n".join(topics[key] for key in sorted(topics)).encode("utf-8")


def split() -> tuple[torch.Tensor, torch.Tensor]:
    """(train, held_out): 1-D uint8 tensors of byte ids."""
    data = torch.frombuffer(bytearray(corpus_bytes()), dtype=torch.uint8)
    cut = int(TRAIN_FRACTION * len(data))
    return data[:cut].clone(), data[cut:].clone()


def encode(text: str) -> torch.Tensor:
    return torch.tensor(list(text.encode("utf-8")), dtype=torch.long)


def decode(ids) -> str:
    return bytes(int(i) for i in ids).decode("utf-8", errors="replace")
