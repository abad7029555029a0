"""A plausible wrong submission: three LayerNorms per block (ln_f counted once per layer)."""


def count_parameters(config):
    d = config.d_model
    d_ff = 4 * d if config.d_ff is None else config.d_ff
    per_layer = 4 * (d * d + d) + d * d_ff + d_ff + d_ff * d + d + 3 * 2 * d
    total = config.vocab_size * d + config.context_length * d + config.n_layers * per_layer
    return total if config.tie_weights else total + config.vocab_size * d
