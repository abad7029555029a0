"""A torch.cat cache with one bug: the prompt goes through in one call with PyTorch's fused
attention and is_causal=True (right there: the scores are square), and every later step, one
new query against all the cached keys, reuses is_causal=True, whose mask is aligned to the
top-left corner, so the new query sees the first position only."""

import math

import torch
import torch.nn.functional as F


def sample_next(logits, temperature=1.0, top_k=None, generator=None):
    if temperature == 0:
        return torch.argmax(logits, dim=1)
    scaled = logits.div(temperature)
    if top_k:
        threshold = scaled.sort(dim=1, descending=True).values[:, min(top_k, scaled.size(1)) - 1]
        scaled = torch.where(scaled >= threshold[:, None], scaled, torch.full_like(scaled, -math.inf))
    return torch.multinomial(scaled.softmax(dim=1), 1, generator=generator)[:, 0]


@torch.no_grad()
def generate(model, idx, max_new_tokens, temperature=1.0, top_k=None, generator=None):
    was = {m: m.training for m in model.modules()}
    model.eval()
    try:
        for _ in range(max_new_tokens):
            logits = model(idx[:, -model.config.context_length:])
            idx = torch.cat((idx, sample_next(logits[:, -1], temperature, top_k, generator).unsqueeze(1)), 1)
    finally:
        for m, flag in was.items():
            m.train(flag)
    return idx


def _step(model, tokens, start, cache):
    """Tokens (B, t) at positions start..start+t-1; cache[layer] = (keys, values), (B, H, n, hs), grown by
    torch.cat. Returns the logits at the last position."""
    B, t = tokens.shape
    x = model.token_emb(tokens) + model.pos_emb(torch.arange(start, start + t))
    for i, block in enumerate(model.blocks):
        H = block.attn.n_heads
        C = x.shape[-1]
        h = block.ln1(x)
        q, k, v = (proj(h).reshape(B, t, H, C // H).permute(0, 2, 1, 3)
                   for proj in (block.attn.q_proj, block.attn.k_proj, block.attn.v_proj))
        if cache[i] is not None:
            k, v = torch.cat((cache[i][0], k), 2), torch.cat((cache[i][1], v), 2)
        cache[i] = (k, v)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + block.attn.out_proj(y.permute(0, 2, 1, 3).reshape(B, t, C))
        x = x + block.ffn(block.ln2(x))
    return model.lm_head(model.ln_f(x))[:, -1]


def generate_cached(model, idx, max_new_tokens, temperature=1.0, top_k=None, generator=None):
    if idx.shape[1] + max_new_tokens > model.config.context_length:
        raise ValueError(f"too long for context_length {model.config.context_length}")
    was = {m: m.training for m in model.modules()}
    model.eval()
    cache = [None] * len(model.blocks)
    out = idx
    try:
        with torch.no_grad():
            logits = _step(model, idx, 0, cache)  # the whole prompt at once
            for n in range(max_new_tokens):
                out = torch.cat((out, sample_next(logits, temperature, top_k, generator)[:, None]), 1)
                if n + 1 < max_new_tokens:
                    logits = _step(model, out[:, -1:], out.shape[1] - 1, cache)
    finally:
        for m, flag in was.items():
            m.train(flag)
    return out
