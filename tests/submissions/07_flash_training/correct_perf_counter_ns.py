"""A correct unit-07 submission whose timer reads integer nanoseconds from a name bound before
grading (`from time import perf_counter_ns`) and takes the median of the integers itself; the GPU
is detected by the arguments' device type. (Otherwise the correct submission correct_einsum_tiles.py.)"""

import math
from time import perf_counter_ns

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
    cuda = [a.device for a in args if torch.is_tensor(a) and a.device.type == "cuda"]
    for _ in range(warmup):
        fn(*args)
    elapsed_ns = []
    for _ in range(repeats):
        for device in cuda:
            torch.cuda.synchronize(device)
        t0 = perf_counter_ns()
        fn(*args)
        for device in cuda:
            torch.cuda.synchronize(device)
        elapsed_ns.append(perf_counter_ns() - t0)
    ordered = sorted(elapsed_ns)
    half = len(ordered) // 2
    middle = ordered[half] if len(ordered) % 2 else (ordered[half - 1] + ordered[half]) / 2
    return middle / 1e9


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
