"""A correct unit 08 written another way, each part otherwise than the reference: the tokenizer works
on byte strings (the pattern built from its parts; train_bpe counts each distinct word once with its
count and breaks ties by comparing the pairs of byte strings themselves; encode ranks pairs of byte
strings and maps them back to ids at the end); cross_entropy with torch.logsumexp and gather over the
last axis; lr_at returns min_lr from the last step on; clip_grad_norm concatenates every gradient into
one vector; evaluate reshapes the ids into whole windows; the checkpoint is a tuple, and the loop is
a small class."""

import copy
import math
import random

import numpy as np
import regex
import torch

LETTERS, DIGITS = r"\p{L}", r"\p{N}"
GPT2_SPLIT = regex.compile("|".join([
    "'s", "'t", "'re", "'ve", "'m", "'ll", "'d",
    f" ?{LETTERS}+", f" ?{DIGITS}+", rf" ?[^\s{LETTERS}{DIGITS}]+",
    r"\s+(?!\S)", r"\s+",
]))


def pretokenize(text):
    return GPT2_SPLIT.findall(text)


def merged(word, a, b):
    """The tuple of byte strings `word` with each (a, b), left to right, joined."""
    out, i = [], 0
    while i < len(word):
        if i + 1 < len(word) and word[i] == a and word[i + 1] == b:
            out.append(a + b)
            i += 2
        else:
            out.append(word[i])
            i += 1
    return tuple(out)


def train_bpe(text, vocab_size):
    # Words as tuples of byte strings, each distinct word once with its count; pairs of byte
    # strings compare as the contract's ties do.
    words = {}
    for chunk in pretokenize(text):
        word = tuple(bytes([x]) for x in chunk.encode("utf-8"))
        words[word] = words.get(word, 0) + 1
    ids = {bytes([i]): i for i in range(256)}
    merges = []
    for _ in range(vocab_size - 256):
        counts = {}
        for word, n in words.items():
            for pair in zip(word, word[1:], strict=False):
                counts[pair] = counts.get(pair, 0) + n
        best = max(counts.items(), key=lambda item: (item[1], item[0]), default=None)
        if best is None or best[1] < 2:
            break
        a, b = best[0]
        merges.append((ids[a], ids[b]))
        ids[a + b] = 255 + len(merges)
        new_words = {}
        for word, n in words.items():
            word = merged(word, a, b)
            new_words[word] = new_words.get(word, 0) + n
        words = new_words
    return merges


def token_table(merges):
    table = {i: bytes([i]) for i in range(256)}
    for n, (a, b) in enumerate(merges):
        table[256 + n] = table[a] + table[b]
    return table


def encode(text, merges):
    # On byte strings: the rank of each pair of byte strings, and the id of each token's bytes.
    table = token_table(merges)
    rank = {(table[a], table[b]): n for n, (a, b) in enumerate(merges)}
    id_of = {v: k for k, v in table.items()}
    ids = []
    for chunk in pretokenize(text):
        word = tuple(bytes([x]) for x in chunk.encode("utf-8"))
        while True:
            ranked = [(rank[p], p) for p in zip(word, word[1:], strict=False) if p in rank]
            if not ranked:
                break
            _, (a, b) = min(ranked)
            word = merged(word, a, b)
        ids += [id_of[t] for t in word]
    return ids


def decode(ids, merges):
    def expand(i):
        if i < 256:
            return bytes([i])
        a, b = merges[i - 256]
        return expand(a) + expand(b)

    return b"".join(expand(i) for i in ids).decode("utf-8", "replace")


def cross_entropy(logits, targets):
    # logsumexp keeps the leading shape: one loss per position, then their mean.
    per_position = torch.logsumexp(logits, dim=-1) - torch.gather(
        logits, -1, targets.long().unsqueeze(-1)).squeeze(-1)
    return per_position.mean()


def lr_at(step, max_lr, warmup_steps, total_steps, min_lr):
    last = total_steps - 1
    if step < warmup_steps:
        return max_lr * (step + 1) / warmup_steps
    if step >= last:
        return min_lr
    progress = (step - warmup_steps) / max(1, last - warmup_steps)
    return min_lr + 0.5 * (max_lr - min_lr) * (1.0 + math.cos(progress * math.pi))


def clip_grad_norm(parameters, max_norm):
    grads = [p.grad for p in list(parameters) if p.grad is not None]
    if not grads:
        return torch.tensor(0.0)
    flat = torch.cat([g.detach().reshape(-1).float() for g in grads])
    total = flat.norm()
    scale = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    with torch.no_grad():
        for g in grads:
            g.mul_(scale.to(g.dtype))
    return total


