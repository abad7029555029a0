"""A correct unit-06 submission that prefills the prompt one token at a time and, since only the
last prompt position's logits are needed, skips `ln_f` and `lm_head` on the others: `lm_head`
runs once per new token, not once per forward step (issue 18)."""

import math

import torch


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


def _step(model, token, position, cache, logits=True):
    """One token (B, 1) at `position`; cache[layer] = (keys, values), (B, H, n, hs), grown by torch.cat.
    Returns the logits (B, V), or None when `logits` is False (a prompt position whose prediction is unused)."""
    B = token.shape[0]
    x = model.token_emb(token) + model.pos_emb(torch.tensor([position]))
    for i, block in enumerate(model.blocks):
        H = block.attn.n_heads
        C = x.shape[-1]
        h = block.ln1(x)
        q, k, v = (proj(h).reshape(B, 1, H, C // H).permute(0, 2, 1, 3)
                   for proj in (block.attn.q_proj, block.attn.k_proj, block.attn.v_proj))
        if cache[i] is not None:
            k, v = torch.cat((cache[i][0], k), 2), torch.cat((cache[i][1], v), 2)
        cache[i] = (k, v)
        weights = torch.softmax(q @ k.transpose(2, 3) / math.sqrt(C // H), dim=-1)
        x = x + block.attn.out_proj((weights @ v).permute(0, 2, 1, 3).reshape(B, 1, C))
        x = x + block.ffn(block.ln2(x))
    return model.lm_head(model.ln_f(x))[:, 0] if logits else None


def generate_cached(model, idx, max_new_tokens, temperature=1.0, top_k=None, generator=None):
    if idx.shape[1] + max_new_tokens > model.config.context_length:
        raise ValueError(f"too long for context_length {model.config.context_length}")
    was = {m: m.training for m in model.modules()}
    model.eval()
    cache = [None] * len(model.blocks)
    out = idx
    try:
        with torch.no_grad():
            T = idx.shape[1]
            for position in range(T):  # the prompt, one token at a time; only the last one's logits matter
                logits = _step(model, idx[:, position:position + 1], position, cache, logits=position == T - 1)
            for n in range(max_new_tokens):
                out = torch.cat((out, sample_next(logits, temperature, top_k, generator)[:, None]), 1)
                if n + 1 < max_new_tokens:
                    logits = _step(model, out[:, -1:], out.shape[1] - 1, cache)
    finally:
        for m, flag in was.items():
            m.train(flag)
    return out
