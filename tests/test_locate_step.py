"""Feedback that locates the faulty step (issue 29): where no catalogued mistake explains a failed
part, its locator (`Part.locate`) runs the student's function on inputs made so that each step
shows in the output, and the message says which step departs and what it does instead.

Held here: the reference is never located anywhere; every catalogued mistake of a part with a
locator is located at its own step, or not at all (never at another's); and an uncatalogued
mistake, graded in a sandboxed worker, is told its step."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from autograder.engine.catalogue import variant_namespace
from autograder.engine.grade import grade_part, locate_step
from autograder.engine.reference import load_reference
from autograder.trust.student import InProcessStudent, Student
from autograder.units import UNITS

# Each catalogued mistake of a part with a locator and the step its located sentence must begin
# with (None: not located, because it raises on the locator's inputs, which the checks' own
# messages report, or because it only shows on shapes the locator does not try).
UNIT_01_STEPS = {
    "softmax": {
        "unstable_softmax": "the stability shift", "softmax_global_max": "the stability shift",
        "softmax_ignores_axis": "the axis argument", "softmax_axis_zero": "the axis.",
        "softmax_shift_by_min": "the stability shift", "softmax_shift_in_numerator_only": "the normalisation",
        "softmax_textbook_formula": "the axis argument", "softmax_shift_by_mean": "the stability shift",
        "softmax_divides_by_max": "the normalisation", "softmax_missing_keepdims": "the axis argument",
        "softmax_over_everything": "the axis argument",
    },
    "scaled_dot_product_attention": {
        "unstable_softmax": "the softmax's stability", "no_scaling": "the scale", "scale_by_dk": "the scale",
        "scale_multiplied": "the scale", "scale_power_precedence": "the scale", "scale_by_n_keys": "the scale",
        "output_scaled_instead_of_scores": "the scale", "scale_by_dv": "the scale",
        "softmax_over_queries": "the softmax's axis", "attention_softmax_axis_zero": "the softmax's axis",
        "returns_scores_not_weights": "the softmax.", "mask_after_softmax": "the mask.",
        "mask_inverted": "the mask's meaning", "mask_boolean_index_no_broadcast": "the mask's shape",
        "mask_ignored": "the mask.",
        "mask_added_to_scores": "the mask.", "mask_truth_tested": None, "mask_filled_with_zero": "the mask.",
        "batched_transpose_with_T": "the keys' transpose",
    },
    "self_attention": {
        "no_scaling": "the scale", "scale_by_dk": "the scale", "scale_multiplied": "the scale",
        "scale_by_d_model": "the scale", "mask_ignored": "the mask.", "self_attention_returns_pair": "the output",
        "keys_from_W_q": "the scores", "values_from_W_k": "the values", "query_key_swapped": "the scores",
    },
}
GELU_MISTAKES = ("gelu_tanh_approximation", "gelu_sigmoid_approximation", "gelu_erf_unscaled", "gelu_erf_over_two",
                 "gelu_erf_times_sqrt2", "gelu_sqrt2_outside_erf", "gelu_tanh_instead_of_erf", "gelu_x_times_erf",
                 "gelu_missing_half", "gelu_cdf_only", "gelu_is_silu", "relu_instead_of_gelu")
UNIT_04_STEPS = {
    "gelu": dict.fromkeys(GELU_MISTAKES, "the weighting"),
    "layer_norm": {
        "ln_eps_outside_sqrt": "eps.", "ln_unbiased_variance": "the variance",
        "ln_divides_by_torch_std": "the variance", "ln_no_eps": "eps.", "ln_ignores_affine": "the weight and bias",
        "ln_weight_and_bias_swapped": "the weight and bias",
        "ln_not_centred": "the centring", "ln_bias_before_weight": "the weight and bias",
        "ln_wrong_axis": "the statistics' axis", "ln_statistics_over_dim_1": "the statistics' axis",
        "ln_whole_tensor_statistics": "the statistics' axis", "ln_wrong_default_eps": "the default eps",
    },
    "rms_norm": {
        "rms_subtracts_mean": "the centring", "rms_eps_outside_sqrt": "eps.", "rms_no_root": "the square root",
        "rms_ignores_weight": "the weight", "rms_sum_not_mean": "the mean square",
        "rms_divides_by_norm": "the mean square",
        "rms_square_of_mean": "the denominator", "rms_divides_by_std": "the denominator",
        "rms_whole_tensor": "the statistics' axis", "rms_no_eps": "eps.", "rms_wrong_default_eps": "the default eps",
    },
}
UNIT_04_STEPS.update({
    "MultiHeadAttention": {
        "attention_not_causal": "the mask", "attention_mask_upper": "the mask", "attention_mask_one_ahead": "the mask",
        "attention_mask_inverted": "the mask's meaning", "attention_mask_hides_diagonal": "the mask",
        "attention_mask_inverted_large_negative": "the mask's meaning", "attention_mask_added": "the mask",
        "attention_mask_with_zero": "the mask", "attention_mask_after_softmax": "the mask",
        "attention_softmax_wrong_axis": "the softmax's axis", "attention_softmax_over_heads": "the softmax's axis",
        "attention_scale_d_model": "the scale", "attention_no_scaling": "the scale",
        "attention_scale_multiplied": "the scale", "attention_scaled_after_softmax": "the softmax",
        "attention_q_k_swapped": "the scores",
        "attention_one_head": "the scale",  # one head of d_model: its scores are divided by sqrt(d_model)
        "heads_split_without_transpose": "the heads", "heads_merged_without_transpose": "the heads",
        "heads_reshaped_without_transpose": "the heads",
        "heads_merged_with_view": None,  # raises (a view of a transposed tensor): the checks say so
        "attention_adds_residual": "the residual", "attention_no_out_proj": "the output projection",
        # no bias to load the locator's weights into: the checks of the parameters say so
        "attention_projections_without_bias": None, "attention_out_proj_without_bias": None,
    },
    "FeedForward": {
        "gelu_tanh_approximation": "the activation", "relu_instead_of_gelu": "the activation",
        "ffn_gelu_after_fc2": "the activation", "ffn_adds_residual": "the residual",
        "ffn_gelu_after_fc2_only": "the order", "ffn_no_activation": "the activation",
        # layers of other shapes, or without bias, take no weights of the contract's: the structure checks say so
        "ffn_default_width": None, "ffn_ignores_d_ff": None, "ffn_without_bias": None,
    },
    "TransformerBlock": {
        "block_post_norm": "the residual stream",
        "block_normalises_stream": "the residual stream",
        "block_attention_residual_from_normalised": "the residual stream",
        "block_ffn_residual_from_normalised": "the residual stream",
        "block_ffn_residual_skips_attention": "the attention sublayer",
        "block_norm_after_sublayer": "the residual stream",
        "block_norms_without_parameters": "the attention sublayer",
        "block_attention_without_norm": "the attention sublayer",
        "block_ffn_without_norm": "the feed-forward sublayer",
        "block_ffn_reads_block_input": "the order of the sublayers",
        "block_drops_attention_update": "the attention sublayer",
        "block_ffn_before_attention": "the order of the sublayers",
        "block_attention_residual_missing": "the residual stream",
        "block_ffn_residual_missing": "the residual stream",
        "block_one_norm_twice": "the feed-forward sublayer",
        "block_norms_swapped": "the attention sublayer",
        "block_ignores_d_ff": None,  # an FFN of another width takes no weights of the contract's
    },
})
UNIT_03_STEPS = {
    "split_heads": {
        "split_without_transpose": "the columns", "split_strided_columns": "the columns",
        "heads_on_first_axis": "batch axes", "heads_swap_last_two_axes": "the shape",
        "heads_transposed_for_one_sequence": None, "heads_transposed_with_fixed_axes": None,
    },
    "merge_heads": {
        "merge_without_transpose": "the positions", "merge_interleaved": "the columns",
        "heads_on_first_axis": "batch axes", "heads_swap_last_two_axes": "the positions",
        "heads_transposed_for_one_sequence": "batch axes", "heads_transposed_with_fixed_axes": None,
    },
    "multi_head_attention": {
        "split_without_transpose": "the heads' arrangement", "split_strided_columns": "the heads' columns",
        "merge_without_transpose": "the heads' arrangement", "merge_interleaved": "the heads' columns",
        "no_output_projection": "the output projection", "output_projection_transposed": "the output projection",
        "weights_transposed": "the output projection", "scale_by_d_model": "the scale", "scale_by_d_head": "the scale",
        "no_scaling": "the scale", "causal_ignored": "the causal mask", "causal_default_false": "the causal mask",
        "causal_inverted": "the causal flag", "causal_always_on": "the causal flag",
        "mask_upper_triangle": "the causal mask", "mask_blocked_convention": "the causal mask's meaning",
        "mask_after_softmax": "the causal mask", "seq_len_from_last_axis": None,
        "softmax_over_queries": "the softmax's axis", "seq_len_from_first_axis": None,
    },
}
UNIT_02_STEPS = {
    "looks_causal": {  # read from the calls a detector makes on causal attention, then from three leaks
        "detector_exact_equality": "the comparison's tolerance",
        "detector_loose_tolerance": "the comparison's tolerance",
        "detector_next_position_only": None,  # changing one later row at a time is a valid design: its comparison
        # (output i only) misses nothing the three leaks show
        "detector_only_position_zero": "the split points", "detector_single_fixed_input": "the inputs.",
        "detector_perturbs_position_i": "the rows you change", "detector_checks_after_i": "the comparison.",
        "detector_inverted": "the verdict", "detector_skips_output_i": "the comparison.",
        "detector_never_finds_a_leak": "the calls", "detector_ignores_arguments": "the inputs' shape",
    },
    "causal_mask": {
        "mask_diagonal_excluded": "the cells", "mask_upper_triangle": "the cells", "mask_one_ahead": "the cells",
        "mask_blocked_convention": "the convention", "mask_all_allowed": "the cells",
        "mask_additive_float": "the type", "mask_as_numbers": "the type",
    },
    "causal_self_attention": {
        "mask_diagonal_excluded": "the mask:", "mask_upper_triangle": "the mask:", "mask_one_ahead": "the mask:",
        "mask_blocked_convention": "the mask:", "mask_forgotten": "the mask:",
        "seq_len_from_first_axis": "the batch axis", "seq_len_from_last_axis": "the mask's size",
        "mask_boolean_index_no_broadcast": "the batch axis", "mask_added_to_scores": "the mask:",
        "mask_filled_with_zero": "the mask:", "mask_after_softmax": "the mask:",
    },
    "next_token_pairs": {
        "targets_not_shifted": "the targets", "pairs_shifted_backwards": "the inputs",
        "pairs_sliced_first_axis": "the inputs' shape", "pairs_sliced_second_axis": "batch axes",
        "inputs_not_trimmed": "the inputs' shape", "pairs_drop_two": "the inputs' shape",
        "targets_rolled": "the inputs' shape", "token_ids_as_floats": "the inputs' type",
    },
}
UNIT_05_STEPS = {
    "sinusoidal_positions": {
        "sinusoid_sin_cos_swapped": "the columns' functions", "sinusoid_halves": "the columns' layout",
        "sinusoid_exponent_i": "the frequencies", "sinusoid_exponent_column": "the frequencies",
        "sinusoid_exponent_doubled": "the frequencies", "sinusoid_from_one": "the positions",
        "sinusoid_float64": "the dtype",
    },
    "GPT": {
        "gpt_no_positions": "the positions", "gpt_positions_from_one": "the positions",
        "gpt_no_final_norm": "the final norm", "gpt_returns_probabilities": "the output",
        "gpt_one_block_repeated": "the blocks", "gpt_always_tied": "the weight tying",
        # a head of its own, a bias, a plain list of blocks: the same logits from the contract's weights
        # (the structure checks say so); a freshly built model's weights: the initialisation checks
        **dict.fromkeys(("gpt_not_tied", "gpt_head_bias", "gpt_blocks_plain_list",
                         "gpt_full_context_refused", "gpt_init_pytorch_defaults", "gpt_init_embeddings_default",
                         "gpt_init_pos_emb_default", "gpt_init_embeddings_only", "gpt_init_residual_not_scaled",
                         "gpt_init_biases_kept", "gpt_init_pos_emb_small", "gpt_init_xavier",
                         "gpt_init_every_parameter")),
    },
    "rope": {
        "rope_rotate_halves": "the pairs", "rope_exponent_i": "the frequencies",
        "rope_wrong_direction": "the direction",
        "rope_ignores_positions": "the positions", "rope_ignores_base": "the base",
        "rope_output_concatenated": "the pairs", "rope_exponent_positive": "the frequencies",
    },
}
ATTENTION_07 = {"scale_by_length": "the scale", "mask_with_zero": "the mask", "mask_hides_diagonal": "the mask"}
UNIT_07_STEPS = {
    "naive_attention": {
        **ATTENTION_07, "naive_no_scale": "the scale", "naive_mask_upper": "the mask",
        "naive_softmax_over_queries": "the softmax's axis", "naive_mask_after_softmax": "the mask",
    },
    "flash_attention": {
        **ATTENTION_07, "flash_exp_before_max_update": "the online softmax", "flash_no_rescale": "the online softmax",
        "flash_sum_not_rescaled": "the online softmax", "flash_no_final_division": "the final division",
        "flash_diagonal_local_indices": "the mask", "flash_partial_tile_dropped": "the last, partial tile",
        "flash_no_scale": "the scale", "flash_skips_diagonal_tile": "the mask",
        "flash_full_rows": None,  # right on every input: only its memory, measured by a check, is wrong
    },
}
UNIT_08_STEPS = {
    "evaluate": {  # a model whose loss says each target, the windows read from its embedding's calls
        "eval_training_mode": None, "eval_with_gradients": None, "eval_calls_backward": None,
        "eval_mode_not_restored": None, "eval_always_back_to_train": None,
        "eval_misses_last_window": None,  # shows only where a last window is one id from fitting
        "eval_overlapping_windows": "the window starts", "eval_window_without_target": "the number of windows",
        "eval_unweighted_batch_means": "the average",
    },
    "pretokenize": {
        "pretokenize_str_split": "the white space", "pretokenize_ascii_letters": "letters and digits",
        "pretokenize_ignore_case": "the contractions", "pretokenize_no_trailing_space_rule": "a run of spaces",
        "pretokenize_space_apart": "the space before a word",
    },
    "train_bpe": {
        "merges_cross_chunks": "the chunks", "tie_smallest_pair": "the tie-break", "tie_first_seen": "the tie-break",
        "tie_by_ids": "the tie-break",  # where merged tokens tie: the replay's first text
        "non_overlapping_counts": "overlapping pairs", "distinct_chunks_once": "the counts' weights",
        "no_early_stop": "stopping early", "merges_up_to_vocab_size": "the number of merges",
        "one_merge_too_many": "the number of merges",
        "merge_right_to_left": "a merge's direction",  # in the counts after a merge in "aaab": the replay
    },
    "encode": {
        "merges_cross_chunks": "the chunks", "merge_right_to_left": "a merge's direction",
        "encode_greedy_left_to_right": "the merge order", "encode_longest_match": "the merge order",
        "encode_by_frequency": "the merge order", "encode_by_chunk_frequency": "the merge order",
        "encode_last_merge_first": "the merge order",
    },
    "decode": {
        "decode_each_token_separately": "the decoding", "decode_errors_ignore": "invalid bytes",
        "decode_strict": "invalid bytes", "decode_latin1": "the decoding",
    },
    "cross_entropy": {
        "ce_no_max_shift": "the log-sum-exp", "ce_max_not_added_back": "the log-sum-exp",
        "ce_sum_not_mean": "the reduction", "ce_mean_over_first_axis": "the positions", "ce_wrong_sign": "the sign",
        "ce_every_row_target": "the targets",
    },
    "lr_at": {
        "lr_warmup_from_zero": "the warm-up", "lr_warmup_never_reaches_max": "the warm-up",
        "lr_cosine_misses_floor": "the cosine's end", "lr_decays_to_zero": "the cosine",
        "lr_cosine_past_the_end": "after the end",
    },
}
PROMPT_STEP, FIRST_NEW = ". In the prompt's forward step", ". In the forward step that fed new token 1"
UNIT_06_STEPS = {
    "generate": {
        "generate_first_position": "the token chosen at step 1", "generate_one_token_short": "the number of steps",
        "generate_last_token_only": "the model's input, at step 1",
        "generate_crops_front": "the model's input, at step 4",
        "generate_new_only": "what is returned", "generate_crop_replaces_sequence": "what is returned",
        # top_k and the temperature's second division show in a sampled generation, replayed
        "top_k_not_passed": "the call to sample_next", "generate_double_temperature": "what is handed to sample_next",
        # The model refuses a sequence longer than its context (the checks say so), and the flags do not show in
        # a generation's calls.
        **dict.fromkeys(("generate_no_crop", "generate_leaves_eval", "model_forced_to_train",
                         "generate_restores_top_flag_only")),
    },
    "generate_cached": {
        "generate_first_position": "the token chosen after the prompt's forward step",
        **dict.fromkeys(("cache_positions_restart", "cache_positions_one_ahead", "cache_slot_one_ahead",
                         "cache_appends_whole_sequence", "cache_recomputes_prefix"), f"the positions{FIRST_NEW}"),
        "cache_never_appended": "block 0's attention. In the forward step that fed new token 2",
        **dict.fromkeys(("cache_not_read", "cache_written_at_step", "cache_causal_one_query"),
                        f"block 0's attention{FIRST_NEW}"),
        "cache_shared_across_layers": f"block 1's attention{PROMPT_STEP}",
        "cache_heads_split_wrong": f"block 0's attention{PROMPT_STEP}",
        "cache_mask_inverted": f"block 0's attention{PROMPT_STEP}",
        "cache_softmax_wrong_axis": f"block 0's attention{PROMPT_STEP}",
        "cache_prefill_unmasked": f"block 0's attention{PROMPT_STEP}",
        "cache_scale_d_model": f"block 0's attention{PROMPT_STEP}",
        "cache_skips_ln_f": f"the final layer norm{PROMPT_STEP}",
        # Not in the layers' calls: the model's flags, the limit's check, a sampler of its own (its draws are
        # not sample_next's), what is returned.
        **dict.fromkeys(("generate_new_only", "generate_leaves_eval", "model_forced_to_train",
                         "cache_limit_error_unnamed", "cache_limit_one_early", "cache_limit_assert",
                         "cache_no_limit_check", "cache_own_sampler")),
        "top_k_not_passed": "the call to sample_next",  # in a sampled generation, replayed
    },
}
STEPS = {"01_attention": UNIT_01_STEPS, "02_masking": UNIT_02_STEPS, "03_multihead": UNIT_03_STEPS,
         "04_block": UNIT_04_STEPS, "05_model": UNIT_05_STEPS, "06_generation": UNIT_06_STEPS,
         "07_flash_training": UNIT_07_STEPS,
         "08_training": UNIT_08_STEPS}
LOCATED_UNITS = [name for name, unit in UNITS.items() if any(part.locates for part in unit.parts)]


def graded_in_worker(unit, part_name: str, source: str) -> list:
    """`part_name` of `source` graded in a sandboxed worker, as a student's answer is."""
    student = Student([("answer", source)])
    student.start()
    try:
        return grade_part(unit, part_name, student)
    finally:
        student.close()


