"""Each gradient replaced by a scaled copy (p.grad = p.grad * scale) rather than scaled in place.
Only what the graded part runs is here: a mistake is graded on its own part."""

import torch


def clip_grad_norm(parameters, max_norm):
    params = [p for p in parameters if p.grad is not None]
    total_norm = torch.norm(torch.stack([p.grad.detach().norm() for p in params]))
    scale = min(1.0, max_norm / (float(total_norm) + 1e-6))
    for p in params:
        p.grad = p.grad * scale
    return total_norm
