"""Unit 04, the transformer block (PyTorch): the hidden checks and the misconception catalogue.

The reference is the solution notebook (`solutions/04_block/block.ipynb`). Where PyTorch has
its own version of a part, that is the expected value instead of the reference, an
independent oracle: `F.layer_norm`, `F.rms_norm`, `F.gelu(approximate="none")`,
`nn.MultiheadAttention` and `nn.TransformerEncoderLayer` (pre-norm, GELU, no dropout, causal)
carrying the same weights as the student's module.

The classes are checked through probes (`spec.Check.probe`): build the student's module in
the worker, load weights drawn here, run it, read its outputs, parameter names and
gradients. The same probe runs on the reference and on each wrong variant below; the
variants of a class are subclasses of the reference's with one mistake, written against
the contract's attribute names only (`q_proj`, `fc1`, `ln1`, ...).

A mistake costs points once: while `FeedForward` is graded the student's `gelu` is torch's,
and while `TransformerBlock` is graded its sub-parts (`MultiHeadAttention`, `FeedForward`,
`layer_norm`, `rms_norm`, `gelu`) are correct ones from `coursekit.blocks` (`BLOCK_STUBS`). So
the block's catalogue holds only mistakes in the block's own wiring.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..engine.compare import Tolerance, compare_arrays, describe
from ..engine.locate import located_mask, located_scale, shown
from ..engine.probes import ProbeFailed
from ..engine.reference import load_reference
from ..engine.spec import Check, Inputs, Misconception, Part, SampleBug, Unit
from ..engine.weights import random_state as shared_random_state

UNIT_NAME = "04_block"
F32 = Tolerance(rtol=1e-4, atol=1e-5)  # float32 arithmetic in a different order
F64 = Tolerance(rtol=1e-7, atol=1e-9)


def ref():
    return load_reference(UNIT_NAME)


def tensor(rng, shape, dtype=torch.float32, scale=1.0, shift=0.0):
    return torch.from_numpy(rng.normal(shift, scale, shape)).to(dtype)


# ---------------------------------------------------------------- what is graded


def graded() -> Unit:
    """The graded parts: each check, what it shows, and its points. What the checks use (their
    inputs, diagnoses and probes) and the catalogue of mistakes they name are below; this is
    called at the end of the module, once all of it is defined."""
    parts = (
        Part(
            "layer_norm",
            diagnose=diagnose,
            locate=locate_layer_norm,
            forbid=NORM_FORBID,
            checks=(
                Check("rows", "x (4, 6) with random weight and bias", 1, norm_inputs((4, 6)), tol=F32,
                      oracle=layer_norm_oracle),
                Check("batched_float64", "x (2, 5, 12) in float64", 1, norm_inputs((2, 5, 12), torch.float64), tol=F64,
                      oracle=layer_norm_oracle),
                Check("tiny_variance", "rows whose variance (1e-8) is far below eps", 1, tiny_variance_inputs(),
                      tol=F64, oracle=layer_norm_oracle),
                Check("custom_eps", "d_model 10 (not a power of two) with eps=0.1", 1,
                      norm_inputs((3, 7, 10), eps=0.1), tol=F32, oracle=layer_norm_oracle),
                Check("gradient", "gradients of x, weight and bias", 1, with_upstream(norm_inputs((3, 6),
                      torch.float64)),
                      tol=F64, probe=grad_probe("layer_norm")),
                _unchanged(norm_inputs((2, 5))),
            ),
        ),
        Part(
            "rms_norm",
            diagnose=diagnose,
            locate=locate_rms_norm,
            forbid=RMS_FORBID,
            checks=(
                Check("rows", "x (4, 6) with a random weight", 1, rms_inputs((4, 6)), tol=F32, oracle=rms_norm_oracle),
                Check("batched_float64", "x (2, 5, 12) in float64", 1, rms_inputs((2, 5, 12), torch.float64), tol=F64,
                      oracle=rms_norm_oracle),
                Check("tiny_values", "rows of size 1e-4, where eps matters", 1, tiny_variance_inputs(rms=True), tol=F64,
                      oracle=rms_norm_oracle),
                Check("custom_eps", "d_model 10 with eps=0.01", 1, rms_inputs((3, 7, 10), eps=0.01), tol=F32,
                      oracle=rms_norm_oracle),
                Check("gradient", "gradients of x and weight", 1, with_upstream(rms_inputs((3, 6), torch.float64)),
                      tol=F64, probe=grad_probe("rms_norm")),
            ),
        ),
        Part(
            "gelu",
            diagnose=diagnose,
            locate=locate_gelu,
            forbid=GELU_FORBID,
            checks=(
                Check("grid", "x from -6 to 6 in steps of 0.1", 1, gelu_inputs(grid=True), tol=Tolerance(1e-5, 1e-6),
                      oracle=gelu_oracle),
                Check("large", "x up to +-80 (no overflow, no NaN)", 1, gelu_inputs(large=True), tol=F32,
                      oracle=gelu_oracle),
                # float64 to float64's precision: a constant kept in float32 (1/sqrt(2) as 0.70710677) is off
                # by about 1e-8 of the value, which F64's 1e-7 lets through
                Check("batched_float64", "x (2, 3, 5) in float64, to float64's precision", 1,
                      gelu_inputs((2, 3, 5), torch.float64), tol=Tolerance(rtol=1e-12, atol=1e-14), oracle=gelu_oracle),
                Check("gradient", "the gradient of x", 1, with_upstream(gelu_inputs((3, 7), torch.float64)), tol=F64,
                      probe=grad_probe("gelu")),
                _unchanged(gelu_inputs((3, 4))),
            ),
        ),
        Part(
            "MultiHeadAttention",
            kind="class",
            diagnose=diagnose,
            forbid=ATTENTION_FORBID,
            locate_probe=locate_attention_module,
            # coursekit.blocks (the course's block for units 05+) stays in the sandbox, where the
            # stand-ins above come from: an answer that imports it earns nothing here.
            not_imported=("coursekit.blocks",),
            checks=(
                Check("attributes", "MultiHeadAttention(12, 3): n_heads and the parameters' names and shapes", 1,
                      module_inputs("MultiHeadAttention", (12, 3), (1, 4, 12)),
                      probe=structure_probe("MultiHeadAttention", ("n_heads",))),
                Check("forward", "d_model 8, 2 heads, x (1, 5, 8)", 1,
                      module_inputs("MultiHeadAttention", (8, 2), (1, 5, 8)), tol=F32,
                      probe=forward_probe("MultiHeadAttention"), oracle=mha_oracle),
                Check("batched", "d_model 12 (not a power of two), 3 heads, x (3, 7, 12)", 1,
                      module_inputs("MultiHeadAttention", (12, 3), (3, 7, 12)), tol=F32,
                      probe=forward_probe("MultiHeadAttention"), oracle=mha_oracle),
                Check("single_token", "a single position: x (2, 1, 8)", 0.5,
                      module_inputs("MultiHeadAttention", (8, 4), (2, 1, 8)), tol=F32,
                      probe=forward_probe("MultiHeadAttention"), oracle=mha_oracle),
                Check("longer_than_d_model", "more positions than d_model, and than a mask kept for 64 or 256 "
                      "positions: d_model 4, 2 heads, x (2, 300, 4)", 0.5,
                      module_inputs("MultiHeadAttention", (4, 2), (2, 300, 4)), tol=F32,
                      probe=forward_probe("MultiHeadAttention"), oracle=mha_oracle),
                Check("float64", "the module in float64 (.double()), x (2, 6, 8)", 0.5,
                      module_inputs("MultiHeadAttention", (8, 2), (2, 6, 8), torch.float64), tol=F64,
                      probe=forward_probe("MultiHeadAttention", torch.float64)),
                Check("two_lengths", "one module called on 3 positions, then on 8: nothing kept from the first "
                      "call (a mask made for 3 positions) may change the second", 0.5,
                      module_inputs("MultiHeadAttention", (8, 2), (2, 8, 8)), tol=F32,
                      probe=lengths_probe("MultiHeadAttention")),
                Check("causal", "outputs before position 4 do not change when positions 4-7 do", 1,
                      module_inputs("MultiHeadAttention", (8, 2), (2, 8, 8)), tol=F32,
                      probe=causality_probe("MultiHeadAttention")),
                Check("gradient", "gradients of the input and every parameter", 1,
                      module_inputs("MultiHeadAttention", (8, 2), (2, 5, 8)), tol=Tolerance(1e-4, 1e-5),
                      probe=gradient_probe("MultiHeadAttention")),
            ),
        ),
        Part(
            "FeedForward",
            kind="class",
            diagnose=diagnose,
            library_stubs=GELU_STUB,
            locate_probe=locate_feed_forward,
            not_imported=("coursekit.blocks",),
            checks=(
                Check("attributes_default_width", "FeedForward(12): fc1 and fc2, d_ff defaulting to 48", 1,
                      module_inputs("FeedForward", (12,), (1, 3, 12)), probe=structure_probe("FeedForward")),
                Check("attributes_given_width", "FeedForward(8, 20): fc1 (8 -> 20) and fc2 (20 -> 8)", 1,
                      module_inputs("FeedForward", (8, 20), (1, 3, 8)), probe=structure_probe("FeedForward")),
                Check("forward", "FeedForward(8, 20) on x (2, 5, 8)", 1,
                      module_inputs("FeedForward", (8, 20), (2, 5, 8), scale=2.0), tol=F32,
                      probe=forward_probe("FeedForward")),
                Check("float64", "in float64 on x (1, 1, 6)", 1,
                      module_inputs("FeedForward", (6,), (1, 1, 6), torch.float64, scale=2.0), tol=F64,
                      probe=forward_probe("FeedForward", torch.float64)),
                Check("gradient", "gradients of the input, fc1 and fc2", 1,
                      module_inputs("FeedForward", (6, 10), (2, 3, 6)), tol=Tolerance(1e-4, 1e-5),
                      probe=gradient_probe("FeedForward")),
            ),
        ),
        Part(
            "TransformerBlock",
            kind="class",
            diagnose=diagnose,
            library_stubs=BLOCK_STUBS,
            locate_probe=locate_block,
            not_imported=("coursekit.blocks",),
            checks=(
                Check("attributes", "TransformerBlock(12, 3): ln1, attn, ln2, ffn and their parameters", 1,
                      module_inputs("TransformerBlock", (12, 3), (1, 4, 12)),
                                    probe=structure_probe("TransformerBlock")),
                Check("forward", "d_model 8, 2 heads, d_ff 16, x (2, 5, 8)", 1,
                      module_inputs("TransformerBlock", (8, 2, 16), (2, 5, 8)), tol=F32,
                      probe=forward_probe("TransformerBlock")),
                Check("torch_encoder_layer", "against nn.TransformerEncoderLayer (pre-norm, GELU, causal), "
                      "d_model 12, 3 heads, x (2, 7, 12)", 1,
                      module_inputs("TransformerBlock", (12, 3), (2, 7, 12)), tol=F32,
                      probe=forward_probe("TransformerBlock"), oracle=block_oracle),
                Check("single_token", "a single position: x (3, 1, 8)", 1,
                      module_inputs("TransformerBlock", (8, 2), (3, 1, 8)), tol=F32,
                      probe=forward_probe("TransformerBlock")),
                Check("float64", "the block in float64, x (1, 6, 8)", 1,
                      module_inputs("TransformerBlock", (8, 4), (1, 6, 8), torch.float64), tol=F64,
                      probe=forward_probe("TransformerBlock", torch.float64)),
                Check("gradient", "gradients of the input and every parameter", 1,
                      module_inputs("TransformerBlock", (8, 2, 16), (2, 4, 8)), tol=Tolerance(1e-4, 1e-5),
                      probe=gradient_probe("TransformerBlock")),
                Check("eval_deterministic", "two calls in eval() mode give the same output", 1,
                      module_inputs("TransformerBlock", (8, 2), (1, 5, 8)), tol=Tolerance(0.0, 0.0),
                      probe=determinism_probe("TransformerBlock")),
            ),
        ),
    )

    return Unit(
        UNIT_NAME,
        # The slowest cell of the solution notebook takes under 2 s on a laptop CPU (its setup, importing
        # PyTorch): 15 s leaves room for a busy machine, and costs a looping notebook less.
        cell_seconds=15,
        reference_cpu_seconds=2.5,  # 2.33 s measured (spec.Unit.reference_cpu_seconds)
        notebook_cpu_seconds=4,  # 3.72 s measured (spec.Unit.notebook_cpu_seconds)
        parts=parts,
        misconceptions=MISCONCEPTIONS,
        sample_bug=SampleBug("gelu", "math.sqrt(2", "(1", "gelu_erf_unscaled"),
    )


# ---------------------------------------------------------------- comparing results


def diagnose(result, expected, inputs: Inputs, tol: Tolerance) -> str | None:
    """Tensors: shape, dtype, NaN, values. Dicts: the module's parameters (names and shapes),
    or named gradients. A pair (output, gradients)."""
    if isinstance(expected, dict) and "parameters" in expected:
        return diagnose_structure(result, expected)
    if isinstance(expected, dict):  # gradients by parameter name
        if not isinstance(result, dict):
            return f"expected the gradients by parameter name, got {describe(result)}"
        for name, want in expected.items():
            got = result.get(name)
            if want is not None and got is None:
                return f"`{name}` got no gradient: is it used in forward, and not detached?"
            if want is not None:
                problem = compare_arrays(got, want, tol, f"the gradient of `{name}`")
                if problem:
                    return problem
        return None
    if isinstance(expected, tuple):
        labels = ("the output", "the input's gradient", "the weight's gradient", "the bias's gradient")
        if not isinstance(result, tuple) or len(result) != len(expected):
            return f"expected {len(expected)} values, got {describe(result)}"
        for label, got, want in zip(labels, result, expected, strict=False):
            if want is None:
                continue
            if got is None:
                return f"{label} is missing: did backward reach it (no .detach(), no new tensor)?"
            problem = diagnose(got, want, inputs, tol)
            if problem:
                return problem.replace("the output", label, 1)
        return None
    return diagnose_tensor(result, expected, tol)


def diagnose_tensor(result, expected, tol: Tolerance, label: str = "the output") -> str | None:
    if not isinstance(result, torch.Tensor):
        return f"{label} is {describe(result)}, expected a tensor of shape {tuple(expected.shape)}"
    if result.dtype != expected.dtype:
        return (f"{label} has dtype {result.dtype}, expected {expected.dtype} (the input's dtype: build new "
                "tensors with dtype=x.dtype, or from x itself)")
    return compare_arrays(result, expected, tol, label)


def diagnose_structure(result, expected) -> str | None:
    if not isinstance(result, dict) or "parameters" not in result:
        return f"could not read the module's parameters ({describe(result)})"
    got, want = result["parameters"], expected["parameters"]
    missing = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    if missing:
        return (f"the module has no parameter `{missing[0]}` (its state_dict has {', '.join(sorted(got)) or 'none'}): "
                "use the contract's attribute names")
    if extra:
        return f"the module has a parameter `{extra[0]}` the contract does not have"
    for name, shape in want.items():
        if list(got[name]) != list(shape):
            return f"`{name}` has shape {tuple(got[name])}, expected {tuple(shape)}"
    for key, value in expected.items():
        if key != "parameters" and result.get(key) != value:
            return f"`{key}` is {result.get(key)!r}, expected {value!r}"
    return None


# ---------------------------------------------------------------- the functions: layer_norm, rms_norm, gelu


def norm_inputs(shape, dtype=torch.float32, eps=None, scale=2.0, shift=0.5, affine=True):
    def make(rng):
        x = tensor(rng, shape, dtype, scale, shift)
        d = shape[-1]
        weight = tensor(rng, (d,), dtype, 0.5, 1.0) if affine else torch.ones(d, dtype=dtype)
        bias = tensor(rng, (d,), dtype, 0.5)
        kwargs = {} if eps is None else {"eps": eps}
        return Inputs((x, weight, bias), kwargs)

    return make


def rms_inputs(shape, dtype=torch.float32, eps=None, scale=2.0):
    def make(rng):
        inputs = norm_inputs(shape, dtype, eps, scale)(rng)
        return Inputs(inputs.args[:2], inputs.kwargs)

    return make


def tiny_variance_inputs(rms=False):
    """Rows that are almost constant: their variance (1e-8) is far below eps, so where eps
    goes changes the answer by orders of magnitude. In float64: in float32, round-off on
    such rows is as large as the differences the check is about."""

    def make(rng):
        x = torch.from_numpy((0.0 if rms else 1.0) + 1e-4 * rng.normal(size=(3, 8)))
        weight, bias = torch.ones(8, dtype=torch.float64), torch.zeros(8, dtype=torch.float64)
        return Inputs((x, weight) if rms else (x, weight, bias))

    return make


def layer_norm_oracle(inputs: Inputs):
    x, weight, bias = inputs.args
    return F.layer_norm(x, x.shape[-1:], weight, bias, inputs.kwargs.get("eps", 1e-5))


def rms_norm_oracle(inputs: Inputs):
    x, weight = inputs.args
    return F.rms_norm(x, x.shape[-1:], weight, inputs.kwargs.get("eps", 1e-6))


def gelu_oracle(inputs: Inputs):
    return F.gelu(inputs.args[0], approximate="none")


def grad_probe(name):
    """Backpropagate a fixed upstream gradient through the function: (output, grads of inputs)."""

    def probe(api, inputs: Inputs):
        args = tuple(a.detach().clone().requires_grad_(True) for a in inputs.args)
        upstream = inputs.kwargs["upstream"]
        kwargs = {k: v for k, v in inputs.kwargs.items() if k != "upstream"}
        out, grads = api.call(name, *args, backward=upstream, **kwargs)
        return (out.detach(), *grads)

    return probe


def with_upstream(make):
    def made(rng):
        inputs = make(rng)
        out_shape = inputs.args[0].shape
        return Inputs(inputs.args, {**inputs.kwargs, "upstream": tensor(rng, out_shape, inputs.args[0].dtype)})

    return made


def gelu_inputs(shape=(4, 9), dtype=torch.float32, scale=3.0, grid=False, large=False):
    def make(rng):
        if grid:
            x = torch.linspace(-6, 6, 121, dtype=dtype).reshape(11, 11)
        else:
            x = tensor(rng, shape, dtype, scale)
        if large:
            x = torch.tensor([-80.0, -30.0, -10.0, 0.0, 10.0, 30.0, 80.0], dtype=dtype)
        return Inputs((x,))

    return make


# ---------------------------------------------------------------- the classes


def random_state(cls_name, ctor, seed, dtype=torch.float32):
    """A state dict for the reference class, drawn from `seed` (LayerNorm gains near 1)."""
    torch.manual_seed(seed)
    return shared_random_state(getattr(ref(), cls_name)(*ctor), seed, dtype, gain_spread=0.2)


def module_inputs(cls_name, ctor, x_shape, dtype=torch.float32, scale=1.0):
    def make(rng):
        seed = int(rng.integers(0, 2**31))
        return Inputs((tuple(ctor), tensor(rng, x_shape, dtype, scale)),
                      {"state": random_state(cls_name, ctor, seed, dtype)})

    return make


def built(api, cls_name, inputs: Inputs, dtype=torch.float32):
    ctor, x = inputs.args
    module = api.new(cls_name, *ctor)
    if dtype == torch.float64:
        module = api.method(module, "double", keep=True)
    api.method(module, "load_state_dict", inputs.kwargs["state"])
    api.method(module, "eval", keep=True)
    return module, x


def forward_probe(cls_name, dtype=torch.float32):
    def probe(api, inputs: Inputs):
        module, x = built(api, cls_name, inputs, dtype)
        return api.forward(module, x)

    return probe


def structure_probe(cls_name, attributes=()):
    """The module's parameter names and shapes (and some int attributes), as built by its
    constructor with the contract's arguments."""

    def probe(api, inputs: Inputs):
        ctor, _ = inputs.args
        module = api.new(cls_name, *ctor)
        state = api.method(module, "state_dict")
        result = {"parameters": {name: list(value.shape) for name, value in state.items()}}
        for attribute in attributes:
            value = api.attr(module, attribute)
            result[attribute] = value if type(value) is int else repr(value)
        return result

    return probe


