"""Unit 08, the recipe's functions: hidden checks and misconceptions.

(Being written: `PARTS` for cross_entropy, lr_at, clip_grad_norm, evaluate; `MISCONCEPTIONS`.)
"""

from __future__ import annotations

PARTS: tuple = ()
MISCONCEPTIONS: tuple = ()
