"""generate divides the last position's logits by the temperature and hands them to sample_next,
which divides them again."""

import torch
import torch.nn.functional as F


def sample_next(logits, temperature=1.0, top_k=None, generator=None):
    if temperature == 0:
        return logits.argmax(dim=-1)
    logits = logits / temperature
    if top_k is not None:
        values, _ = torch.topk(logits, min(top_k, logits.size(-1)))
        logits = logits.masked_fill(logits < values[:, [-1]], float("-inf"))
    probs = F.softmax(logits, dim=-1)
    return torch.multinomial(probs, num_samples=1, generator=generator).view(-1)


def generate(model, idx, max_new_tokens, temperature=1.0, top_k=None, generator=None):
    flags = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        with torch.no_grad():
            for _ in range(max_new_tokens):
                logits = model(idx[:, -model.config.context_length:])
                scaled = logits[:, -1, :] / temperature if temperature else logits[:, -1, :]
                nxt = sample_next(scaled, temperature, top_k, generator)
                idx = torch.cat([idx, nxt.unsqueeze(-1)], dim=-1)
    finally:
        for m, flag in flags:
            m.training = flag
    return idx


def _forward(model, tokens, start, kv):
    B, t = tokens.shape
    pos = torch.arange(start, start + t)
    x = model.token_emb(tokens) + model.pos_emb(pos)
    for i, block in enumerate(model.blocks):
        nh = block.attn.n_heads
        C = x.size(-1)
        h = block.ln1(x)
        q = block.attn.q_proj(h).view(B, t, nh, C // nh).transpose(1, 2)
        k = block.attn.k_proj(h).view(B, t, nh, C // nh).transpose(1, 2)
        v = block.attn.v_proj(h).view(B, t, nh, C // nh).transpose(1, 2)
        if i in kv:
            k = torch.cat([kv[i][0], k], dim=2)
            v = torch.cat([kv[i][1], v], dim=2)
        kv[i] = (k, v)
        if t == 1:
            y = F.scaled_dot_product_attention(q, k, v)
        else:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + block.attn.out_proj(y.transpose(1, 2).reshape(B, t, C))
        x = x + block.ffn(block.ln2(x))
    return model.lm_head(model.ln_f(x[:, -1, :]))


def generate_cached(model, idx, max_new_tokens, temperature=1.0, top_k=None, generator=None):
    T = idx.shape[1]
    if T + max_new_tokens > model.config.context_length:
        raise ValueError(f"{T + max_new_tokens} tokens do not fit in context_length {model.config.context_length}")
    flags = [(m, m.training) for m in model.modules()]
    model.eval()
    kv = {}
    try:
        with torch.no_grad():
            logits = _forward(model, idx, 0, kv)
            for step in range(max_new_tokens):
                nxt = sample_next(logits, temperature, top_k, generator)
                idx = torch.cat([idx, nxt[:, None]], dim=1)
                if step < max_new_tokens - 1:
                    logits = _forward(model, nxt[:, None], T + step, kv)
    finally:
        for m, flag in flags:
            m.training = flag
    return idx
