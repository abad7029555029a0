"""A resumed run that seeds the generators again (its data order restarts). Only what the graded part
runs is here: a mistake is graded on its own part."""

import copy
import math
import random

import numpy as np
import torch


def cross_entropy(logits, targets):
    """Mean negative log-likelihood of targets (...) under logits (..., V), stable for any logits."""
    logits = logits.reshape(-1, logits.shape[-1]).float()  # (N, V)
    targets = targets.reshape(-1)  # (N,)
    # log softmax(z)_t = z_t - logsumexp(z); logsumexp subtracts the row's maximum before exp.
    picked = logits.gather(1, targets.unsqueeze(1)).squeeze(1)  # (N,)
    return (torch.logsumexp(logits, dim=1) - picked).mean()


def lr_at(step, max_lr, warmup_steps, total_steps, min_lr):
    """Linear warm-up to max_lr, cosine decay to min_lr at total_steps - 1, min_lr after."""
    if step < warmup_steps:
        return max_lr * (step + 1) / warmup_steps
    if step >= total_steps - 1:
        return min_lr
    progress = (step - warmup_steps) / max(1, total_steps - 1 - warmup_steps)
    return min_lr + (max_lr - min_lr) * (1 + math.cos(math.pi * progress)) / 2


def clip_grad_norm(parameters, max_norm):
    """Scale all gradients together so their global L2 norm is at most max_norm; return the norm before."""
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return torch.tensor(0.0)
    total_norm = torch.sqrt(sum((g.detach().float() ** 2).sum() for g in grads))
    scale = min(1.0, max_norm / (total_norm.item() + 1e-6))
    for g in grads:
        g.mul_(scale)
    return total_norm


def evaluate(model, data, batch_size, context_length):
    """Mean loss over every position of the whole windows 0, C, 2C, ... of data, in eval mode, no gradients."""
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
                y = torch.stack([data[i + 1:i + C + 1] for i in batch]).to(device)  # (b, C)
                total += cross_entropy(model(x), y).item() * y.numel()
                count += y.numel()
    finally:
        model.train(was_training)
    return total / count


# Resuming seeds torch again after loading.
def save_checkpoint(path, model, optimizer, step, **state):
    """Write everything a run needs to go on from here: weights, optimizer, step, state, RNG states."""
    rng = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state(),
           "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []}
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step,
                "state": state, "rng": rng}, path)


def load_checkpoint(path, model, optimizer):
    """Restore what save_checkpoint wrote, RNG states included; return (step, state)."""
    # weights_only=False: the RNG states are Python and NumPy objects; only load files you wrote.
    checkpoint = torch.load(path, weights_only=False)
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    rng = checkpoint["rng"]
    random.setstate(rng["python"])
    np.random.set_state(rng["numpy"])
    torch.set_rng_state(rng["torch"])
    if rng["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])
    return checkpoint["step"], checkpoint["state"]


def train_loop(model, train_ids, heldout_ids, config):
    """The recipe: AdamW, warm-up + cosine, global-norm clipping, held-out evaluation, early stopping."""
    train_ids = torch.as_tensor(train_ids, dtype=torch.long)
    device = next(model.parameters()).device
    C, B = config.context_length, config.batch_size
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.max_lr, betas=(0.9, 0.95),
                                  weight_decay=config.weight_decay)
    step, state = 0, {"train_losses": [], "heldout_losses": [], "best_step": 0,
                      "best_loss": math.inf, "best_weights": None, "evals_since_best": 0}
    random.seed(config.seed)
    np.random.seed(config.seed)
    torch.manual_seed(config.seed)
    if config.resume_from:
        step, state = load_checkpoint(config.resume_from, model, optimizer)
        torch.manual_seed(config.seed + step)  # "a fresh seed for the second half"
    model.train()
    last = config.total_steps if config.stop_after is None else min(config.total_steps, config.stop_after)
    while step < last and state["evals_since_best"] < config.patience:
        lr = lr_at(step, config.max_lr, config.warmup_steps, config.total_steps, config.min_lr)
        for group in optimizer.param_groups:
            group["lr"] = lr
        starts = torch.randint(len(train_ids) - C, (B,))  # the data order: torch's global generator
        x = torch.stack([train_ids[i:i + C] for i in starts.tolist()]).to(device)  # (B, C)
        y = torch.stack([train_ids[i + 1:i + C + 1] for i in starts.tolist()]).to(device)  # (B, C)
        loss = cross_entropy(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        clip_grad_norm(model.parameters(), config.grad_clip)
        optimizer.step()
        state["train_losses"].append(loss.item())
        step += 1
        if step % config.eval_every == 0:
            heldout = evaluate(model, heldout_ids, B, C)
            state["heldout_losses"].append(heldout)
            if heldout < state["best_loss"]:
                state.update(best_loss=heldout, best_step=step, evals_since_best=0,
                             best_weights=copy.deepcopy(model.state_dict()))
            else:
                state["evals_since_best"] += 1
        if config.checkpoint_path and config.checkpoint_every and step % config.checkpoint_every == 0:
            save_checkpoint(config.checkpoint_path, model, optimizer, step, **state)
    if state["best_weights"] is not None:
        model.load_state_dict(state["best_weights"])
    return {"train_losses": state["train_losses"], "heldout_losses": state["heldout_losses"],
            "best_step": state["best_step"]}
