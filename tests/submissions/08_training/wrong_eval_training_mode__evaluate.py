"""An evaluation run in training mode. Only what the graded part runs is here: a mistake is graded on
its own part."""

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
    total, count = 0.0, 0
    with torch.no_grad():
        for first in range(0, len(starts), batch_size):
            batch = starts[first:first + batch_size]
            x = torch.stack([data[i:i + C] for i in batch])
            y = torch.stack([data[i + 1:i + C + 1] for i in batch])
            total += cross_entropy(model(x), y).item() * y.numel()
            count += y.numel()
    return total / count