@torch.no_grad()
def evaluate(model, data, batch_size, context_length):
    C = context_length
    data = torch.as_tensor(data, dtype=torch.long)
    n = (len(data) - 1) // C  # a window at i * C needs ids up to i * C + C
    inputs = data[:n * C].view(n, C)
    targets = data[1:n * C + 1].view(n, C)
    device = next(model.parameters()).device
    mode = model.training
    model.eval()
    try:
        summed = 0.0
        for i in range(0, n, batch_size):
            x, y = inputs[i:i + batch_size].to(device), targets[i:i + batch_size].to(device)
            summed += float(cross_entropy(model(x), y)) * y.numel()
    finally:
        model.train(mode)
    return summed / (n * C)


def save_checkpoint(path, model, optimizer, step, **state):
    """Write everything a run needs to go on from here: weights, optimizer, step, state, RNG states."""
    cuda = [state.cpu() for state in torch.cuda.get_rng_state_all()] if torch.cuda.is_available() else None
    generators = [random.getstate(), np.random.get_state(), torch.get_rng_state().clone(), cuda]
    torch.save((step, copy.deepcopy(state), model.state_dict(), optimizer.state_dict(), generators), path)


def load_checkpoint(path, model, optimizer):
    """Restore what save_checkpoint wrote, RNG states included; return (step, state)."""
    step, state, weights, optimizer_state, generators = torch.load(path, weights_only=False)
    model.load_state_dict(weights)
    optimizer.load_state_dict(optimizer_state)
    python_state, numpy_state, torch_state, cuda = generators
    random.setstate(python_state)
    np.random.set_state(numpy_state)
    torch.set_rng_state(torch_state)
    if cuda is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(cuda)
    return step, state


class _Run:
    def __init__(self, model, heldout_ids, config):
        self.model, self.heldout_ids, self.config = model, heldout_ids, config
        self.state = {"train_losses": [], "heldout_losses": [], "best_step": 0, "best": math.inf,
                      "weights": None, "since_best": 0}

    def evaluate_now(self, step):
        loss = evaluate(self.model, self.heldout_ids, self.config.batch_size, self.config.context_length)
        self.state["heldout_losses"].append(loss)
        if loss < self.state["best"]:
            self.state.update(best=loss, best_step=step, since_best=0, weights=copy.deepcopy(self.model.state_dict()))
        else:
            self.state["since_best"] += 1


def train_loop(model, train_ids, heldout_ids, config):
    """The recipe: AdamW, warm-up + cosine, global-norm clipping, held-out evaluation, early stopping."""
    ids = torch.as_tensor(train_ids, dtype=torch.long)
    device = next(model.parameters()).device
    C = config.context_length
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.max_lr, betas=(0.9, 0.95),
                                  weight_decay=config.weight_decay)
    run = _Run(model, heldout_ids, config)
    step = 0
    if config.resume_from:
        step, run.state = load_checkpoint(config.resume_from, model, optimizer)
    else:
        torch.manual_seed(config.seed)
        np.random.seed(config.seed)
        random.seed(config.seed)
    stop = config.total_steps if config.stop_after is None else config.stop_after
    model.train()
    while step < min(stop, config.total_steps) and run.state["since_best"] < config.patience:
        lr = lr_at(step, config.max_lr, config.warmup_steps, config.total_steps, config.min_lr)
        for group in optimizer.param_groups:
            group["lr"] = lr
        starts = torch.randint(len(ids) - C, (config.batch_size,)).tolist()
        x = torch.stack([ids[s:s + C] for s in starts]).to(device)
        y = torch.stack([ids[s + 1:s + 1 + C] for s in starts]).to(device)
        logits = model(x)
        loss = cross_entropy(logits, y)
        optimizer.zero_grad(set_to_none=False)
        loss.backward()
        clip_grad_norm(list(model.parameters()), config.grad_clip)
        optimizer.step()
        run.state["train_losses"].append(loss.item())
        step += 1
        if step % config.eval_every == 0:
            run.evaluate_now(step)
        if config.checkpoint_path and config.checkpoint_every and step % config.checkpoint_every == 0:
            save_checkpoint(config.checkpoint_path, model, optimizer, step, **run.state)
    if run.state["weights"] is not None:
        model.load_state_dict(run.state["weights"])
    return {k: run.state[k] for k in ("train_losses", "heldout_losses", "best_step")}