def reference_with(unit, source: str) -> dict:
    """The unit's reference namespace with `source` (the course's own test code, trusted) run in it."""
    namespace = dict(vars(load_reference(unit.name)))
    exec(compile(source, "answer", "exec"), namespace)
    return namespace


def located(unit, part, namespace, student=None) -> str | None:
    """The step `part`'s locator finds in `namespace` (trusted code), or in `student` (a worker)."""
    ref = load_reference(unit.name)
    stubs = {name: getattr(ref, name) for name in part.uses if hasattr(ref, name)}
    stubs.update(dict(part.library_stubs))
    return locate_step(part, student or InProcessStudent(namespace), stubs, 5.0)


@pytest.mark.parametrize("unit_name", LOCATED_UNITS)
def test_the_reference_is_located_nowhere(unit_name):
    unit = UNITS[unit_name]
    for part in (p for p in unit.parts if p.locates):
        assert located(unit, part, dict(vars(load_reference(unit_name)))) is None, part.name


def test_every_part_with_a_locator_has_its_steps_here():
    assert {(u, p.name) for u in LOCATED_UNITS for p in UNITS[u].parts if p.locates} == \
        {(u, part) for u, parts in STEPS.items() for part in parts}


@pytest.mark.parametrize(("unit_name", "part_name"), [(u, p) for u, parts in STEPS.items() for p in sorted(parts)])
def test_every_catalogued_mistake_is_located_at_its_own_step(unit_name, part_name):
    unit = UNITS[unit_name]
    part, ref = unit.part(part_name), load_reference(unit.name)
    catalogued = {m.name: m for m in unit.misconceptions if part_name in m.variants}
    assert set(catalogued) == set(STEPS[unit_name][part_name]), "every catalogued mistake of the part has its step"
    wrong = {}
    for name, step in STEPS[unit_name][part_name].items():
        where = located(unit, part, variant_namespace(part, ref, catalogued[name].variants[part_name]))
        if (where is None) != (step is None) or (step and not where.startswith(step)):
            wrong[name] = where
    assert not wrong, wrong


UNCATALOGUED = {  # part -> (an answer in no catalogue, the step it must be told)
    "softmax": ("""
import numpy as np

def softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / (e.sum(axis=axis, keepdims=True) + 1)
""", "the normalisation"),
    "scaled_dot_product_attention": ("""
import numpy as np

def softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)

def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = Q @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1] + 1)
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    weights = softmax(scores)
    return weights @ V, weights
""", "the scale"),
}


@pytest.mark.parametrize("part_name", sorted(UNCATALOGUED))
def test_an_uncatalogued_mistake_graded_in_a_worker_is_told_its_step(part_name):
    source, step = UNCATALOGUED[part_name]
    results = graded_in_worker(UNITS["01_attention"], part_name, source)
    failed = [r for r in results if not r.passed]
    assert failed and not any(r.misconception for r in results)
    told = [r.message for r in failed if "Where it goes wrong:" in r.message]
    assert len(told) == 1 and f"Where it goes wrong: {step}" in told[0], [r.message for r in failed]


def test_a_named_mistake_is_not_located_as_well():
    unit = UNITS["01_attention"]
    part, ref = unit.part("softmax"), load_reference(unit.name)
    mistake = next(m for m in unit.misconceptions if m.name == "unstable_softmax")
    results = grade_part(unit, "softmax", InProcessStudent(variant_namespace(part, ref, mistake.variants["softmax"])))
    assert any(r.misconception == "unstable_softmax" for r in results)
    assert not any("Where it goes wrong" in r.message for r in results)


TWO_SLIPS_IN_LAYER_NORM = """
import torch

def layer_norm(x, weight, bias, eps=1e-8):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps)
"""


def test_two_slips_that_no_name_explains_are_both_located():
    """A default eps of 1e-8 and no weight or bias: together they fit no catalogued mistake, and
    the locator tells both steps."""
    results = graded_in_worker(UNITS["04_block"], "layer_norm", TWO_SLIPS_IN_LAYER_NORM)
    assert not any(r.misconception for r in results)
    told = next(r.message for r in results if "Where it goes wrong:" in r.message)
    assert "Where it goes wrong: the default eps." in told and "Also: the weight and bias." in told, told


SWAPPED_LAYER_NORM = """
import torch

def layer_norm(x, weight, bias, eps=1e-5):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * bias + weight
"""


@pytest.mark.parametrize("change, told", [
    (("eps=1e-5", "eps=1e-6"), "the default eps."),  # the fresh set fresh29g's 04/32
    (("torch.sqrt(var + eps)", "(torch.sqrt(var) + eps)"), "eps."),
    (("eps=1e-5", "eps=1e-5"), None),  # the swap alone: that step only
])
def test_a_swapped_weight_and_bias_does_not_hide_a_second_slip_in_layer_norm(change, told):
    """Weight and bias swapped gave 1 everywhere on the locator's rows, and it stopped there: a default
    eps of 1e-6 behind it was never told (the fresh set). With weight and bias both 1 a swap computes
    what the right order does, so the later steps are tried that way, and both slips are told."""
    unit = UNITS["04_block"]
    where = located(unit, unit.part("layer_norm"), reference_with(unit, SWAPPED_LAYER_NORM.replace(*change)))
    swap = "the weight and bias. On a row that normalises to [-1, 1, -1, 1]"
    if told is None:
        assert where is not None and where.startswith("the weight and bias.") and "Also" not in where, where
    else:
        assert where is not None and where.startswith(told) and f"Also: {swap}" in where, where


GLOBAL_MAX_CROSS_ENTROPY = """
import torch

def cross_entropy(logits, targets):
    z = logits.reshape(-1, logits.shape[-1])
    m = z.max()  # the whole tensor's maximum, not each row's
    lse = torch.log(torch.exp(z - m).sum(dim=-1)) + m
    return (lse - z.gather(1, targets.reshape(-1, 1)).squeeze(1)).mean()
"""


def test_a_name_is_kept_only_where_its_variant_goes_wrong_at_the_answers_step():
    """A shift by the whole tensor's maximum fails the same check as no shift at all (an infinite
    loss), but on the locator's own inputs it goes wrong nowhere, and no shift goes wrong at the
    log-sum-exp: the answer is not named ce_no_max_shift."""
    results = graded_in_worker(UNITS["08_training"], "cross_entropy", GLOBAL_MAX_CROSS_ENTROPY)
    assert any(not r.passed for r in results)
    assert not any(r.misconception for r in results), [r.misconception for r in results]


def test_a_locator_that_fails_costs_no_grade(monkeypatch):
    """A locator is trusted code that only words the feedback: should it raise on an answer, the
    part is graded all the same, without a located step."""
    import dataclasses

    unit = UNITS["01_attention"]
    part = unit.part("softmax")

    def broken(call):
        raise ValueError("a locator's own bug")

    broken_unit = dataclasses.replace(unit, parts=tuple(dataclasses.replace(p, locate=broken) if p is part else p
                                                        for p in unit.parts))
    namespace = dict(vars(load_reference(unit.name)))
    namespace["softmax"] = lambda x, axis=-1: UNCATALOGUED_SOFTMAX(x, axis)
    results = grade_part(broken_unit, "softmax", InProcessStudent(namespace))
    assert any(not r.passed for r in results) and not any("could not check" in r.message for r in results)
    assert not any("Where it goes wrong" in r.message for r in results)


def UNCATALOGUED_SOFTMAX(x, axis=-1):  # noqa: N802 - the answer of UNCATALOGUED["softmax"], as a function
    import numpy as np

    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / (e.sum(axis=axis, keepdims=True) + 1)


# Slips in a correct generator (tests/submissions/06_generation/correct_concat_cache.py, whose cached
# one feeds the prompt one token at a time) that no catalogued mistake makes: each is told its step,
# from the layers' calls the grader saw (for generate_cached, the step between two layers).
GENERATE_SLIPS = {
    "one step too many": (("for _ in range(max_new_tokens):", "for _ in range(max_new_tokens + 1):"),
                          "the number of steps", "ran 6 times"),
    "a window one token short": (("model(idx[:, -model.config.context_length:])",
                                  "model(idx[:, 1 - model.config.context_length:])"),
                                 "the model's input, at step 3", "one fewer than the context holds"),
    "the temperature not passed on": (("sample_next(logits[:, -1], temperature, top_k, generator)",
                                       "sample_next(logits[:, -1], top_k=top_k, generator=generator)"),
                                      "the token chosen at step 1", "pass temperature"),
    # the fresh set fresh29h's 06/11: the generator not passed on, told only as other tokens
    "the generator not passed on": (("sample_next(logits[:, -1], temperature, top_k, generator)",
                                     "sample_next(logits[:, -1], temperature, top_k)"),
                                    "the call to sample_next", "pass generator on to sample_next"),
}
CACHED_SLIPS = {
    "the attention's residual added to ln1(x)": (
        ("x = x + block.attn.out_proj(", "x = h + block.attn.out_proj("),
        "block 0's attention residual. In the first forward step", "added to ln1(x)"),
    "the feed-forward computed from the stream before the attention's update": (
        ("x = x + block.attn.out_proj((weights @ v).permute(0, 2, 1, 3).reshape(B, 1, C))\n"
         "        x = x + block.ffn(block.ln2(x))",
         "x = x + block.attn.out_proj((weights @ v).permute(0, 2, 1, 3).reshape(B, 1, C)) + block.ffn(block.ln2(x))"),
        "block 0's attention residual. In the first forward step", "before the attention's output is added"),
    "the feed-forward given the stream, not ln2 of it": (
        ("x = x + block.ffn(block.ln2(x))", "x = x + block.ffn(x)"),
        "block 0's feed-forward. In the first forward step", "no call of `block.ln2`"),
    # the fresh set fresh29f's 06/22: blamed on the attention residual
    "the feed-forward normalised with ln1": (
        ("x = x + block.ffn(block.ln2(x))", "x = x + block.ffn(block.ln1(x))"),
        "block 0's feed-forward norm. In the first forward step", "it was given ln1(x + attn_out)"),
    "the feed-forward given the attention's normalised copy": (
        ("x = x + block.ffn(block.ln2(x))", "x = x + block.ffn(h)"),
        "block 0's feed-forward norm. In the first forward step", "it was given ln1(x), the attention's own"),
    # 06/25: a prompt counted as idx.numel(), told only by the student's own ValueError
    "the limit counted on every token of the batch": (
        ("if idx.shape[1] + max_new_tokens >", "if idx.numel() + max_new_tokens >"),
        "the context-length check. A batch of 4 prompts of 3 tokens", "not on idx.numel() (B * T)"),
    "values stored where the keys go": (
        ("cache[i] = (k, v)", "cache[i] = (v, k)"),
        "block 0's attention. In the forward step at prompt position 1", "keys and values swapped"),
    "a cache kept between calls": (
        ("cache = [None] * len(model.blocks)", "cache = KEPT.setdefault('cache', [None] * len(model.blocks))"),
        "block 0's attention, on a second call", "kept from one call to the next"),
    # the fresh set fresh29h's 06/24: a batch's new tokens fed as nxt.view(1, -1), blamed on the positions
    "the batch's new tokens fed as one row": (
        ("_step(model, out[:, -1:], out.shape[1] - 1, cache)",
         "_step(model, out[:, -1].view(1, -1), out.shape[1] - 1, cache)"),
        "the shape of the tokens fed. In the forward step that fed new token 1", "given ids of shape (1, 2)"),
    # 06/28: the temperature not passed on to sample_next, blamed on the tokens fed
    "the temperature not passed on": (
        ("sample_next(logits, temperature, top_k, generator)[:, None]",
         "sample_next(logits, top_k=top_k, generator=generator)[:, None]"),
        "the token chosen after", "pass temperature"),
    "the generator not passed on": (
        ("sample_next(logits, temperature, top_k, generator)[:, None]",
         "sample_next(logits, temperature, top_k)[:, None]"),
        "the call to sample_next", "pass generator on to sample_next"),
}
CORRECT_CACHED = Path(__file__).parent / "submissions" / "06_generation" / "correct_concat_cache.py"


SLIPS = [("generate", slip) for slip in sorted(GENERATE_SLIPS)] + [("generate_cached", s) for s in sorted(CACHED_SLIPS)]


@pytest.mark.parametrize(("part_name", "slip"), SLIPS)
def test_a_slip_in_a_generator_is_told_its_step_from_the_calls_the_grader_saw(part_name, slip):
    (old, new), step, words = (GENERATE_SLIPS if part_name == "generate" else CACHED_SLIPS)[slip]
    source = CORRECT_CACHED.read_text()
    assert old in source
    source = source.replace(old, new) + "\n\nKEPT = {}\n"
    unit = UNITS["06_generation"]
    student = Student([("answer", source)])
    student.start()
    try:
        where = located(unit, unit.part(part_name), None, student=student)
    finally:
        student.close()
    assert where is not None and where.startswith(step) and words in where, where


def test_a_catalogued_cache_mistake_is_named_whichever_way_the_prompt_is_fed():
    """The reference fills the cache with the whole prompt at once, the answer a token at a time: the
    same slip then shows in another forward step, but at the same step of the model, so the name
    stays (it was dropped when the step named the forward step too)."""
    source = CORRECT_CACHED.read_text()
    old = "/ math.sqrt(C // H)"
    assert old in source
    unit = UNITS["06_generation"]
    results = graded_in_worker(unit, "generate_cached", source.replace(old, "/ math.sqrt(C)"))
    assert {r.misconception for r in results if not r.passed} == {"cache_scale_d_model"}, \
        [r.message for r in results if not r.passed]


SOFTMAX_OVER_QUERIES_02 = """
import numpy as np

def causal_mask(T):
    return np.tril(np.ones((T, T), dtype=bool))

def causal_self_attention(x, W_q, W_k, W_v):
    q, k, v = x @ W_q, x @ W_k, x @ W_v
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    s = np.where(causal_mask(x.shape[-2]), s, -np.inf)
    e = np.exp(s - s.max(axis=-2, keepdims=True))
    return (e / e.sum(axis=-2, keepdims=True)) @ v
"""


def test_a_softmax_over_the_queries_is_not_told_as_the_mask():
    """Unit 02 catalogues no softmax-axis slip; its weights' rows do not sum to 1, as a mask applied
    after the softmax would make them, but their columns do (found by the fresh set)."""
    unit = UNITS["02_masking"]
    namespace = reference_with(unit, SOFTMAX_OVER_QUERIES_02)
    where = located(unit, unit.part("causal_self_attention"), namespace)
    assert where is not None and where.startswith("the softmax's axis:"), where


@pytest.mark.parametrize("part_name", ["naive_attention", "flash_attention"])
def test_an_attention_that_is_always_causal_is_told_the_causal_flag(part_name):
    """No catalogued mistake ignores causal=False; its uniform weights come back masked (the fresh set)."""
    unit = UNITS["07_flash_training"]
    reference = load_reference(unit.name)
    namespace = dict(vars(reference))
    namespace[part_name] = lambda q, k, v, causal=False, **kw: getattr(reference, part_name)(q, k, v, causal=True,
                                                                                                 **kw)
    where = located(unit, unit.part(part_name), namespace)
    assert where is not None and where.startswith("the causal flag."), where


def test_weights_returned_from_before_the_mask_are_told_as_such():
    """The output mixed with the masked weights, the weights returned from before the mask (the fresh set)."""
    unit = UNITS["01_attention"]
    namespace = reference_with(unit, """
def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = Q @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1])
    unmasked = softmax(scores)
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    weights = softmax(scores)
    return weights @ V, unmasked
""")
    where = located(unit, unit.part("scaled_dot_product_attention"), namespace)
    assert where is not None and where.startswith("the weights returned."), where


MHA_SOFTMAX_OVER_HEADS = """
def multi_head_attention(x, W_q, W_k, W_v, W_o, n_heads, causal=True):
    q, k, v = (split_heads(x @ W, n_heads) for W in (W_q, W_k, W_v))
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    if causal:
        n = x.shape[-2]
        scores = np.where(np.tril(np.ones((n, n), dtype=bool)), scores, -np.inf)
    e = np.exp(scores - scores.max(axis=-3, keepdims=True))
    return merge_heads((e / e.sum(axis=-3, keepdims=True)) @ v) @ W_o
"""


@pytest.mark.parametrize(("slip", "step"), [("keys from W_q", "the keys."), ("x added", "the output."),
                                            ("softmax over the heads", "the softmax's axis.")])
def test_slips_in_multi_head_attention_are_told_their_step(slip, step):
    """Three slips of the fresh set, once told as the scale or the mix of values."""
    unit = UNITS["03_multihead"]
    reference = load_reference(unit.name)
    namespace = dict(vars(reference))
    mha = reference.multi_head_attention
    if slip == "keys from W_q":
        namespace["multi_head_attention"] = lambda x, W_q, W_k, W_v, W_o, n, causal=True: mha(x, W_q, W_q, W_v, W_o,
                                                                                               n, causal)
    elif slip == "x added":
        namespace["multi_head_attention"] = lambda x, W_q, W_k, W_v, W_o, n, causal=True: mha(x, W_q, W_k, W_v, W_o,
                                                                                               n, causal) + x
    else:
        exec(compile(MHA_SOFTMAX_OVER_HEADS, "answer", "exec"), namespace)  # the course's own test code
    where = located(unit, unit.part("multi_head_attention"), namespace)
    assert where is not None and where.startswith(step), where


