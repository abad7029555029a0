"""A plausible wrong submission: a LayerNorm counted as d parameters (its weight), its bias forgotten."""


def count_parameters(config):
    d = config.d_model
    d_ff = config.d_ff or 4 * d
    per_block = 4 * d * d + 4 * d + 2 * d * d_ff + d_ff + d + 2 * d  # ln1, ln2: d each
    total = config.vocab_size * d + config.context_length * d + config.n_layers * per_block + d  # ln_f: d
    return total + (0 if config.tie_weights else config.vocab_size * d)
