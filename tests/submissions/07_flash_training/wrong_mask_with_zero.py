"""Both attentions fill the masked scores with 0 instead of -inf. (Otherwise the correct
submission correct_einsum_tiles.py.)"""

import math
import time

import torch
import torch.nn.functional as F

from coursekit import corpus
from coursekit.gpt import GPT


def naive_attention(q, k, v, causal=True):
    T, d = q.shape[-2:]
    att = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(d)
    if causal:
        keep = torch.tril(torch.ones(T, T)).bool()
        att = att.masked_fill(~keep, 0)
    att = F.softmax(att, dim=-1)
    return torch.matmul(att, v)


def flash_attention(q, k, v, causal=True, block_size=64):
    B, H, T, d = q.shape
    outs = []
    for start in range(0, T, block_size):
        q_blk = q[:, :, start:start + block_size] / math.sqrt(d)
        rows = q_blk.shape[2]
        m = torch.full((B, H, rows, 1), -math.inf, dtype=q.dtype)
        l = torch.zeros(B, H, rows, 1, dtype=q.dtype)
        o = torch.zeros(B, H, rows, d, dtype=q.dtype)
        stop = min(T, start + rows) if causal else T
        for ks in range(0, stop, block_size):
            kb, vb = k[:, :, ks:ks + block_size], v[:, :, ks:ks + block_size]
            s = q_blk @ kb.transpose(-2, -1)
            if causal:
                qpos = torch.arange(start, start + rows)[:, None]
                kpos = torch.arange(ks, ks + kb.shape[2])[None, :]
                s = s.masked_fill(kpos > qpos, 0.0)
            new_m = torch.max(m, s.max(dim=-1, keepdim=True).values)
            p = torch.exp(s - new_m)
            alpha = torch.exp(m - new_m)
            l = alpha * l + p.sum(dim=-1, keepdim=True)
            o = alpha * o + p @ vb
            m = new_m
        outs.append(o / l)
    return torch.cat(outs, dim=2)


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
