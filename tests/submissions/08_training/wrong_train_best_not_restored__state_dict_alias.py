"""correct_written_plainly.py with one change: train_loop keeps model.state_dict() itself as the best
weights, whose tensors every later step overwrites, so loading them back at the end keeps the last
weights (named once as another mistake: the words now cover it, issue 29)."""

import math
import random

import numpy as np
import regex
import torch

PATTERN = regex.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")


def pretokenize(text):
    return [m.group() for m in PATTERN.finditer(text)]


def replace_pair(ids, a, b, new_id):
    # one pass, left to right, skipping past each replacement ("aaa" -> [aa, a])
    result, i = [], 0
    while i < len(ids):
        if ids[i] == a and i + 1 < len(ids) and ids[i + 1] == b:
            result.append(new_id)
            i += 2
        else:
            result.append(ids[i])
            i += 1
    return result


def train_bpe(text, vocab_size):
    # Every chunk of the text, repeats included, recounted from scratch after each merge.
    chunks = [list(c.encode("utf-8")) for c in pretokenize(text)]
    vocab = {i: bytes([i]) for i in range(256)}
    merges = []
    while 256 + len(merges) < vocab_size:
        counts = {}
        for ids in chunks:
            for a, b in zip(ids, ids[1:], strict=False):
                counts[(a, b)] = counts.get((a, b), 0) + 1
        if not counts:
            break
        top = max(counts.values())
        if top < 2:
            break
        tied = [p for p, n in counts.items() if n == top]
        tied.sort(key=lambda p: (vocab[p[0]], vocab[p[1]]), reverse=True)
        a, b = tied[0]
        new_id = 256 + len(merges)
        merges.append((a, b))
        vocab[new_id] = vocab[a] + vocab[b]
        chunks = [replace_pair(ids, a, b, new_id) for ids in chunks]
    return merges


def encode(text, merges):
    # Each merge in learned order over every chunk: the same as always taking the earliest-learned
    # pair present, since a merge can only create pairs learned after it.
    chunks = [list(c.encode("utf-8")) for c in pretokenize(text)]
    for n, (a, b) in enumerate(merges):
        chunks = [replace_pair(ids, a, b, 256 + n) if len(ids) > 1 else ids for ids in chunks]
    return [i for ids in chunks for i in ids]


def decode(ids, merges):
    vocab = [bytes([i]) for i in range(256)]
    for a, b in merges:
        vocab.append(vocab[a] + vocab[b])
    data = bytearray()
    for i in ids:
        data.extend(vocab[i])
    return bytes(data).decode("utf-8", errors="replace")


def cross_entropy(logits, targets):
    # Written out: shift each row by its maximum, exponentiate, sum, log, and add the shift back.
    vocab = logits.shape[-1]
    rows = logits.reshape(-1, vocab)
    wanted = targets.reshape(-1).long()
    top = rows.max(dim=-1, keepdim=True).values
    shifted = rows - top
    log_norm = torch.log(torch.exp(shifted).sum(dim=-1))  # logsumexp(z) - max(z)
    nll = log_norm - shifted[torch.arange(rows.shape[0]), wanted]
    return nll.mean()


def lr_at(step, max_lr, warmup_steps, total_steps, min_lr):
    if step < warmup_steps:
        return (step + 1) / warmup_steps * max_lr
    # From max_lr down by the part of the range the cosine has covered; p is held at 1 from the last step on.
    p = min(1.0, (step - warmup_steps) / max(1, total_steps - 1 - warmup_steps))
    return max_lr - (max_lr - min_lr) * (1 - math.cos(math.pi * p)) / 2


def clip_grad_norm(parameters, max_norm):
    params = [p for p in parameters if p.grad is not None]
    if not params:
        return 0.0
    norms = torch.stack([torch.linalg.vector_norm(p.grad.detach().double()) for p in params])
    total = torch.linalg.vector_norm(norms)  # the norm of the norms is the norm of everything
    factor = min(1.0, max_norm / (float(total) + 1e-6))
    if factor < 1.0:
        for p in params:
            p.grad.detach().mul_(factor)
    return float(total)