def gradient_probe(cls_name):
    """Parameter gradients after backpropagating a fixed upstream gradient, and the input's."""

    def probe(api, inputs: Inputs):
        module, x = built(api, cls_name, inputs)
        api.method(module, "train", keep=True)
        x = x.detach().clone().requires_grad_(True)
        upstream = torch.from_numpy(np.random.default_rng(7).normal(size=tuple(x.shape))).float()
        _, (x_grad,) = api.forward(module, x, backward=upstream)
        return {"input": x_grad, **api.grads(module)}

    return probe


def lengths_probe(cls_name):
    """One module called on the first 3 positions, then on all of them: what it keeps from its first
    call (a mask made once, for the first length) must not change the second."""

    def probe(api, inputs: Inputs):
        module, x = built(api, cls_name, inputs)
        api.forward(module, x[..., :3, :].clone())
        return api.forward(module, x)

    return probe


def causality_probe(cls_name):
    """The outputs at positions 0..k-1, minus the same outputs once positions k.. change:
    zero for a causal module."""

    def probe(api, inputs: Inputs):
        module, x = built(api, cls_name, inputs)
        k = x.shape[-2] // 2
        later = x.clone()
        later[..., k:, :] = later[..., k:, :].flip(-2) * 3.0 + 1.0
        return api.forward(module, x)[..., :k, :] - api.forward(module, later)[..., :k, :]

    return probe


def determinism_probe(cls_name):
    """In eval() mode, two calls on the same input give the same output."""

    def probe(api, inputs: Inputs):
        module, x = built(api, cls_name, inputs)
        return api.forward(module, x) - api.forward(module, x)

    return probe


def causal_allowed(t):
    return torch.tril(torch.ones(t, t, dtype=torch.bool))


def mha_oracle(inputs: Inputs):
    """nn.MultiheadAttention carrying the same weights, with a causal mask."""
    (d_model, n_heads), x = inputs.args
    state = inputs.kwargs["state"]
    layer = nn.MultiheadAttention(d_model, n_heads, batch_first=True, dtype=x.dtype)
    with torch.no_grad():
        layer.in_proj_weight.copy_(torch.cat([state[f"{p}_proj.weight"] for p in "qkv"]))
        layer.in_proj_bias.copy_(torch.cat([state[f"{p}_proj.bias"] for p in "qkv"]))
        layer.out_proj.weight.copy_(state["out_proj.weight"])
        layer.out_proj.bias.copy_(state["out_proj.bias"])
        t = x.shape[-2]
        out, _ = layer(x, x, x, attn_mask=~causal_allowed(t), need_weights=False)
    return out


def block_oracle(inputs: Inputs):
    """nn.TransformerEncoderLayer (pre-norm, exact GELU, no dropout, causal) with the weights."""
    ctor, x = inputs.args
    d_model, n_heads = ctor[:2]
    state = inputs.kwargs["state"]
    d_ff = state["ffn.fc1.weight"].shape[0]
    layer = nn.TransformerEncoderLayer(d_model, n_heads, dim_feedforward=d_ff, dropout=0.0, activation="gelu",
                                       batch_first=True, norm_first=True, dtype=x.dtype)
    layer.eval()
    with torch.no_grad():
        attention = layer.self_attn
        attention.in_proj_weight.copy_(torch.cat([state[f"attn.{p}_proj.weight"] for p in "qkv"]))
        attention.in_proj_bias.copy_(torch.cat([state[f"attn.{p}_proj.bias"] for p in "qkv"]))
        attention.out_proj.weight.copy_(state["attn.out_proj.weight"])
        attention.out_proj.bias.copy_(state["attn.out_proj.bias"])
        for mine, theirs in (("ffn.fc1", "linear1"), ("ffn.fc2", "linear2"), ("ln1", "norm1"), ("ln2", "norm2")):
            getattr(layer, theirs).weight.copy_(state[f"{mine}.weight"])
            getattr(layer, theirs).bias.copy_(state[f"{mine}.bias"])
        t = x.shape[-2]
        return layer(x, src_mask=~causal_allowed(t), is_causal=True)


# ---------------------------------------------------------------- the grader's own forward passes
# Written here from the contract's attribute names, with one knob per mistake; the defaults
# are right. The wrong variants below are the reference's classes with one knob turned.

MASKS = {  # what each mask lets query t read, as a (T, T) boolean: True = may attend
    "lower": lambda t: causal_allowed(t),
    "upper": lambda t: causal_allowed(t).T,
    "one_ahead": lambda t: torch.tril(torch.ones(t, t, dtype=torch.bool), diagonal=1),
    # masked_fill(tril, -inf): the mask read as "where to hide", so only the strict future is left
    "inverted": lambda t: ~causal_allowed(t),
    # masked_fill(torch.triu(ones), -inf): diagonal=1 forgotten, so each query loses itself too
    "strict_past": lambda t: torch.tril(torch.ones(t, t, dtype=torch.bool), diagonal=-1),
}


