"""A plausible wrong submission: the token table counted, the position table forgotten."""


def count_parameters(config):
    d, L = config.d_model, config.n_layers
    d_ff = config.d_ff or 4 * d
    n = config.vocab_size * d  # token_emb
    for _ in range(L):
        n += 4 * (d * d + d)  # q, k, v, out
        n += d * d_ff + d_ff + d_ff * d + d  # fc1, fc2
        n += 4 * d  # ln1, ln2
    n += 2 * d  # ln_f
    if not config.tie_weights:
        n += config.vocab_size * d
    return n
