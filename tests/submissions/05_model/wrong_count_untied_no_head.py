"""A plausible wrong submission: lm_head has no bias, so it is left out of the count altogether,
even when it has a weight of its own."""


def count_parameters(config):
    d = config.d_model
    d_ff = 4 * d if config.d_ff is None else config.d_ff
    embeddings = config.vocab_size * d + config.context_length * d
    blocks = config.n_layers * (4 * d * d + 4 * d + 2 * d * d_ff + d_ff + d + 4 * d)
    return embeddings + blocks + 2 * d
