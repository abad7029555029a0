"""A plausible wrong submission: the embeddings and every block counted, ln_f forgotten."""


def count_parameters(config):
    d = config.d_model
    d_ff = 4 * d if config.d_ff is None else config.d_ff
    block = 4 * (d * d + d) + (d * d_ff + d_ff) + (d_ff * d + d) + 2 * (2 * d)
    embeddings = (config.vocab_size + config.context_length) * d
    head = 0 if config.tie_weights else config.vocab_size * d
    return embeddings + config.n_layers * block + head