def attention_forward(m, x, causal=True, scale="d_head", split="heads_first", merge="transpose", project_out=True,
                      mask="lower", fill=float("-inf"), softmax_dim=-1, scale_after_softmax=False, swap_qk=False,
                      mask_after_softmax=False, one_head=False, residual=False, mask_added=False):
    B, T, d_model = x.shape
    H = 1 if one_head else m.n_heads
    d_head = d_model // H

    def heads(t):  # (B, T, d_model) -> (B, H, T, d_head)
        if split == "no_transpose":
            return t.reshape(B, H, T, d_head)
        return t.reshape(B, T, H, d_head).transpose(1, 2)

    q, k, v = heads(m.q_proj(x)), heads(m.k_proj(x)), heads(m.v_proj(x))
    if swap_qk:
        q, k = k, q
    scores = q @ k.transpose(-1, -2)
    divisor = {"d_head": math.sqrt(d_head), "d_model": math.sqrt(d_model), "none": 1.0,
               "times_d_head": 1.0 / math.sqrt(d_head)}[scale]
    if not scale_after_softmax:
        scores = scores / divisor
    hidden = ~MASKS[mask](T)
    if mask_added:  # the boolean mask added to the scores as 0s and 1s
        scores = scores + (~hidden).to(scores.dtype)
    elif causal and not mask_after_softmax:
        scores = scores.masked_fill(hidden, fill)
    weights = torch.softmax(scores, dim=softmax_dim)
    if causal and mask_after_softmax:
        weights = weights.masked_fill(hidden, 0.0)
    if scale_after_softmax:
        weights = weights / divisor
    out = weights @ v  # (B, H, T, d_head)
    if merge == "view":  # .view on the transposed tensor: it raises where the memory is not contiguous
        out = out.transpose(1, 2).view(B, T, d_model)
    else:
        out = out.transpose(1, 2).reshape(B, T, d_model) if merge == "transpose" else out.reshape(B, T, d_model)
    out = m.out_proj(out) if project_out else out
    return x + out if residual else out


def layer_norm_without_parameters(t):
    """Normalised, but without a LayerNorm's weight and bias: F.layer_norm(x, shape) alone."""
    return F.layer_norm(t, t.shape[-1:])


def block_forward(m, x, post_norm=False, attn_residual=True, ffn_residual=True, first_norm="ln1", second_norm="ln2",
                  normalised_stream=(), attn_norm=True, ffn_norm=True, ffn_reads_block_input=False,
                  ffn_first=False, ffn_residual_from_block_input=False, norm_parameters=True,
                  norm_after_sublayer=False):
    if post_norm:
        x = m.ln1(x + m.attn(x))
        return m.ln2(x + m.ffn(x))
    block_input = x
    sublayers = [(getattr(m, first_norm), m.attn, attn_norm, attn_residual),
                 (getattr(m, second_norm), m.ffn, ffn_norm, ffn_residual)]
    for norm, layer, normed, residual in reversed(sublayers) if ffn_first else sublayers:
        if not norm_parameters:
            norm = layer_norm_without_parameters
        if norm_after_sublayer:
            x = x + norm(layer(x))
            continue
        source = block_input if ffn_reads_block_input and layer is m.ffn else x
        h = norm(source) if normed else source
        if not residual:
            x = layer(h)
        elif any(layer is getattr(m, name) for name in normalised_stream):
            x = h + layer(h)  # the residual added to the normalised copy replaces the stream by it
        else:
            x = (block_input if ffn_residual_from_block_input and layer is m.ffn else x) + layer(h)
    return x


def attention_variant(bias=("q_proj", "k_proj", "v_proj", "out_proj"), **knobs):
    def make(reference):
        class Wrong(reference.MultiHeadAttention):
            def __init__(self, d_model, n_heads):
                super().__init__(d_model, n_heads)
                for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
                    if name not in bias:
                        setattr(self, name, nn.Linear(d_model, d_model, bias=False))

            def forward(self, x):
                return attention_forward(self, x, **knobs)

        return Wrong

    return make


def ffn_variant(activation=None, default_d_ff=None, ignores_d_ff=False, bias=True, after_fc2=False, residual=False,
                only_after_fc2=False):
    def make(reference):
        class Wrong(reference.FeedForward):
            def __init__(self, d_model, d_ff=None):
                if d_ff is None and default_d_ff is not None:
                    d_ff = default_d_ff(d_model)
                if ignores_d_ff:
                    d_ff = 4 * d_model
                super().__init__(d_model, d_ff)
                if not bias:
                    self.fc1 = nn.Linear(self.fc1.in_features, self.fc1.out_features, bias=False)
                    self.fc2 = nn.Linear(self.fc2.in_features, self.fc2.out_features, bias=False)

            def forward(self, x):
                act = F.gelu if activation is None else activation
                out = act(self.fc2(self.fc1(x))) if only_after_fc2 else self.fc2(act(self.fc1(x)))
                out = act(out) if after_fc2 else out
                return x + out if residual else out

        return Wrong

    return make


def block_variant(passes_d_ff=True, **knobs):
    def make(reference):
        class Wrong(reference.TransformerBlock):
            def __init__(self, d_model, n_heads, d_ff=None):
                super().__init__(d_model, n_heads, d_ff if passes_d_ff else None)

            def forward(self, x):
                return block_forward(self, x, **knobs)

        return Wrong

    return make


def layer_norm_with(eps_outside=False, unbiased=False, affine=True, dims=(-1,), default_eps=1e-5,
                    bias_first=False, centred=True, swapped_affine=False):
    def variant(reference, x, weight, bias, eps=default_eps):
        eps = 0.0 if default_eps is None else eps  # None: no eps at all
        if dims is None:  # statistics of the whole tensor
            mean, var = x.mean(), x.var(unbiased=unbiased)
        else:
            mean = x.mean(dim=dims, keepdim=True)
            var = x.var(dim=dims, keepdim=True, unbiased=unbiased)
        top = x - mean if centred else x
        normed = top / (var.sqrt() + eps) if eps_outside else top / torch.sqrt(var + eps)
        if swapped_affine:
            weight, bias = bias, weight
        if not affine:
            return normed
        return (normed + bias) * weight if bias_first else normed * weight + bias

    return variant


def rms_norm_with(centred=False, eps_outside=False, root=True, scaled=True, default_eps=1e-6, reduce="mean",
                  statistic="mean_square"):
    def variant(reference, x, weight, eps=default_eps):
        eps = 0.0 if default_eps is None else eps  # None: no eps at all
        if centred:
            x = x - x.mean(dim=-1, keepdim=True)
        mean_square = {
            "mean_square": lambda: getattr(x * x, reduce)(dim=-1, keepdim=True),
            "square_of_mean": lambda: x.mean(dim=-1, keepdim=True) ** 2,
            "variance": lambda: x.var(dim=-1, keepdim=True, unbiased=False),
            "whole_tensor": lambda: (x * x).mean(),
        }[statistic]()
        if not root:
            denominator = mean_square + eps
        else:
            denominator = mean_square.sqrt() + eps if eps_outside else torch.sqrt(mean_square + eps)
        return x / denominator * weight if scaled else x / denominator

    return variant


