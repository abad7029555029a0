"""Unit 04, the transformer block (PyTorch): the hidden checks and the misconception catalogue.

The reference is the solution notebook (`solutions/04_block/block.ipynb`). Where PyTorch has
its own version of a part, that is the expected value instead of the reference, an
independent oracle: `F.layer_norm`, `F.rms_norm`, `F.gelu(approximate="none")`,
`nn.MultiheadAttention` and `nn.TransformerEncoderLayer` (pre-norm, GELU, no dropout, causal)
carrying the same weights as the student's module.

The classes are checked through probes (`core.Check.probe`): build the student's module in
the worker, load weights drawn here, run it, read its outputs, parameter names and
gradients. The same probe runs on the reference and on each wrong variant below; the
variants of a class are subclasses of the reference's with one mistake, written against
the contract's attribute names only (`q_proj`, `fc1`, `ln1`, ...).
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..compare import Tolerance, compare_arrays, describe
from ..core import Check, Inputs, Misconception, Part, SampleBug, Unit
from ..reference import load_reference
from ..weights import random_state as shared_random_state

UNIT_NAME = "04_block"
F32 = Tolerance(rtol=1e-4, atol=1e-5)  # float32 arithmetic in a different order
F64 = Tolerance(rtol=1e-7, atol=1e-9)


def ref():
    return load_reference(UNIT_NAME)


def tensor(rng, shape, dtype=torch.float32, scale=1.0, shift=0.0):
    return torch.from_numpy(rng.normal(shift, scale, shape)).to(dtype)


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


def attention_forward(m, x, causal=True, scale="d_head", split="heads_first", project_out=True, mask="lower"):
    B, T, d_model = x.shape
    H = m.n_heads
    d_head = d_model // H

    def heads(t):  # (B, T, d_model) -> (B, H, T, d_head)
        if split == "no_transpose":
            return t.reshape(B, H, T, d_head)
        return t.reshape(B, T, H, d_head).transpose(1, 2)

    q, k, v = heads(m.q_proj(x)), heads(m.k_proj(x)), heads(m.v_proj(x))
    scores = q @ k.transpose(-1, -2)
    scores = scores / {"d_head": math.sqrt(d_head), "d_model": math.sqrt(d_model), "none": 1.0}[scale]
    if causal:
        allowed = causal_allowed(T) if mask == "lower" else causal_allowed(T).T
        scores = scores.masked_fill(~allowed, float("-inf"))
    out = torch.softmax(scores, dim=-1) @ v  # (B, H, T, d_head)
    out = out.transpose(1, 2).reshape(B, T, d_model)
    return m.out_proj(out) if project_out else out


def exact_gelu(x):
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def block_forward(m, x, pre_norm=True, attn_residual=True, ffn_residual=True, second_norm="ln2"):
    ln2 = getattr(m, second_norm)
    if not pre_norm:
        x = m.ln1(x + m.attn(x))
        return ln2(x + m.ffn(x))
    x = x + m.attn(m.ln1(x)) if attn_residual else m.attn(m.ln1(x))
    return x + m.ffn(ln2(x)) if ffn_residual else m.ffn(ln2(x))


def attention_variant(**knobs):
    def make(reference):
        class Wrong(reference.MultiHeadAttention):
            def forward(self, x):
                return attention_forward(self, x, **knobs)

        return Wrong

    return make


def ffn_variant(activation=None, default_d_ff=None):
    def make(reference):
        class Wrong(reference.FeedForward):
            def __init__(self, d_model, d_ff=None):
                if d_ff is None and default_d_ff is not None:
                    d_ff = default_d_ff(d_model)
                super().__init__(d_model, d_ff)

            if activation is not None:
                def forward(self, x):
                    return self.fc2(activation(self.fc1(x)))

        return Wrong

    return make


def block_variant(**knobs):
    def make(reference):
        class Wrong(reference.TransformerBlock):
            def forward(self, x):
                return block_forward(self, x, **knobs)

        return Wrong

    return make


def layer_norm_with(eps_outside=False, unbiased=False, affine=True, dims=(-1,)):
    def variant(reference, x, weight, bias, eps=1e-5):
        mean = x.mean(dim=dims, keepdim=True)
        var = x.var(dim=dims, keepdim=True, unbiased=unbiased)
        normed = (x - mean) / (var.sqrt() + eps) if eps_outside else (x - mean) / torch.sqrt(var + eps)
        return normed * weight + bias if affine else normed

    return variant


def rms_norm_with(centred=False, eps_outside=False, root=True):
    def variant(reference, x, weight, eps=1e-6):
        if centred:
            x = x - x.mean(dim=-1, keepdim=True)
        mean_square = (x * x).mean(dim=-1, keepdim=True)
        if not root:
            return x / (mean_square + eps) * weight
        denominator = mean_square.sqrt() + eps if eps_outside else torch.sqrt(mean_square + eps)
        return x / denominator * weight

    return variant


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
        "ln_ignores_affine", "a layer norm that never applies `weight` and `bias`",
        "After normalising, scale by `weight` and shift by `bias`: they are what training learns.",
        {"layer_norm": layer_norm_with(affine=False)},
    ),
    Misconception(
        "ln_wrong_axis", "a layer norm whose statistics are taken over the wrong axes",
        "Each position is normalised on its own: mean and variance over the last dimension only "
        "(dim=-1, keepdim=True).",
        {"layer_norm": layer_norm_with(dims=(0,))},
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
        "gelu_tanh_approximation", "the tanh approximation of GELU",
        "The contract asks for the exact GELU, 0.5 x (1 + erf(x / sqrt 2)); the tanh formula is an "
        "approximation that is off by up to about 1e-3.",
        {"gelu": lambda reference, x: 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))},
    ),
    Misconception(
        "gelu_sigmoid_approximation", "the sigmoid approximation of GELU, x * sigmoid(1.702 x)",
        "Use the exact form with the error function: torch.erf(x / math.sqrt(2)).",
        {"gelu": lambda reference, x: x * torch.sigmoid(1.702 * x)},
    ),
    Misconception(
        "gelu_erf_unscaled", "GELU with erf(x) instead of erf(x / sqrt 2)",
        "GELU weighs x by the standard normal CDF, Phi(x) = (1 + erf(x / sqrt 2)) / 2: the sqrt 2 matters.",
        {"gelu": lambda reference, x: 0.5 * x * (1.0 + torch.erf(x))},
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
        {"MultiHeadAttention": attention_variant(causal=False),
         "TransformerBlock": lambda reference: _block_with_attention(reference, causal=False)},
    ),
    Misconception(
        "attention_mask_upper", "a causal mask that is upper-triangular (reading the future, not the past)",
        "Row t is query t: it may read keys at or before t, on and below the diagonal (torch.tril).",
        {"MultiHeadAttention": attention_variant(mask="upper")},
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
        "heads_split_without_transpose", "heads split with a reshape to (B, H, T, d_head) and no transpose",
        "Reshape to (B, T, H, d_head) first, then swap T and H: a direct reshape mixes positions and heads.",
        {"MultiHeadAttention": attention_variant(split="no_transpose")},
    ),
    Misconception(
        "attention_no_out_proj", "multi-head attention that never applies `out_proj`",
        "After merging the heads, mix them with out_proj: it is part of the layer (and of its parameters).",
        {"MultiHeadAttention": attention_variant(project_out=False)},
    ),
    Misconception(
        "ffn_default_width", "a feed-forward layer whose default width is d_model instead of 4 * d_model",
        "When d_ff is None the hidden layer is 4 * d_model wide.",
        {"FeedForward": ffn_variant(default_d_ff=lambda d_model: d_model)},
    ),
    Misconception(
        "block_post_norm", "a post-norm block (normalising after each residual addition)",
        "The contract's block is pre-norm: x = x + attn(ln1(x)), then x = x + ffn(ln2(x)); the stream itself "
        "is never normalised.",
        {"TransformerBlock": block_variant(pre_norm=False)},
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
)


def _block_with_attention(reference, **knobs):
    attention = attention_variant(**knobs)(reference)

    class Wrong(reference.TransformerBlock):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            wrong = attention(self.attn.q_proj.in_features, self.attn.n_heads)
            wrong.load_state_dict(self.attn.state_dict())
            self.attn = wrong

    return Wrong


# ---------------------------------------------------------------- the graded parts

NORM_FORBID = ("torch.nn.functional.layer_norm", "torch.nn.LayerNorm", "torch.layer_norm")
RMS_FORBID = ("torch.nn.functional.rms_norm", "torch.nn.RMSNorm", "torch.rms_norm")
GELU_FORBID = ("torch.nn.functional.gelu", "torch.nn.GELU")
ATTENTION_FORBID = ("torch.nn.functional.scaled_dot_product_attention", "torch.nn.MultiheadAttention")
# Inside the classes, the student's own gelu is replaced by torch's exact GELU, so a bug in
# `gelu` costs its own points only (a call back to the reference would cut the autograd graph).
GELU_STUB = (("gelu", "torch.nn.functional.gelu"),)


def _unchanged(make):
    return Check("inputs_unchanged", "the input tensors are not modified", 1, make, kind="unchanged")


PARTS = (
    Part(
        "layer_norm",
        diagnose=diagnose,
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
            Check("gradient", "gradients of x, weight and bias", 1, with_upstream(norm_inputs((3, 6), torch.float64)),
                  tol=F64, probe=grad_probe("layer_norm")),
            _unchanged(norm_inputs((2, 5))),
        ),
    ),
    Part(
        "rms_norm",
        diagnose=diagnose,
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
        forbid=GELU_FORBID,
        checks=(
            Check("grid", "x from -6 to 6 in steps of 0.1", 1, gelu_inputs(grid=True), tol=Tolerance(1e-5, 1e-6),
                  oracle=gelu_oracle),
            Check("large", "x up to +-80 (no overflow, no NaN)", 1, gelu_inputs(large=True), tol=F32,
                  oracle=gelu_oracle),
            Check("batched_float64", "x (2, 3, 5) in float64", 1, gelu_inputs((2, 3, 5), torch.float64), tol=F64,
                  oracle=gelu_oracle),
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
            Check("single_token", "a single position: x (2, 1, 8)", 1,
                  module_inputs("MultiHeadAttention", (8, 4), (2, 1, 8)), tol=F32,
                  probe=forward_probe("MultiHeadAttention"), oracle=mha_oracle),
            Check("float64", "the module in float64 (.double()), x (2, 6, 8)", 1,
                  module_inputs("MultiHeadAttention", (8, 2), (2, 6, 8), torch.float64), tol=F64,
                  probe=forward_probe("MultiHeadAttention", torch.float64)),
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
        library_stubs=GELU_STUB,
        checks=(
            Check("attributes", "TransformerBlock(12, 3): ln1, attn, ln2, ffn and their parameters", 1,
                  module_inputs("TransformerBlock", (12, 3), (1, 4, 12)), probe=structure_probe("TransformerBlock")),
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

UNIT = Unit(
    UNIT_NAME,
    parts=PARTS,
    misconceptions=MISCONCEPTIONS,
    sample_bug=SampleBug("gelu", "math.sqrt(2", "(1", "gelu_erf_unscaled"),
)
