"""A plausible wrong submission: ln_f counted as part of the output head."""


def parameter_breakdown(config):
    d, L, V = config.d_model, config.n_layers, config.vocab_size
    d_ff = config.d_ff or 4 * d
    return {
        "embeddings": V * d + config.context_length * d,
        "attention": L * (4 * d * d + 4 * d),
        "ffn": L * (2 * d * d_ff + d_ff + d),
        "norms": L * 4 * d,
        "lm_head": 2 * d + (0 if config.tie_weights else V * d),
    }
