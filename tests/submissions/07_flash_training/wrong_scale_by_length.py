"""Both attentions scale the scores by 1/sqrt(T), the sequence length, instead of 1/sqrt(d).
(Otherwise the correct submission correct_einsum_tiles.py.)"""

import math
import time

import torch
import torch.nn.functional as F

from coursekit import corpus
from coursekit.gpt import GPT


def naive_attention(q, k, v, causal=True):
    B, H, T, d = q.shape
    scores = q @ k.transpose(-1, -2) / math.sqrt(T)
    if causal:
        future = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
        scores = scores.masked_fill(future, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def flash_attention(q, k, v, causal=True, block_size=64):
    B, H, T, d = q.shape
    out = torch.empty_like(q)
    for i in range(0, T, block_size):
        qi = q[:, :, i:i + block_size]
        n = qi.shape[2]
        m = torch.full((B, H, n, 1), float("-inf"), dtype=q.dtype)
        l = torch.zeros((B, H, n, 1), dtype=q.dtype)
        acc = torch.zeros((B, H, n, d), dtype=q.dtype)
        for j in range(0, min(T, i + n) if causal else T, block_size):
            s = qi @ k[:, :, j:j + block_size].transpose(-1, -2) / math.sqrt(T)
            if causal:
                r = torch.arange(i, i + n).view(-1, 1)
                c = torch.arange(j, j + s.shape[-1]).view(1, -1)
                s = s.masked_fill(c > r, float("-inf"))
            m2 = torch.maximum(m, s.amax(-1, keepdim=True))
            p = torch.exp(s - m2)
            fix = torch.exp(m - m2)
            l = l * fix + p.sum(-1, keepdim=True)
            acc = acc * fix + p @ v[:, :, j:j + block_size]
            m = m2
        out[:, :, i:i + n] = acc / l
    return out


def time_fn(fn, *args, warmup=3, repeats=10):
    on_gpu = any(isinstance(a, torch.Tensor) and a.is_cuda for a in args)
    for _ in range(warmup):
        fn(*args)
    times = []
    for _ in range(repeats):
        if on_gpu:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn(*args)
        if on_gpu:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    times.sort()
    mid = len(times) // 2
    return times[mid] if len(times) % 2 else (times[mid - 1] + times[mid]) / 2


def train(config, steps, device=None, model=None, batch_size=16, lr=3e-3, seed=0, progress=None):
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    model = (model if model is not None else GPT(config)).to(device)
    model.train()
    data = corpus.split()[0].long()
    g = torch.Generator().manual_seed(seed)
    T = config.context_length
    starts = torch.randint(0, len(data) - T - 1, (steps, batch_size), generator=g)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    losses = []
    for step in range(steps):
        rows = torch.stack([data[s:s + T + 1] for s in starts[step].tolist()]).to(device)
        logits = model(rows[:, :T])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), rows[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss))
        if progress:
            progress(step + 1, losses[-1])
    return losses
