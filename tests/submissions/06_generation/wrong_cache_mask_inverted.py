"""The prefill builds the allowed positions with tril, as scaled_dot_product_attention wants them,
but hands them to masked_fill, which fills where the mask is True: the allowed ones are hidden."""

import math

import torch


def sample_next(logits, temperature=1.0, top_k=None, generator=None):
    if not temperature:
        return torch.argmax(logits, dim=-1)
    scaled = logits.float() / temperature
    if top_k:
        k = min(top_k, scaled.shape[-1])
        cutoff = torch.topk(scaled, k, dim=-1).values[..., -1, None]
        scaled = torch.where(scaled >= cutoff, scaled, torch.tensor(-math.inf))
    probs = torch.softmax(scaled, dim=-1)
    return torch.multinomial(probs, 1, generator=generator)[:, 0]


@torch.no_grad()
def generate(model, idx, max_new_tokens, temperature=1.0, top_k=None, generator=None):
    saved = {name: m.training for name, m in model.named_modules()}
    model.eval()
    try:
        out = idx
        n_ctx = model.config.context_length
        for _ in range(max_new_tokens):
            logits = model(out if out.shape[1] <= n_ctx else out[:, out.shape[1] - n_ctx:])
            out = torch.cat((out, sample_next(logits[:, -1], temperature, top_k, generator)[:, None]), dim=1)
        return out
    finally:
        for name, m in model.named_modules():
            m.training = saved[name]


class KVCache:
    def __init__(self, n_layers, B, H, capacity, hs):
        self.k = torch.zeros(n_layers, B, H, capacity, hs)
        self.v = torch.zeros(n_layers, B, H, capacity, hs)
        self.length = 0

    def write(self, layer, k, v, start):
        self.k[layer, :, :, start:start + k.shape[2]] = k
        self.v[layer, :, :, start:start + v.shape[2]] = v
        return self.k[layer, :, :, :start + k.shape[2]], self.v[layer, :, :, :start + v.shape[2]]


def run_step(model, cache, tokens, start):
    B, t = tokens.shape
    x = model.token_emb(tokens) + model.pos_emb(torch.arange(start, start + t))
    for layer, blk in enumerate(model.blocks):
        H = blk.attn.n_heads
        D = x.shape[-1] // H
        h = blk.ln1(x)
        q, k_new, v_new = (proj(h).reshape(B, t, H, D).permute(0, 2, 1, 3)
                           for proj in (blk.attn.q_proj, blk.attn.k_proj, blk.attn.v_proj))
        k, v = cache.write(layer, k_new, v_new, start)
        scores = q @ k.transpose(-1, -2) / math.sqrt(D)
        if t > 1:
            n = k.shape[2]
            allowed = torch.tril(torch.ones(t, n, dtype=torch.bool), diagonal=n - t)
            scores = scores.masked_fill(allowed, -math.inf)
        att = scores.softmax(-1) @ v
        x = x + blk.attn.out_proj(att.permute(0, 2, 1, 3).reshape(B, t, H * D))
        x = x + blk.ffn(blk.ln2(x))
    return model.lm_head(model.ln_f(x))[:, -1]


def generate_cached(model, idx, max_new_tokens, temperature=1.0, top_k=None, generator=None):
    B, T = idx.shape
    cfg = model.config
    if T + max_new_tokens > cfg.context_length:
        raise ValueError(f"prompt + new tokens = {T + max_new_tokens} > context_length = {cfg.context_length}")
    if max_new_tokens == 0:
        return idx
    saved = [m.training for m in model.modules()]
    model.eval()
    H = model.blocks[0].attn.n_heads
    cache = KVCache(len(model.blocks), B, H, T + max_new_tokens, cfg.d_model // H)
    tokens = [idx]
    try:
        with torch.inference_mode():
            logits = run_step(model, cache, idx, 0)
            for i in range(max_new_tokens):
                nxt = sample_next(logits, temperature, top_k, generator)[:, None]
                tokens.append(nxt)
                if i + 1 < max_new_tokens:
                    logits = run_step(model, cache, nxt, T + i)
    finally:
        for m, flag in zip(model.modules(), saved, strict=True):
            m.training = flag
    return torch.cat(tokens, dim=1)
