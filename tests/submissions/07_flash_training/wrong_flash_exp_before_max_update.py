"""flash_attention takes the exponentials with the running maximum from before this tile, and
updates it afterwards: on the first tile that maximum is -inf, and everything overflows.
(Otherwise the correct submission correct_einsum_tiles.py.)"""

import math
import time

import torch
import torch.nn.functional as F

from coursekit import corpus
from coursekit.gpt import GPT


def naive_attention(q, k, v, causal=True):
    s = torch.einsum("bhqd,bhkd->bhqk", q, k) * q.shape[-1] ** -0.5
    if causal:
        s = s + torch.full(s.shape[-2:], float("-inf"), dtype=q.dtype).triu(1)
    return torch.einsum("bhqk,bhkd->bhqd", s.softmax(-1), v)


def flash_attention(q, k, v, causal=True, block_size=64):
    B, H, T, d = q.shape
    out = torch.zeros_like(q)
    for i in range(0, T, block_size):
        qi = q[:, :, i:i + block_size] / math.sqrt(d)
        rows = qi.shape[2]
        m = torch.full((B, H, rows, 1), float("-inf"), dtype=q.dtype)
        l = torch.zeros((B, H, rows, 1), dtype=q.dtype)
        acc = torch.zeros((B, H, rows, d), dtype=q.dtype)
        for j in range(0, min(T, i + rows) if causal else T, block_size):
            s = qi @ k[:, :, j:j + block_size].transpose(-2, -1)
            if causal:
                pos_q = torch.arange(i, i + rows)[:, None]
                pos_k = torch.arange(j, j + s.shape[-1])[None, :]
                s = s.masked_fill(pos_k > pos_q, float("-inf"))
            p = torch.exp(s - m)
            m_new = torch.maximum(m, s.amax(-1, keepdim=True))
            l = l * torch.exp(m - m_new) + p.sum(-1, keepdim=True)
            acc = acc * torch.exp(m - m_new) + p @ v[:, :, j:j + block_size]
            m = m_new
        out[:, :, i:i + rows] = acc / l
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