@pytest.mark.parametrize(("scale", "second"), [("np.sqrt(x.shape[-1])", "the scale."), ("np.sqrt(q.shape[-1])", None)])
def test_mha_without_w_o_and_a_second_slip_is_told_both(scale, second):
    """W_o left out and the scores divided by sqrt(d_model) (the fresh set fresh29h's 03/28): only the
    projection was told, though the later steps, whose W_o is the identity, show the scale as well."""
    unit = UNITS["03_multihead"]
    namespace = reference_with(unit, f"""
def multi_head_attention(x, W_q, W_k, W_v, W_o, n_heads, causal=True):
    q, k, v = (split_heads(x @ W, n_heads) for W in (W_q, W_k, W_v))
    scores = q @ np.swapaxes(k, -1, -2) / {scale}
    if causal:
        n = x.shape[-2]
        scores = np.where(np.tril(np.ones((n, n), dtype=bool)), scores, -np.inf)
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return merge_heads((e / e.sum(axis=-1, keepdims=True)) @ v)
""")
    where = located(unit, unit.part("multi_head_attention"), namespace)
    assert where is not None and where.startswith("the output projection."), where
    if second is None:
        assert "A second step" not in where, where
    else:
        assert f"A second step is wrong as well, {second}" in where and "sqrt(d_model)" in where, where


def test_a_flop_count_in_multiply_adds_and_a_projection_short_is_read_as_both():
    """Multiply-adds (no 2) and three projections (the fresh set fresh29h's 03/29) got only the ratio."""
    results = graded_in_worker(UNITS["03_multihead"], "attention_flops", """
def attention_flops(n, d_model, n_heads):
    d_head = d_model // n_heads
    return 3 * n * d_model * d_model + n_heads * 2 * n * n * d_head
""")
    failed = [r for r in results if not r.passed]
    assert failed and all("multiply-adds" in r.message and "a projection left out" in r.message
                          for r in failed), [r.message for r in failed]


def test_values_made_with_k_proj_are_told_as_the_values():
    """Once told as the softmax (the fresh set): with q_proj = k_proj = 0 such values are 0."""
    unit = UNITS["04_block"]
    reference = load_reference(unit.name)

    class KeysAsValues(reference.MultiHeadAttention):
        def forward(self, x):
            v_proj = self.v_proj
            self.v_proj = self.k_proj
            try:
                return super().forward(x)
            finally:
                self.v_proj = v_proj

    namespace = dict(vars(reference), MultiHeadAttention=KeysAsValues)
    where = located(unit, unit.part("MultiHeadAttention"), namespace)
    assert where is not None and where.startswith("the values."), where


def test_an_exception_inside_a_part_quotes_the_students_line_that_raised():
    """Shape errors raised inside a part told only the exception (the fresh set): the line that raised
    names the step, in the student's own words."""
    source = """
import numpy as np

def split_heads(x, n_heads):
    d_head = x.shape[-2] // n_heads
    return np.swapaxes(x.reshape(x.shape[:-1] + (n_heads, d_head)), -2, -3)
"""
    results = graded_in_worker(UNITS["03_multihead"], "split_heads", source)
    raised = [r.message for r in results if ": raised ValueError" in r.message]
    assert raised and all("(in your code: answer, line 6: `return np.swapaxes(x.reshape(" in m for m in raised), raised


def test_a_float_size_that_raises_later_is_told_where_it_comes_from():
    """A head size computed with / raised at the reshape, told only as the TypeError (the fresh set):
    what the error usually means, and where the names on the line that raised were set."""
    source = """
import numpy as np

def split_heads(x, n_heads):
    d_head = x.shape[-1] / n_heads
    return np.swapaxes(x.reshape(x.shape[:-1] + (n_heads, d_head)), -2, -3)
"""
    results = graded_in_worker(UNITS["03_multihead"], "split_heads", source)
    raised = [r.message for r in results if ": raised TypeError" in r.message]
    assert raised and all("is it computed with / where // gives a whole number?" in m for m in raised), raised
    # and the line that made the float, where the names on the line that raised were set
    assert all("`d_head` on line 5: `d_head = x.shape[-1] / n_heads`" in m for m in raised), raised


BREAKDOWN = """
def parameter_breakdown(config):
    d, L = config.d_model, config.n_layers
    d_ff = config.d_ff or 4 * d
    return {{"embeddings": (config.vocab_size + config.context_length) * d,
            "attention": L * (4 * d * d + {attention_biases} * d),
            "ffn": L * (2 * d * d_ff + d_ff + {fc2_bias}),
            "norms": {norms},
            "lm_head": 0 if config.tie_weights else config.vocab_size * d}}


def count_parameters(config):
    return sum(parameter_breakdown(config).values())
"""
RIGHT_TERMS = {"attention_biases": "4", "fc2_bias": "d", "norms": "L * 4 * d + 2 * d"}


@pytest.mark.parametrize("slip, check, told", [
    ({"attention_biases": "1"}, "attention", "three vectors of d_model too few in every block"),
    ({"fc2_bias": "d_ff"}, "ffn", "a vector of d_ff where one of d_model belongs in every block"),
    ({"norms": "L * 2 * d + 2 * d"}, "norms", "two vectors of d_model too few in every block"),
    ({"norms": "4 * d + 2 * d"}, "block", "four vectors of d_model too few in every block"),
    # One bias for the four projections: with d_ff 20 this was also two vectors of d_ff - d_model (the fresh set)
    ({"attention_biases": "1"}, "block", "three vectors of d_model too few in every block"),
])
def test_a_count_that_is_off_is_told_which_piece_of_the_model_it_misses(slip, check, told):
    """A parameter count off by some number (the fresh set: "numbers only") is told what that number
    is, in pieces of a model, read from the models of different sizes it was counted for."""
    source = BREAKDOWN.format(**{**RIGHT_TERMS, **slip})
    part = "count_parameters" if check == "block" else "parameter_breakdown"
    results = {r.name: r for r in graded_in_worker(UNITS["05_model"], part, source)}
    result = results[f"{part}/{check}"]
    assert not result.passed and told in result.message, result.message


BLOCK_BY_BLOCK_COUNT = """
def count_parameters(config):
    d = config.d_model
    d_ff = config.d_ff if config.d_ff is not None else 4 * d
    n = (config.vocab_size + config.context_length) * d
    for layer in range(config.n_layers):
        n += 4 * d + 4 * (d * d + d) + 2 * d * d_ff + d_ff + d
    n += 2 * d
    return n + (0 if config.tie_weights else config.vocab_size * d)
"""


@pytest.mark.parametrize("loop, told", [
    ("range(1, config.n_layers)", "one block fewer than n_layers"),  # the fresh set fresh29g's 05/17
    ("range(config.n_layers + 1)", "one block more than n_layers"),
])
def test_a_count_a_block_short_or_over_is_told_so(loop, told):
    """A count whose loop over the blocks ran once too few was told numbers only (the fresh set): its
    one-more-layer check passes, and every check it fails is off by whole blocks."""
    unit = UNITS["05_model"]
    source = BLOCK_BY_BLOCK_COUNT.replace("range(config.n_layers)", loop)
    assert loop in source
    failed = [r.message for r in grade_part(unit, "count_parameters", InProcessStudent(reference_with(unit, source)))
              if not r.passed]
    # what is left outside the blocks is one block over in a count of one block for n_layers as well: there
    # only a block too few is read; every other check says it, and no check says anything else
    assert all(told in m or "Where it goes wrong" not in m for m in failed), failed
    assert sum("Where it goes wrong: the blocks counted." in m and told in m for m in failed) >= 3, failed


@pytest.mark.parametrize("count, told", [
    ("8 * n * d * d + 2 * (2 * d * n * (n + 1) // 2)", "the future half of both products over the heads left out"),
    ("4 * n * d * (2 * d - 1) + 4 * n * n * d", "2b - 1 FLOPs for a dot product of length b in four projections"),
    ("6 * n * d * d + 4 * n * n * d", "a projection left out"),
    ("8 * n * d * d + 4 * n * n * d + n_heads * n * n", "one FLOP for every score"),
    # weights @ V at n^2 d_model (the fresh set fresh29g's 03/22): with 2 heads the same number as one product
    # counted for one head only, which was told there; that check now says nothing, the others the missing 2
    ("8 * n * d * d + 2 * n * n * d + n * n * d", "counted without the multiply-add's 2"),
    ("7 * n * d * d + 4 * n * n * d", "a projection counted without the multiply-add's 2"),
])
def test_a_flop_count_that_is_off_is_told_which_products_it_misses(count, told):
    """A FLOP count off by some number told only the ratio (the fresh set); now what that number is,
    in the call's products, on each check where one reading alone gives it."""
    source = f"def attention_flops(n, d_model, n_heads):\n    d = d_model\n    return {count}\n"
    results = graded_in_worker(UNITS["03_multihead"], "attention_flops", source)
    failed = [r.message for r in results if not r.passed]
    # where another reading fits a check's numbers too, that check says nothing more: never another step
    assert failed and all(told in message or "Where it goes wrong" not in message for message in failed), failed
    assert any(told in message for message in failed), failed


TRAINER = Path(__file__).parent / "submissions" / "07_flash_training" / "correct_default_timer.py"


@pytest.mark.parametrize("change, check, told", [
    (("progress(step + 1, losses[-1])", "progress(step, losses[-1])"), "progress", "count the steps from 1, not 0"),
    (("torch.Generator().manual_seed(seed)", "torch.Generator().manual_seed(0)"), "seed",
     "the batches do not depend on `seed`"),
    (("torch.Generator().manual_seed(seed)", "torch.Generator(); g.seed()"), "seed",
     "two runs with seed=11 from the same start returned different losses"),
])
def test_a_trainer_that_ignores_its_seed_or_miscounts_progress_is_told_so(change, check, told):
    """Three mistakes of the fresh set that kept full marks: progress counted from 0, and the seed
    ignored (a constant, or the system's entropy)."""
    source = TRAINER.read_text()
    assert change[0] in source
    results = {r.name: r for r in graded_in_worker(UNITS["07_flash_training"], "train", source.replace(*change))}
    failed = {name: r.message for name, r in results.items() if not r.passed}
    # Batches drawn from the system's entropy are other batches each run: the checks that read how a
    # run went from its batches (its step-to-step jitter, how far it got) may then fail too, by chance.
    by_chance = {"train/every_position", "train/keeps_pace"} if "g.seed()" in change[1] else set()
    assert f"train/{check}" in failed and set(failed) - by_chance == {f"train/{check}"}, failed
    assert told in failed[f"train/{check}"], failed


def test_a_mask_read_transposed_is_told_as_the_masks_axes():
    """Once told as the fill value (the fresh set): the weights follow mask.T, filled with -1e9."""
    unit = UNITS["01_attention"]
    namespace = reference_with(unit, """
def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = Q @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1])
    if mask is not None:
        scores = np.where(np.swapaxes(mask, -1, -2), scores, -1e9)
    weights = softmax(scores)
    return weights @ V, weights
""")
    where = located(unit, unit.part("scaled_dot_product_attention"), namespace)
    assert where is not None and where.startswith("the mask's axes."), where


def test_a_block_whose_second_layernorm_is_its_first_is_told_so():
    """Once told as the attention sublayer (the fresh set): loading ln2's weights overwrote ln1's."""
    unit = UNITS["04_block"]
    reference = load_reference(unit.name)

    class SharedNorm(reference.TransformerBlock):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.ln2 = self.ln1

    namespace = dict(vars(reference), TransformerBlock=SharedNorm)
    where = located(unit, unit.part("TransformerBlock"), namespace)
    assert where is not None and where.startswith("the second LayerNorm."), where


BLOCK_WITH_ITS_OWN_NORM = """
import torch
from torch import nn


class LN(nn.Module):
    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d))

    def forward(self, x):
        return layer_norm(x, self.weight, self.bias, self.eps)


class TransformerBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff=None):
        super().__init__()
        self.ln1 = LN(d_model)
        self.attn = MultiHeadAttention(d_model, n_heads)
        self.ln2 = LN(d_model)
        self.ffn = FeedForward(d_model, d_ff)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.ffn(self.ln2(x))
"""


@pytest.mark.parametrize("change, told", [
    (("self.weight, self.bias,", "self.weight, torch.zeros_like(self.bias),"), "without adding the bias"),
    (("self.weight, self.bias,", "torch.ones_like(self.weight), self.bias,"), "without multiplying by the weight"),
    (("self.weight, self.bias,", "self.bias, self.weight,"), "the weight and bias swapped"),
    (("self.weight, self.bias, self.eps)", "self.weight, self.bias, self.eps) * 1.5"), "differs from a LayerNorm"),
    (("self.eps = eps", "self.eps = 1e-6"), None),  # an eps of its own: the eps step's, as before
    (("self.eps = eps", "self.eps = eps"), ""),  # right: located nowhere
])
def test_a_block_whose_own_layernorm_module_departs_is_told_the_norm(change, told):
    """A block with a LayerNorm module of the student's own that drops its bias was told as the
    attention sublayer, the first to use it (the fresh set fresh29g's 04/26): ln1 and ln2 are now
    called on their own, and what they return is said."""
    unit = UNITS["04_block"]
    where = located(unit, unit.part("TransformerBlock"),
                    reference_with(unit, BLOCK_WITH_ITS_OWN_NORM.replace(*change)))
    if told is None:
        assert where is not None and where.startswith("the norms' eps."), where
    elif not told:
        assert where is None, where
    else:
        assert where is not None and where.startswith("the norms. ") and told in where, where


def test_a_block_whose_own_layernorm_drops_its_bias_is_told_so_in_a_worker():
    # the contract's other names, each stood in for by the grader's while the block is graded
    source = ("def layer_norm(x, weight, bias, eps=1e-5):\n    raise NotImplementedError\n\n\n"
              "MultiHeadAttention = FeedForward = layer_norm\n"
              + BLOCK_WITH_ITS_OWN_NORM.replace("self.weight, self.bias,", "self.weight, torch.zeros_like(self.bias),"))
    results = graded_in_worker(UNITS["04_block"], "TransformerBlock", source)
    told = [r.message for r in results if "Where it goes wrong" in r.message]
    assert told and "Where it goes wrong: the norms. " in told[0] and "without adding the bias" in told[0], told


GPT_FORWARD = """
import math

import torch
from torch import nn

_Reference = GPT


class FinalNorm(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d))

    def forward(self, x):
        return torch.nn.functional.layer_norm(x, x.shape[-1:], self.weight, self.bias, 1e-5)


class GPT(_Reference):
    def __init__(self, config):
        super().__init__(config)
        self.ln_f = FinalNorm(config.d_model)

    def forward(self, idx):
        T = idx.shape[1]
        x = self.token_emb(idx) + self.pos_emb(torch.arange(T))
        for block in self.blocks:
            x = block(x)
        x = self.ln_f(x)
        return self.lm_head(x)
"""


@pytest.mark.parametrize("change, told", [
    # the fresh set fresh29g's 05/09 and 05/12: both told "the embeddings, the final norm and the head"
    (("x = block(x)\n        x = self.ln_f(x)", "x = self.ln_f(block(x))\n"),
     "the final norm. With every block silenced"),
    (("self.token_emb(idx) +", "self.token_emb(idx) * math.sqrt(self.config.d_model) +"),
     "token_emb(idx) times 2.828 = sqrt(d_model)"),
    (("+ self.pos_emb(torch.arange(T))", "+ 0.3 * self.pos_emb(torch.arange(T))"), "pos_emb(positions) times 0.3"),
    (("return self.lm_head(x)", "return self.lm_head(x) / math.sqrt(self.config.d_model)"),
     "those logits times 0.3536 = 1 / sqrt(d_model)"),
    (("x.shape[-1:], self.weight, self.bias, 1e-5)", "x.shape[-1:], self.weight, None, 1e-5)"),
     "the final norm. Called on its own with the model's weights, your ln_f"),
    (("return self.lm_head(x)", "return self.lm_head(x + self.ln_f(x))"), "the forward's wiring."),
    (("x = self.ln_f(x)", "x = self.ln_f(x)"), None),  # right: located nowhere
])
def test_a_gpt_whose_embeddings_final_norm_or_head_departs_is_told_which(change, told):
    """Outside the blocks, "the embeddings, the final norm and the head" was said of every slip (the fresh
    set): ln_f after every block and a token embedding scaled by sqrt(d_model) alike. Now the stage is named,
    with what it computes instead (a scale read from the logits, a norm applied where), and where no changed
    pipeline fits, each module called on its own."""
    unit = UNITS["05_model"]
    assert change[0] in GPT_FORWARD
    where = located(unit, unit.part("GPT"), reference_with(unit, GPT_FORWARD.replace(*change)))
    if told is None:
        assert where is None, where
    else:
        assert where is not None and told in where, where
    if "None, 1e-5" in change[1]:
        assert "without adding the bias" in where, where


@pytest.mark.parametrize("chain, step", [("ln_f first", "the final norm's place."), ("reversed", "the blocks' order."),
                                         ("last block only", "the blocks.")])
def test_a_gpt_whose_stream_goes_another_way_is_told_how(chain, step):
    """ln_f before the blocks was told only as "the blocks" (the fresh set)."""
    unit = UNITS["05_model"]
    reference = load_reference(unit.name)

    class Rewired(reference.GPT):
        def forward(self, idx):
            x = self.token_emb(idx) + self.pos_emb(torch.arange(idx.shape[1]))
            if chain == "ln_f first":
                x = self.ln_f(x)
            blocks = list(self.blocks)[::-1] if chain == "reversed" else list(self.blocks)
            start = x
            for block in blocks:
                x = block(start if chain == "last block only" else x)
            return self.lm_head(x if chain == "ln_f first" else self.ln_f(x))

    where = located(unit, unit.part("GPT"), dict(vars(reference), GPT=Rewired))
    assert where is not None and where.startswith(step), where


