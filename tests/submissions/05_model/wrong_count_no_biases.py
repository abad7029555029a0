"""A plausible wrong submission: every weight matrix counted, the linear layers' biases not."""


def count_parameters(config):
    V, T, d, L = config.vocab_size, config.context_length, config.d_model, config.n_layers
    hidden = config.d_ff if config.d_ff is not None else 4 * d
    attention = 4 * d * d  # W_q, W_k, W_v, W_o
    ffn = d * hidden + hidden * d
    layer_norms = 2 * 2 * d
    total = V * d + T * d + L * (attention + ffn + layer_norms) + 2 * d
    if not config.tie_weights:
        total += V * d
    return total
