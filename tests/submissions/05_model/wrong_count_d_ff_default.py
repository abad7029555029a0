"""A plausible wrong submission: d_ff=None read as "the FFN is as wide as the model"."""


def count_parameters(config):
    d = config.d_model
    d_ff = config.d_ff if config.d_ff is not None else d
    block = 4 * (d * d + d) + 2 * d * d_ff + d_ff + d + 4 * d
    tables = (config.vocab_size + config.context_length) * d
    return tables + config.n_layers * block + 2 * d + (0 if config.tie_weights else config.vocab_size * d)
