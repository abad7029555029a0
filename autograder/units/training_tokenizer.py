"""Unit 08, first half: the byte-level BPE tokenizer's hidden checks and misconceptions.

(Being written: `PARTS` for pretokenize, train_bpe, encode, decode; `MISCONCEPTIONS`; `SAMPLE_BUG`.)
"""

from __future__ import annotations

PARTS: tuple = ()
MISCONCEPTIONS: tuple = ()
SAMPLE_BUG = None
