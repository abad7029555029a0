"""A plausible wrong submission: attention counted as its three projections q, k and v, with
out_proj forgotten."""


def count_parameters(config):
    d = config.d_model
    d_ff = 4 * d if config.d_ff is None else config.d_ff
    qkv = 3 * (d * d + d)
    ffn = (d * d_ff + d_ff) + (d_ff * d + d)
    norms = 2 * 2 * d
    total = (config.vocab_size + config.context_length) * d + config.n_layers * (qkv + ffn + norms) + 2 * d
    if not config.tie_weights:
        total += config.vocab_size * d
    return total
