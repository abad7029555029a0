"""The course's corpus as token ids of unit 08's reference tokenizer, cached on disk.

`course.py train` trains BPE merges on a slice of the training text and encodes the whole
corpus with them. Both are pure Python (the reference's `train_bpe` and `encode`), so they are
done once and kept under `.course_runs/tokens/`: the merges keyed by the Python version, the
vocabulary size and a hash of the text they were learned from; the ids keyed by the Python
version, the vocabulary size, a hash of the merges and a hash of the text encoded. A changed
standard library (another Python) or another vocabulary is a new key, never a stale hit.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from ..paths import ROOT

CACHE = ROOT / ".course_runs" / "tokens"


def _digest(data: str | bytes) -> str:
    return hashlib.sha256(data.encode("utf-8") if isinstance(data, str) else data).hexdigest()[:16]


def _python() -> str:
    return f"py{sys.version_info.major}.{sys.version_info.minor}"


def _write_atomically(path: Path, write) -> None:
    """Write to a temporary name and rename, so an interrupted run never leaves half a file
    that a later run would take for a cache hit."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    write(temporary)
    os.replace(temporary, path)


def merges_for(text: str, vocab_size: int, train_bpe, cache: Path = CACHE, log=print) -> list[tuple[int, int]]:
    """`train_bpe(text, vocab_size)`, or the merges a previous run learned from the same text."""
    path = cache / f"merges-{_python()}-v{vocab_size}-{_digest(text)}.json"
    if path.exists():
        return [tuple(pair) for pair in json.loads(path.read_text())]
    started = time.perf_counter()
    merges = [tuple(pair) for pair in train_bpe(text, vocab_size)]
    seconds = time.perf_counter() - started
    size = len(text.encode("utf-8"))
    log(f"BPE: {len(merges)} merges learned from {size / 1e6:.1f} MB in {seconds:.1f} s "
        f"({size / 1e6 / seconds:.2f} MB/s, once: cached in {path.parent})")
    _write_atomically(path, lambda p: p.write_text(json.dumps(merges)))
    return merges


def ids_for(text: str, merges, encode, what: str = "text", cache: Path = CACHE, log=print) -> np.ndarray:
    """`encode(text, merges)` as a 1-D int32 array, or the ids a previous run cached."""
    vocab_size = 256 + len(merges)
    path = cache / f"ids-{_python()}-v{vocab_size}-{_digest(json.dumps(merges))}-{_digest(text)}.npy"
    if path.exists():
        return np.load(path)
    started = time.perf_counter()
    ids = np.asarray(encode(text, merges), dtype=np.int32)
    seconds = time.perf_counter() - started
    size = len(text.encode("utf-8"))
    log(f"encoded the {what}: {size / 1e6:.1f} MB into {len(ids):,} tokens ({size / max(1, len(ids)):.2f} bytes "
        f"a token) in {seconds:.1f} s ({size / 1e6 / seconds:.2f} MB/s, once: cached)")

    def save(temporary: Path) -> None:
        with temporary.open("wb") as stream:  # a stream: np.save would add ".npy" to a path's name
            np.save(stream, ids)

    _write_atomically(path, save)
    return ids


def token_bytes(merges) -> list[bytes]:
    """The bytes each id stands for: 0..255 their byte, merge i (id 256 + i) its pair's joined."""
    table = [bytes([i]) for i in range(256)]
    for a, b in merges:
        table.append(table[a] + table[b])
    return table
