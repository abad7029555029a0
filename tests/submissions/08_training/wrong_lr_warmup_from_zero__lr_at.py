"""A warm-up of max_lr * step / warmup_steps (off by one). Only what the graded part runs is here: a
mistake is graded on its own part."""

import math


def lr_at(step, max_lr, warmup_steps, total_steps, min_lr):
    if step < warmup_steps:
        return max_lr * step / warmup_steps
    if step >= total_steps - 1:
        return min_lr
    progress = (step - warmup_steps) / max(1, total_steps - 1 - warmup_steps)
    return min_lr + (max_lr - min_lr) * 0.5 * (1 + math.cos(math.pi * progress))
