"""A plausible wrong submission: the linear layers and the tables counted, no LayerNorm at all."""


def linear(n_in, n_out, bias=True):
    return n_in * n_out + (n_out if bias else 0)


def count_parameters(config):
    d = config.d_model
    d_ff = config.d_ff if config.d_ff else 4 * d
    block = 4 * linear(d, d) + linear(d, d_ff) + linear(d_ff, d)
    head = 0 if config.tie_weights else linear(d, config.vocab_size, bias=False)
    return (config.vocab_size + config.context_length) * d + config.n_layers * block + head
