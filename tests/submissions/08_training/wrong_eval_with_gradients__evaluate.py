"""A hand-written mistake (eval_with_gradients); everything else is the reference's."""

import copy
import heapq
import math
import random
from collections import Counter, defaultdict
from itertools import pairwise

import numpy as np
import regex
import torch

# GPT-2's rule: contractions, runs of letters, of digits, of other symbols (each with one leading
# space), and runs of white space.
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def pretokenize(text):
    """Split text into chunks whose concatenation is text; BPE never merges across two chunks."""
    return regex.findall(GPT2_PATTERN, text)


def train_bpe(text, vocab_size):
    """Byte-level BPE: return the merges (id_a, id_b) in the order learned; merge i makes id 256 + i."""
    # Each distinct chunk once, with how often it occurs: the text has far fewer distinct chunks
    # than chunks, and a merge changes every copy of a chunk the same way.
    chunk_counts = Counter(pretokenize(text))
    words = [list(chunk.encode("utf-8")) for chunk in chunk_counts]
    freqs = list(chunk_counts.values())
    token_bytes = [bytes([i]) for i in range(256)]  # what each id stands for

    pair_counts = Counter()  # (id_a, id_b) -> occurrences in the whole text
    words_with = defaultdict(set)  # (id_a, id_b) -> the words it occurs in (may hold stale entries)
    for w, ids in enumerate(words):
        for pair in pairwise(ids):
            pair_counts[pair] += freqs[w]
            words_with[pair].add(w)

    # The most frequent pair, ties to the greatest (bytes_a, bytes_b): a heap of candidates,
    # each checked against the current count when it comes out (counts change as merges happen).
    class Candidate:
        def __init__(self, pair):
            self.pair, self.count = pair, pair_counts[pair]
            self.key = (self.count, token_bytes[pair[0]], token_bytes[pair[1]])

        def __lt__(self, other):  # heapq pops the smallest: make "smallest" mean "best"
            return self.key > other.key

    heap = [Candidate(pair) for pair in pair_counts]
    heapq.heapify(heap)
    merges = []
    while len(token_bytes) < vocab_size and heap:
        best = heapq.heappop(heap)
        if best.count != pair_counts.get(best.pair, 0):
            continue  # stale: the pair's count changed since it was pushed
        if best.count < 2:
            break  # no pair occurs twice: nothing left worth merging
        a, b = best.pair
        new_id = len(token_bytes)
        merges.append((a, b))
        token_bytes.append(token_bytes[a] + token_bytes[b])
        changed = set()
        for w in words_with.pop(best.pair):
            ids, freq = words[w], freqs[w]
            merged, i = [], 0
            while i < len(ids):  # left to right, so "aaa" becomes [aa, a]
                if i + 1 < len(ids) and ids[i] == a and ids[i + 1] == b:
                    merged.append(new_id)
                    i += 2
                else:
                    merged.append(ids[i])
                    i += 1
            if len(merged) == len(ids):
                continue  # a stale entry: this word no longer holds the pair
            for pair in pairwise(ids):
                pair_counts[pair] -= freq
                changed.add(pair)
            for pair in pairwise(merged):
                pair_counts[pair] += freq
                words_with[pair].add(w)
                changed.add(pair)
            words[w] = merged
        for pair in changed:
            if pair_counts[pair] > 0:
                heapq.heappush(heap, Candidate(pair))
            else:
                del pair_counts[pair]
    return merges


def encode(text, merges):
    """Token ids of text: pretokenize, then apply the merges inside each chunk in the order learned."""
    rank = {pair: i for i, pair in enumerate(merges)}
    known = {}  # chunk -> ids: a text repeats its chunks, so each is worked out once
    ids = []
    for chunk in pretokenize(text):
        if chunk not in known:
            tokens = list(chunk.encode("utf-8"))
            while len(tokens) > 1:
                # The earliest-learned merge present in the chunk, applied everywhere in it.
                pair = min(pairwise(tokens), key=lambda p: rank.get(p, math.inf))
                if pair not in rank:
                    break
                new_id, merged, i = 256 + rank[pair], [], 0
                while i < len(tokens):
                    if i + 1 < len(tokens) and (tokens[i], tokens[i + 1]) == pair:
                        merged.append(new_id)
                        i += 2
                    else:
                        merged.append(tokens[i])
                        i += 1
                tokens = merged
            known[chunk] = tokens
        ids.extend(known[chunk])
    return ids


def decode(ids, merges):
    """The text of ids: the bytes each id stands for, joined, decoded as UTF-8."""
    token_bytes = [bytes([i]) for i in range(256)]
    for a, b in merges:
        token_bytes.append(token_bytes[a] + token_bytes[b])
    return b"".join(token_bytes[int(i)] for i in ids).decode("utf-8", errors="replace")


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
    if config.resume_from:
        step, state = load_checkpoint(config.resume_from, model, optimizer)
    else:
        random.seed(config.seed)
        np.random.seed(config.seed)
        torch.manual_seed(config.seed)
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
