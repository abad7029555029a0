"""An evaluation that keeps autograd graphs (no torch.no_grad()). Only what the graded part runs is
here: a mistake is graded on its own part."""

import torch


def cross_entropy(logits, targets):
    """Mean negative log-likelihood of targets (...) under logits (..., V), stable for any logits."""
    logits = logits.reshape(-1, logits.shape[-1]).float()  # (N, V)
    targets = targets.reshape(-1)  # (N,)
    # log softmax(z)_t = z_t - logsumexp(z); logsumexp subtracts the row's maximum before exp.
    picked = logits.gather(1, targets.unsqueeze(1)).squeeze(1)  # (N,)
    return (torch.logsumexp(logits, dim=1) - picked).mean()


def evaluate(model, data, batch_size, context_length):
    C = context_length
    data = torch.as_tensor(data, dtype=torch.long)
    starts = list(range(0, len(data) - C, C))
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    for first in range(0, len(starts), batch_size):
        batch = starts[first:first + batch_size]
        x = torch.stack([data[i:i + C] for i in batch])
        y = torch.stack([data[i + 1:i + C + 1] for i in batch])
        loss = cross_entropy(model(x), y)
        total += loss.item() * y.numel()
        count += y.numel()
    model.train(was_training)
    return total / count