def tanh_gelu(x):
    """GELU's tanh approximation (F.gelu(x, approximate="tanh"))."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def gelu_with(phi):
    """x * phi(x): GELU with a wrong stand-in for the normal CDF."""
    return lambda reference, x: x * phi(x)


MISCONCEPTIONS = (
    Misconception(
        "ln_eps_outside_sqrt", "a layer norm with eps added outside the square root",
        "The contract divides by sqrt(var + eps): with eps outside, rows whose variance is tiny "
        "come out very different.",
        {"layer_norm": layer_norm_with(eps_outside=True)},
    ),
    Misconception(
        "ln_unbiased_variance", "a layer norm with the unbiased variance (dividing by d - 1)",
        "Layer norm uses the biased variance, the plain mean of squared deviations: x.var(dim=-1, "
        "unbiased=False), or ((x - mean) ** 2).mean(-1).",
        {"layer_norm": layer_norm_with(unbiased=True)},
    ),
    Misconception(
        "ln_divides_by_torch_std", "a layer norm that divides by x.std(-1) + eps",
        "torch.std divides by d - 1 unless told otherwise, and eps then sits outside the root: compute the "
        "biased variance yourself and divide by torch.sqrt(var + eps).",
        {"layer_norm": layer_norm_with(unbiased=True, eps_outside=True)},
    ),
    Misconception(
        "ln_no_eps", "a layer norm without eps (dividing by the standard deviation alone)",
        "Add eps to the variance inside the square root, sqrt(var + eps): it keeps rows with (almost) no "
        "spread finite, and the caller's eps must change the result.",
        {"layer_norm": layer_norm_with(default_eps=None)},
    ),
    Misconception(
        "ln_ignores_affine", "a layer norm that never applies `weight` and `bias`",
        "After normalising, scale by `weight` and shift by `bias`: they are what training learns.",
        {"layer_norm": layer_norm_with(affine=False)},
    ),
    Misconception(
        "ln_weight_and_bias_swapped", "a layer norm that multiplies by `bias` and adds `weight`",
        "weight (gamma) scales and bias (beta) shifts: x_hat * weight + bias.",
        {"layer_norm": layer_norm_with(swapped_affine=True)},
    ),
    Misconception(
        "ln_not_centred", "a layer norm that divides by the standard deviation without subtracting the mean",
        "Centre first: (x - mean) / sqrt(var + eps). Without the subtraction it is neither LayerNorm nor RMSNorm.",
        {"layer_norm": layer_norm_with(centred=False)},
    ),
    Misconception(
        "ln_bias_before_weight", "a layer norm that adds `bias` before multiplying by `weight`",
        "Scale first, then shift: x_hat * weight + bias. (x_hat + bias) * weight scales the shift too.",
        {"layer_norm": layer_norm_with(bias_first=True)},
    ),
    Misconception(
        "ln_wrong_axis", "a layer norm whose statistics are taken over the wrong axes",
        "Each position is normalised on its own: mean and variance over the last dimension only "
        "(dim=-1, keepdim=True).",
        {"layer_norm": layer_norm_with(dims=(0,))},
    ),
    Misconception(
        "ln_statistics_over_dim_1", "a layer norm whose statistics are taken over dim=1",
        "dim=1 is the last dimension only for 2-D inputs: use dim=-1, which is the last whatever the number "
        "of leading dimensions.",
        {"layer_norm": layer_norm_with(dims=(1,))},
    ),
    Misconception(
        "ln_whole_tensor_statistics", "a layer norm with one mean and one variance for the whole tensor",
        "x.mean() with no dim averages over every number in the tensor: each vector needs its own mean "
        "and variance, x.mean(dim=-1, keepdim=True).",
        {"layer_norm": layer_norm_with(dims=None)},
    ),
    Misconception(
        "ln_wrong_default_eps", "a layer norm whose default eps is 1e-6 instead of 1e-5",
        "The contract's signature is layer_norm(x, weight, bias, eps=1e-5) (1e-6 is rms_norm's default).",
        {"layer_norm": layer_norm_with(default_eps=1e-6)},
    ),
    Misconception(
        "rms_subtracts_mean", "an RMS norm that subtracts the mean first",
        "RMS norm does not centre: it divides x itself by sqrt(mean(x**2) + eps).",
        {"rms_norm": rms_norm_with(centred=True)},
    ),
    Misconception(
        "rms_eps_outside_sqrt", "an RMS norm with eps added outside the square root",
        "Divide by sqrt(mean(x**2) + eps): eps belongs inside the root.",
        {"rms_norm": rms_norm_with(eps_outside=True)},
    ),
    Misconception(
        "rms_no_root", "an RMS norm that divides by the mean square instead of its square root",
        "The root mean square is sqrt(mean(x**2)): without the root the output's scale depends on the input's.",
        {"rms_norm": rms_norm_with(root=False)},
    ),
    Misconception(
        "rms_ignores_weight", "an RMS norm that never multiplies by `weight`",
        "After dividing by the root mean square, multiply by `weight`: it is what training learns.",
        {"rms_norm": rms_norm_with(scaled=False)},
    ),
    Misconception(
        "rms_sum_not_mean", "an RMS norm that divides by the square root of the sum of squares (the vector's length)",
        "The root *mean* square divides the sum of x**2 by d: (x * x).mean(dim=-1, keepdim=True).",
        {"rms_norm": rms_norm_with(reduce="sum")},
    ),
    Misconception(
        "rms_divides_by_norm", "an RMS norm that divides by the vector's length, x.norm(dim=-1) + eps",
        "x.norm() is sqrt(sum(x**2)), not the root *mean* square, and eps then sits outside the root: "
        "divide by torch.sqrt((x * x).mean(dim=-1, keepdim=True) + eps).",
        {"rms_norm": rms_norm_with(reduce="sum", eps_outside=True)},
    ),
    Misconception(
        "rms_square_of_mean", "an RMS norm that squares the mean instead of taking the mean of the squares",
        "mean(x**2) is not mean(x)**2: square every element first, then average, (x * x).mean(dim=-1, "
        "keepdim=True).",
        {"rms_norm": rms_norm_with(statistic="square_of_mean")},
    ),
    Misconception(
        "rms_divides_by_std", "an RMS norm that divides x by its standard deviation",
        "The standard deviation is taken around the mean; RMS norm does not centre: divide by "
        "sqrt(mean(x**2) + eps).",
        {"rms_norm": rms_norm_with(statistic="variance")},
    ),
    Misconception(
        "rms_whole_tensor", "an RMS norm with one mean square for the whole tensor",
        "(x * x).mean() with no dim averages over every number in the tensor: each vector needs its own, "
        "(x * x).mean(dim=-1, keepdim=True).",
        {"rms_norm": rms_norm_with(statistic="whole_tensor")},
    ),
    Misconception(
        "rms_no_eps", "an RMS norm without eps",
        "Divide by sqrt(mean(x**2) + eps): eps keeps an all-zero vector finite, and the caller's eps must "
        "change the result.",
        {"rms_norm": rms_norm_with(default_eps=None)},
    ),
    Misconception(
        "rms_wrong_default_eps", "an RMS norm whose default eps is 1e-5 instead of 1e-6",
        "The contract's signature is rms_norm(x, weight, eps=1e-6) (1e-5 is layer_norm's default).",
        {"rms_norm": rms_norm_with(default_eps=1e-5)},
    ),
    Misconception(
        "gelu_tanh_approximation", "the tanh approximation of GELU",
        "The contract asks for the exact GELU, 0.5 x (1 + erf(x / sqrt 2)); the tanh formula is an "
        "approximation that is off by up to about 1e-3.",
        {"gelu": lambda reference, x: tanh_gelu(x),
         "FeedForward": ffn_variant(activation=tanh_gelu)},
    ),
    Misconception(
        "gelu_sigmoid_approximation", "the sigmoid approximation of GELU, x * sigmoid(1.702 x)",
        "Use the exact form with the error function: torch.erf(x / math.sqrt(2)).",
        {"gelu": lambda reference, x: x * torch.sigmoid(1.702 * x)},
    ),
    Misconception(
        "gelu_erf_unscaled", "GELU with erf(x) instead of erf(x / sqrt 2)",
        "GELU weighs x by the standard normal CDF, Phi(x) = (1 + erf(x / sqrt 2)) / 2: the sqrt 2 matters.",
        {"gelu": gelu_with(lambda x: 0.5 * (1.0 + torch.erf(x)))},
    ),
    Misconception(
        "gelu_erf_over_two", "GELU with erf(x / 2) instead of erf(x / sqrt 2)",
        "Divide by the square root of 2, not by 2: Phi(x) = (1 + erf(x / math.sqrt(2))) / 2.",
        {"gelu": gelu_with(lambda x: 0.5 * (1.0 + torch.erf(x / 2.0)))},
    ),
    Misconception(
        "gelu_erf_times_sqrt2", "GELU with erf(x * sqrt 2) instead of erf(x / sqrt 2)",
        "The argument of erf is x divided by sqrt 2, not multiplied by it.",
        {"gelu": gelu_with(lambda x: 0.5 * (1.0 + torch.erf(x * math.sqrt(2.0))))},
    ),
    Misconception(
        "gelu_sqrt2_outside_erf", "GELU with erf(x) / sqrt 2 instead of erf(x / sqrt 2)",
        "The division by sqrt 2 belongs inside the error function: torch.erf(x / math.sqrt(2)).",
        {"gelu": gelu_with(lambda x: 0.5 * (1.0 + torch.erf(x) / math.sqrt(2.0)))},
    ),
    Misconception(
        "gelu_tanh_instead_of_erf", "GELU with tanh(x / sqrt 2) where erf(x / sqrt 2) belongs",
        "The exact GELU uses the error function, torch.erf(x / math.sqrt(2)); tanh appears only in the "
        "approximation, with a different argument.",
        {"gelu": gelu_with(lambda x: 0.5 * (1.0 + torch.tanh(x / math.sqrt(2.0))))},
    ),
    Misconception(
        "gelu_x_times_erf", "GELU as x * erf(x / sqrt 2), without the 1 + and the 1/2",
        "The weight on x is the normal CDF, Phi(x) = (1 + erf(x / sqrt 2)) / 2, which runs from 0 to 1; "
        "erf alone runs from -1 to 1.",
        {"gelu": gelu_with(lambda x: torch.erf(x / math.sqrt(2.0)))},
    ),
    Misconception(
        "gelu_missing_half", "GELU without the factor 1/2, x (1 + erf(x / sqrt 2))",
        "Phi(x) = (1 + erf(x / sqrt 2)) / 2 runs from 0 to 1: keep the 0.5, or GELU doubles every positive input.",
        {"gelu": gelu_with(lambda x: 1.0 + torch.erf(x / math.sqrt(2.0)))},
    ),
    Misconception(
        "gelu_cdf_only", "GELU that returns Phi(x), the normal CDF, without multiplying by x",
        "GELU(x) = x * Phi(x): Phi(x) = (1 + erf(x / sqrt 2)) / 2 is only the weight x is multiplied by.",
        {"gelu": lambda reference, x: 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0)))},
    ),
    Misconception(
        "gelu_is_silu", "x * sigmoid(x) (SiLU, also called swish) instead of GELU",
        "SiLU is a different activation: GELU is x * Phi(x) with Phi(x) = (1 + erf(x / sqrt 2)) / 2.",
        {"gelu": gelu_with(torch.sigmoid)},
    ),
    Misconception(
        "relu_instead_of_gelu", "ReLU where GELU belongs",
        "GELU is smooth and lets small negative values through: 0.5 x (1 + erf(x / sqrt 2)).",
        {"gelu": lambda reference, x: torch.relu(x),
         "FeedForward": ffn_variant(activation=torch.relu)},
    ),
    Misconception(
        "attention_not_causal", "attention without the causal mask",
        "Position t may only read positions up to t: set the scores above the diagonal to -inf before "
        "the softmax (a lower-triangular boolean mask built for the input's T).",
        {"MultiHeadAttention": attention_variant(causal=False)},
    ),
    Misconception(
        "attention_mask_upper", "a causal mask that is upper-triangular (reading the future, not the past)",
        "Row t is query t: it may read keys at or before t, on and below the diagonal (torch.tril).",
        {"MultiHeadAttention": attention_variant(mask="upper")},
    ),
    Misconception(
        "attention_mask_one_ahead", "a causal mask that lets each position see the next one (tril with diagonal=1)",
        "torch.tril(ones, diagonal=1) keeps one diagonal above the main one: use the default diagonal=0, so "
        "query t reads keys 0..t only.",
        {"MultiHeadAttention": attention_variant(mask="one_ahead")},
    ),
    Misconception(
        "attention_mask_inverted", "a mask used the wrong way round: the allowed positions are the ones hidden",
        "masked_fill(mask, -inf) fills where the mask is True: pass ~allowed (True above the diagonal), not "
        "the lower-triangular mask itself.",
        {"MultiHeadAttention": attention_variant(mask="inverted")},
    ),
    Misconception(
        "attention_mask_hides_diagonal", "a causal mask that hides each position from itself as well "
        "(torch.triu(ones) without diagonal=1)",
        "Query t may read key t: hide only the strict future, torch.triu(ones, diagonal=1), or use "
        "~torch.tril(ones). Hiding the diagonal leaves position 0 nothing to attend to.",
        {"MultiHeadAttention": attention_variant(mask="strict_past")},
    ),
    Misconception(
        "attention_mask_inverted_large_negative", "a mask used the wrong way round (the allowed positions "
        "hidden), filled with a large negative number",
        "masked_fill(mask, value) fills where the mask is True: pass ~allowed (True above the diagonal), not "
        "the lower-triangular mask itself.",
        {"MultiHeadAttention": attention_variant(mask="inverted", fill=-1e9)},
    ),
    Misconception(
        "attention_mask_added", "the 0/1 causal mask added to the scores",
        "Adding True/False as 1/0 barely changes the scores: the future must get -inf, with "
        "scores.masked_fill(~allowed, float('-inf')).",
        {"MultiHeadAttention": attention_variant(mask_added=True)},
    ),
    Misconception(
        "attention_mask_with_zero", "masked scores set to 0 instead of -inf",
        "A score of 0 still gets weight exp(0) in the softmax: the future must get -inf (weight exactly 0).",
        {"MultiHeadAttention": attention_variant(fill=0.0)},
    ),
    Misconception(
        "attention_mask_after_softmax", "the mask applied after the softmax (zeroing weights that were normalised "
        "with the future in them)",
        "Mask the scores with -inf before the softmax: zeroing weights afterwards leaves rows that no longer "
        "sum to one.",
        {"MultiHeadAttention": attention_variant(mask_after_softmax=True)},
    ),
    Misconception(
        "attention_softmax_wrong_axis", "the softmax taken over the queries (dim=-2) instead of the keys",
        "Each query's weights over the keys must sum to one: torch.softmax(scores, dim=-1) on (B, H, T_q, T_k).",
        {"MultiHeadAttention": attention_variant(softmax_dim=-2)},
    ),
    Misconception(
        "attention_softmax_over_heads", "the softmax taken over the heads axis (dim=1)",
        "The scores are (B, H, T_q, T_k): each query's weights are over the keys, the last axis, dim=-1.",
        {"MultiHeadAttention": attention_variant(softmax_dim=1)},
    ),
    Misconception(
        "attention_scale_d_model", "scores scaled by sqrt(d_model) instead of sqrt(d_head)",
        "Each head's dot products are over d_head = d_model // n_heads numbers: divide by sqrt(d_head).",
        {"MultiHeadAttention": attention_variant(scale="d_model")},
    ),
    Misconception(
        "attention_no_scaling", "scores that are not scaled at all",
        "Divide q @ k^T by sqrt(d_head) before the softmax, or the softmax saturates as d_head grows.",
        {"MultiHeadAttention": attention_variant(scale="none")},
    ),
    Misconception(
        "attention_scale_multiplied", "scores multiplied by sqrt(d_head) instead of divided by it",
        "Divide: q @ k^T / sqrt(d_head). Multiplying makes the softmax sharper instead of tempering it.",
        {"MultiHeadAttention": attention_variant(scale="times_d_head")},
    ),
    Misconception(
        "attention_scaled_after_softmax", "the weights divided by sqrt(d_head) after the softmax",
        "Scale the scores, q @ k^T / sqrt(d_head), before the softmax: dividing the weights afterwards "
        "only shrinks the output.",
        {"MultiHeadAttention": attention_variant(scale_after_softmax=True)},
    ),
    Misconception(
        "attention_q_k_swapped", "queries and keys swapped (q from k_proj, k from q_proj)",
        "q = q_proj(x) and k = k_proj(x): swapping them transposes every score matrix, so each query "
        "is scored with the other projection.",
        {"MultiHeadAttention": attention_variant(swap_qk=True)},
    ),
    Misconception(
        "attention_one_head", "attention over the whole d_model as one head, n_heads ignored",
        "Split q, k and v into n_heads heads of d_head = d_model // n_heads columns each, attend in every "
        "head separately (scaled by sqrt(d_head)), then merge them.",
        {"MultiHeadAttention": attention_variant(one_head=True)},
    ),
    Misconception(
        "heads_split_without_transpose", "heads split with a reshape to (B, H, T, d_head) and no transpose",
        "Reshape to (B, T, H, d_head) first, then swap T and H: a direct reshape mixes positions and heads.",
        {"MultiHeadAttention": attention_variant(split="no_transpose")},
    ),
    Misconception(
        "heads_merged_without_transpose", "heads merged with a reshape to (B, T, d_model) straight from "
        "(B, H, T, d_head)",
        "Swap H and T back first: y.transpose(1, 2).reshape(B, T, d_model). Without the transpose, "
        "positions and heads are mixed up.",
        {"MultiHeadAttention": attention_variant(merge="no_transpose")},
    ),
    Misconception(
        "heads_reshaped_without_transpose", "heads split and merged with plain reshapes, never transposing",
        "Split with .view(B, T, H, d_head).transpose(1, 2) and merge with .transpose(1, 2).reshape(B, T, "
        "d_model): a reshape alone does not move positions and heads apart.",
        {"MultiHeadAttention": attention_variant(split="no_transpose", merge="no_transpose")},
    ),
    Misconception(
        "heads_merged_with_view", "heads merged with .view right after the transpose",
        "After .transpose(1, 2) the tensor is no longer contiguous, so .view(B, T, d_model) raises (except "
        "when T = 1): use .reshape, or .contiguous().view.",
        {"MultiHeadAttention": attention_variant(merge="view")},
    ),
    Misconception(
        "attention_adds_residual", "multi-head attention that adds its input to its output",
        "The residual connection belongs to the block (x = x + attn(ln1(x))): attention itself returns "
        "out_proj of the merged heads only.",
        {"MultiHeadAttention": attention_variant(residual=True)},
    ),
    Misconception(
        "attention_no_out_proj", "multi-head attention that never applies `out_proj`",
        "After merging the heads, mix them with out_proj: it is part of the layer (and of its parameters).",
        {"MultiHeadAttention": attention_variant(project_out=False)},
    ),
    Misconception(
        "attention_projections_without_bias", "projections built with bias=False",
        "The contract's q_proj, k_proj, v_proj and out_proj are nn.Linear(d_model, d_model) with their "
        "bias (the default), as in GPT-2.",
        {"MultiHeadAttention": attention_variant(bias=())},
    ),
    Misconception(
        "attention_out_proj_without_bias", "an out_proj built with bias=False",
        "out_proj is nn.Linear(d_model, d_model) with its bias, like the other three projections.",
        {"MultiHeadAttention": attention_variant(bias=("q_proj", "k_proj", "v_proj"))},
    ),
    Misconception(
        "ffn_default_width", "a feed-forward layer whose default width is d_model instead of 4 * d_model",
        "When d_ff is None the hidden layer is 4 * d_model wide.",
        {"FeedForward": ffn_variant(default_d_ff=lambda d_model: d_model)},
    ),
    Misconception(
        "ffn_ignores_d_ff", "a feed-forward layer that is always 4 * d_model wide, even when d_ff is given",
        "4 * d_model is only the default: when d_ff is given, the hidden layer is d_ff wide.",
        {"FeedForward": ffn_variant(ignores_d_ff=True)},
    ),
    Misconception(
        "ffn_without_bias", "a feed-forward layer built with bias=False",
        "fc1 and fc2 are nn.Linear layers with their bias (the default).",
        {"FeedForward": ffn_variant(bias=False)},
    ),
    Misconception(
        "ffn_gelu_after_fc2", "a feed-forward layer that applies GELU after fc2 as well",
        "GELU sits between the two layers only: fc2(gelu(fc1(x))). The output goes back into the residual "
        "stream as it is.",
        {"FeedForward": ffn_variant(after_fc2=True)},
    ),
    Misconception(
        "ffn_adds_residual", "a feed-forward layer that adds its input to its output",
        "The residual connection belongs to the block (x = x + ffn(ln2(x))): FeedForward returns "
        "fc2(gelu(fc1(x))) only.",
        {"FeedForward": ffn_variant(residual=True)},
    ),
    Misconception(
        "ffn_gelu_after_fc2_only", "a feed-forward layer that applies GELU after fc2 instead of between the layers",
        "GELU goes between the two layers: fc2(gelu(fc1(x))). After fc2 it leaves fc2(fc1(x)), one linear map.",
        {"FeedForward": ffn_variant(only_after_fc2=True)},
    ),
    Misconception(
        "ffn_no_activation", "a feed-forward layer with no GELU between fc1 and fc2",
        "Without the nonlinearity, fc2(fc1(x)) is one linear map: put gelu between them.",
        {"FeedForward": ffn_variant(activation=lambda h: h)},
    ),
    Misconception(
        "block_post_norm", "a post-norm block (normalising after each residual addition)",
        "The contract's block is pre-norm: x = x + attn(ln1(x)), then x = x + ffn(ln2(x)); the stream itself "
        "is never normalised.",
        {"TransformerBlock": block_variant(post_norm=True)},
    ),
    Misconception(
        "block_normalises_stream", "a block that replaces the residual stream by its normalised copy "
        "(x = ln1(x), then x = x + attn(x); or h = ln1(x), then x = h + attn(h))",
        "Normalise only what the sublayer reads and add its answer to the stream as it was: "
        "x = x + attn(ln1(x)), then x = x + ffn(ln2(x)).",
        {"TransformerBlock": block_variant(normalised_stream=("attn", "ffn"))},
    ),
    Misconception(
        "block_attention_residual_from_normalised", "a block whose attention residual is added to the normalised "
        "copy (h = ln1(x); x = h + attn(h))",
        "Add attention's answer to the stream as it was, not to its normalised copy: x = x + attn(ln1(x)).",
        {"TransformerBlock": block_variant(normalised_stream=("attn",))},
    ),
    Misconception(
        "block_ffn_residual_from_normalised", "a block whose feed-forward residual is added to the normalised "
        "copy (h = ln2(x); x = h + ffn(h))",
        "Add the feed-forward answer to the stream as it was, not to its normalised copy: x = x + ffn(ln2(x)).",
        {"TransformerBlock": block_variant(normalised_stream=("ffn",))},
    ),
    Misconception(
        "block_ffn_residual_skips_attention", "a block that adds the feed-forward output to the block's input, "
        "dropping attention's update",
        "Keep the stream attention wrote to: h = x + attn(ln1(x)), then return h + ffn(ln2(h)), not x + ffn(...).",
        {"TransformerBlock": block_variant(ffn_residual_from_block_input=True)},
    ),
    Misconception(
        "block_norm_after_sublayer", "a block that normalises each sublayer's output instead of its input "
        "(x = x + ln1(attn(x)))",
        "Pre-norm normalises what the sublayer reads: x = x + attn(ln1(x)), then x = x + ffn(ln2(x)).",
        {"TransformerBlock": block_variant(norm_after_sublayer=True)},
    ),
    Misconception(
        "block_norms_without_parameters", "a block that normalises without ln1's and ln2's weight and bias",
        "Call the block's own LayerNorms, self.ln1(x) and self.ln2(x): their weight and bias are learned "
        "(and loaded by the grader); F.layer_norm(x, shape) alone leaves them out.",
        {"TransformerBlock": block_variant(norm_parameters=False)},
    ),
    Misconception(
        "block_attention_without_norm", "a block whose attention reads the stream without ln1",
        "Attention reads the normalised copy: x = x + attn(ln1(x)).",
        {"TransformerBlock": block_variant(attn_norm=False)},
    ),
    Misconception(
        "block_ffn_without_norm", "a block whose feed-forward layer reads the stream without ln2",
        "The feed-forward layer reads a normalised copy too: x = x + ffn(ln2(x)).",
        {"TransformerBlock": block_variant(ffn_norm=False)},
    ),
    Misconception(
        "block_ffn_reads_block_input", "a block whose feed-forward layer reads the block's input, not the stream "
        "after attention",
        "The sublayers run one after the other: the FFN reads ln2 of the stream attention has just added to, "
        "x = x + ffn(ln2(x)) with the updated x.",
        {"TransformerBlock": block_variant(ffn_reads_block_input=True)},
    ),
    Misconception(
        "block_drops_attention_update", "a block whose output leaves attention's update out (x + ffn(ln2(x)) "
        "on the block's input)",
        "Keep attention's result: h = x + attn(ln1(x)), then return h + ffn(ln2(h)).",
        {"TransformerBlock": block_variant(ffn_reads_block_input=True, ffn_residual_from_block_input=True)},
    ),
    Misconception(
        "block_ffn_before_attention", "a block that runs the feed-forward layer before attention",
        "Attention comes first (tokens exchange information), then the feed-forward layer: x = x + "
        "attn(ln1(x)), then x = x + ffn(ln2(x)).",
        {"TransformerBlock": block_variant(ffn_first=True)},
    ),
    Misconception(
        "block_attention_residual_missing", "a block that drops the residual connection around attention",
        "Add the attention's output to its input: x = x + attn(ln1(x)), not x = attn(ln1(x)).",
        {"TransformerBlock": block_variant(attn_residual=False)},
    ),
    Misconception(
        "block_ffn_residual_missing", "a block that drops the residual connection around the feed-forward layer",
        "Add the feed-forward output to its input: x = x + ffn(ln2(x)).",
        {"TransformerBlock": block_variant(ffn_residual=False)},
    ),
    Misconception(
        "block_one_norm_twice", "a block that uses ln1 before the feed-forward layer too",
        "Each sub-layer has its own LayerNorm: ln1 before attention, ln2 before the feed-forward layer.",
        {"TransformerBlock": block_variant(second_norm="ln1")},
    ),
    Misconception(
        "block_norms_swapped", "a block that uses ln2 before attention and ln1 before the feed-forward layer",
        "ln1 belongs to attention and ln2 to the feed-forward layer: x = x + attn(ln1(x)), then "
        "x = x + ffn(ln2(x)).",
        {"TransformerBlock": block_variant(first_norm="ln2", second_norm="ln1")},
    ),
    Misconception(
        "block_ignores_d_ff", "a block that does not pass d_ff on to its FeedForward",
        "Build the feed-forward layer with FeedForward(d_model, d_ff): it falls back to 4 * d_model only "
        "when d_ff is None.",
        {"TransformerBlock": block_variant(passes_d_ff=False)},
    ),
)


# ---------------------------------------------------------------- locating the step that is wrong
# Where no catalogued mistake explains a failed norm, its locator feeds rows whose statistics are
# known (mean 0 and variance 1; mean 2; a variance of 1e-6 beside eps = 1e-6; a weight and a bias
# of their own) and says which step first departs: the centring, the variance, eps, the affine.


def _out(value) -> np.ndarray | None:
    if isinstance(value, torch.Tensor):
        return value.detach().double().numpy()
    return None


def _row(a) -> str:
    return np.array2string(np.asarray(a, dtype=float), precision=4, suppress_small=False, separator=", ")


def _t(rows) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float64)


def _locate_norm(call, *, name: str, rms: bool) -> str | None:
    """The steps of layer_norm (centre, variance, eps, weight and bias) or rms_norm (mean square,
    eps, weight), each shown alone by a row built for it."""
    ones, zeros = _t([1.0] * 4), _t([0.0] * 4)
    affine = (ones,) if rms else (ones, zeros)
    shift = 0.0  # what `affine` adds to the output: 1 once a swapped weight and bias are found (see step 2)

    def run(x, *params, **kwargs):
        got = _out(call(_t(x), *(params or affine), **kwargs))
        return got - shift if got is not None and not params else got

    def close(got, want):
        return got is not None and got.shape == np.shape(want) and np.allclose(got, want, rtol=1e-6, atol=1e-9)

    # 0. the precision: random float64 rows, right only to float32's rounding (a .float() inside),
    # said first, since every later row would then differ by rounding and blame its own step
    generator = torch.Generator().manual_seed(3)
    xr = torch.randn(3, 8, generator=generator, dtype=torch.float64) * 2 + 0.5
    w, b = (torch.randn(8, generator=generator, dtype=torch.float64) for _ in range(2))
    # eps 1e-12: where eps goes (inside the root or not) changes nothing at this precision; and on rows
    # 1000 times as large too, where an eps other than the one given (a hard-coded 1e-5) fades away and
    # float32's round-off stays
    errors = []
    for scale in (1.0, 1000.0):
        xs = xr * scale
        centred = xs if rms else xs - xs.mean(-1, keepdim=True)
        want0 = (centred / torch.sqrt(centred.pow(2).mean(-1, keepdim=True) + 1e-12) * w + (0 if rms else b)).numpy()
        got0 = _out(call(xs.clone(), *((w,) if rms else (w, b)), eps=1e-12))
        if got0 is None or got0.shape != want0.shape:
            break
        errors.append(float(np.abs(got0 - want0).max() / np.abs(want0).max()))
    if len(errors) == 2:
        error = min(errors)
        if 1e-10 < error < 1e-4:
            return (f"the precision. On x (3, 8) in float64, your output is right only to about {error:.1g} of its "
                    "size, float32's rounding: something inside computes in float32 (a .float(), or a tensor made "
                    "without dtype=x.dtype); keep every step in x's dtype")
    # 1. the statistics' axis: each row of a (2, 2, 4) input must come out as it does alone (the
    # student's own answer for that row, whatever it is), so only the axis shows here
    x3 = [[[1.0, 3.0, 1.0, 3.0], [10.0, 30.0, 10.0, 30.0]], [[0.0, 4.0, 0.0, 4.0], [5.0, 6.0, 5.0, 6.0]]]
    together = run(x3, eps=1e-5)
    alone = [run([row], eps=1e-5) for rows in x3 for row in rows]
    if together is not None and together.shape == (2, 2, 4) and all(a is not None and a.shape == (1, 4) for a in alone):
        if not np.allclose(np.nan_to_num(together.reshape(4, 4)), np.nan_to_num(np.concatenate(alone)), atol=1e-9):
            return ("the statistics' axis. Each row of x is normalised on its own, over the last axis: yours gives "
                    "the rows of x (2, 2, 4) other values together than each of them alone (are the mean and "
                    f"{'the mean square' if rms else 'variance'} taken over dim=-1, with keepdim=True?)")
    # 2. statistics: rms_norm of [1, 3, 1, 3] divides by sqrt(mean(x^2)) = sqrt(5); layer_norm
    # of the same row centres it (mean 2) and divides by its standard deviation, 1.
    x = [[1.0, 3.0, 1.0, 3.0]]
    want = np.array(x) / np.sqrt(5.0) if rms else np.array([[-1.0, 1.0, -1.0, 1.0]])
    got = run(x, eps=0.0)
    if got is None or got.shape != want.shape:
        return f"the output. `{name}` of x (1, 4) should have x's shape; yours returned {describe(got)}"
    if not rms and not close(got, want) and close(got, np.ones((1, 4))):
        # 1 everywhere with weight 1 and bias 0: swapped. With weight and bias both 1 a swap gives what the
        # right order does, so the steps below (eps, the default eps) are tried that way: a second mistake
        # behind the swap is told as well, and the swap by the weight-and-bias step.
        if close(_out(call(_t(x), ones, ones, eps=0.0)), want + 1.0):
            affine, shift, got = (ones, ones), 1.0, want
        else:
            return ("the weight and bias. With weight 1 and bias 0 your output is 1 everywhere: the two are swapped "
                    "(normalised * weight + bias)")
    if not close(got, want):
        if not rms and close(got, np.array(x)):
            return ("the centring. On x = [1, 3, 1, 3] (mean 2, variance 1) your layer_norm returns x / 1: it divides "
                    "by the standard deviation but never subtracts the mean")
        if rms and close(got, np.array([[-1.0, 1.0, -1.0, 1.0]])):
            return ("the centring. On x = [1, 3, 1, 3] your rms_norm subtracts the mean (2) and divides by the "
                    "standard deviation: RMS norm divides x itself by sqrt(mean(x ** 2) + eps), with no mean taken out")
        if not rms and close(got, np.array(x) / np.sqrt(5.0)):
            return ("the centring. On x = [1, 3, 1, 3] (mean 2) your layer_norm gives x / sqrt(mean(x ** 2)): "
                    "subtract the mean over the last axis first")
        if np.all(np.isfinite(got)) and np.all(got != 0):
            ratio = float(want[0, 0] / got[0, 0])
            if np.allclose(want / got, ratio):  # the right direction, a wrong size: the denominator
                square = ratio ** 2  # what the denominator was, over the right one, squared
                if rms and abs(square - 5.0) < 1e-6:
                    return ("the square root. On x = [1, 3, 1, 3] (mean square 5) yours divides by 5, not by "
                            "sqrt(5 + eps): take the square root of the mean square")
                for factor, why in ((4 / 3, "n - 1 (an unbiased variance, torch's .var() or .std() default): use "
                                     "unbiased=False, or mean((x - mean) ** 2)"), (4.0, "the sum, not the mean, over "
                                     "the last axis"), (1 / 4, "1 / n too often")):
                    if abs(square - factor) < 1e-6:
                        return (f"the {'mean square' if rms else 'variance'}. On x = {_row(x[0])} your output is "
                                f"{_row(got[0])}, the right one times {1 / ratio:.4g}: the "
                                f"{'mean of x ** 2' if rms else 'variance'} was divided by {why}")
                if abs(1 / ratio - 1) < 1e-3:  # a hair off: an eps where eps = 0 was given
                    used = (1 / ratio) ** -2 * (5.0 if rms else 1.0) - (5.0 if rms else 1.0)
                    return (f"eps. Called with eps=0 on x = {_row(x[0])}, yours divides as if eps were {used:.3g}: "
                            f"use the `eps` you are given ({name}(x, ..., eps=eps)), not a number of your own")
                right = "sqrt(mean(x ** 2) + eps)" if rms else "sqrt(variance + eps), the variance over the last axis"
                return (f"the denominator. On x = {_row(x[0])} your output is {_row(got[0])}, the right one "
                        f"({_row(want[0])}) times {1 / ratio:.4g}: divide by {right}")
        return (f"the normalisation. On x = {_row(x[0])} (eps = 0) it should give {_row(want[0])}; yours gives "
                f"{_row(got[0])}")
    # Steps 3 to 5 are independent of one another: each that departs is told (two mistakes, both).
    small = [[-1e-3, 1e-3, -1e-3, 1e-3]]  # its mean square (and variance) is 1e-6

    # 3. eps: that row with eps = 1e-6
    def eps_step() -> str | None:
        got = run(small, eps=1e-6)
        want3 = np.array(small) / np.sqrt(2e-6)
        if not close(got, want3) and got is not None and got.shape == want3.shape and got[0, 1] != 0:
            denominator = 1e-3 / float(got[0, 1])
            root = "sqrt(mean(x ** 2))" if rms else "sqrt(variance)"
            for value, why in ((1e-3 + 1e-6, f"{root} + eps: eps goes inside the square root"),
                               (1e-3, "without eps"), (1e-6 + 1e-6, "without the square root")):
                if abs(denominator - value) < 1e-9:
                    return (f"eps. For a row of size 1e-3 with eps = 1e-6 the denominator is sqrt(1e-6 + 1e-6) = "
                            f"{np.sqrt(2e-6):.4g}; yours divides by {denominator:.4g}, {why}")
            return (f"eps. For a row of size 1e-3 with eps = 1e-6 the denominator is {np.sqrt(2e-6):.4g}; yours is "
                    f"{denominator:.4g}")
        return None

    # 4. the default eps, on the same row
    def default_eps_step() -> str | None:
        default = 1e-6 if rms else 1e-5
        got = run(small)
        want4 = np.array(small) / np.sqrt(1e-6 + default)
        if not close(got, want4) and got is not None and got.shape == want4.shape and got[0, 1] != 0:
            used = (1e-3 / float(got[0, 1])) ** 2 - 1e-6
            return (f"the default eps. Called without eps on a row of size 1e-3, yours divides as if eps were "
                    f"{used:.3g}; the contract's default is {default:g} "
                    f"({name}(x, {'weight' if rms else 'weight, bias'}, eps={default:g}))")
        return None

    # 5. the weight (and bias), on a row that normalises to itself
    def affine_step() -> str | None:
        unit_row = [[-1.0, 1.0, -1.0, 1.0]]
        weight, bias = _t([1.0, 2.0, 3.0, 4.0]), _t([10.0, 20.0, 30.0, 40.0])
        params = (weight,) if rms else (weight, bias)
        got = run(unit_row, *params, eps=0.0)
        xr, w, b = np.array(unit_row), weight.numpy(), bias.numpy()
        want5 = xr * w if rms else xr * w + b
        if not close(got, want5):
            seen = {"applies neither": xr, "adds the weight and multiplies by the bias": xr * b + w,
                    "adds the bias before multiplying by the weight": (xr + b) * w, "ignores the bias": xr * w,
                    "ignores the weight": xr + b}
            for what, value in seen.items():
                if close(got, value) and not (rms and what != "applies neither"):
                    return (f"the {'weight' if rms else 'weight and bias'}. On a row that normalises to "
                            f"[-1, 1, -1, 1], with weight [1, 2, 3, 4]"
                            f"{'' if rms else ' and bias [10, 20, 30, 40]'}, yours "
                            f"{'ignores the weight' if rms else what}: the output is normalised * weight"
                            f"{'' if rms else ' + bias'}")
            return (f"the {'weight' if rms else 'weight and bias'}. On a row that normalises to [-1, 1, -1, 1] the "
                    f"output should be {_row(want5)}; yours is {_row(got) if got is not None else describe(got)}")
        return None

    eps_found = eps_step()
    found = [m for m in (eps_found, None if eps_found else default_eps_step(), affine_step()) if m]
    return " Also: ".join(found) if found else None


def locate_gelu(call) -> str | None:
    """gelu(x) / x is the normal CDF at x: read it off at a few points, then at +-80."""
    xr = torch.linspace(-4.0, 4.0, 33, dtype=torch.float64)
    got = _out(call(xr.clone()))
    want = (xr * 0.5 * (1 + torch.erf(xr / math.sqrt(2.0)))).numpy()
    if got is not None and got.shape == want.shape:
        error = float(np.abs(got - want).max() / np.abs(want).max())
        if 1e-10 < error < 1e-5:  # the tanh approximation is off by about 1e-4 of the size
            return (f"the precision. On x from -4 to 4 in float64, your output is right only to about {error:.1g} of "
                    "its size, float32's rounding: something inside computes in float32 (a .float(), or a constant "
                    "tensor made without dtype=x.dtype); keep every step in x's dtype")
    x = _t([-2.0, -1.0, -0.5, 0.5, 1.0, 2.0])
    got = _out(call(x.clone()))
    phi = 0.5 * (1 + torch.erf(x / math.sqrt(2.0)))
    if got is None or got.shape != tuple(x.shape):
        return f"the output: gelu of x (6,) has x's shape; yours returned {describe(got)}"
    if not np.allclose(got, (x * phi).numpy(), rtol=1e-6, atol=1e-9):
        weight = got / x.numpy()
        at = {float(v): float(w) for v, w in zip(x.tolist(), weight, strict=True)}
        symmetric = abs(at[1.0] + at[-1.0] - 1) < 1e-6
        return (f"the weighting. gelu(x) = x * Phi(x), so gelu(x) / x is the standard normal CDF: Phi(1) = 0.8413 and "
                f"Phi(-1) = 0.1587; yours gives {at[1.0]:.4g} and {at[-1.0]:.4g}"
                + ("" if symmetric else " (a CDF has Phi(x) + Phi(-x) = 1; yours does not)")
                + ": Phi(x) = (1 + erf(x / sqrt(2))) / 2")
    big = _t([-80.0, 80.0])
    got = _out(call(big.clone()))
    if got is None or not np.all(np.isfinite(got)) or not np.allclose(got, [0.0, 80.0], atol=1e-9):
        return (f"large inputs: gelu(-80) is 0 and gelu(80) is 80; yours gives "
                f"{_row(got) if got is not None else describe(got)} (an exp that overflows?)")
    return None


def locate_layer_norm(call) -> str | None:
    return _locate_norm(call, name="layer_norm", rms=False)


def locate_rms_norm(call) -> str | None:
    return _locate_norm(call, name="rms_norm", rms=True)


# ---------------------------------------------------------------- what the graded parts use

NORM_FORBID = ("torch.nn.functional.layer_norm", "torch.nn.LayerNorm", "torch.layer_norm")
RMS_FORBID = ("torch.nn.functional.rms_norm", "torch.nn.RMSNorm", "torch.rms_norm")
GELU_FORBID = ("torch.nn.functional.gelu", "torch.nn.GELU")
ATTENTION_FORBID = ("torch.nn.functional.scaled_dot_product_attention", "torch.nn.MultiheadAttention")
# Inside the classes, the student's own sub-parts are replaced by correct ones, so a bug in
# `gelu` or `MultiHeadAttention` costs its own points only, not the block's as well. They are
# library code imported inside the worker: a call back to the reference would cut the autograd graph.
# ---------------------------------------------------------------- where a wrong module goes wrong
# Each module is built (in float64) with weights chosen so that one step shows: values and output
# projections that are the identity, so the output holds the attention weights; a sublayer silenced
# (its last layer zero), so the block shows the other one alone. The student's module and the
# reference's, given the same weights, are compared setting by setting; the first that differs
# names the step.


def _shared_norms(api, ctor: tuple, state: dict) -> str | None:
    """Whether ln1 and ln2 are one module (`self.ln2 = self.ln1`): given different weights, such a
    block keeps one pair of them for both."""
    module = api.new("TransformerBlock", *ctor)
    module = api.method(module, "double", keep=True)
    api.method(module, "load_state_dict", state)
    kept = api.method(module, "state_dict")
    names = ("ln1.weight", "ln2.weight")
    if not isinstance(kept, dict) or not all(isinstance(kept.get(name), torch.Tensor) for name in names):
        return None
    if kept["ln1.weight"].shape == kept["ln2.weight"].shape and torch.equal(kept["ln1.weight"], kept["ln2.weight"]) \
            and not torch.equal(state["ln1.weight"], state["ln2.weight"]):
        return ("the second LayerNorm. Given ln1 and ln2 weights of their own, your block kept one set for both: "
                "ln2 is ln1 (one module, or shared parameters). Each sublayer has its own LayerNorm: make ln2 a "
                "second nn.LayerNorm(d_model)")
    return None


def _module_output(api, cls_name: str, ctor: tuple, state: dict, x):
    module = api.new(cls_name, *ctor)
    module = api.method(module, "double", keep=True)
    api.method(module, "load_state_dict", state)
    api.method(module, "eval", keep=True)
    return _out(api.forward(module, x))


def _reference_output(cls_name: str, ctor: tuple, state: dict, x):
    module = getattr(ref(), cls_name)(*ctor).double()
    module.load_state_dict(state)
    module.eval()
    with torch.no_grad():
        return module(x).numpy()


def _zeroed(cls_name: str, ctor: tuple) -> dict:
    return {k: torch.zeros_like(v) for k, v in getattr(ref(), cls_name)(*ctor).double().state_dict().items()}


def _differs(got, want) -> str | None:
    """None where they agree (float64), else how they differ, in a few words."""
    if got is None or got.shape != want.shape:
        return f"yours is {describe(got)}, not of shape {tuple(want.shape)}"
    if np.allclose(got, want, rtol=1e-7, atol=1e-9):
        return None
    return f"yours differs from it by up to {float(np.nanmax(np.abs(got - want))):.3g}"


def _float32_somewhere(api, cls_name: str, ctor: tuple) -> str | None:
    """Whether the module, in float64 on random weights and input, is right only to float32's
    precision (a .float(), or a tensor made without the input's dtype, inside): said first, since
    every later setting would then differ by rounding and blame its own step."""
    generator = torch.Generator().manual_seed(5)
    state = {k: torch.randn(v.shape, generator=generator, dtype=torch.float64) * 0.5
             for k, v in _zeroed(cls_name, ctor).items()}
    x = torch.randn(2, 6, ctor[0], generator=generator, dtype=torch.float64)
    got, want = _module_output(api, cls_name, ctor, state, x), _reference_output(cls_name, ctor, state, x)
    if got is None or got.shape != want.shape or np.allclose(got, want, rtol=1e-10, atol=1e-12):
        return None
    error = float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-12))
    if 1e-9 < error < 1e-4:
        return (f"the precision. In float64 (weights and x), your output is right only to about {error:.1g} of its "
                "size, float32's rounding: something inside computes in float32 (a .float(), or a tensor made without "
                "dtype=x.dtype); keep every step in the input's dtype")
    return None


def _train_mode_differs(api, cls_name: str, ctor: tuple) -> str | None:
    """Whether the module, built with the contract's arguments alone, computes otherwise in train()
    mode than in eval() mode (a dropout with p > 0 by default): its gradients are checked in train()
    mode, where that is all that fails."""
    generator = torch.Generator().manual_seed(9)
    state = {k: torch.randn(v.shape, generator=generator, dtype=torch.float64) * 0.5
             for k, v in _zeroed(cls_name, ctor).items()}
    x = torch.randn(2, 6, ctor[0], generator=generator, dtype=torch.float64)
    module = api.new(cls_name, *ctor)
    module = api.method(module, "double", keep=True)
    api.method(module, "load_state_dict", state)
    api.method(module, "eval", keep=True)
    evaluated = _out(api.forward(module, x))
    api.method(module, "train", keep=True)
    trained = _out(api.forward(module, x))
    if evaluated is None or trained is None or evaluated.shape != trained.shape:
        return None
    if np.allclose(evaluated, trained, rtol=1e-9, atol=1e-12, equal_nan=True):
        return None
    return (f"the train mode. Built as {cls_name}{ctor}, with nothing more, your module gives other outputs in "
            "train() mode than in eval() mode on the same input (a dropout with p > 0?): the contract's module "
            "has no dropout by default (p = 0.0), so training computes what evaluation does")


def locate_attention_module(api) -> str | None:
    T, d, heads = 8, 8, 2
    ctor, x = (d, heads), torch.eye(T, dtype=torch.float64)[None]  # x = I: position t is e_t
    precision = _float32_somewhere(api, "MultiHeadAttention", ctor) or _train_mode_differs(
        api, "MultiHeadAttention", ctor)
    if precision:
        return precision
    # the mask's size: a sequence longer than d_model, where a mask sized by d_model runs out
    small = (4, 2)
    try:
        _module_output(api, "MultiHeadAttention", small, _zeroed("MultiHeadAttention", small),
                       torch.zeros(1, 6, 4, dtype=torch.float64))
    except ProbeFailed as err:
        try:
            _module_output(api, "MultiHeadAttention", small, _zeroed("MultiHeadAttention", small),
                           torch.zeros(1, 4, 4, dtype=torch.float64))
        except ProbeFailed:
            pass
        else:
            said = getattr(err.outcome, "error", None) or err.step
            return ("the mask's size. MultiHeadAttention(4, 2) runs on 4 positions but not on 6, more than d_model "
                    f"({said}): the causal mask must cover the sequence's length T, whatever d_model (make it in "
                    "forward from T, or keep a buffer as long as the longest sequence)")
    kept = api.attr(api.new("MultiHeadAttention", *ctor), "n_heads")
    if kept != heads:  # every head's slice of the projections is then another: say that first
        return (f"the number of heads. MultiHeadAttention({d}, {heads}) keeps n_heads = {heads} and splits d_model "
                f"into {heads} heads of d_model // n_heads = {d // heads}; yours keeps n_heads = {kept!r} (the head "
                "size in its place?)")
    state = _zeroed("MultiHeadAttention", ctor)
    state["v_proj.weight"] = torch.eye(d, dtype=torch.float64)
    state["out_proj.weight"] = torch.eye(d, dtype=torch.float64)
    # Every position the same, [1, 1, ...], and v_proj = diag(1..8): every value row is [1, ..., 8], so any
    # weights that sum to 1 give [1, ..., 8] back, whatever the mask: only the heads' layout, the
    # weights' sum and anything added on show.
    same = torch.ones(1, T, d, dtype=torch.float64)
    spread = {**state, "v_proj.weight": torch.diag(torch.arange(1.0, d + 1, dtype=torch.float64))}
    got = _module_output(api, "MultiHeadAttention", ctor, spread, same)
    want = _reference_output("MultiHeadAttention", ctor, spread, same)
    if _differs(got, want):
        setting = ("With every position [1, 1, ...] and v_proj = diag(1, ..., 8), every value row is [1, ..., 8], so "
                   "the output is [1, ..., 8] at every position, whatever the weights (each row of them sums to 1)")
        if got is None or got.shape != want.shape:
            return f"the output. {setting}; yours is {describe(got)}"
        if np.allclose(got, want + same.numpy(), atol=1e-9):
            return (f"the residual. {setting}; yours adds x to it: the module returns the attention's output alone "
                    "(the block adds the residual)")
        if np.allclose(got, 0, atol=1e-12):
            return (f"the values. {setting}; yours is 0 everywhere, and here only v_proj and out_proj are not zero: "
                    "are the values v_proj(x)?")
        ratio = got / want
        over_queries = np.cumsum(1 / (T - np.arange(T)))  # each row's sum when the softmax runs down the columns
        if np.all(np.isfinite(got)) and np.allclose(ratio, ratio[..., :1], atol=1e-9):
            if np.allclose(ratio[0, :, 0], (np.arange(T) + 1) / T, atol=1e-9):
                return (f"the mask. {setting}; yours gives {shown(ratio[0, :, 0])} times it, position by position: "
                        "position t keeps (t + 1) / T of the weight, as when the future is hidden after the softmax; "
                        "fill the hidden scores with -inf before it, so that each row sums to 1")
            if np.allclose(ratio[0, :, 0], over_queries, atol=1e-9):
                return (f"the softmax's axis. {setting}; yours gives {shown(ratio[0, :, 0])} times it, position by "
                        "position: your weights' columns sum to 1, not their rows (softmax over the keys, dim=-1)")
            return (f"the softmax. {setting}; yours gives {shown(ratio[0, :, 0])} times it, position by position: the "
                    "weights are the softmax of the scaled, masked scores (scale and mask before the softmax), and "
                    "each row of them sums to 1")
        rows_nan = np.isnan(got[0]).any(axis=-1)
        if rows_nan.sum() > T // 2:
            return (f"the softmax's axis. {setting}; yours is NaN at {int(rows_nan.sum())} of {T} positions: a softmax "
                    "over an axis where every entry can be -inf (the heads, dim=1), not over the keys (dim=-1)")
        if not rows_nan.any():  # a row with no key at all (NaN) is the mask's doing: told below
            return (f"the heads. {setting}; yours gives {_row(got[0, -1])} at the last position: head h attends with "
                    "its own d_head columns and writes them back in place: split with .view(B, T, n_heads, d_head)"
                    ".transpose(1, 2) (heads before positions), merge with .transpose(1, 2).reshape(B, T, d_model)")
    # q = k = 0: every score equal; v = out = I: the output is the weight matrix itself.
    got, want = _module_output(api, "MultiHeadAttention", ctor, state, x), _reference_output(
        "MultiHeadAttention", ctor, state, x)
    if _differs(got, want):
        weights, mask = got[0] if got is not None and got.shape == (1, T, d) else None, np.tril(np.ones((T, T), bool))
        setting = ("With q_proj = k_proj = 0 (every score equal) and v_proj = out_proj = the identity, on x = I, the "
                   "output is the attention weights: position t averages positions 0..t")
        if weights is not None and np.isnan(weights).all():
            return (f"the softmax's axis. {setting}; yours is NaN throughout: a softmax over an axis where every "
                    "entry can be -inf (the heads, dim=1), not over the keys (dim=-1)")
        if weights is not None and np.allclose(weights - np.eye(T), want[0], atol=1e-9):
            return (f"the residual. {setting}; yours adds x to that: the module returns the attention's output alone "
                    "(the block adds the residual)")
        if weights is not None and np.allclose(weights[~mask], 0, atol=1e-9) and not np.allclose(
                weights.sum(-1), 1, atol=1e-6) and np.allclose(weights / weights.sum(-1, keepdims=True), want[0]):
            return (f"the softmax. {setting}; yours has the right keys, but its rows sum to "
                    f"{shown(weights.sum(-1)[:3])}...: the weights are the softmax of the scaled scores (scale before "
                    "the softmax, mask before the softmax), and sum to 1")
        if weights is not None and np.allclose(np.where(mask, weights, 0).sum(0), 1, atol=1e-6) and not np.allclose(
                weights.sum(-1), 1, atol=1e-6):
            return (f"the softmax's axis. {setting}; your weights' columns sum to 1, not their rows: each query's "
                    "weights over the keys (dim=-1) sum to 1")
        return located_mask(weights, mask, setting) or f"the mixing. {setting}; {_differs(got, want)}"
    # Each projection on its own: with k_proj zero every key is 0 and every score equal, whatever q_proj
    # is (and the other way round), unless the other projection stands in for it.
    generator = torch.Generator().manual_seed(4)
    for name, other in (("keys", "k_proj"), ("queries", "q_proj")):
        alone = {**state, f"{'q_proj' if other == 'k_proj' else 'k_proj'}.weight":
                 torch.randn(d, d, generator=generator, dtype=torch.float64) * 3}
        got = _module_output(api, "MultiHeadAttention", ctor, alone, x)
        want = _reference_output("MultiHeadAttention", ctor, alone, x)
        if got is not None and got.shape == want.shape and _differs(got, want):
            return (f"the {name}. With {other} zero every {name[:-1]} is 0, so every score is equal (whatever the "
                    f"other projection is); yours are not: are the {name} {other}(x)?")
    # Head 0's queries all [2, 0, 0, 0] and only key 0 has [1, 0, 0, 0]: raw scores [2, 0, ..., 0].
    scaled = {**state, "q_proj.weight": state["q_proj.weight"].clone(), "k_proj.weight": state["k_proj.weight"].clone()}
    scaled["q_proj.weight"][0, :] = 2.0
    scaled["k_proj.weight"][0, 0] = 1.0
    got = _module_output(api, "MultiHeadAttention", ctor, scaled, x)
    want = _reference_output("MultiHeadAttention", ctor, scaled, x)
    if _differs(got, want) and got is not None and got.shape == want.shape:
        row = got[0, T - 1, :2]  # the last query's weights on keys 0 and 1, in head 0
        setting = ("With 2 heads of d_head 4, head 0's queries all [2, 0, 0, 0] and only key 0 [1, 0, 0, 0] (raw "
                   "scores [2, 0, ..., 0])")
        if np.all(row > 0) and abs(row[0] - row[1]) < 1e-9:
            return (f"the scores. {setting}, each query should weigh key 0 most; yours weighs them all alike: the "
                    "scores are q k^T, each query against every key (not k q^T)")
        located = located_scale(np.array([row[0], row[1]]), 4, 2.0, setting, d_model=d)
        if located:
            return located
    generator = torch.Generator().manual_seed(3)
    mixed = {**state, "q_proj.weight": torch.randn(d, d, generator=generator, dtype=torch.float64),
             "k_proj.weight": torch.randn(d, d, generator=generator, dtype=torch.float64)}
    got = _module_output(api, "MultiHeadAttention", ctor, mixed, x)
    problem = _differs(got, _reference_output("MultiHeadAttention", ctor, mixed, x))
    if problem:
        return (f"the heads. With random q_proj and k_proj (v_proj = out_proj = I), the output columns "
                f"h*d_head..(h+1)*d_head hold head h's weighted values: {problem}. Head h attends with its own "
                "d_head columns of q and k: split (B, T, d_model) with .view(B, T, n_heads, d_head).transpose(1, 2), "
                "and merge back with .transpose(1, 2).reshape(B, T, d_model)")
    projected = {**mixed, "out_proj.weight": torch.randn(d, d, generator=generator, dtype=torch.float64)}
    got = _module_output(api, "MultiHeadAttention", ctor, projected, x)
    problem = _differs(got, _reference_output("MultiHeadAttention", ctor, projected, x))
    if problem:
        return (f"the output projection. With a random out_proj, {problem}: out_proj (an nn.Linear) maps the merged "
                "heads, once, at the end")
    full = {k: torch.randn(v.shape, generator=generator, dtype=torch.float64) for k, v in state.items()}
    got = _module_output(api, "MultiHeadAttention", ctor, full, x)
    problem = _differs(got, _reference_output("MultiHeadAttention", ctor, full, x))
    if problem:
        return (f"the biases. With every weight right so far, random biases too: {problem}: each of q_proj, k_proj, "
                "v_proj and out_proj is an nn.Linear with a bias, applied as a whole")
    batch = torch.randn(3, 5, d, generator=generator, dtype=torch.float64)
    got = _module_output(api, "MultiHeadAttention", ctor, full, batch)
    problem = _differs(got, _reference_output("MultiHeadAttention", ctor, full, batch))
    if problem:
        return (f"batch axes. One sequence is right, but on a batch of 3, x (3, 5, 8), {problem}: each sequence's "
                "output is what it is alone; split and merge the heads with the batch axis left where it is "
                "(.transpose(1, 2), the heads and the positions, never axis 0)")
    return None


def locate_feed_forward(api) -> str | None:
    precision = _float32_somewhere(api, "FeedForward", (8, 16)) or _train_mode_differs(api, "FeedForward", (8, 16))
    if precision:
        return precision
    d = 6
    x = torch.linspace(-3.0, 3.0, d, dtype=torch.float64)[None, None]
    state = _zeroed("FeedForward", (d, d))
    state["fc1.weight"] = torch.eye(d, dtype=torch.float64)
    state["fc2.weight"] = torch.eye(d, dtype=torch.float64)
    got, want = _module_output(api, "FeedForward", (d, d), state, x), _reference_output("FeedForward", (d, d), state, x)
    if _differs(got, want):
        setting = (f"With fc1 = fc2 = the identity, on x = {_row(x[0, 0].numpy())}, the output is gelu(x) = "
                   f"{_row(want[0, 0])}")
        if got is not None and got.shape == want.shape:
            if np.allclose(got, want + x.numpy(), atol=1e-9):
                return f"the residual. {setting}; yours adds x to it: FeedForward returns fc2(gelu(fc1(x))) alone"
            if np.allclose(got, x.numpy(), atol=1e-9):
                return f"the activation. {setting}; yours gives x back: there is no GELU between fc1 and fc2"
        told = _row(got[0, 0]) if got is not None and got.shape == want.shape else describe(got)
        return (f"the activation. {setting}; yours gives {told}: the exact GELU, x * (1 + erf(x / sqrt(2))) / 2 "
                "(F.gelu), between fc1 and fc2")
    scaled = {**state, "fc1.weight": 2 * state["fc1.weight"], "fc2.weight": 0.5 * state["fc2.weight"]}
    got = _module_output(api, "FeedForward", (d, d), scaled, x)
    want = _reference_output("FeedForward", (d, d), scaled, x)
    if _differs(got, want):
        return (f"the order. With fc1 = 2 I and fc2 = I / 2 the output is gelu(2x) / 2 = {_row(want[0, 0])}; yours "
                f"gives {_row(got[0, 0]) if got is not None and got.shape == want.shape else describe(got)}: fc1, then "
                "GELU, then fc2")
    generator = torch.Generator().manual_seed(5)
    for ctor, what in (((d, 10), "with d_ff = 10"), ((d,), "with d_ff left to its default, 4 * d_model")):
        full = {k: torch.randn(v.shape, generator=generator, dtype=torch.float64)
                for k, v in _zeroed("FeedForward", ctor).items()}
        got = _module_output(api, "FeedForward", ctor, full, x)
        problem = _differs(got, _reference_output("FeedForward", ctor, full, x))
        if problem:
            return (f"the layers. With random weights and biases {what}, {problem}: fc1 (d_model -> d_ff) and fc2 "
                    "(d_ff -> d_model), each an nn.Linear with a bias")
    return None


def _norms_alone(api, ctor: tuple, state: dict, x) -> str | None:
    """ln1 and ln2 called on their own (the contract's LayerNorms over d_model, with `weight`, `bias`
    and eps 1e-5: nn.LayerNorm or the student's own module), given the block's weights: a module of
    the student's own that departs (no bias, no weight, the two swapped) shows here alone, where the
    whole block would blame the sublayer that uses it. A norm that is right but for its eps is left to
    the eps step that follows (right on a stream of size ~1e4)."""
    block = api.new("TransformerBlock", *ctor)
    block = api.method(block, "double", keep=True)
    api.method(block, "load_state_dict", state)
    api.method(block, "eval", keep=True)
    for name in ("ln1", "ln2"):
        try:
            norm = api.method(block, "get_submodule", name, keep=True)
            got, got_big = (_out(api.forward(norm, v)) for v in (x, x * 1e4))
        except ProbeFailed:
            return None
        weight, bias = state[f"{name}.weight"], state[f"{name}.bias"]
        normalised = F.layer_norm(x, x.shape[-1:], eps=1e-5)
        want = (normalised * weight + bias).numpy()
        if got is None or got.shape != want.shape or np.allclose(got, want, rtol=1e-7, atol=1e-9):
            continue
        big = (F.layer_norm(x * 1e4, x.shape[-1:], eps=1e-5) * weight + bias).numpy()
        if got_big is not None and got_big.shape == big.shape and np.allclose(got_big, big, rtol=1e-7, atol=1e-9):
            return None  # an eps of its own: the eps step's
        n = normalised.numpy()
        w, b = weight.numpy(), bias.numpy()
        for value, what in ((n * w, "normalised * weight, without adding the bias"),
                            (n + b, "normalised + bias, without multiplying by the weight"),
                            (n * b + w, "normalised * bias + weight: the weight and bias swapped"),
                            (n, "the normalised x alone: neither the weight nor the bias applied")):
            if np.allclose(got, value, rtol=1e-7, atol=1e-9):
                return (f"the norms. Called on its own with the block's weights, your {name} returns {what}; a "
                        f"LayerNorm returns normalised * weight + bias ({name}.weight and {name}.bias, eps 1e-5): "
                        "look at the norm module's forward (nn.LayerNorm(d_model) does it all)")
        return (f"the norms. Called on its own with the block's weights, your {name} differs from a LayerNorm "
                f"(normalised * {name}.weight + {name}.bias, eps 1e-5) by up to "
                f"{float(np.nanmax(np.abs(got - want))):.3g}: look at the norm module's forward")
    return None


def locate_block(api) -> str | None:
    d, heads, d_ff, T = 8, 2, 16, 5
    ctor = (d, heads, d_ff)
    generator = torch.Generator().manual_seed(11)
    full = {k: torch.randn(v.shape, generator=generator, dtype=torch.float64) * (0.5 if v.dim() > 1 else 1.0)
            + (1.0 if k.endswith("ln1.weight") or k.endswith("ln2.weight") else 0.0)
            for k, v in _zeroed("TransformerBlock", ctor).items()}
    x = torch.randn(1, T, d, generator=generator, dtype=torch.float64) * 2 + 1

    def silenced(*layers):
        return {k: torch.zeros_like(v) if any(k.startswith(layer) for layer in layers) else v for k, v in full.items()}

    shared = _shared_norms(api, ctor, full) or _norms_alone(api, ctor, full, x)
    if shared:
        return shared
    # The norms' eps: right on a stream of size ~1e4 (each sublayer's update compared), where eps is
    # nothing beside the variance, and wrong on one of size ~2, where it is a part in a million.
    big = x * 1e4
    got_big, got = (_module_output(api, "TransformerBlock", ctor, full, v) for v in (big, x))
    want_big, want = (_reference_output("TransformerBlock", ctor, full, v) for v in (big, x))
    if (got_big is not None and got is not None and got_big.shape == want_big.shape and got.shape == want.shape
            and np.allclose(got_big - big.numpy(), want_big - big.numpy(), rtol=1e-9, atol=1e-9)
            and _differs(got, want)):
        return ("the norms' eps. Your block is right on a stream of size ~1e4, where eps is nothing beside the "
                "variance, but not on one of size ~2: ln1 and ln2 take eps = 1e-5 (nn.LayerNorm's default, and "
                "layer_norm's), not another")
    # (after eps: float32's round-off stays at any size, a wrong eps fades on a large stream)
    precision = _float32_somewhere(api, "TransformerBlock", ctor) or _train_mode_differs(api, "TransformerBlock", ctor)
    if precision:
        return precision

    for layers, step, setting, fix in (
            (("attn.out_proj", "ffn.fc2"), "the residual stream", "With both sublayers silenced (attn.out_proj and "
             "ffn.fc2 zero), a pre-norm block passes x through unchanged",
             "the stream itself is never normalised: x + attn(ln1(x)), then x + ffn(ln2(x)) (pre-norm, not "
             "post-norm)"),
            (("ffn.fc2",), "the attention sublayer", "With the feed-forward silenced (ffn.fc2 zero) the block is "
             "x + attn(ln1(x))", "ln1 normalises a copy of the stream for the attention, whose output is added to x "
             "itself"),
            (("attn.out_proj",), "the feed-forward sublayer", "With the attention silenced (attn.out_proj zero) the "
             "block is x + ffn(ln2(x))", "ln2 normalises a copy of the stream for the feed-forward, whose output is "
             "added to the stream"),
            ((), "the order of the sublayers", "With both sublayers on", "the feed-forward reads the stream after the "
             "attention's update: x = x + attn(ln1(x)), then x = x + ffn(ln2(x))")):
        state = silenced(*layers)
        got = _module_output(api, "TransformerBlock", ctor, state, x)
        problem = _differs(got, _reference_output("TransformerBlock", ctor, state, x))
        if problem:
            return f"{step}. {setting}: {problem}: {fix}"
    return None


GELU_STUB = (("gelu", "torch.nn.functional.gelu"),)
BLOCK_STUBS = (
    ("MultiHeadAttention", "coursekit.blocks.CausalSelfAttention"),
    ("FeedForward", "coursekit.blocks.FeedForward"),
    ("layer_norm", "coursekit.blocks.layer_norm"),
    ("rms_norm", "coursekit.blocks.rms_norm"),
    *GELU_STUB,
)


def _unchanged(make):
    return Check("inputs_unchanged", "the input tensors are not modified", 1, make, kind="unchanged")


UNIT = graded()
