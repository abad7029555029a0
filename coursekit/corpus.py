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


# ---------------------------------------------------------------- unit 08: the standard library

HELD_OUT_ONE_IN = 10  # a file is held out when crc32(its name) % 10 == 0: about a tenth of the text


def stdlib_root():
    import sysconfig
    from pathlib import Path

    return Path(sysconfig.get_paths()["stdlib"])


@functools.cache
def stdlib_files() -> tuple[tuple[str, str], ...]:
    """((name, text), ...): every `.py` file of this Python's standard library (its tests too, not
    site-packages), plus the help pages as `pydoc_data/topics`, sorted by name. About 32 MB on
    CPython 3.11. The few files that are not valid UTF-8 (some tests keep them on purpose) are
    left out, so every text round-trips through `str.encode`."""
    from pydoc_data.topics import topics

    root = stdlib_root()
    files = [("pydoc_data/topics", "\n\n".join(topics[key] for key in sorted(topics)))]
    for path in sorted(root.rglob("*.py")):
        name = path.relative_to(root).as_posix()
        if name.startswith(("site-packages/", "dist-packages/")):
            continue
        try:
            files.append((name, path.read_bytes().decode("utf-8")))
        except (OSError, UnicodeDecodeError):
            continue
    return tuple(sorted(files))


def is_held_out(name: str) -> bool:
    """Decided by the file's name alone, so the split never cuts a file and never changes with
    the order files are found in."""
    import zlib

    return zlib.crc32(name.encode("utf-8")) % HELD_OUT_ONE_IN == 0


def stdlib_split(max_chars: int | None = None) -> tuple[str, str]:
    """(training text, held-out text): whole files, joined with a blank line, split by
    `is_held_out`. `max_chars` keeps each side's first files up to about that many characters
    (whole files only), for runs that need less text."""
    sides: dict[bool, list[str]] = {False: [], True: []}
    sizes = {False: 0, True: 0}
    for name, text in stdlib_files():
        side = is_held_out(name)
        if max_chars is not None and sizes[side] >= max_chars:
            continue
        sides[side].append(text)
        sizes[side] += len(text) + 2
    return "\n\n".join(sides[False]), "\n\n".join(sides[True])


def byte_baselines(train_bytes: bytes, held_bytes: bytes, scored_from: int = 0) -> dict[str, float]:
    """Held-out loss in nats per byte of the byte-level unigram and bigram models (counts from
    the training bytes, add-one smoothing) on the bytes `held_bytes[scored_from:]` (the byte
    before each is its bigram context): the bars any model of the text must clear, whatever
    its tokenizer."""
    import numpy as np

    train = np.frombuffer(train_bytes, dtype=np.uint8).astype(np.int64)
    held = np.frombuffer(held_bytes, dtype=np.uint8).astype(np.int64)
    unigram = np.log((np.bincount(train, minlength=256) + 1) / (len(train) + 256))
    pairs = np.bincount(train[:-1] * 256 + train[1:], minlength=256 * 256).reshape(256, 256) + 1
    bigram = np.log(pairs / pairs.sum(axis=1, keepdims=True))
    start = max(1, scored_from)  # the first byte has no context: scored from the second at the earliest
    return {"unigram": float(-unigram[held[start:]].mean()),
            "bigram": float(-bigram[held[start - 1:-1], held[start:]].mean())}


@functools.cache
def bigram_nats_per_byte() -> float:
    """The byte bigram's held-out loss on the whole corpus (`byte_baselines` of the training
    and held-out files)."""
    train, held = stdlib_split()
    return byte_baselines(train.encode("utf-8"), held.encode("utf-8"))["bigram"]
