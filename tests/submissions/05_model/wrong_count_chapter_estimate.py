"""A plausible wrong submission: chapter 05's estimate handed in as the exact count."""


def count_parameters(config):
    L, d = config.n_layers, config.d_model
    return 12 * L * d**2 + (config.vocab_size + config.context_length) * d
