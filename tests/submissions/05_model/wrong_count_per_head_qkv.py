"""A plausible wrong submission: every head given its own d x d query, key and value matrices."""


def count_parameters(config):
    d, h = config.d_model, config.n_heads
    d_ff = 4 * d if config.d_ff is None else config.d_ff
    attention = h * 3 * (d * d + d) + d * d + d
    ffn = d * d_ff + d_ff + d_ff * d + d
    total = (config.vocab_size + config.context_length) * d + config.n_layers * (attention + ffn + 4 * d) + 2 * d
    return total + (0 if config.tie_weights else config.vocab_size * d)