def evaluate(model, data, batch_size, context_length):
    C = context_length
    data = torch.as_tensor(data).long()
    windows = data.unfold(0, C + 1, C)  # (n, C + 1): starts 0, C, 2C, ... that fit whole
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    total = torch.zeros((), dtype=torch.float64)
    positions = 0
    try:
        with torch.inference_mode():
            for batch in windows.split(batch_size):
                batch = batch.to(device)
                loss = cross_entropy(model(batch[:, :-1]), batch[:, 1:])
                total += loss.double() * batch[:, 1:].numel()
                positions += batch[:, 1:].numel()
    finally:
        model.train(was_training)
    return float(total / positions)


def save_checkpoint(path, model, optimizer, step, **state):
    """Write everything a run needs to go on from here: weights, optimizer, step, state, RNG states."""
    generators = {"py": random.getstate(), "np": np.random.get_state(), "pt": torch.get_rng_state()}
    if torch.cuda.is_available():
        generators["gpu"] = torch.cuda.get_rng_state_all()
    torch.save({"weights": model.state_dict(), "adam": optimizer.state_dict(), "at_step": step,
                "extra": dict(state), "generators": generators}, path)


def load_checkpoint(path, model, optimizer):
    """Restore what save_checkpoint wrote, RNG states included; return (step, state)."""
    saved = torch.load(path, weights_only=False)
    model.load_state_dict(saved["weights"])
    optimizer.load_state_dict(saved["adam"])
    generators = saved["generators"]
    random.setstate(generators["py"])
    np.random.set_state(generators["np"])
    torch.set_rng_state(generators["pt"])
    if "gpu" in generators and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(generators["gpu"])
    return saved["at_step"], saved["extra"]


def train_loop(model, train_ids, heldout_ids, config):
    """The recipe: AdamW, warm-up + cosine, global-norm clipping, held-out evaluation, early stopping."""
    data = torch.as_tensor(train_ids).long()
    device = next(model.parameters()).device
    C = config.context_length
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.max_lr, betas=(0.9, 0.95),
                                  weight_decay=config.weight_decay)
    train_losses, heldout_losses = [], []
    best_loss, best_step, best_weights, bad_evals = float("inf"), 0, None, 0
    start = 0
    if config.resume_from is not None:
        start, kept = load_checkpoint(config.resume_from, model, optimizer)
        train_losses, heldout_losses = list(kept["train"]), list(kept["heldout"])
        best_loss, best_step, best_weights, bad_evals = kept["best"], kept["best_step"], kept["weights"], kept["bad"]
    else:
        random.seed(config.seed)
        np.random.seed(config.seed)
        torch.manual_seed(config.seed)
    end = config.total_steps if config.stop_after is None else min(config.stop_after, config.total_steps)
    offsets = torch.arange(C)
    model.train()
    for step in range(start, end):
        if bad_evals >= config.patience:
            break
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, config.max_lr, config.warmup_steps, config.total_steps, config.min_lr)
        starts = torch.randint(len(data) - C, (config.batch_size,))
        index = starts[:, None] + offsets  # (B, C): gathered in one go
        x, y = data[index].to(device), data[index + 1].to(device)
        loss = cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        clip_grad_norm(model.parameters(), config.grad_clip)
        optimizer.step()
        train_losses.append(float(loss))
        done = step + 1
        if done % config.eval_every == 0:
            held = evaluate(model, heldout_ids, config.batch_size, C)
            heldout_losses.append(held)
            if held < best_loss:
                best_loss, best_step, bad_evals = held, done, 0
                best_weights = model.state_dict()  # the live tensors: later steps overwrite them
            else:
                bad_evals += 1
        if config.checkpoint_path and config.checkpoint_every > 0 and done % config.checkpoint_every == 0:
            save_checkpoint(config.checkpoint_path, model, optimizer, done, train=train_losses,
                            heldout=heldout_losses, best=best_loss, best_step=best_step, weights=best_weights,
                            bad=bad_evals)
    if best_weights is not None:
        model.load_state_dict(best_weights)
    return {"train_losses": train_losses, "heldout_losses": heldout_losses, "best_step": best_step}
