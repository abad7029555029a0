"""What unit 08's training loop is told: one object with every setting of a run.

`train_loop(model, train_ids, heldout_ids, config)` (exercise 08) reads these by name; the
hidden graders and `course.py train` build one the same way.
"""

from __future__ import annotations

import types
from dataclasses import dataclass


@dataclass
class TrainConfig:
    total_steps: int = 200
    batch_size: int = 16
    context_length: int = 64
    max_lr: float = 3e-3
    min_lr: float = 3e-4
    warmup_steps: int = 20
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    eval_every: int = 50  # evaluate on the held-out ids after steps eval_every, 2 * eval_every, ...
    patience: int = 3  # stop after this many evaluations in a row without a new best
    seed: int = 0
    # Resuming: save a checkpoint every `checkpoint_every` steps to `checkpoint_path`, and start
    # from the checkpoint at `resume_from` instead of from scratch.
    checkpoint_path: str | None = None
    checkpoint_every: int = 0
    resume_from: str | None = None
    # End this run after this step (the schedule still counts to total_steps), as a job with a
    # time limit would: with a checkpoint, a later run resumes where it stopped.
    stop_after: int | None = None


def process_modules() -> types.SimpleNamespace:
    """Python's `random`, NumPy and torch, as this process has them. Not for students: unit 08's
    hidden graders build this in the process that runs a student's code, to seed and read its
    random generators and to build an AdamW there, by handle."""
    import random

    import numpy
    import torch

    return types.SimpleNamespace(random=random, numpy=numpy, torch=torch)