@pytest.mark.parametrize("scale, read", [("np.sqrt(x.shape[-1])", "sqrt(d_model) = sqrt(5)"), ("1.0", "1 (no scale)")])
def test_causal_self_attention_with_another_scale_is_told_what_it_divides_by(scale, read):
    """A scale of sqrt(d_model) got only "the output differs" (the fresh set): with W_q = W_k = 0 the
    scale never shows, so one more input gives a position a known score."""
    unit = UNITS["02_masking"]
    namespace = reference_with(unit, f"""
def causal_self_attention(x, W_q, W_k, W_v):
    q, k, v = x @ W_q, x @ W_k, x @ W_v
    scores = q @ np.swapaxes(k, -1, -2) / {scale}
    n = x.shape[-2]
    scores = np.where(np.tril(np.ones((n, n), dtype=bool)), scores, -np.inf)
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)) @ v
""")
    where = located(unit, unit.part("causal_self_attention"), namespace)
    assert where is not None and where.startswith("the scale:") and read in where, where


@pytest.mark.parametrize("product, step", [
    ("k @ np.swapaxes(q, -1, -2)", "the scores."),  # the fresh set fresh29h's 02/10: K Qᵀ
    ("(x @ W_k) @ np.swapaxes(k, -1, -2)", None),  # queries made with W_k: not the scores' order
])
def test_causal_self_attention_with_keys_times_queries_is_told_the_scores(product, step):
    """K Qᵀ got only "the output differs": every probe had W_q = W_k (or zero), where the scores are
    symmetric; one query and one key at different positions show which way round they are."""
    unit = UNITS["02_masking"]
    namespace = reference_with(unit, f"""
def causal_self_attention(x, W_q, W_k, W_v):
    q, k, v = x @ W_q, x @ W_k, x @ W_v
    scores = {product} / np.sqrt(k.shape[-1])
    n = x.shape[-2]
    scores = np.where(np.tril(np.ones((n, n), dtype=bool)), scores, -np.inf)
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)) @ v
""")
    where = located(unit, unit.part("causal_self_attention"), namespace)
    if step is None:
        assert where is None or not where.startswith("the scores."), where
    else:
        assert where is not None and where.startswith(step) and "K Qᵀ" in where, where


@pytest.mark.parametrize("loop, told", [
    ("range(n - 1)", "row 3 is [False, False, False, False]"),  # the fresh set fresh29h's 02/04
    ("range(1, n)", "row 0 is [False, False, False, False]"),
])
def test_a_causal_mask_loop_that_misses_a_row_is_told_which_row(loop, told):
    """A loop that left the last row out got only "a pattern that is not made of whole diagonals"."""
    unit = UNITS["02_masking"]
    namespace = reference_with(unit, f"""
def causal_mask(n):
    mask = np.zeros((n, n), dtype=bool)
    for i in {loop}:
        for j in range(i + 1):
            mask[i, j] = True
    return mask
""")
    where = located(unit, unit.part("causal_mask"), namespace)
    assert where is not None and where.startswith("the rows:") and told in where and loop.split(")")[0] in where, where


def test_next_token_pairs_that_squeezes_a_batch_of_one_fails_a_check():
    """np.squeeze(tokens) kept full marks (the fresh set fresh29h's 02/18): no batch of one was tried.
    The part's total stays 5."""
    unit = UNITS["02_masking"]
    part = unit.part("next_token_pairs")
    assert sum(check.points for check in part.checks) == 5
    results = graded_in_worker(unit, "next_token_pairs", """
import numpy as np

def next_token_pairs(tokens):
    tokens = np.squeeze(np.asarray(tokens))
    return tokens[..., :-1], tokens[..., 1:]
""")
    failed = [r for r in results if not r.passed]
    assert failed and all("(1, 7)" in r.message for r in failed), [r.message for r in failed]


def test_a_sampler_with_another_default_temperature_is_told_its_defaults():
    """temperature=0.8 as the default kept full marks (the fresh set): every check gave a temperature."""
    source = (Path(__file__).parent / "submissions" / "06_generation" / "correct_concat_cache.py").read_text()
    assert "def sample_next(logits, temperature=1.0," in source
    results = graded_in_worker(UNITS["06_generation"], "sample_next",
                               source.replace("def sample_next(logits, temperature=1.0,",
                                              "def sample_next(logits, temperature=0.8,"))
    failed = {r.name: r.message for r in results if not r.passed}
    assert list(failed) == ["sample_next/defaults"] and "temperature=1.0" in failed["sample_next/defaults"], failed


def test_a_flash_attention_that_drops_the_last_query_tile_is_told_its_loop():
    """Once told as the output's shape (the fresh set)."""
    unit = UNITS["07_flash_training"]
    reference = load_reference(unit.name)

    def flash_attention(q, k, v, causal=True, block_size=64):
        whole = q.shape[-2] // block_size * block_size  # range(0, T - block_size + 1, block_size)
        return reference.flash_attention(q[..., :whole, :], k, v, causal, block_size)

    where = located(unit, unit.part("flash_attention"), dict(vars(reference), flash_attention=flash_attention))
    assert where is not None and where.startswith("the query tiles' loop."), where


