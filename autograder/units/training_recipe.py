"""Unit 08, second half: the training recipe's hidden checks and misconceptions.

(Being written: `PARTS` for cross_entropy, lr_at, clip_grad_norm, evaluate, save_checkpoint,
load_checkpoint, train_loop; `MISCONCEPTIONS`; `CELL_SECONDS`; `WORKER_IMPORTS`.)
"""

from __future__ import annotations

PARTS: tuple = ()
MISCONCEPTIONS: tuple = ()
CELL_SECONDS = 30
WORKER_IMPORTS: tuple = ()
