"""Library code standing in for the student's own recipe functions while a part that calls them
is graded (unit 08's `train_loop`), so that a wrong loss, clip, evaluation or checkpoint costs
its own part's points once, and not `train_loop`'s as well.

They run in the student's worker, beside the student's code, because what they take cannot
cross to the grader: the autograd graph (`cross_entropy`), the parameters whose gradients are
scaled in place (`clip_grad_norm`), the model itself (`evaluate`, and the checkpoints).
`train_loop`'s checks compare trained weights with the reference's run, so these do the same
arithmetic in the same order as the reference notebook's functions: bit for bit the same
results, which tests/test_stand_ins.py holds them to (and the reference graded through them keeps
full marks). They follow the contract (../shared/CURRICULUM.md) and nothing more.
"""

from __future__ import annotations

import random

import numpy as np
import torch


def cross_entropy(logits, targets):
    logits = logits.reshape(-1, logits.shape[-1]).float()  # (N, V)
    targets = targets.reshape(-1)  # (N,)
    picked = logits.gather(1, targets.unsqueeze(1)).squeeze(1)
    return (torch.logsumexp(logits, dim=1) - picked).mean()


def clip_grad_norm(parameters, max_norm):
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return torch.tensor(0.0)
    total_norm = torch.sqrt(sum((g.detach().float() ** 2).sum() for g in grads))
    scale = min(1.0, max_norm / (total_norm.item() + 1e-6))
    for g in grads:
        g.mul_(scale)
    return total_norm


def evaluate(model, data, batch_size, context_length):
    C = context_length
    data = torch.as_tensor(data, dtype=torch.long)
    starts = list(range(0, len(data) - C, C))  # window i needs data[i : i + C + 1]
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    try:
        with torch.no_grad():
            for first in range(0, len(starts), batch_size):
                batch = starts[first:first + batch_size]
                x = torch.stack([data[i:i + C] for i in batch]).to(device)  # (b, C)
                y = torch.stack([data[i + 1:i + C + 1] for i in batch]).to(device)
                total += cross_entropy(model(x), y).item() * y.numel()
                count += y.numel()
    finally:
        model.train(was_training)
    return total / count


def save_checkpoint(path, model, optimizer, step, **state):
    rng = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state(),
           "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []}
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step,
                "state": state, "rng": rng}, path)


def load_checkpoint(path, model, optimizer):
    checkpoint = torch.load(path, weights_only=False)  # the RNG states are Python and NumPy objects
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    rng = checkpoint["rng"]
    random.setstate(rng["python"])
    np.random.set_state(rng["numpy"])
    torch.set_rng_state(rng["torch"])
    if rng["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])
    return checkpoint["step"], checkpoint["state"]
