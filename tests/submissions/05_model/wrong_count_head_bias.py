"""A plausible wrong submission: an untied lm_head counted as a Linear with a bias."""


def count_parameters(config):
    d = config.d_model
    d_ff = 4 * d if config.d_ff is None else config.d_ff
    n = (config.vocab_size + config.context_length) * d
    n += config.n_layers * (4 * (d * d + d) + d * d_ff + d_ff + d_ff * d + d + 4 * d)
    n += 2 * d
    if not config.tie_weights:
        n += d * config.vocab_size + config.vocab_size
    return n
