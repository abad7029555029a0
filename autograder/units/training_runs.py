"""Unit 08, the runs: hidden checks and misconceptions for save_checkpoint, load_checkpoint, train_loop.

(Being written: `PARTS`, `MISCONCEPTIONS`, `WORKER_IMPORTS`.)
"""

from __future__ import annotations

PARTS: tuple = ()
MISCONCEPTIONS: tuple = ()
WORKER_IMPORTS: tuple = ()