def test_an_attention_module_that_keeps_the_head_size_as_n_heads_is_told_the_number_of_heads():
    """Once told as the scale (the fresh set)."""
    unit = UNITS["04_block"]
    reference = load_reference(unit.name)

    class HeadSizeAsHeads(reference.MultiHeadAttention):
        def __init__(self, d_model, n_heads):
            super().__init__(d_model, d_model // n_heads)

    where = located(unit, unit.part("MultiHeadAttention"), dict(vars(reference), MultiHeadAttention=HeadSizeAsHeads))
    assert where is not None and where.startswith("the number of heads."), where


@pytest.mark.parametrize("slip, step", [("axis=1", "the softmax's axis."), ("Q.shape[1]", "the scale.")])
def test_an_axis_counted_from_the_front_is_told_which_one(slip, step):
    """Right on one set of queries, wrong on a batch: once told as the keys' transpose whatever the
    axis (the fresh set)."""
    unit = UNITS["01_attention"]
    axis, d_k = ("1", "Q.shape[-1]") if slip == "axis=1" else ("-1", "Q.shape[1]")
    namespace = reference_with(unit, f"""
def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = Q @ np.swapaxes(K, -1, -2) / np.sqrt({d_k})
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    e = np.exp(scores - scores.max(axis={axis}, keepdims=True))
    weights = e / e.sum(axis={axis}, keepdims=True)
    return weights @ V, weights
""")
    where = located(unit, unit.part("scaled_dot_product_attention"), namespace)
    assert where is not None and where.startswith(step), where


def test_a_softmax_that_swaps_its_axis_back_fails_on_the_first_of_three():
    """np.moveaxis(x, axis, -1) undone with np.swapaxes kept full marks (the fresh set): the two
    agree for axis=1 of three axes, and on two axes."""
    unit = UNITS["01_attention"]
    namespace = reference_with(unit, """
def softmax(x, axis=-1):
    moved = np.moveaxis(np.asarray(x, dtype=float), axis, -1)
    e = np.exp(moved - moved.max(axis=-1, keepdims=True))
    return np.swapaxes(e / e.sum(axis=-1, keepdims=True), axis, -1)
""")
    failed = [r.name for r in grade_part(unit, "softmax", InProcessStudent(namespace)) if not r.passed]
    assert failed == ["softmax/first_axis"], failed


def test_an_attention_module_that_rounds_to_float32_is_told_its_precision():
    """Once told as the heads (the fresh set): a softmax in float32 inside a float64 module."""
    unit = UNITS["04_block"]
    reference = load_reference(unit.name)

    class Float32Inside(reference.MultiHeadAttention):
        def forward(self, x):
            return super().forward(x).float().to(x.dtype)

    where = located(unit, unit.part("MultiHeadAttention"), dict(vars(reference), MultiHeadAttention=Float32Inside))
    assert where is not None and where.startswith("the precision."), where


def test_a_trainer_with_another_default_lr_is_told_its_defaults_and_given_no_name():
    """lr=3e-4 as the default was named train_no_zero_grad (the fresh set): both only train slowly.
    The seed check's run with the defaults given tells them apart."""
    source = TRAINER.read_text().replace("lr=3e-3, seed=0", "lr=3e-4, seed=0")
    results = {r.name: r for r in graded_in_worker(UNITS["07_flash_training"], "train", source)}
    assert not results["train/seed"].passed and "the defaults in the signature" in results["train/seed"].message
    assert not any(r.misconception for r in results.values()), {n: r.misconception for n, r in results.items()}


BPE_HELPERS = """
from collections import Counter

def _merged(ids, pair, new_id):
    out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out

def _counts(words):
    counts = Counter()
    for ids, n in words.items():
        for pair in zip(ids, ids[1:]):
            counts[pair] += n
    return counts

def train_bpe(text, vocab_size):
    words = Counter(tuple(chunk.encode("utf-8")) for chunk in pretokenize(text))
    table = {i: bytes([i]) for i in range(256)}
    merges = []
    while 256 + len(merges) < vocab_size:
        counts = _counts(words)
        if not counts:
            break
        pair = max(counts, key=lambda p: (counts[p], table[p[0]], table[p[1]]))
        if counts[pair] < 2:
            break
        merges.append(pair)
        table[NEW_ID] = table[pair[0]] + table[pair[1]]
        new_words = Counter()
        for ids, n in words.items():
            new_words[tuple(_merged(list(ids), pair, NEW_ID))] += n
        words = new_words
    return merges

def encode(text, merges):
    rank = {pair: i for i, pair in enumerate(merges)}  # a dict: the merges must come as tuples
    ids = []
    for chunk in pretokenize(text):
        seq = list(chunk.encode("utf-8"))
        while len(seq) >= 2:
            present = [p for p in zip(seq, seq[1:]) if p in rank]
            if not present:
                break
            pair = min(present, key=rank.get)
            seq = _merged(seq, pair, 256 + rank[pair])
        ids += seq
    return ids
"""
NEW_ID_RIGHT = ("NEW_ID", "255 + len(merges)")  # merges.append(pair) came first: the id of merge i is 256 + i


@pytest.mark.parametrize("part_name, change, step, told", [
    ("train_bpe", [NEW_ID_RIGHT, ("255 + len(merges)", "256 + len(merges)")], "the new ids", "one higher"),
    ("train_bpe", [NEW_ID_RIGHT, ("for pair in zip(ids, ids[1:]):", "for pair in set(zip(ids, ids[1:])):")],
     "counting the pairs", "each distinct pair counted once per chunk"),
    ("train_bpe", [NEW_ID_RIGHT, ("            i += 2", "            i += 1")], "replacing the pair",
     "second id kept"),
    # the fresh set fresh29h's 08/04: the tie-break is right, but it compares bytes made the wrong way round
    ("train_bpe", [NEW_ID_RIGHT, ("table[pair[0]] + table[pair[1]]", "table[pair[1]] + table[pair[0]]")],
     "the new token's bytes", "vocab[b] + vocab[a], the halves swapped"),
    ("encode", [NEW_ID_RIGHT, ("list(chunk.encode(\"utf-8\"))", "[ord(c) for c in chunk]")], "the bytes",
     "code points"),
    ("encode", [NEW_ID_RIGHT, ("while len(seq) >= 2:", "while len(seq) > 2:")], "the merge loop's end",
     "two ids can become one"),
    ("encode", [NEW_ID_RIGHT, ("            i += 2", "            i += 1")], "replacing the pair", "skip both ids"),
    ("encode", [NEW_ID_RIGHT, ("min(present, key=rank.get)", "max(present, key=rank.get)")], "the merge order",
     "nor the latest learned"),
])
def test_a_slip_inside_the_tokenizer_is_told_its_step(part_name, change, step, told):
    """Each slip changed one line of a tokenizer written otherwise than the reference: train_bpe's
    merges are replayed merge by merge to the first that departs, and encode is tried on chunks of
    a few bytes; the right source passes both (the first change alone)."""
    unit = UNITS["08_training"]
    right = BPE_HELPERS.replace(*change[0])
    assert located(unit, unit.part(part_name), reference_with(unit, right)) is None
    source = right
    for old, new in change[1:]:
        assert old in source
        source = source.replace(old, new)
    where = located(unit, unit.part(part_name), reference_with(unit, source))
    assert where is not None and where.startswith(step) and told in where, where


DETECTOR = """
import numpy as np

def looks_causal(attn_fn, n=8, d=4, trials=3, seed=0):
    rng = np.random.default_rng(seed)
    for _ in range(trials):
        x = rng.normal(size=(n, d))
        base = np.asarray(attn_fn(x))
        for i in range(n - 1):
            x2 = x.copy()
            x2[i + 1:] = rng.normal(size=(n - 1 - i, d))
            if not np.allclose(np.asarray(attn_fn(x2))[:i + 1], base[:i + 1], rtol=0, atol=1e-9):
                return False
    return True
"""


@pytest.mark.parametrize("old, new, step, told", [
    ("        for i in range(n - 1):", "        for i in range(n - 2):", "the split points", "never i = [4]"),
    ("    rng = np.random.default_rng(seed)\n    for _ in range(trials):",
     "    for _ in range(trials):\n        rng = np.random.default_rng(seed)", "the generator", "same x"),
    ("rng.normal(size=(n - 1 - i, d))", "x[i + 1:] + 1e-6", "the size of the change", "at most 1e-06"),
    ("    return True", "        return True", "the trials", "tried 1 random input"),
    ("    rng = np.random.default_rng(seed)\n", "    n, d = d, n\n    rng = np.random.default_rng(seed)\n",
     "the inputs' shape", "n and d swapped"),
    ("base[:i + 1]", "base[:i + 1] * (i < n - 2)", "the comparison", "finds a leak in causal attention"),
    ("            if not np.allclose(", "            leaks = not np.allclose(", None, None),  # made a flag below
])
def test_a_leak_detector_is_told_its_step_from_the_calls_it_makes(old, new, step, told):
    """The detector's attn_fn runs on the grader's side: each input it tries is seen there, and read
    against the pattern (x, then x with the rows after i changed, for every i, in every trial)."""
    unit = UNITS["02_masking"]
    part = unit.part("looks_causal")
    assert located(unit, part, reference_with(unit, DETECTOR)) is None
    assert old in DETECTOR
    source = DETECTOR.replace(old, new)
    if step is None:  # a flag that a later split sets back: the verdict
        source = source.replace("base[:i + 1], rtol=0, atol=1e-9):\n                return False",
                                "base[:i + 1], rtol=0, atol=1e-9)\n    return not leaks")
        step, told = "the verdict", "misses input 1 read by output 0"
    student = Student([("answer", source)])
    student.start()
    try:
        where = located(unit, part, None, student)
    finally:
        student.close()
    assert where is not None and where.startswith(step) and told in where, where


FLASH = """
import math
import torch

def flash_attention(q, k, v, causal=True, block_size=64):
    T, d = q.shape[-2], q.shape[-1]
    out = torch.empty_like(q)
    for qs in range(0, T, block_size):
        qe = min(qs + block_size, T)
        m = torch.full(q.shape[:-2] + (qe - qs, 1), -math.inf, dtype=q.dtype)
        l = torch.zeros_like(m)
        acc = torch.zeros(q.shape[:-2] + (qe - qs, d), dtype=q.dtype)
        for ks in range(0, qe if causal else T, block_size):
            ke = min(ks + block_size, T)
            s = q[..., qs:qe, :] @ k[..., ks:ke, :].transpose(-2, -1) / math.sqrt(d)
            if causal:
                hide = torch.arange(ks, ke)[None, :] > torch.arange(qs, qe)[:, None]
                s = s.masked_fill(hide, -math.inf)
            m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
            p = torch.exp(s - m_new)
            rescale = torch.exp(m - m_new)
            l = rescale * l + p.sum(dim=-1, keepdim=True)
            acc = rescale * acc + p @ v[..., ks:ke, :]
            m = m_new
        out[..., qs:qe, :] = acc / l
    return out
"""


@pytest.mark.parametrize("old, new, step", [
    ("torch.full(q.shape[:-2] + (qe - qs, 1), -math.inf", "torch.full(q.shape[:-2] + (qe - qs, 1), 0.0",
     "the running maximum's start."),
    ("            m = m_new", "            m = s.amax(dim=-1, keepdim=True)", "the running maximum."),
    # the last tile's own maximum, rescaled consistently: exact but for an overflow
    ("m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))", "m_new = s.amax(dim=-1, keepdim=True)",
     "the running maximum."),
    ("range(0, qe if causal else T, block_size)", "range(0, qe, block_size)", "the key tiles' loop."),
    ("    for qs in range(0, T, block_size):\n        qe = min(qs + block_size, T)",
     "    for qs in range(0, T - block_size + 1, block_size):\n        qe = qs + block_size",
     "the last, partial tile."),
    # rescaled after the tile is added: the first tile (rescaled by exp(-inf) = 0) is wiped (the fresh set's 07/11)
    ("acc = rescale * acc + p @ v[..., ks:ke, :]", "acc = rescale * (acc + p @ v[..., ks:ke, :])",
     "the rescaling of the accumulated output."),
    # m never carried: every tile is weighed as the first, only the last one stands (07/12)
    ("            m = m_new\n", "", "the running maximum."),
    ("/ math.sqrt(d)", "/ math.sqrt(block_size)", "the scale."),
])
def test_a_slip_inside_flash_attention_is_told_its_step(old, new, step):
    """Each slip in a flash attention written otherwise than the reference, read on scores made to
    show it: all very negative (the maximum's start), tiles that peak high, low, then middling (the
    running maximum), no mask (the key tiles' loop), T not a multiple of the tile (the last tile)."""
    unit = UNITS["07_flash_training"]
    part = unit.part("flash_attention")
    assert located(unit, part, reference_with(unit, FLASH)) is None
    assert old in FLASH
    where = located(unit, part, reference_with(unit, FLASH.replace(old, new)))
    assert where is not None and where.startswith(step), where


def test_a_wrong_scale_is_told_beside_a_running_maximum_never_carried():
    """Both slips of the fresh set's 07/12: the scale was not told, since with the maximum never
    carried only the last tile stands and the first tile's weights, where the scale was read, are 0."""
    unit = UNITS["07_flash_training"]
    source = FLASH.replace("            m = m_new\n", "").replace("/ math.sqrt(d)", "/ math.sqrt(block_size)")
    where = located(unit, unit.part("flash_attention"), reference_with(unit, source))
    assert where is not None and where.startswith("the scale.") and "sqrt(block_size)" in where, where
    assert "Also: the running maximum." in where, where


def test_a_sampler_that_returns_positions_within_the_top_k_is_told_so():
    """Once told only "row 1 drew token 0 13791 times, though it is outside the top k" (the fresh set)."""
    source = """
import torch

def sample_next(logits, temperature=1.0, top_k=None, generator=None):
    if temperature == 0:
        return logits.argmax(dim=-1)
    logits = logits / temperature
    if top_k is not None:
        logits, _ = torch.topk(logits, top_k, dim=-1)  # the indices are dropped: positions, not ids
    probs = torch.softmax(logits, dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)
"""
    results = graded_in_worker(UNITS["06_generation"], "sample_next", source)
    failed = {r.name.split("/")[1]: r.message for r in results if not r.passed}
    # top_k_beyond_vocab: torch.topk raises for a k larger than V
    assert set(failed) == {"top_k_one", "top_k_ties", "top_k_three", "top_k_beyond_vocab"}, failed
    assert all("torch.topk returns" in message for name, message in failed.items() if name != "top_k_beyond_vocab"), \
        failed


def test_an_attention_whose_softmax_subtracts_the_largest_score_of_all_is_told_its_shift():
    """Once told only that a row summed to NaN (the fresh set)."""
    unit = UNITS["01_attention"]
    source = """
import numpy as np

def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = Q @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1])
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    e = np.exp(scores - scores.max())  # the whole array's maximum, not each row's
    weights = e / e.sum(axis=-1, keepdims=True)
    return weights @ V, weights
"""
    where = located(unit, unit.part("scaled_dot_product_attention"), reference_with(unit, source))
    assert where is not None and where.startswith("the softmax's shift."), where


SINUSOID = """
import math
import torch

def sinusoidal_positions(n_positions, d_model):
    positions = torch.arange(n_positions, dtype=torch.float64)[:, None]
    rates = torch.exp(-math.log(10000.0) * torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    table = torch.zeros(n_positions, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(positions * rates)
    table[:, 1::2] = torch.cos(positions * rates)
    return table.float()
"""


@pytest.mark.parametrize("old, new, step, told", [
    ("torch.exp(-math.log", "torch.exp(math.log", "the frequencies", "+2i / d"),
    ("torch.arange(n_positions, dtype=torch.float64)", "torch.linspace(0, 6, n_positions, dtype=torch.float64)",
     "the positions", "[0. , 1.2, 2.4"),
])
def test_a_sinusoid_table_with_another_exponent_or_positions_is_told_which(old, new, step, told):
    """The sign of the exponent was once told as each column's own index, and positions spread over
    another range as the frequencies (the fresh set)."""
    unit = UNITS["05_model"]
    part = unit.part("sinusoidal_positions")
    assert located(unit, part, reference_with(unit, SINUSOID)) is None
    assert old in SINUSOID
    where = located(unit, part, reference_with(unit, SINUSOID.replace(old, new)))
    assert where is not None and where.startswith(step) and told in where, where


@pytest.mark.parametrize("part_name, source, step, told", [
    ("split_heads", """
import numpy as np

def split_heads(x, n_heads):
    return np.swapaxes(x.reshape(*x.shape[:-1], n_heads, x.shape[-1] // n_heads), 1, 2)
""", "the axes", "swapped axes 1 and 2"),
    ("split_heads", """
import numpy as np

def split_heads(x, n_heads):
    flat = x.reshape(-1, x.shape[-2], x.shape[-1])  # every batch axis flattened into one, even none
    return np.swapaxes(flat.reshape(flat.shape[0], flat.shape[1], n_heads, -1), -3, -2)
""", "batch axes", "a batch axis of 1 in front"),
    ("merge_heads", """
import numpy as np

def merge_heads(x):
    return np.swapaxes(x, -3, -2).reshape(*x.shape[:-3], x.shape[-2], x.shape[-2] * x.shape[-1])
""", "the merged width", "equals n_heads"),
    ("merge_heads", """
import numpy as np

def merge_heads(x):
    return np.swapaxes(x, -3, -2).reshape(*x.shape[:-3], x.shape[-2], x.shape[-3] * x.shape[-2])
""", "the merged width", "equals d_head"),
])
def test_a_head_split_or_merge_that_reads_the_wrong_axis_is_told_which(part_name, source, step, told):
    """Told the output's shape only, once (the fresh set): now the axis it swapped, the batch axis it
    added, or the size its width was read from."""
    unit = UNITS["03_multihead"]
    where = located(unit, unit.part(part_name), reference_with(unit, source))
    assert where is not None and where.startswith(step) and told in where, where


EVALUATE = """
import torch

def evaluate(model, data, batch_size, context_length):
    C = context_length
    starts = list(range(0, len(data) - C, C))
    mode = model.training
    model.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for b in range(0, len(starts), batch_size):
            x = torch.stack([data[i:i + C] for i in starts[b:b + batch_size]])
            y = torch.stack([data[i + 1:i + C + 1] for i in starts[b:b + batch_size]])
            total += float(cross_entropy(model(x), y)) * y.numel()
            count += y.numel()
    model.train(mode)
    return total / count
"""


@pytest.mark.parametrize("old, new, step, told", [
    ("range(0, len(data) - C, C)", "range(0, len(data) - C - 1, C + 1)", "the window starts", "step by C"),
    ("range(0, len(data) - C, C)", "range(0, len(data) // C * C, C)", "the number of windows", "(len(data) - 1) // C"),
    ("data[i + 1:i + C + 1] for i", "data[i:i + C] for i", "the targets", "the next ids"),
    ("    return total / count", "    return total", "the average", "the sum over every position"),
])
def test_an_evaluate_that_takes_other_windows_or_averages_otherwise_is_told_which(old, new, step, told):
    """Read on a model whose loss says each position's target, the windows from the calls of its token
    embedding that the grader computed (a stride of C + 1 and len(data) // C windows were told only
    as a loss that differs, the fresh set)."""
    unit = UNITS["08_training"]
    part = unit.part("evaluate")
    assert located(unit, part, reference_with(unit, EVALUATE)) is None
    assert old in EVALUATE
    where = located(unit, part, reference_with(unit, EVALUATE.replace(old, new)))
    assert where is not None and where.startswith(step) and told in where, where


UNIT_01_SDPA = """
def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = Q @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1])
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    weights = softmax(scores, axis=-1)
    return weights @ V, weights
"""


@pytest.mark.parametrize("part_name, source, step", [
    ("softmax", """
def softmax(x, axis=-1):
    x = np.asarray(x, dtype=np.float16)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)
""", "the precision."),
    ("softmax", """
def softmax(x, axis=-1):
    x = np.moveaxis(np.asarray(x, dtype=float), axis, -1)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)
""", "the axes' order."),
    ("softmax", """
def softmax(x, axis=-1):
    moved = np.moveaxis(np.asarray(x, dtype=float), axis, -1)
    e = np.exp(moved - moved.max(axis=-1, keepdims=True))
    return np.swapaxes(e / e.sum(axis=-1, keepdims=True), axis, -1)
""", "the axes' order."),
    ("scaled_dot_product_attention", UNIT_01_SDPA.replace("/ np.sqrt(Q.shape[-1])", "").replace(
        "softmax(scores, axis=-1)", "softmax(scores, axis=-1) / np.sqrt(Q.shape[-1])"), "the scale."),
    ("scaled_dot_product_attention", UNIT_01_SDPA.replace("return weights @ V, weights", "return weights, weights @ V"),
     "the pair's order."),
    ("scaled_dot_product_attention", UNIT_01_SDPA.replace("if mask is not None:", "if mask is not None:\n"
                                                           "        mask = np.squeeze(mask)"), "the mask's shape."),
    ("self_attention", """
def self_attention(x, W_q, W_k, W_v, mask=None):
    return x + scaled_dot_product_attention(x @ W_q, x @ W_k, x @ W_v, mask=mask)[0]
""", "the output."),
])
def test_a_slip_in_unit_01_is_told_its_step(part_name, source, step):
    """Each was told another step, or none (the fresh set fresh29e): a softmax in float16 as its
    exponent, an axis left at the end as keepdims, weights scaled after the softmax as the softmax,
    (weights, out) as the batch axes, a per-batch mask squeezed as an exception at a later line, a
    residual added in self_attention as the values."""
    unit = UNITS["01_attention"]
    where = located(unit, unit.part(part_name), reference_with(unit, source))
    assert where is not None and where.startswith(step), where


def test_a_mask_filled_with_a_finite_number_above_some_scores_loses_its_check():
    """A fill of -1000 kept full marks (the fresh set): every score the checks made was above it."""
    unit = UNITS["01_attention"]
    namespace = reference_with(unit, UNIT_01_SDPA.replace("-np.inf", "-1000.0"))
    failed = {r.name: r.message for r in grade_part(unit, "scaled_dot_product_attention", InProcessStudent(namespace))
              if not r.passed}
    assert list(failed) == ["scaled_dot_product_attention/mask_on_negative_scores"], failed
    assert "the mask is not respected" in failed["scaled_dot_product_attention/mask_on_negative_scores"]


UNIT_03_MHA = """
def multi_head_attention(x, W_q, W_k, W_v, W_o, n_heads, causal=True):
    q, k, v = (split_heads(x @ W, n_heads) for W in (W_q, W_k, W_v))
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    if causal:
        n = x.shape[-2]
        scores = np.where(np.tril(np.ones((n, n), dtype=bool)), scores, -np.inf)
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return merge_heads(e / e.sum(axis=-1, keepdims=True) @ v) @ W_o
"""


@pytest.mark.parametrize("part_name, source, step", [
    ("split_heads", """
def split_heads(x, n_heads):
    *batch, n, d = x.shape
    flat = x.reshape(-1, n, n_heads, d // n_heads) if batch else x.reshape(n, n_heads, d // n_heads)
    return np.swapaxes(flat, -3, -2)
""", "batch axes."),
    ("merge_heads", """
def merge_heads(x):
    return np.concatenate([x[..., i, :, :] for i in range(x.shape[0])], axis=-1)
""", "batch axes."),
    ("multi_head_attention", UNIT_03_MHA.replace("q @ np.swapaxes(k, -1, -2)", "k @ np.swapaxes(q, -1, -2)"),
     "the scores."),
])
def test_a_slip_in_unit_03_is_told_its_step(part_name, source, step):
    """Each was told another step, or none (the fresh set fresh29e): batch axes flattened into one
    (right with one batch axis), a head count read from the front (right for a batch of 2), scores
    computed as K Qᵀ (told as the scale)."""
    unit = UNITS["03_multihead"]
    assert located(unit, unit.part(part_name), reference_with(unit, UNIT_03_MHA)) is None
    where = located(unit, unit.part(part_name), reference_with(unit, source))
    assert where is not None and where.startswith(step), where


@pytest.mark.parametrize("part_name, source, check, told", [
    ("split_heads", """
def split_heads(x, n_heads):
    x = np.asarray(x, dtype=np.float32)
    return np.swapaxes(x.reshape(*x.shape[:-1], n_heads, x.shape[-1] // n_heads), -3, -2)
""", "values_kept", "your output is float32 where the input is float64"),
    ("merge_heads", """
def merge_heads(x):
    x = np.swapaxes(np.asarray(x, dtype=np.float32), -3, -2)
    return x.reshape(*x.shape[:-2], -1)
""", "values_kept", "your output is float32 where the input is float64"),
    ("multi_head_attention", UNIT_03_MHA.replace("np.exp(scores - scores.max(axis=-1, keepdims=True))",
                                                 "np.exp(scores)"), "large_scores", "overflow in exp"),
])
def test_a_cast_or_an_unshifted_softmax_in_unit_03_costs_its_own_check(part_name, source, check, told):
    """Both kept full marks (the fresh set fresh29e): a split that rounds to float32 (within the
    checks' tolerance), and a softmax with no shift inside multi_head_attention (no score large enough)."""
    unit = UNITS["03_multihead"]
    failed = {r.name.split("/")[1]: r.message
              for r in grade_part(unit, part_name, InProcessStudent(reference_with(unit, source))) if not r.passed}
    assert list(failed) == [check] and told in failed[check], failed


def test_a_slip_in_unit_04_is_told_its_step():
    """Each was told another step, or nothing but a difference of 3e-7 (the fresh set fresh29e): a
    layer_norm computed in float32, a block whose LayerNorms take eps 1e-6, an attention whose causal
    mask is sized by d_model."""
    unit = UNITS["04_block"]
    reference = load_reference(unit.name)

    def float32_inside(x, weight, bias, eps=1e-5):
        return reference.layer_norm(x.float(), weight.float(), bias.float(), eps).to(x.dtype)

    class NarrowEps(reference.TransformerBlock):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.ln1.eps = self.ln2.eps = 1e-6

    class MaskSizedByWidth(reference.MultiHeadAttention):
        def __init__(self, d_model, n_heads):
            super().__init__(d_model, n_heads)
            self.d_model_seen = d_model

        def forward(self, x):
            if x.shape[-2] > self.d_model_seen:
                raise RuntimeError("The size of tensor a (4) must match the size of tensor b (6)")
            return super().forward(x)

    for part, namespace, step in (
            ("layer_norm", dict(vars(reference), layer_norm=float32_inside), "the precision."),
            ("TransformerBlock", dict(vars(reference), TransformerBlock=NarrowEps), "the norms' eps."),
            ("MultiHeadAttention", dict(vars(reference), MultiHeadAttention=MaskSizedByWidth), "the mask's size.")):
        where = located(unit, unit.part(part), namespace)
        assert where is not None and where.startswith(step), (part, where)
    failed = [r.name for r in grade_part(unit, "MultiHeadAttention", InProcessStudent(
        dict(vars(reference), MultiHeadAttention=MaskSizedByWidth))) if not r.passed]
    assert failed == ["MultiHeadAttention/longer_than_d_model"], failed


def test_a_causal_attention_that_loops_over_the_first_axis_is_told_the_batch_axes():
    """Told only as an IndexError at a later line (the fresh set fresh29e): right on a batch, raising
    on one sequence with no batch axis."""
    unit = UNITS["02_masking"]
    namespace = reference_with(unit, """
def causal_self_attention(x, W_q, W_k, W_v):
    return np.stack([self_attention(seq, W_q, W_k, W_v, mask=causal_mask(seq.shape[-2])) for seq in x])
""")
    where = located(unit, unit.part("causal_self_attention"), namespace)
    assert where is not None and where.startswith("batch axes:"), where


def test_a_gelu_feed_forward_or_block_computed_in_float32_is_told_its_precision():
    """A float32 step inside a float64 computation shows only as differences of 1e-7 (the fresh set
    fresh29e's layer_norm): told as the precision in every part of unit 04 that takes a dtype."""
    unit = UNITS["04_block"]
    reference = load_reference(unit.name)

    def gelu32(x):
        return reference.gelu(x.float()).to(x.dtype)

    class FeedForward32(reference.FeedForward):
        def forward(self, x):
            return super().forward(x).float().to(x.dtype)

    class Block32(reference.TransformerBlock):
        def forward(self, x):
            return super().forward(x).float().to(x.dtype)

    for part, namespace in (("gelu", dict(vars(reference), gelu=gelu32)),
                            ("FeedForward", dict(vars(reference), FeedForward=FeedForward32)),
                            ("TransformerBlock", dict(vars(reference), TransformerBlock=Block32))):
        where = located(unit, unit.part(part), namespace)
        assert where is not None and where.startswith("the precision."), (part, where)


def test_a_causal_attention_scaled_by_an_axis_counted_from_the_front_is_told_the_scale():
    """Found by a sweep of one-token changes to a correct answer: d_k read as q.shape[1] is right for
    one sequence (and for one batch axis on the locator's equal scores) and was told nothing."""
    unit = UNITS["02_masking"]
    source = (Path(__file__).parent / "submissions" / "02_masking" / "correct_loops.py").read_text()
    assert "np.sqrt(q.shape[-1])" in source
    namespace = reference_with(unit, source.replace("np.sqrt(q.shape[-1])", "np.sqrt(q.shape[1])"))
    where = located(unit, unit.part("causal_self_attention"), namespace)
    assert where is not None and where.startswith("the scale with batch axes:") and "axis 1" in where, where


def test_an_attention_module_whose_merge_moves_the_batch_axis_is_told_the_batch_axes():
    """Found by a sweep of one-token changes to a correct answer: .transpose(0, 2) for .transpose(1, 2)
    in the merge is right for a batch of one, the locator's every input, and was told nothing."""
    unit = UNITS["04_block"]
    source = (Path(__file__).parent / "submissions" / "04_block" / "correct_dropout_arguments.py").read_text()
    old = "out = (weights @ v).transpose(1, 2).contiguous().view(B, T, D)"
    assert old in source
    namespace = reference_with(unit, source.replace(old, old.replace("transpose(1, 2)", "transpose(0, 2)")))
    where = located(unit, unit.part("MultiHeadAttention"), namespace)
    assert where is not None and where.startswith("batch axes."), where


def test_a_mask_kept_from_the_first_call_or_a_default_dropout_is_caught_in_unit_04():
    """Both once kept full marks or were told only as a gradient that differs (older fresh sets): a
    causal mask made on the first call and reused, and a dropout with p > 0 by default."""
    unit = UNITS["04_block"]
    reference = load_reference(unit.name)

    class MaskFromFirstCall(reference.MultiHeadAttention):
        def forward(self, x):
            if not hasattr(self, "kept_length"):
                self.kept_length = x.shape[-2]
            if x.shape[-2] > self.kept_length:  # what a (3, 3) mask kept from the first call would do
                raise RuntimeError("The size of tensor a (8) must match the size of tensor b (3)")
            return super().forward(x)

    failed = [r.name for r in grade_part(unit, "MultiHeadAttention", InProcessStudent(
        dict(vars(reference), MultiHeadAttention=MaskFromFirstCall))) if not r.passed]
    assert failed == ["MultiHeadAttention/two_lengths"], failed

    class Dropout(reference.FeedForward):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.drop = torch.nn.Dropout(0.1)

        def forward(self, x):
            return self.drop(super().forward(x))

    where = located(unit, unit.part("FeedForward"), dict(vars(reference), FeedForward=Dropout))
    assert where is not None and where.startswith("the train mode."), where


@pytest.mark.parametrize("values, told", [("x", "not x itself"), ("x @ W_k", "W_k's width")])
def test_causal_attention_with_other_values_is_told_the_values(values, told):
    """Told only the output's shape, or 'the output' (an older fresh set): values that are x, or
    made with W_k."""
    unit = UNITS["02_masking"]
    namespace = reference_with(unit, f"""
def causal_self_attention(x, W_q, W_k, W_v):
    n = x.shape[-2]
    return scaled_dot_product_attention(x @ W_q, x @ W_k, {values}, mask=causal_mask(n))[0]
""")
    where = located(unit, unit.part("causal_self_attention"), namespace)
    assert where is not None and where.startswith("the values:") and told in where, where


def test_a_count_returned_as_a_float_is_told_so():
    """A true division in the count gave the right number as a float, once unnoticed (the fresh set)."""
    source = BREAKDOWN.format(**RIGHT_TERMS).replace("return sum(parameter_breakdown(config).values())",
                            "return sum(parameter_breakdown(config).values()) * config.n_heads / config.n_heads")
    results = {r.name.split("/")[1]: r for r in graded_in_worker(UNITS["05_model"], "count_parameters", source)}
    failed = {name: r.message for name, r in results.items() if not r.passed}
    assert set(failed) == {"gpt2_small", "untied_exact"}, failed
    assert all("the right number, but a float" in message for message in failed.values()), failed
    source = BREAKDOWN.format(**{**RIGHT_TERMS, "norms": "(L * 4 * d + 2 * d) / 1"})
    results = {r.name.split("/")[1]: r for r in graded_in_worker(UNITS["05_model"], "parameter_breakdown", source)}
    failed = {name: r.message for name, r in results.items() if not r.passed}
    assert set(failed) == {"total"} and "`norms` is a float" in failed["total"], failed


def test_ln_f_counted_under_the_embeddings_is_named_in_words_that_say_so():
    """The checks see `embeddings` and `lm_head` only as their sum: ln_f put under `embeddings` was
    named "ln_f counted under `lm_head`", another place than the one written (the fresh set fresh29h)."""
    source = BREAKDOWN.format(**{**RIGHT_TERMS, "norms": "L * 4 * d"}).replace(
        '"embeddings": (config.vocab_size + config.context_length) * d,',
        '"embeddings": (config.vocab_size + config.context_length) * d + 2 * d,')
    failed = [r for r in graded_in_worker(UNITS["05_model"], "parameter_breakdown", source) if not r.passed]
    assert failed and {r.misconception for r in failed} == {"breakdown_ln_f_in_head"}, failed
    assert all("under `lm_head` (or `embeddings`)" in r.message for r in failed), [r.message for r in failed]


CORRECT_GPT = Path(__file__).parent / "submissions" / "05_model" / "correct_loops.py"


@pytest.mark.parametrize("old, new, told", [
    ('name.endswith(("out_proj.weight", "fc2.weight"))', 'name.endswith(("proj.weight", "fc2.weight"))',
     "q_proj, k_proj and v_proj's weights have a standard deviation of about 0.01 (N(0, 0.02 / sqrt(2 * n_layers))"),
    ('elif not name.startswith("ln_f")', 'elif not name.startswith(("ln_f", "lm_head"))',
     "lm_head's weight (in a model built with tie_weights=False) has a standard deviation of about 0.072 "
     "(nn.Linear's default)"),
])
def test_an_initialisation_that_misses_or_overreaches_one_layer_is_told_which(old, new, told):
    """q/k/v scaled like out_proj, or an untied lm_head left at nn.Linear's default, went unnoticed
    (the fresh set): each linear layer is now measured on its own, and an untied model's lm_head too."""
    source = CORRECT_GPT.read_text()
    assert old in source
    results = {r.name.split("/")[1]: r for r in graded_in_worker(UNITS["05_model"], "GPT", source.replace(old, new))}
    failed = {name: r.message for name, r in results.items() if not r.passed}
    assert set(failed) == {"initial_weights"} and told in failed["initial_weights"], failed


SAMPLER = """
import torch

def sample_next(logits, temperature=1.0, top_k=None, generator=None):
    if temperature == 0:
        return logits.argmax(dim=-1)
    scaled = logits / temperature
    if top_k is not None:
        kth = torch.topk(scaled, min(top_k, scaled.shape[-1]), dim=-1).values[:, -1:]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    probs = torch.softmax(scaled, dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)
"""


@pytest.mark.parametrize("old, new, failing, told", [
    # the fresh set's 06/04: told only the shape
    ("return logits.argmax(dim=-1)", "return logits.argmax(dim=0)", {"greedy", "greedy_float64"},
     "as an argmax down the batch (over dim 0) gives"),
    # 06/06: a top_k larger than V was never tried
    ("min(top_k, scaled.shape[-1])", "top_k", {"top_k_beyond_vocab"}, "raised RuntimeError"),
    # 06/08: one threshold for the whole batch, told only that the frequencies differ
    ("torch.topk(scaled, min(top_k, scaled.shape[-1]), dim=-1).values[:, -1:]",
     "torch.topk(scaled.flatten(), top_k).values[-1]", {"top_k_one", "top_k_ties", "top_k_three", "top_k_beyond_vocab"},
     "a top-k threshold taken over the whole batch"),
    # 06/23 (fresh29f): divided by the temperature before the test for 0, told only the ids
    ("    if temperature == 0:\n        return logits.argmax(dim=-1)\n    scaled = logits / temperature\n",
     "    scaled = logits / temperature\n    if temperature == 0:\n        return scaled.argmax(dim=-1)\n",
     {"greedy", "greedy_float64"}, "these are the argmax of logits / 0"),
    # 06/09: the temperature left out where top_k is given
    ("kth = torch.topk(scaled,", "scaled = logits\n        kth = torch.topk(scaled,", {"top_k_three"},
     "the logits not divided by the temperature (0.8) on the path with top_k"),
    # fresh29g's 06/06: a batch of one squeezed to a number, never sampled (the greedy check's row takes argmax)
    (".squeeze(-1)", ".squeeze()", {"one_row"}, "as .squeeze() does to multinomial's (1, 1)"),
    # fresh29g's 06/08: masked in place where temperature 1 skips the division (and its copy)
    ("scaled = logits / temperature\n    if top_k is not None:\n        kth = torch.topk(scaled, min(top_k, "
     "scaled.shape[-1]), dim=-1).values[:, -1:]\n        scaled = scaled.masked_fill(scaled < kth, float(\"-inf\"))",
     "scaled = logits if temperature == 1 else logits / temperature\n    if top_k is not None:\n        kth = "
     "torch.topk(scaled, min(top_k, scaled.shape[-1]), dim=-1).values[:, -1:]\n        scaled[scaled < kth] = "
     "float(\"-inf\")", {"inputs_unchanged_top_k"}, "not modified at temperature 1 with top_k=3"),
    # fresh29h's 06/05: the dropped logits set to 0, told only that a token outside the top k was drawn
    ('scaled.masked_fill(scaled < kth, float("-inf"))', "scaled.masked_fill(scaled < kth, 0.0)",
     {"top_k_one", "top_k_ties", "top_k_three"}, None),
])
def test_a_sampler_slip_is_told_what_it_does(old, new, failing, told):
    assert old in SAMPLER
    results = graded_in_worker(UNITS["06_generation"], "sample_next", SAMPLER.replace(old, new))
    failed = {r.name.split("/")[1]: r.message for r in results if not r.passed}
    assert set(failed) == failing, failed
    if told is None:  # told on the frequencies' checks alone (top_k=1 shows a wrong id, no frequencies)
        told = "They match the dropped logits set to 0 instead of -inf"
        assert all(told in message for name, message in failed.items() if name != "top_k_one"), failed
        return
    assert all(told in message for message in failed.values() if " raised " not in message or "raised" in told), failed
    assert any(told in message for message in failed.values()), failed


def test_a_cached_limit_that_leaves_out_the_prompt_is_named_as_an_incomplete_check():
    """Named 'no check of context_length' though the check was there, of max_new_tokens alone (the fresh set)."""
    source = CORRECT_CACHED.read_text()
    old = "if idx.shape[1] + max_new_tokens > model.config.context_length:"
    assert old in source
    results = graded_in_worker(UNITS["06_generation"], "generate_cached",
                               source.replace(old, "if max_new_tokens > model.config.context_length:"))
    limit = next(r for r in results if r.name == "generate_cached/context_limit")
    assert limit.misconception == "cache_no_limit_check", limit.message
    assert "max_new_tokens alone, without the prompt's T" in limit.message, limit.message


def test_a_cached_limit_one_token_late_is_named_in_words_that_cover_it():
    """`T + max_new_tokens - 1 > context_length` lets one position over through, as no check does on the
    check's request: it was named with words of a missing check only (the fresh set fresh29h's 06/17)."""
    source = CORRECT_CACHED.read_text()
    old = "if idx.shape[1] + max_new_tokens > model.config.context_length:"
    late = "if idx.shape[1] + max_new_tokens - 1 > model.config.context_length:"
    results = graded_in_worker(UNITS["06_generation"], "generate_cached", source.replace(old, late))
    limit = next(r for r in results if r.name == "generate_cached/context_limit")
    assert limit.misconception == "cache_no_limit_check", limit.message
    assert "lets one position over through" in limit.message, limit.message


SOFTMAX_HANDED = ("what is handed to sample_next", "from softmax(logits)")


@pytest.mark.parametrize("submission, part_name, old, new, step, told", [
    ("correct_concat_cache.py", "generate", "sample_next(logits[:, -1], temperature",
     "sample_next(torch.softmax(logits[:, -1], dim=-1), temperature", *SOFTMAX_HANDED),
    ("correct_concat_cache.py", "generate_cached", "(out, sample_next(logits, temperature",
     "(out, sample_next(torch.softmax(logits, dim=-1), temperature", *SOFTMAX_HANDED),
    ("correct_concat_cache.py", "generate_cached", "(out, sample_next(logits, temperature, top_k",
     "(out, sample_next(logits / (temperature or 1.0), temperature, top_k", "what is handed to sample_next",
     "from logits / 0.8"),
])
def test_probabilities_handed_to_sample_next_are_told_so(submission, part_name, old, new, step, told):
    """A softmax taken before sample_next (which takes another) was told only as tokens that differ (the
    fresh set's 06/19): a sampled generation is replayed with the reference's sampler, and the draws are
    those of softmax(logits) taken as logits."""
    unit = UNITS["06_generation"]
    source = (Path(__file__).parent / "submissions" / "06_generation" / submission).read_text()
    assert old in source
    part = unit.part(part_name)
    assert located(unit, part, reference_with(unit, source)) is None
    where = located(unit, part, reference_with(unit, source.replace(old, new)))
    assert where is not None and where.startswith(f"{step}.") and told in where, where


ROPE = """
import torch

def rope(x, positions=None, base=10000.0):
    T, d = x.shape[-2], x.shape[-1]
    pos = torch.arange(T) if positions is None else torch.as_tensor(positions)
    rates = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angles = pos.to(torch.float64)[:, None] * rates
    cos, sin = torch.cos(angles).to(x.dtype), torch.sin(angles).to(x.dtype)
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)
"""


@pytest.mark.parametrize("new, told", [
    ("T, d = len(x), x.shape[-1]", "is T read from the first axis"),
])
def test_rope_with_default_positions_of_another_length_is_told_the_default_positions(new, told):
    """T = len(x) for the default positions was blamed on the frequencies (the fresh set's 05/31)."""
    unit = UNITS["05_model"]
    part = unit.part("rope")
    old = "T, d = x.shape[-2], x.shape[-1]"
    assert old in ROPE and located(unit, part, reference_with(unit, ROPE)) is None
    where = located(unit, part, reference_with(unit, ROPE.replace(old, new)))
    assert where is not None and where.startswith("the default positions.") and told in where, where


def test_a_timer_whose_cuda_test_never_holds_is_told_to_look_at_that_test():
    """A timer that synchronises only where a.device == torch.device('cuda') (never so for cuda:0)
    was named as one that does not synchronise, with nothing about the test that guards it (the
    fresh set's 07/18): the name's description and hint now cover both causes."""
    unit = UNITS["07_flash_training"]
    source = (Path(__file__).parent / "submissions" / "07_flash_training"
              / "wrong_time_no_sync__device_equals_cuda.py").read_text()
    checks = [c.to_json() for c in graded_in_worker(unit, "time_fn", source)]
    named = [c for c in checks if c["misconception"] == "time_no_sync"]
    assert named and all("torch.device('cuda')" in c["message"] for c in named), checks


UNSORTED_MIDDLE_TIMER = """
import time

import torch

def time_fn(fn, *args, warmup=3, repeats=10):
    gpu = any(torch.is_tensor(a) and a.is_cuda for a in args)
    for _ in range(warmup):
        fn(*args)
    times = []
    for _ in range(repeats):
        if gpu:
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn(*args)
        if gpu:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    middle = len(times) // 2
    return times[middle] if len(times) % 2 else (times[middle - 1] + times[middle]) / 2
"""


def test_a_timer_that_takes_the_middle_of_unsorted_calls_is_told_the_median():
    """Once told as 'the fastest of the timed calls but the first' or 'the slowest of the timed
    calls' (the fresh set's 07/16), which read as a min or max pick."""
    results = graded_in_worker(UNITS["07_flash_training"], "time_fn", UNSORTED_MIDDLE_TIMER)
    failed = [r.message for r in results if not r.passed]
    assert failed and all("Where it goes wrong: the median." in m and "in the order they ran" in m
                          for m in failed), failed


@pytest.mark.parametrize("change, check, told", [
    # AdamW's own default lr (the fresh set's 07/22): only the held-out loss fell short, told as the targets
    (("torch.optim.AdamW(model.parameters(), lr=lr)", "torch.optim.AdamW(model.parameters())"), "lr",
     "the lr argument never reaches the optimizer"),
    # a model of its own (07/25): told as losses that do not describe the model, or no zero_grad
    (("(model if model is not None else GPT(config))", "GPT(config)"), "losses",
     "comes back with exactly the weights it was given"),
    # a sum over each window's positions (07/24): told as losses that do not describe the model
    (("rows[:, 1:].reshape(-1))", "rows[:, 1:].reshape(-1), reduction='sum') / batch_size"), "every_position",
     "summed over each window's 32 positions"),
    # a fresh AdamW at each step (07/23): it still learns, and kept full marks
    (("        opt.zero_grad()\n",
      "        opt = torch.optim.AdamW(model.parameters(), lr=lr)\n        opt.zero_grad()\n"),
     "one_optimizer", "An AdamW made anew at each step"),
    # two optimizer steps per training step (the fresh set fresh29f's 07/24): kept full marks
    (("        opt.step()\n", "        opt.step()\n        opt.step()\n"), "one_step",
     "steps more than once per training step"),
    # targets flattened transposed (07/25): told as a missing zero_grad, or the targets not the next bytes
    (("rows[:, 1:].reshape(-1))", "rows[:, 1:].t().reshape(-1))"), "keeps_pace",
     "paired position by position with the logits"),
])
def test_a_trainer_that_ignores_lr_or_its_model_or_sums_the_loss_is_told_so(change, check, told):
    source = TRAINER.read_text()
    assert change[0] in source
    results = {r.name: r for r in graded_in_worker(UNITS["07_flash_training"], "train", source.replace(*change))}
    assert not results[f"train/{check}"].passed and told in results[f"train/{check}"].message, \
        {n: r.message for n, r in results.items() if not r.passed}


@pytest.mark.parametrize("old, new, told", [
    ("save_checkpoint(config.checkpoint_path, model, optimizer, done,",
     "save_checkpoint(config.checkpoint_path, model, optimizer, step,", "takes step 12 again"),
    ("save_checkpoint(config.checkpoint_path, model, optimizer, done,",
     "save_checkpoint(config.checkpoint_path, model, optimizer, done + 1,", "skips step 13"),
])
def test_a_checkpoint_whose_step_is_one_off_is_told_the_step_saved(old, new, told):
    """A step saved 0-based was told only as a resumed run that differs (the fresh set's 08/35): the
    resumed run's one train_loss more, or fewer, says which way the step saved is off."""
    source = (Path(__file__).parent / "submissions" / "08_training" / "correct_written_plainly.py").read_text()
    assert old in source
    results = {r.name: r for r in graded_in_worker(UNITS["08_training"], "train_loop", source.replace(old, new))}
    assert not results["train_loop/resume"].passed and told in results["train_loop/resume"].message, \
        {n: r.message for n, r in results.items() if not r.passed}


@pytest.mark.parametrize("old, new, check, told", [
    # default betas with evaluations on train_ids (the fresh set's 08/37): no name explains both, and the
    # recipe check recited the whole recipe; its run is the recipe's with the betas alone changed
    ("held = evaluate(model, heldout_ids,", "held = evaluate(model, train_ids,", "recipe",
     "AdamW's default betas (0.9, 0.999)"),
    ("held = evaluate(model, heldout_ids,", "held = evaluate(model, train_ids,", "early_stopping",
     "evaluate on heldout_ids"),
])
def test_a_loop_with_default_betas_and_evaluations_on_train_ids_is_told_both(old, new, check, told):
    source = (Path(__file__).parent / "submissions" / "08_training" / "correct_written_plainly.py").read_text()
    source = source.replace("betas=(0.9, 0.95)", "betas=(0.9, 0.999)")
    assert old in source
    results = {r.name: r for r in graded_in_worker(UNITS["08_training"], "train_loop", source.replace(old, new))}
    assert not any(r.misconception for r in results.values())
    assert not results[f"train_loop/{check}"].passed and told in results[f"train_loop/{check}"].message, \
        {n: r.message for n, r in results.items() if not r.passed}


@pytest.mark.parametrize("old, new, part, told", [
    # a seed read from the state saved (its key's first word, the seed itself right after seeding): the
    # fresh set's 08/30 kept full marks, since the grader saved right after seeding
    ('np.random.set_state(generators["np"])', 'np.random.seed(int(generators["np"][1][0]))', "load_checkpoint",
     "NumPy's global generator did not draw what it drew right after saving"),
    ('torch.set_rng_state(generators["pt"])', 'torch.manual_seed(int(generators["pt"][0]))', "load_checkpoint",
     "torch"),
])
def test_a_generator_reseeded_from_its_saved_state_is_told_so(old, new, part, told):
    source = (Path(__file__).parent / "submissions" / "08_training" / "correct_written_plainly.py").read_text()
    assert old in source
    results = {r.name: r for r in graded_in_worker(UNITS["08_training"], part, source.replace(old, new))}
    assert not results[f"{part}/generators"].passed and told in results[f"{part}/generators"].message, \
        {n: r.message for n, r in results.items() if not r.passed}


CACHED_ENCODE = """
import regex

_SEEN = {}

def pretokenize(text):
    pattern = r"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
    return regex.findall(pattern, text)

def encode(text, merges):
    rank = {tuple(pair): i for i, pair in enumerate(merges)}
    ids = []
    for chunk in pretokenize(text):
        if chunk not in _SEEN:
            seq = list(chunk.encode("utf-8"))
            while len(seq) > 1:
                best = min(zip(seq, seq[1:]), key=lambda p: rank.get(p, len(rank)))
                if best not in rank:
                    break
                out, i = [], 0
                while i < len(seq):
                    if i + 1 < len(seq) and (seq[i], seq[i + 1]) == best:
                        out.append(256 + rank[best])
                        i += 2
                    else:
                        out.append(seq[i])
                        i += 1
                seq = out
            _SEEN[chunk] = seq
        ids.extend(_SEEN[chunk])
    return ids
"""


def test_an_encode_that_keeps_chunks_between_calls_is_told_its_memory():
    """A module-level cache of encoded chunks, kept across calls with other merges (the fresh set's
    08/10): told only as ids that differ, and located at the chunks."""
    results = {r.name: r for r in graded_in_worker(UNITS["08_training"], "encode", CACHED_ENCODE)}
    told = results["encode/each_call_its_merges"]
    assert not told.passed and "something kept between calls" in told.message, told.message
    assert "Where it goes wrong: the memory between calls." in told.message, told.message


@pytest.mark.parametrize("changes, part, check, told", [
    # NumPy's state never saved (the fresh set's 08/25): only load_checkpoint's check saw it
    ((('"np": np.random.get_state(), ', ""),
      ('    np.random.set_state(generators["np"])',
       '    if "np" in generators:\n        np.random.set_state(generators["np"])')),
     "save_checkpoint", "generators", "NumPy's global generator did not draw"),
    # AdamW's state never loaded back (08/29): only save_checkpoint's check saw it
    ((('    optimizer.load_state_dict(saved["adam"])\n', ""),), "load_checkpoint", "optimizer",
     "optimizer.load_state_dict"),
])
def test_a_checkpoint_slip_on_one_side_shows_in_each_parts_own_check(changes, part, check, told):
    source = (Path(__file__).parent / "submissions" / "08_training" / "correct_written_plainly.py").read_text()
    for old, new in changes:
        assert old in source
        source = source.replace(old, new)
    results = {r.name: r for r in graded_in_worker(UNITS["08_training"], part, source)}
    assert not results[f"{part}/{check}"].passed and told in results[f"{part}/{check}"].message, \
        {n: r.message for n, r in results.items() if not r.passed}


def test_an_exception_also_quotes_the_line_one_step_further_back():
    """The names on the line that raised, then the names on the lines that set those: a size read from
    the wrong axis two lines up (the fresh set fresh29f's 04/20, whose mask came from n = x.size(0)
    through a line the message quoted)."""
    source = """
import numpy as np

def split_heads(x, n_heads):
    width = x.shape[-2]
    d_head = width // n_heads
    return np.swapaxes(x.reshape(x.shape[:-1] + (n_heads, d_head)), -2, -3)
"""
    results = graded_in_worker(UNITS["03_multihead"], "split_heads", source)
    raised = [r.message for r in results if ": raised ValueError" in r.message]
    assert raised and all("`d_head` on line 6" in m and "`width` on line 5: `width = x.shape[-2]`" in m
                          for m in raised), raised


@pytest.mark.parametrize("unit_name, part_name, source, step", [
    ("02_masking", "causal_self_attention", """
def causal_self_attention(x, W_q, W_k, W_v):
    q, k, v = x @ W_q, x @ W_k, x @ W_v
    n = x.shape[-2]
    scores = np.where(causal_mask(n), q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1]), -np.inf)
    e = np.exp(scores)
    return e / e.sum(axis=-1, keepdims=True) @ v
""", "the softmax's stability:"),
    ("03_multihead", "multi_head_attention", UNIT_03_MHA.replace(
        "(split_heads(x @ W, n_heads) for W in (W_q, W_k, W_v))",
        "(split_heads(x @ W, n_heads) for W in (W_q, W_v, W_k))"), "the values."),
])
def test_a_slip_found_by_the_fresh_set_fresh29f_is_told_its_step(unit_name, part_name, source, step):
    """Told generically or at another step by the fresh set fresh29f (graded before these were made):
    an unshifted softmax inside causal_self_attention (a NaN with two guesses), keys and values swapped
    (the mix of values)."""
    unit = UNITS[unit_name]
    where = located(unit, unit.part(part_name), reference_with(unit, source))
    assert where is not None and where.startswith(step), where


def test_a_layer_norm_with_its_own_eps_is_not_told_as_float32():
    """A layer_norm that ignores its eps argument (1e-5 always) was told 'the precision' (fresh29f's
    04/05): a wrong eps fades on large rows, float32's round-off does not."""
    unit = UNITS["04_block"]
    reference = load_reference(unit.name)

    def fixed_eps(x, weight, bias, eps=1e-5):
        return reference.layer_norm(x, weight, bias, 1e-5)

    where = located(unit, unit.part("layer_norm"), dict(vars(reference), layer_norm=fixed_eps))
    assert where is not None and where.startswith("eps."), where


@pytest.mark.parametrize("unit_name, part_name, answer, told", [
    ("03_multihead", "attention_flops", "lambda n, d_model, n_heads: float(8 * n * d_model ** 2 + 4 * n * n * d_model)",
     "the right number, but a float"),
    ("05_model", "count_parameters", "lambda config: float(REF_COUNT(config) - config.d_model)",
     "and it came back as a float"),
])
def test_a_count_returned_as_a_float_is_told_so_right_or_off(unit_name, part_name, answer, told):
    """A float count was said only where it was right (05), or never (03), in the fresh set fresh29f."""
    unit = UNITS[unit_name]
    namespace = dict(vars(load_reference(unit_name)))
    namespace["REF_COUNT"] = namespace.get("count_parameters")
    namespace[part_name] = eval(answer, namespace)  # the course's own test code
    failed = [r.message for r in grade_part(unit, part_name, InProcessStudent(namespace)) if not r.passed]
    assert failed and any(told in m for m in failed), failed


def test_an_attention_with_a_mask_kept_for_64_positions_loses_the_long_sequence_check():
    """Kept full marks in the fresh set fresh29f (04/18): no input was longer than 64 positions."""
    unit = UNITS["04_block"]
    reference = load_reference(unit.name)

    class Buffer64(reference.MultiHeadAttention):
        def forward(self, x):
            if x.shape[-2] > 64:  # what masked_fill with a (64, 64) buffer's [:T, :T] would do
                raise RuntimeError("The size of tensor a (64) must match the size of tensor b (300)")
            return super().forward(x)

    failed = [r.name for r in grade_part(unit, "MultiHeadAttention", InProcessStudent(
        dict(vars(reference), MultiHeadAttention=Buffer64))) if not r.passed]
    assert failed == ["MultiHeadAttention/longer_than_d_model"], failed


def test_more_slips_found_by_the_fresh_set_fresh29f_are_told_their_step():
    """Each kept full marks, or was told another step, in the fresh set fresh29f (graded before these
    were made): a softmax whose output keeps an integer input's dtype, a gelu with 1/sqrt(2) kept in
    float32, an attention whose keys come from q_proj, a detector whose every copy redraws the last
    row only."""
    unit = UNITS["01_attention"]
    namespace = reference_with(unit, """
def softmax(x, axis=-1):
    out = np.empty_like(x)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    out[...] = e / e.sum(axis=axis, keepdims=True)
    return out
""")
    failed = [r.name for r in grade_part(unit, "softmax", InProcessStudent(namespace)) if not r.passed]
    assert failed == ["softmax/integers"], failed
    where = located(unit, unit.part("softmax"), namespace)
    assert where is not None and where.startswith("the output's dtype."), where

    unit = UNITS["04_block"]
    reference = load_reference(unit.name)
    half = torch.tensor(1.0 / math.sqrt(2.0))  # float32, as torch.tensor makes it

    def gelu(x):
        return x * 0.5 * (1.0 + torch.erf(x * half))

    failed = [r.name for r in grade_part(unit, "gelu", InProcessStudent(dict(vars(reference), gelu=gelu)))
              if not r.passed]
    assert failed == ["gelu/batched_float64"], failed

    class KeysFromQueries(reference.MultiHeadAttention):
        def forward(self, x):
            k_proj = self.k_proj
            self.k_proj = self.q_proj
            try:
                return super().forward(x)
            finally:
                self.k_proj = k_proj

    where = located(unit, unit.part("MultiHeadAttention"), dict(vars(reference), MultiHeadAttention=KeysFromQueries))
    assert where is not None and where.startswith("the keys."), where

    unit = UNITS["02_masking"]
    namespace = reference_with(unit, """
def looks_causal(attn_fn, n=8, d=4, trials=3, seed=0):
    rng = np.random.default_rng(seed)
    for _ in range(trials):
        x = rng.normal(size=(n, d))
        before = np.asarray(attn_fn(x))
        for i in range(n - 1):
            changed = x.copy()
            changed[-1] = rng.normal(size=d)
            if np.abs(np.asarray(attn_fn(changed))[: i + 1] - before[: i + 1]).max() > 1e-9:
                return False
    return True
""")
    where = located(unit, unit.part("looks_causal"), namespace)
    assert where is not None and where.startswith("the rows you change.") and "the same row 5" in where, where


NAIVE_ATTENTION = """
import math
import torch

def naive_attention(q, k, v, causal=True):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        T = q.shape[-2]
        s = s + torch.full((T, T), float("-inf"), dtype=q.dtype).triu(1)
    return torch.softmax(s, dim=-1) @ v
"""


@pytest.mark.parametrize("old, new, step, told", [
    (".triu(1)", ".triu(2)", "the mask's diagonal.", "key i + 1"),
    (".triu(1)", ".triu(3)", "the mask's diagonal.", "keys i + 1 to i + 2"),
    ("torch.softmax(s, dim=-1) @ v", "torch.softmax(s, dim=-1) * math.sqrt(q.shape[-1]) @ v",
     "the scale's place.", "sum to sqrt(d)"),
    ("torch.softmax(s, dim=-1) @ v", "torch.softmax(s * math.sqrt(q.shape[-1]), dim=-1) / math.sqrt(q.shape[-1]) @ v",
     "the scale's place.", "1/sqrt(d)"),
])
def test_a_naive_attention_mask_offset_or_late_scale_is_told_its_step(old, new, step, told):
    """The fresh set fresh29f's 07/04 (triu(2): the next key leaks) was blamed on the fill value, and
    07/23 (the weights times 1/sqrt(d) after the softmax) on 'the output'."""
    unit = UNITS["07_flash_training"]
    part = unit.part("naive_attention")
    assert located(unit, part, reference_with(unit, NAIVE_ATTENTION)) is None
    assert old in NAIVE_ATTENTION
    where = located(unit, part, reference_with(unit, NAIVE_ATTENTION.replace(old, new)))
    assert where is not None and where.startswith(step) and told in where, where


def test_a_resumed_loop_that_does_not_restore_its_history_is_told_so():
    """The fresh set fresh29f's 08/27 saved train_losses but never put them back: told only as a
    resumed run that differs, with a checklist that asked to save what it already saved."""
    old = '        train_losses, heldout_losses = list(kept["train"]), list(kept["heldout"])\n'
    source = (Path(__file__).parent / "submissions" / "08_training" / "correct_written_plainly.py").read_text()
    assert old in source
    results = {r.name: r for r in graded_in_worker(UNITS["08_training"], "train_loop", source.replace(old, ""))}
    assert not results["train_loop/resume"].passed and "The history is not restored" in \
        results["train_loop/resume"].message, {n: r.message for n, r in results.items() if not r.passed}


@pytest.mark.parametrize("old, new, told", [
    ("self.pos_emb(torch.arange(T, device=idx.device))",
     "self.pos_emb(torch.arange(T, device=idx.device).repeat_interleave(idx.shape[0]).view(idx.shape[0], T))",
     "the position ids for a batch. With every block silenced, one sequence alone gets the right logits, but in a "
     "batch of 2 sequences of 8 tokens each row should read pos_emb rows [0, 1, 2, 3, 4, 5, 6, 7]; yours reads rows "
     "[0, 0, 1, 1, 2, 2, 3, 3] for the first sequence and [4, 4, 5, 5, 6, 6, 7, 7] for the second"),
    ("return self.lm_head(self.ln_f(x))", "return self.ln_f(x) @ self.token_emb.weight.T",
     "the output layer. With tie_weights=False lm_head has a weight of its own (here loaded with other values than "
     "token_emb's), and the logits are lm_head(ln_f(x)); yours are those of token_emb.weight (the tied table)"),
])
def test_a_gpt_right_for_one_tied_sequence_is_followed_to_a_batch_and_an_untied_head(old, new, told):
    """Position ids right for one sequence but mixed across a batch, and logits taken from token_emb's table
    in an untied model, got only 'the output differs' (the fresh set's 05/10 and 05/14): the locator now tries
    a batch of two (finding the pos_emb row each logit read) and an untied model."""
    source = CORRECT_GPT.read_text()
    assert old in source
    unit = UNITS["05_model"]
    part = next(p for p in unit.parts if p.name == "GPT")
    assert told in located(unit, part, reference_with(unit, source.replace(old, new)))


@pytest.mark.parametrize("old, new, second", [
    ("        out[..., :, i] = a * cos - b * sin\n        out[..., :, i + 1] = a * sin + b * cos",
     "        x[..., :, i] = a * cos - b * sin\n        out[..., :, i + 1] = a * sin + b * cos\n"
     "        out[..., :, i] = a", "b"),
    ("        out[..., :, i] = a * cos - b * sin\n        out[..., :, i + 1] = a * sin + b * cos",
     "        out[..., :, i + 1] = a * sin + b * cos\n        out[..., :, i] = a * cos - out[..., :, i + 1] * sin",
     "a"),
])
def test_rope_making_one_column_of_a_pair_from_the_other_already_turned_is_located_there(old, new, second):
    """rope writing the new even columns into x in place through views, so that the odd ones were made
    from the turned even ones, was blamed on the frequencies (the fresh set's 05/22): it is now told."""
    source = CORRECT_GPT.read_text()
    assert old in source
    unit = UNITS["05_model"]
    part = next(p for p in unit.parts if p.name == "rope")
    told = located(unit, part, reference_with(unit, source.replace(old, new)))
    assert told.startswith("writing the rotated pairs.") and f"the new {second} is made from" in told, told


@pytest.mark.parametrize("part_name, old, new", [
    ("generate", "    try:\n        for _ in range(max_new_tokens):\n            logits = model(idx[:, -model.config"
     ".context_length:])\n            idx = torch.cat((idx, sample_next(logits[:, -1], temperature, top_k, generator)"
     ".unsqueeze(1)), 1)\n    finally:\n",
     "    if True:\n        for _ in range(max_new_tokens):\n            logits = model(idx[:, -model.config"
     ".context_length:])\n            idx = torch.cat((idx, sample_next(logits[:, -1], temperature, top_k, generator)"
     ".unsqueeze(1)), 1)\n    if True:\n"),
    ("generate_cached", "    try:\n        with torch.no_grad():\n            for position", "    if True:\n"
     "        with torch.no_grad():\n            for position"),
])
def test_flags_restored_without_finally_are_caught_by_an_error_in_the_loop(part_name, old, new):
    """Flags put back after the loop but not in a finally block kept full marks (the fresh set's 06/23):
    a generator that is not one makes the draw raise inside the loop, and the flags are read afterwards."""
    source = CORRECT_CACHED.read_text()
    assert old in source
    source = source.replace(old, new)
    if part_name == "generate_cached":
        head, tail = source.rsplit("    finally:\n", 1)  # the cached one's, the last
        source = head + "    if True:\n" + tail
    results = graded_in_worker(UNITS["06_generation"], part_name, source)
    failed = {r.name.split("/")[1]: r.message for r in results if not r.passed}
    assert set(failed) == {"restored_on_error"}, failed
    assert "after an error inside the loop the model is left in eval mode" in failed["restored_on_error"], failed


def test_a_softmax_reshaped_back_is_told_the_axes_order_without_contradiction():
    """Told 'sums to 1 along axis 1, not axis 1' in the fresh set fresh29g (07): a result computed along
    the last axis, then reshaped (not moved) back to x's shape."""
    unit = UNITS["01_attention"]
    namespace = reference_with(unit, """
def softmax(x, axis=-1):
    moved = np.moveaxis(np.asarray(x, dtype=float), axis, -1)
    e = np.exp(moved - moved.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)).reshape(np.shape(x))
""")
    where = located(unit, unit.part("softmax"), namespace)
    assert where is not None and where.startswith("the axes' order.") and "reshaped" in where, where


@pytest.mark.parametrize("source, step, words", [
    ("""
def self_attention(x, W_q, W_k, W_v, mask=None):
    tokens = x.reshape(-1, x.shape[-1])
    out, _ = scaled_dot_product_attention(tokens @ W_q, tokens @ W_k, tokens @ W_v, mask=mask)
    return out.reshape(x.shape[:-1] + (W_v.shape[1],))
""", "the batch axes.", "each item reads the other's tokens, as if the two were one sequence"),
    ("""
def self_attention(x, W_q, W_k, W_v, mask=None):
    if mask is None:
        mask = np.tril(np.ones((x.shape[-2], x.shape[-2]), dtype=bool))
    return scaled_dot_product_attention(x @ W_q, x @ W_k, x @ W_v, mask=mask)[0]
""", "the mask.", "your weights are causal, row i 1 / (i + 1) on keys 0..i: a mask was applied though none was given"),
    ("""
def self_attention(x, W_q, W_k, W_v, mask=None):
    return scaled_dot_product_attention(x @ W_q, x @ W_k, x @ W_v, mask=mask)[1]
""", "the output.", "it is the attention weights"),
    ("""
def self_attention(x, W_q, W_k, W_v, mask=None):
    q, k, v = x @ W_q, x @ W_k, x @ W_v
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    if mask is not None:
        s = np.where(mask, s, -np.inf)
    return np.exp(s - s.max(axis=-1, keepdims=True)) @ v
""", "the softmax's normalisation.", "the weights are not divided by their sum"),
])
def test_self_attention_slips_of_the_fresh_set_fresh29g_are_told_their_step(source, step, words):
    """A batch flattened into one long sequence (22: generic), a causal mask applied when mask is None
    (23: told as the values) and the weights returned in place of the output (25: only the shape) in
    the fresh set fresh29g; and, as its 02/13 in unit 02, exponentials never divided by their sum
    (told as the values)."""
    unit = UNITS["01_attention"]
    where = located(unit, unit.part("self_attention"), reference_with(unit, source))
    assert where is not None and where.startswith(step) and words in where, where


UNIT_02_CSA = """
def causal_self_attention(x, W_q, W_k, W_v):
    q, k, v = x @ W_q, x @ W_k, x @ W_v
    n = x.shape[-2]
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    s = np.where(causal_mask(n), s, -np.inf)
    w = np.exp(s - s.max(axis=-1, keepdims=True))
    return (w / w.sum(axis=-1, keepdims=True)) @ v
"""


def test_causal_attention_whose_softmax_is_not_divided_is_told_the_normalisation():
    """Told as the mask applied after the softmax in the fresh set fresh29g (02/13): exponentials never
    divided by their sum, so that the rows of weights sum to 1, 2, 3, ..."""
    unit = UNITS["02_masking"]
    namespace = reference_with(unit, UNIT_02_CSA.replace("(w / w.sum(axis=-1, keepdims=True)) @ v", "w @ v"))
    where = located(unit, unit.part("causal_self_attention"), namespace)
    assert where is not None and where.startswith("the softmax's normalisation:"), where
    assert "[1.0, 2.0, 3.0, 4.0]" in where, where


def test_causal_attention_unscaled_and_sized_from_the_first_axis_is_told_both_steps():
    """The fresh set fresh29g's 02/26: no scale and n = x.shape[0]; one sequence failed for the scale, but
    only the batch axis was told. The scale, the first to go wrong (and all one sequence shows), is told first."""
    unit = UNITS["02_masking"]
    source = UNIT_02_CSA.replace(" / np.sqrt(q.shape[-1])", "").replace("x.shape[-2]", "x.shape[0]")
    where = located(unit, unit.part("causal_self_attention"), reference_with(unit, source))
    assert where is not None and where.startswith("the scale:") and "divided by 1 (no scale)" in where, where
    assert "A second step is wrong as well, the batch axis:" in where, where


def test_a_detector_that_draws_new_rows_of_the_outputs_width_loses_the_wider_outputs_case():
    """Kept 20/20 in the fresh set fresh29g (02/25): the new rows drawn with the output's width, never
    tried on an attn_fn whose d_out is not d, which the contract allows; the locator tells the width."""
    unit = UNITS["02_masking"]
    source = (Path(__file__).parent / "submissions" / "02_masking" / "correct_loops.py").read_text()
    old = "        out = np.asarray(attn_fn(x))\n"
    new = old + "        width = out.shape[-1]\n"
    assert old in source and "x2[j] = rng.standard_normal(d)" in source
    source = source.replace(old, new).replace("x2[j] = rng.standard_normal(d)", "x2[j] = rng.standard_normal(width)")
    results = graded_in_worker(unit, "looks_causal", source)
    failed = {r.name.split("/")[1]: r.message for r in results if not r.passed}
    assert set(failed) == {"wider_outputs"}, failed
    assert "Where it goes wrong: the width of the new inputs." in failed["wider_outputs"], failed


def test_causal_attention_over_a_flattened_batch_is_told_the_sequences_mix():
    """A batch flattened into one long sequence (as the fresh set fresh29g's 01/22 did in unit 01) was
    told to take n from x.shape[-2] and broadcast the mask, which it did."""
    unit = UNITS["02_masking"]
    namespace = reference_with(unit, """
def causal_self_attention(x, W_q, W_k, W_v):
    tokens = x.reshape(-1, x.shape[-1])
    out = self_attention(tokens, W_q, W_k, W_v, mask=causal_mask(tokens.shape[0]))
    return out.reshape(x.shape[:-1] + (W_v.shape[1],))
""")
    where = located(unit, unit.part("causal_self_attention"), namespace)
    assert where is not None and where.startswith("the batch axis:") and "other sequence's tokens mixed in" in where


def test_causal_attention_that_returns_the_weights_is_told_the_output():
    """As the fresh set fresh29g's 01/25 in unit 01: the weights returned in place of the output were
    told as the batch axis here (the weights of x and 2 x are the same)."""
    unit = UNITS["02_masking"]
    namespace = reference_with(unit, """
def causal_self_attention(x, W_q, W_k, W_v):
    return scaled_dot_product_attention(x @ W_q, x @ W_k, x @ W_v, mask=causal_mask(x.shape[-2]))[1]
""")
    where = located(unit, unit.part("causal_self_attention"), namespace)
    assert where is not None and where.startswith("the output:") and "it is the attention weights" in where, where


def test_attention_with_a_default_causal_mask_is_told_the_mask():
    """As the fresh set fresh29g's 01/23 in self_attention: a causal mask used when mask is None, in
    scaled_dot_product_attention, was told as the batch axes."""
    unit = UNITS["01_attention"]
    namespace = reference_with(unit, UNIT_01_SDPA.replace(
        "    if mask is not None:\n", "    if mask is None:\n        mask = np.tril(np.ones(scores.shape[-2:], "
        "dtype=bool))\n    if mask is not None:\n"))
    where = located(unit, unit.part("scaled_dot_product_attention"), namespace)
    assert where is not None and where.startswith("the mask.") and "though no mask was given" in where, where


# The fresh set fresh29g: 9 of its 27 unit-06 files read the positions as `model.pos_emb.weight[pos]`, which
# held NaN in the grader's model; the grader said only that it saw no call of pos_emb, and the real bugs
# went untold. An embedding's weight there now asks the grader for the rows read, as a call of the module.
WEIGHT_INDEX = Path(__file__).parent / "submissions" / "06_generation" / "correct_weight_index.py"


@pytest.mark.parametrize("old, new", [
    ("model.pos_emb(torch.tensor([position]))", "model.pos_emb.weight[position]"),  # an int: a 0-dim lookup
    ("model.pos_emb(torch.tensor([position]))", "model.pos_emb.weight[position:position + 1, :]"),
    ("model.token_emb(token)", "F.embedding(token, model.token_emb.weight)"),
])
def test_embedding_rows_read_from_the_weight_are_the_lookups(old, new):
    source = CORRECT_CACHED.read_text()
    assert old in source
    results = graded_in_worker(UNITS["06_generation"], "generate_cached",
                               "import torch.nn.functional as F\n" + source.replace(old, new))
    assert all(r.passed for r in results), [r.message for r in results if not r.passed]


def test_a_slip_beside_embedding_rows_read_from_the_weight_is_located_at_its_own_step():
    """fresh29g's 06/26: the residual after the attention left out, told only 'no call of model.pos_emb'."""
    source = WEIGHT_INDEX.read_text()
    old = "x = x + block.attn.out_proj(y.transpose(1, 2).reshape(B, t, C))"
    assert old in source and "model.pos_emb.weight[start:end]" in source
    unit = UNITS["06_generation"]
    student = Student([("answer", source.replace(old, "x = block.attn.out_proj(y.transpose(1, 2).reshape(B, t, C))"))])
    student.start()
    try:
        where = located(unit, unit.part("generate_cached"), None, student=student)
    finally:
        student.close()
    assert where is not None and where.startswith("block 0's attention residual."), where


def test_a_cache_kept_per_model_between_calls_is_told():
    """fresh29g's 06/21: a cache kept in a dict keyed by id(model) passed every check: called twice on the same
    prompt, the kept keys are those it computes anew. The second call now has another prompt, and the locator
    calls twice on one model."""
    source = CORRECT_CACHED.read_text()
    old = "cache = [None] * len(model.blocks)"
    assert old in source
    source = source.replace(old, "cache = KEPT.setdefault(id(model), [None] * len(model.blocks))") + "\n\nKEPT = {}\n"
    results = graded_in_worker(UNITS["06_generation"], "generate_cached", source)
    failed = {r.name: r.message for r in results if not r.passed}
    assert "generate_cached/called_twice" in failed, failed
    message = failed["generate_cached/called_twice"]
    assert "a second call on the same model, on another prompt" in message, message
    assert "Where it goes wrong: block 0's attention, on a second call." in message, message


def test_a_cache_allocated_for_a_batch_of_one_is_told_its_batch():
    """fresh29g's 06/24: torch.zeros(1, ...) for the cache, told only by PyTorch's size mismatch at the write."""
    source = WEIGHT_INDEX.read_text()
    old = "weight.new_empty(B, nh, T + max_new_tokens, C // nh)"
    assert source.count(old) == 2
    unit = UNITS["06_generation"]
    student = Student([("answer", source.replace(old, "weight.new_empty(1, nh, T + max_new_tokens, C // nh)"))])
    student.start()
    try:
        where = located(unit, unit.part("generate_cached"), None, student=student)
    finally:
        student.close()
    assert where is not None and where.startswith("the cache's batch size.") and "a batch of 1" in where, where


# ---------------------------------------------------------------- the fresh set fresh29g, units 07 and 08 (issue 29)

TIMER = Path(__file__).parent / "submissions" / "07_flash_training" / "correct_default_timer.py"


@pytest.mark.parametrize("change, checks, told", [
    # a CPU-time clock (07/18): the GPU checks read about 0 and were told as the synchronisation
    (("clock=timeit.default_timer", "clock=time.process_time"), ("synchronises", "gpu_argument"),
     "probably a clock the grader does not control"),
    # one warm-up call short (07/23): told only that fn was called once too few times
    (("for _ in range(warmup):", "for _ in range(warmup - 1):"), ("median", "defaults", "even_repeats"),
     "Where it goes wrong: the warm-up."),
    (("for i in range(repeats):", "for i in range(repeats - 1):"), ("median", "passes_args"),
     "Where it goes wrong: the timed loop."),
    # the middle pair of an even count taken one place late (07/25): told as an unsorted median
    (("return float(np.median(samples))",
      "s = sorted(samples)\n    h = len(s) // 2\n    return float(s[h] if len(s) % 2 else (s[h] + s[h + 1]) / 2)"),
     ("defaults", "even_repeats"), "one past the middle pair"),
])
def test_a_timer_on_a_cpu_clock_a_loop_one_short_or_a_median_one_off_is_told_which(change, checks, told):
    source = "import time\n" + TIMER.read_text()
    assert change[0] in source
    results = {r.name: r for r in graded_in_worker(UNITS["07_flash_training"], "time_fn", source.replace(*change))}
    for check in checks:
        message = results[f"time_fn/{check}"].message
        assert not results[f"time_fn/{check}"].passed and told in message, message
        assert "the synchronisation" not in message, message


def test_a_naive_attention_whose_causal_defaults_to_false_is_told_its_default():
    """Told only 'the output differs' (the fresh set fresh29g's 07/25)."""
    unit = UNITS["07_flash_training"]
    source = TIMER.read_text().replace("def naive_attention(q, k, v, causal=True):",
                                       "def naive_attention(q, k, v, causal=False):")
    results = graded_in_worker(unit, "naive_attention", source)
    told = [r.message for r in results if not r.passed]
    assert told and any("Where it goes wrong: the default of causal." in m for m in told), told


def test_a_trainer_whose_losses_are_tensors_is_still_told_its_progress_count():
    """Losses kept as tensors hid the progress check behind 'could not be judged' (fresh29g's 07/24)."""
    source = TIMER.read_text().replace("losses.append(float(loss))", "losses.append(loss)").replace(
        "progress(step + 1, losses[-1])", "progress(step, losses[-1])")
    results = {r.name: r for r in graded_in_worker(UNITS["07_flash_training"], "train", source)}
    message = results["train/progress"].message
    assert not results["train/progress"].passed and "count the steps from 1, not 0" in message, message


PLAINLY = Path(__file__).parent / "submissions" / "08_training" / "correct_written_plainly.py"
STRIPPED_CACHE_ENCODE = '''def encode(text, merges):
    seen = {}
    out = []
    for chunk in pretokenize(text):
        if chunk.strip() not in seen:
            ids = list(chunk.encode("utf-8"))
            for n, (a, b) in enumerate(merges):
                ids = replace_pair(ids, a, b, 256 + n) if len(ids) > 1 else ids
            seen[chunk.strip()] = ids
        out += seen[chunk.strip()]
    return out


def decode('''


@pytest.mark.parametrize("part_name, changes, check, told", [
    # the new token's id taken one too high (fresh29g's 08/09): an IndexError quoting the tie-break's line
    ("train_bpe", [("new_id = 256 + len(merges)", "new_id = 257 + len(merges)"),
                   ("vocab[new_id] = vocab[a] + vocab[b]", "vocab[255 + len(merges)] = vocab[a] + vocab[b]")], None,
     "Where it goes wrong: the new ids. train_bpe('abab abab abab', 258)"),
    # a cache keyed on the chunk stripped (08/11): told only which ids differ
    ("encode", "stripped cache", None, "Where it goes wrong: the cache of chunk ids."),
    # the last, smaller batch left out (08/26): told as the window starts
    ("evaluate", [("for batch in windows.split(batch_size):",
                   "for batch in [windows[i:i + batch_size] for i in range(0, len(windows) - batch_size + 1, "
                   "batch_size)]:")], None, "Where it goes wrong: the batches."),
    # the count of evaluations without a new best never reset (08/31): full marks
    ("train_loop", [("best_loss, best_step, bad_evals = held, done, 0", "best_loss, best_step = held, done")],
     "patience_in_a_row", "back to 0 at each new best"),
])
def test_a_slip_found_by_the_fresh_set_fresh29g_in_unit_08_is_told_its_step(part_name, changes, check, told):
    source = PLAINLY.read_text()
    if changes == "stripped cache":
        start, end = source.index("def encode("), source.index("def decode(")
        source = source[:start] + STRIPPED_CACHE_ENCODE + source[end + len("def decode("):]
    else:
        for old, new in changes:
            assert old in source
            source = source.replace(old, new)
    results = {r.name: r for r in graded_in_worker(UNITS["08_training"], part_name, source)}
    failed = {name: r.message for name, r in results.items() if not r.passed}
    assert failed and not any(r.misconception for r in results.values()), failed
    if check is not None:
        assert f"{part_name}/{check}" in failed and told in failed[f"{part_name}/{check}"], failed
    else:
        assert any(told in message for message in failed.values()), failed


@pytest.mark.parametrize("old, new, told", [
    # the fresh set fresh29h's 05/25 and 05/33: pairs read from the two halves, written side by side
    ("a, b = x[..., 0::2], x[..., 1::2]", "a, b = x[..., : d // 2], x[..., d // 2 :]",
     "pair i is read from columns i and i + d/2"),
    # another order of the columns at position 0: each pair written back swapped
    ("return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)",
     "return torch.stack((a * sin + b * cos, a * cos - b * sin), dim=-1).flatten(-2)",
     "x's columns in another order"),
])
def test_rope_whose_columns_move_at_position_0_is_told_the_pairing(old, new, told):
    """rope reading pair i from columns i and i + d/2 but writing it to 2i, 2i + 1 was told only "position 0"
    (the fresh set fresh29h's 05/25, 05/33): on x = [1, 2, ..., d] the columns it moves are read."""
    unit = UNITS["05_model"]
    part = unit.part("rope")
    assert old in ROPE
    where = located(unit, part, reference_with(unit, ROPE.replace(old, new)))
    assert where is not None and where.startswith("the pairs.") and told in where, where


@pytest.mark.parametrize("after, told", [(1, "after the first block"), (2, "after the last block"),
                                         (None, "after ln_f, just before lm_head")])
def test_a_gpt_adding_the_positions_later_in_the_stream_is_told_where(after, told):
    """pos_emb added after the first block was told as "the blocks" (the fresh set fresh29h's 05/17): with the
    blocks silenced it does not show, so with them on the stream with the positions added later is tried."""
    unit = UNITS["05_model"]
    reference = load_reference(unit.name)

    class Late(reference.GPT):
        def forward(self, idx):
            positions = self.pos_emb(torch.arange(idx.shape[1]))
            x = self.token_emb(idx)
            for k, block in enumerate(self.blocks):
                x = block(x)
                if k + 1 == after:
                    x = x + positions
            x = self.ln_f(x)
            return self.lm_head(x + positions if after is None else x)

    where = located(unit, unit.part("GPT"), dict(vars(reference), GPT=Late))
    assert where is not None and where.startswith("the position embedding's place.") and told in where, where


def test_a_gpt_whose_blocks_ignore_d_ff_is_told_the_width():
    """A GPT building its blocks without config.d_ff got only a bare shape difference (the fresh set
    fresh29h's 05/15): the feed-forward's width, 4 * d_model where d_ff is given, is now told."""
    old = "TransformerBlock(config.d_model, config.n_heads, config.d_ff)"
    source = CORRECT_GPT.read_text()
    assert old in source
    results = {r.name: r for r in graded_in_worker(UNITS["05_model"], "GPT", source.replace(
        old, "TransformerBlock(config.d_model, config.n_heads)"))}
    message = results["GPT/untied_parameters"].message
    assert not results["GPT/untied_parameters"].passed and "4 * d_model, the default, though config.d_ff = 20" \
        in message and "TransformerBlock(d_model, n_heads, d_ff)" in message, message


def test_a_count_missing_biases_in_two_places_is_told_the_block_pieces():
    """A count with one attention bias of four and fc1's bias of d_model got only totals (the fresh set
    fresh29h's 05/32): one more layer's increase, read at several d_model and d_ff, says which pieces."""
    old, new = ("per_block_attention = 4 * (d * d + d)", "per_block_attention = 4 * d * d + d")
    old2, new2 = ("per_block_ffn = (d * d_ff + d_ff)", "per_block_ffn = (d * d_ff + d)")
    source = CORRECT_GPT.read_text()
    assert old in source and old2 in source
    results = {r.name: r for r in graded_in_worker(UNITS["05_model"], "count_parameters",
                                                   source.replace(old, new).replace(old2, new2))}
    message = results["count_parameters/block"].message
    assert "the block's pieces." in message and "7 vectors of d_model where a block has 9" in message \
        and "0 vectors of d_ff where a block has 1 (fc1's bias)" in message, message
