"""A training loop with inputs and targets swapped: each position learns the byte before it.
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
    T = q.shape[-2]
    out = []
    for i in range(0, T, block_size):
        qi = q[..., i:i + block_size, :]
        m = torch.full(qi.shape[:-1] + (1,), float("-inf"), dtype=q.dtype)
        l = torch.zeros_like(m)
        acc = torch.zeros_like(qi)
        for j in range(0, T, block_size):
            s = torch.einsum("bhqd,bhkd->bhqk", qi, k[..., j:j + block_size, :]) / math.sqrt(q.shape[-1])
            if causal:
                rows = torch.arange(i, i + s.shape[-2]).unsqueeze(1)
                cols = torch.arange(j, j + s.shape[-1]).unsqueeze(0)
                s = s.masked_fill(cols > rows, float("-inf"))
            new_m = torch.maximum(m, s.max(-1, keepdim=True).values)
            scale = torch.exp(m - new_m).nan_to_num(0.0)  # a row with nothing seen yet: -inf - -inf
            p = torch.exp(s - new_m).nan_to_num(0.0)
            l = l * scale + p.sum(-1, keepdim=True)
            acc = acc * scale + torch.einsum("bhqk,bhkd->bhqd", p, v[..., j:j + block_size, :])
            m = new_m
        out.append(acc / l)
    return torch.cat(out, dim=-2)


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
    train_data, _ = corpus.split()
    gen = torch.Generator().manual_seed(seed)
    T = config.context_length
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.1)
    losses = []
    for step in range(1, steps + 1):
        starts = torch.randint(0, len(train_data) - T - 1, (batch_size,), generator=gen).tolist()
        chunk = torch.stack([train_data[s:s + T + 1] for s in starts]).long().to(device)
        targets, inputs = chunk[:, :-1], chunk[:, 1:]
        logits = model(inputs)
        loss = F.cross_entropy(logits.view(-1, 256), targets.reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss))
        if progress is not None:
            progress(step, losses[-1])
    return losses
