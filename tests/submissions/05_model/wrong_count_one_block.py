"""A plausible wrong submission: one block counted, not n_layers of them."""


def count_parameters(config):
    d = config.d_model
    d_ff = 4 * d if config.d_ff is None else config.d_ff
    block = 4 * (d * d + d) + (d * d_ff + d_ff) + (d_ff * d + d) + 4 * d
    head = 0 if config.tie_weights else config.vocab_size * d
    return config.vocab_size * d + config.context_length * d + block + 2 * d + head
