"""A plausible wrong submission: the FFN taken as 4 * d_model wide, whatever config.d_ff says."""


def count_parameters(config):
    d = config.d_model
    per_block = 12 * d * d + 13 * d  # unit 04's count of a block
    total = config.vocab_size * d + config.context_length * d + config.n_layers * per_block + 2 * d
    return total if config.tie_weights else total + config.vocab_size * d
