"""Unit 05, the model (PyTorch): the hidden checks and the misconception catalogue.

The reference is the solution notebook (`solutions/05_model/model.ipynb`). Independent
oracles where there is one: `count_parameters` against `sum(p.numel())` of the reference
model built on PyTorch's meta device (shapes only) and against GPT-2's published sizes,
`sinusoidal_positions` and `rope` against formulas written here with complex numbers.

The model and the counting functions are given plain records of the configuration
(`api.record`), not the student's `GPTConfig`: a mistake in one part never costs points
in another. The block comes from `coursekit.blocks`, so nothing here depends on unit 04.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from ..compare import Tolerance, describe
from ..core import Check, Inputs, Misconception, Part, ProbeFailed, SampleBug, Unit
from ..reference import load_reference
from ..weights import random_state as shared_random_state
from .block import diagnose as diagnose_tensors

UNIT_NAME = "05_model"
F32 = Tolerance(rtol=1e-4, atol=1e-5)
F64 = Tolerance(rtol=1e-7, atol=1e-9)
TABLE = Tolerance(rtol=0.0, atol=1e-4)  # the contract's tolerance for the sinusoid table
EXACT = Tolerance(rtol=0.0, atol=0.0)

GPT2 = {  # name: (n_layers, d_model, n_heads, published parameter count with tied embeddings)
    "small": (12, 768, 12, 124_439_808),
    "medium": (24, 1024, 16, 354_823_168),
    "large": (36, 1280, 20, 774_030_080),
    "xl": (48, 1600, 25, 1_557_611_200),
}


def ref():
    return load_reference(UNIT_NAME)


def config_fields(vocab_size, context_length, d_model, n_layers, n_heads, d_ff=None, tie_weights=True) -> dict:
    return dict(vocab_size=vocab_size, context_length=context_length, d_model=d_model, n_layers=n_layers,
                n_heads=n_heads, d_ff=d_ff, tie_weights=tie_weights)


# ---------------------------------------------------------------- comparing results


def diagnose(result, expected, inputs: Inputs, tol: Tolerance) -> str | None:
    if isinstance(expected, dict) and "fields" in expected:
        if not isinstance(result, dict) or "fields" not in result:
            return f"could not read the configuration ({describe(result)})"
        for name, want in expected["fields"].items():
            got = result["fields"].get(name, "<missing>")
            if got != want:
                return f"`{name}` is {got!r}, expected {want!r}"
        return None
    if isinstance(expected, dict) and "error" in expected:
        got = result.get("error") if isinstance(result, dict) else None
        if got != expected["error"]:
            return (f"expected a {expected['error']} for a sequence longer than context_length, "
                    f"got {got or 'no error'}")
        return None
    if isinstance(expected, dict) and "breakdown" in expected:
        return diagnose_breakdown(result, expected)
    if isinstance(expected, int | float) and not isinstance(expected, bool):
        if not isinstance(result, int | float | np.integer | np.floating) or isinstance(result, bool | np.bool_):
            return f"expected a number, got {describe(result)}"
        result = int(result) if float(result).is_integer() else float(result)
        if result != expected:
            return f"counted {result:,}, expected {expected:,} (off by {result - expected:+,})"
        return None
    if isinstance(expected, dict) and "tied" in expected:
        if not isinstance(result, dict) or result.get("tied") != expected["tied"]:
            want = "share token_emb's weight" if expected["tied"] else "have a weight of its own"
            return f"with tie_weights={expected['tied']}, lm_head should {want}"
        return diagnose_tensors(result.get("parameters"), expected["parameters"], inputs, tol)
    return diagnose_tensors(result, expected, inputs, tol)


def diagnose_breakdown(result, expected) -> str | None:
    if not isinstance(result, dict) or not isinstance(result.get("breakdown"), dict):
        return f"expected a dict, got {describe(result)}"
    got, want = result["breakdown"], expected["breakdown"]
    keys = {"embeddings", "attention", "ffn", "norms", "lm_head"}
    if set(got) != keys:
        return f"the keys are {sorted(got)}, expected {sorted(keys)}"
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in got.values()):
        return "every value should be a number of parameters"
    if sum(got.values()) != expected["total"]:
        return f"the parts sum to {sum(got.values()):,}, but the model has {expected['total']:,} parameters"
    for key in ("attention", "ffn", "norms"):
        if got[key] != want[key]:
            return f"`{key}` is {got[key]:,}, expected {want[key]:,}"
    # A tied matrix may be counted under embeddings or under lm_head: both are accepted.
    if got["embeddings"] + got["lm_head"] != want["embeddings"] + want["lm_head"]:
        return "`embeddings` and `lm_head` together are off"
    if got["embeddings"] not in (want["embeddings"], want["embeddings"] + want["lm_head"]) and not expected["tied"]:
        return f"`embeddings` is {got['embeddings']:,}, expected {want['embeddings']:,}"
    return None


# ---------------------------------------------------------------- probes


def config_probe(positional):
    fields = config_fields(50, 16, 8, 2, 2)

    def probe(api, inputs: Inputs):
        given = list(fields.values())[:5]
        config = api.new("GPTConfig", *given) if positional else api.new("GPTConfig", **dict(
            zip(list(fields)[:5], given, strict=True)))
        return {"fields": {name: _field(api, config, name) for name in fields}}

    return probe


def _field(api, obj, name):
    try:
        return api.attr(obj, name)
    except (ProbeFailed, AttributeError):
        return "<missing>"


def model_inputs(fields: dict, batch=2, T=5, state=True):
    def make(rng):
        seed = int(rng.integers(0, 2**31))
        idx = torch.from_numpy(rng.integers(0, fields["vocab_size"], (batch, T)))
        kwargs = {"fields": fields}
        if state:
            kwargs["state"] = random_state(fields, seed)
        return Inputs((idx,), kwargs)

    return make


def random_state(fields, seed):
    """A state dict for the reference GPT, drawn from `seed` (norm gains near 1)."""
    import types

    torch.manual_seed(seed)
    state = shared_random_state(ref().GPT(types.SimpleNamespace(**fields)), seed, gain_spread=0.1)
    if fields["tie_weights"]:
        state["lm_head.weight"] = state["token_emb.weight"]
    return state


def built_model(api, inputs: Inputs):
    config = api.record(**inputs.kwargs["fields"])
    model = api.new("GPT", config)
    api.method(model, "load_state_dict", inputs.kwargs["state"])
    api.method(model, "eval", keep=True)
    return model


def logits_probe(api, inputs: Inputs):
    model = built_model(api, inputs)
    return api.forward(model, inputs.args[0])


def causal_probe(api, inputs: Inputs):
    model = built_model(api, inputs)
    idx = inputs.args[0]
    k = idx.shape[1] // 2
    later = idx.clone()
    later[:, k:] = (later[:, k:] + 1) % inputs.kwargs["fields"]["vocab_size"]
    return api.forward(model, idx)[:, :k] - api.forward(model, later)[:, :k]


def too_long_probe(api, inputs: Inputs):
    model = built_model(api, inputs)
    n = inputs.kwargs["fields"]["context_length"] + 1
    try:
        api.forward(model, torch.zeros(1, n, dtype=torch.long))
    except ProbeFailed as failed:
        return {"error": failed.outcome.error_type or "error"}
    except Exception as err:  # noqa: BLE001 - the reference or a variant raising
        return {"error": type(err).__name__}
    return {"error": None}


def tying_probe(api, inputs: Inputs):
    """Whether lm_head shares token_emb's Parameter (named_parameters lists a shared
    Parameter once), and the parameters' names and shapes."""
    config = api.record(**inputs.kwargs["fields"])
    model = api.new("GPT", config)
    names = set(api.grads(model))
    state = api.method(model, "state_dict")
    return {"tied": "lm_head.weight" not in names,
            "parameters": {"parameters": {k: list(v.shape) for k, v in state.items()}}}


def gradient_probe(api, inputs: Inputs):
    model = built_model(api, inputs)
    api.method(model, "train", keep=True)
    idx = inputs.args[0]
    logits = api.forward(model, idx, keep=True)
    vocab = inputs.kwargs["fields"]["vocab_size"]
    upstream = torch.from_numpy(np.random.default_rng(11).normal(size=(*idx.shape, vocab))).float()
    api.method(logits, "backward", upstream)
    return api.grads(model)


def count_probe(api, inputs: Inputs):
    return api.call("count_parameters", api.record(**inputs.kwargs["fields"]))


def breakdown_probe(api, inputs: Inputs):
    fields = inputs.kwargs["fields"]
    breakdown = api.call("parameter_breakdown", api.record(**fields))
    return {"breakdown": breakdown, "total": numel_oracle(inputs), "tied": fields["tie_weights"]}


def numel_oracle(inputs: Inputs) -> int:
    """sum(p.numel()) of the reference GPT, built on the meta device (shapes, no memory)."""
    import types

    with torch.device("meta"):
        model = ref().GPT(types.SimpleNamespace(**inputs.kwargs["fields"]))
    return int(sum(p.numel() for p in model.parameters()))


def published_oracle(inputs: Inputs) -> int:
    return inputs.kwargs["published"]


def count_inputs(fields: dict, published: int | None = None):
    def make(rng):
        kwargs = {"fields": fields}
        if published is not None:
            kwargs["published"] = published
        return Inputs((), kwargs)

    return make


def random_configs(count=20, seed=2026):
    rng = np.random.default_rng(seed)
    configs = []
    for _ in range(count):
        n_heads = int(rng.choice([1, 2, 3, 4]))
        d_model = n_heads * int(rng.integers(2, 9))
        d_ff = None if rng.random() < 0.5 else int(rng.integers(3, 40))
        configs.append(config_fields(int(rng.integers(5, 300)), int(rng.integers(1, 64)), d_model,
                                     int(rng.integers(1, 5)), n_heads, d_ff, bool(rng.random() < 0.5)))
    return configs


# ---------------------------------------------------------------- positions


def sinusoid_oracle(inputs: Inputs):
    """The table from complex exponentials: column pair i holds exp(1j * p * w_i)."""
    n_positions, d_model = inputs.args
    p = np.arange(n_positions)[:, None]
    w = 10000.0 ** (-np.arange(0, d_model, 2) / d_model)
    z = np.exp(1j * p * w)
    table = np.empty((n_positions, d_model))
    table[:, 0::2], table[:, 1::2] = z.imag, z.real
    return torch.from_numpy(table).float()


def rope_oracle(inputs: Inputs):
    """Each pair (2i, 2i+1) as one complex number, multiplied by exp(1j * p * base**(-2i/d))."""
    x = inputs.args[0]
    positions = inputs.kwargs.get("positions", inputs.args[1] if len(inputs.args) > 1 else None)
    base = inputs.kwargs.get("base", 10000.0)
    *_, T, d = x.shape
    p = np.arange(T) if positions is None else np.asarray(positions)
    array = x.detach().numpy().astype(np.float64)
    z = array[..., 0::2] + 1j * array[..., 1::2]
    z = z * np.exp(1j * p[:, None] * base ** (-np.arange(0, d, 2) / d))
    out = np.empty_like(array)
    out[..., 0::2], out[..., 1::2] = z.real, z.imag
    return torch.from_numpy(out).to(x.dtype)


def rope_inputs(shape, dtype=torch.float32, positions=None, base=None):
    def make(rng):
        x = torch.from_numpy(rng.normal(size=shape)).to(dtype)
        kwargs = {}
        if positions is not None:
            kwargs["positions"] = torch.tensor(positions)
        if base is not None:
            kwargs["base"] = base
        return Inputs((x,), kwargs)

    return make


def offset_probe(api, inputs: Inputs):
    """q at position m against k at position n, for (m, n) = (3, 1), (7, 5), (12, 10):
    three dot products that must be equal (the offset is 2 each time)."""
    q, k = inputs.args
    dots = []
    for m, n in ((3, 1), (7, 5), (12, 10)):
        rq = api.call("rope", q, torch.tensor([m]))
        rk = api.call("rope", k, torch.tensor([n]))
        for rotated in (rq, rk):
            if not isinstance(rotated, torch.Tensor) or rotated.shape != q.shape:
                return rotated  # not a rotated copy of the input: the comparison says what it is
        dots.append((rq * rk).sum())
    return torch.stack(dots) - dots[0]


def offset_inputs(rng):
    return Inputs((torch.from_numpy(rng.normal(size=(1, 8))).double(),
                   torch.from_numpy(rng.normal(size=(1, 8))).double()))


# ---------------------------------------------------------------- the wrong variants


def sinusoid_with(swap=False, halves=False, exponent="2i"):
    def variant(reference, n_positions, d_model):
        p = torch.arange(n_positions, dtype=torch.float64)[:, None]
        i = torch.arange(0, d_model, 2, dtype=torch.float64) if exponent == "2i" else \
            torch.arange(d_model // 2, dtype=torch.float64)
        angle = p / 10000.0 ** (i / d_model)
        first, second = (torch.cos(angle), torch.sin(angle)) if swap else (torch.sin(angle), torch.cos(angle))
        if halves:
            return torch.cat([first, second], dim=-1).float()
        table = torch.empty(n_positions, d_model, dtype=torch.float64)
        table[:, 0::2], table[:, 1::2] = first, second
        return table.float()

    return variant


def rope_with(halves=False, exponent="2i", sign=1.0, ignore_positions=False):
    def variant(reference, x, positions=None, base=10000.0):
        *_, T, d = x.shape
        p = torch.arange(T) if positions is None or ignore_positions else positions
        i = torch.arange(0, d, 2) if exponent == "2i" else torch.arange(d // 2)
        theta = sign * p[:, None].double() * base ** (-i.double() / d)
        cos, sin = torch.cos(theta).to(x.dtype), torch.sin(theta).to(x.dtype)
        if halves:  # rotate the first half against the second (the "rotate_half" layout)
            a, b = x[..., : d // 2], x[..., d // 2:]
            return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)
        a, b = x[..., 0::2], x[..., 1::2]
        out = torch.empty_like(x)
        out[..., 0::2], out[..., 1::2] = a * cos - b * sin, a * sin + b * cos
        return out

    return variant


def gpt_variant(**knobs):
    def make(reference):
        class Wrong(reference.GPT):
            def __init__(self, config):
                super().__init__(config)
                if knobs.get("untied") and config.tie_weights:
                    self.lm_head.weight = nn.Parameter(self.token_emb.weight.detach().clone())
                if knobs.get("tied_always") and not config.tie_weights:
                    self.lm_head.weight = self.token_emb.weight
                if knobs.get("shared_block"):
                    self.blocks = nn.ModuleList([self.blocks[0]] * len(self.blocks))

            def forward(self, idx):
                B, T = idx.shape
                if T > self.config.context_length:
                    raise ValueError("sequence longer than context_length")
                x = self.token_emb(idx)
                if not knobs.get("no_positions"):
                    start = 1 if knobs.get("positions_from_one") else 0
                    positions = torch.arange(start, T + start, device=idx.device) % self.config.context_length
                    x = x + self.pos_emb(positions)
                for block in self.blocks:
                    x = block(x)
                if not knobs.get("no_final_norm"):
                    x = self.ln_f(x)
                return self.lm_head(x)

        return Wrong

    return make


def count_with(**knobs):
    """A closed form with one term wrong."""

    def variant(reference, config):
        d, L, V, T = config.d_model, config.n_layers, config.vocab_size, config.context_length
        d_ff = config.d_ff or (d if knobs.get("d_ff_default_d_model") else 4 * d)
        biases = 0 if knobs.get("no_biases") else 1
        attention = 4 * d * d + 4 * d * biases
        ffn = 2 * d * d_ff + (d_ff + d) * biases
        norms = 0 if knobs.get("no_norms") else (2 * 2 * d * L + (0 if knobs.get("no_final_norm") else 2 * d))
        embeddings = V * d + (0 if knobs.get("no_positions") else T * d)
        head = 0 if config.tie_weights and not knobs.get("tied_counted_twice") else V * d
        return L * (attention + ffn) + norms + embeddings + head

    return variant


MISCONCEPTIONS = (
    Misconception(
        "config_tie_default_false", "a GPTConfig whose tie_weights defaults to False",
        "The contract's default is tie_weights=True, as in GPT-2.",
        {"GPTConfig": lambda reference: _config_with_default(reference, "tie_weights", False)},
    ),
    Misconception(
        "config_d_ff_default_set", "a GPTConfig whose d_ff default is a number instead of None",
        "Leave d_ff=None in the config: the block turns None into 4 * d_model.",
        {"GPTConfig": lambda reference: _config_with_default(reference, "d_ff", 0)},
    ),
    Misconception(
        "sinusoid_sin_cos_swapped", "cos on the even columns and sin on the odd ones",
        "The table puts sin on even columns (0, 2, ...) and cos on odd ones: row 0 is [0, 1, 0, 1, ...].",
        {"sinusoidal_positions": sinusoid_with(swap=True)},
    ),
    Misconception(
        "sinusoid_halves", "all the sines in the first half of the columns and the cosines in the second",
        "Interleave them: column 2i holds sin and column 2i + 1 holds cos of the same angle.",
        {"sinusoidal_positions": sinusoid_with(halves=True)},
    ),
    Misconception(
        "sinusoid_exponent_i", "frequencies 10000 ** (-i / d_model) for pair i instead of 10000 ** (-2i / d_model)",
        "The exponent runs over the even column index 2i: the slowest pair then has a wavelength near 10000 * 2 pi.",
        {"sinusoidal_positions": sinusoid_with(exponent="i")},
    ),
    Misconception(
        "gpt_no_positions", "a model that never adds the position embedding",
        "Add pos_emb(positions) to the token embeddings, with positions = 0, 1, ..., T - 1.",
        {"GPT": gpt_variant(no_positions=True)},
    ),
    Misconception(
        "gpt_positions_from_one", "positions counted from 1 instead of 0",
        "The first token is at position 0: torch.arange(T).",
        {"GPT": gpt_variant(positions_from_one=True)},
    ),
    Misconception(
        "gpt_no_final_norm", "a model without the final LayerNorm before lm_head",
        "Pre-norm blocks leave the stream unnormalised: apply ln_f before lm_head.",
        {"GPT": gpt_variant(no_final_norm=True)},
    ),
    Misconception(
        "gpt_not_tied", "an lm_head with a weight of its own although tie_weights is True",
        "Tie by sharing the Parameter itself: self.lm_head.weight = self.token_emb.weight (copying the values "
        "is not tying: they drift apart in training).",
        {"GPT": gpt_variant(untied=True)},
    ),
    Misconception(
        "gpt_always_tied", "an lm_head tied to token_emb even when tie_weights is False",
        "Only share the weight when config.tie_weights is True.",
        {"GPT": gpt_variant(tied_always=True)},
    ),
    Misconception(
        "gpt_one_block_repeated", "the same block repeated n_layers times ([block] * n_layers)",
        "Make a new TransformerBlock for every layer: a list of n copies of one module shares its weights.",
        {"GPT": gpt_variant(shared_block=True)},
    ),
    Misconception(
        "count_tied_twice", "a count that includes the tied lm_head matrix as well as token_emb",
        "A tied matrix is one set of parameters: count V * d once when tie_weights is True.",
        {"count_parameters": count_with(tied_counted_twice=True)},
    ),
    Misconception(
        "count_no_biases", "a count that leaves out the linear layers' biases",
        "q_proj, k_proj, v_proj, out_proj, fc1 and fc2 each have a bias: 4 d + d_ff + d per block.",
        {"count_parameters": count_with(no_biases=True)},
    ),
    Misconception(
        "count_no_norms", "a count that leaves out the LayerNorms",
        "Every LayerNorm holds a weight and a bias of d_model each: two per block, plus ln_f.",
        {"count_parameters": count_with(no_norms=True)},
    ),
    Misconception(
        "count_no_final_norm", "a count that forgets ln_f",
        "The final LayerNorm adds 2 * d_model.",
        {"count_parameters": count_with(no_final_norm=True)},
    ),
    Misconception(
        "count_no_positions", "a count that forgets the position embedding",
        "pos_emb holds context_length * d_model parameters.",
        {"count_parameters": count_with(no_positions=True)},
    ),
    Misconception(
        "count_d_ff_default", "a count that takes d_ff = d_model when d_ff is None",
        "When d_ff is None the block uses 4 * d_model.",
        {"count_parameters": count_with(d_ff_default_d_model=True)},
    ),
    Misconception(
        "rope_rotate_halves", "rotary embedding that pairs column i with column i + d/2",
        "The contract pairs neighbouring columns (2i, 2i + 1), as the RoFormer paper does.",
        {"rope": rope_with(halves=True)},
    ),
    Misconception(
        "rope_exponent_i", "rotary angles p * base ** (-i / d) for pair i instead of base ** (-2i / d)",
        "The exponent uses the even column index 2i: pair i turns at base ** (-2i / d) per position.",
        {"rope": rope_with(exponent="i")},
    ),
    Misconception(
        "rope_wrong_direction", "a rotation the wrong way round ((a cos t + b sin t, -a sin t + b cos t))",
        "Rotate (a, b) to (a cos t - b sin t, a sin t + b cos t).",
        {"rope": rope_with(sign=-1.0)},
    ),
    Misconception(
        "rope_ignores_positions", "rotary embedding that ignores the `positions` argument",
        "Use the positions you are given when there are some; 0..T-1 is only the default.",
        {"rope": rope_with(ignore_positions=True)},
    ),
)


def _config_with_default(reference, field, value):
    import dataclasses

    fields = [(f.name, f.type, dataclasses.field(default=value) if f.name == field else
               (dataclasses.field(default=f.default) if f.default is not dataclasses.MISSING else dataclasses.field()))
              for f in dataclasses.fields(reference.GPTConfig)]
    return dataclasses.make_dataclass("GPTConfig", fields)


# ---------------------------------------------------------------- the graded parts

SMALL = config_fields(40, 12, 8, 2, 2)
SMALL_UNTIED = config_fields(40, 12, 8, 2, 2, d_ff=20, tie_weights=False)
ODD = config_fields(37, 9, 12, 3, 3)
SMALL_64 = config_fields(30, 8, 8, 1, 2)

COUNT_CHECKS = tuple(
    Check(f"config_{n:02d}", f"a random configuration: {', '.join(f'{k}={v}' for k, v in fields.items())}", 0.25,
          count_inputs(fields), tol=EXACT, probe=count_probe, oracle=numel_oracle)
    for n, fields in enumerate(random_configs())
) + tuple(
    Check(f"gpt2_{name}", f"GPT-2 {name} (vocab 50257, context 1024, {layers} layers, d_model {d}, {heads} heads)",
          0.5, count_inputs(config_fields(50257, 1024, d, layers, heads), published), tol=EXACT, probe=count_probe,
          oracle=published_oracle)
    for name, (layers, d, heads, published) in GPT2.items()
)

PARTS = (
    Part(
        "GPTConfig",
        kind="class",
        diagnose=diagnose,
        checks=(
            Check("defaults", "GPTConfig(vocab_size=50, context_length=16, d_model=8, n_layers=2, n_heads=2)", 1,
                  lambda rng: Inputs(()), probe=config_probe(positional=False)),
            Check("field_order", "GPTConfig(50, 16, 8, 2, 2): the fields in the contract's order", 1,
                  lambda rng: Inputs(()), probe=config_probe(positional=True)),
        ),
    ),
    Part(
        "sinusoidal_positions",
        diagnose=diagnose,
        checks=(
            Check("small", "sinusoidal_positions(6, 4)", 1, lambda rng: Inputs((6, 4)), tol=TABLE,
                  oracle=sinusoid_oracle),
            Check("long", "sinusoidal_positions(64, 16)", 1, lambda rng: Inputs((64, 16)), tol=TABLE,
                  oracle=sinusoid_oracle),
            Check("width_10", "sinusoidal_positions(20, 10) (d_model not a power of two)", 1,
                  lambda rng: Inputs((20, 10)), tol=TABLE, oracle=sinusoid_oracle),
        ),
    ),
    Part(
        "GPT",
        kind="class",
        not_from=("coursekit.gpt.GPT",),
        diagnose=diagnose,
        checks=(
            Check("tied_parameters", "a tied model: its parameters' names and shapes, lm_head sharing token_emb's "
                  "weight", 1, model_inputs(SMALL, state=False), probe=tying_probe),
            Check("untied_parameters", "tie_weights=False and d_ff=20: lm_head with a weight of its own", 1,
                  model_inputs(SMALL_UNTIED, state=False), probe=tying_probe),
            Check("logits", "logits for a batch of 2 sequences of 5 tokens", 1, model_inputs(SMALL), tol=F32,
                  probe=logits_probe),
            Check("logits_untied_odd", "an untied model, d_model 12 with 3 heads, batch 1, 9 tokens (the whole "
                  "context)", 1, model_inputs({**ODD, "tie_weights": False}, batch=1, T=9), tol=F32,
                  probe=logits_probe),
            Check("single_token", "a single token per sequence", 1, model_inputs(SMALL, batch=3, T=1), tol=F32,
                  probe=logits_probe),
            Check("causal", "logits before position 4 do not change when later tokens do", 1,
                  model_inputs(SMALL, batch=2, T=8), tol=F32, probe=causal_probe),
            Check("too_long", "a sequence longer than context_length raises ValueError", 1,
                  model_inputs(SMALL, batch=1, T=2), probe=too_long_probe),
            Check("gradient", "gradients of every parameter (tied: one gradient for token_emb)", 1,
                  model_inputs(SMALL, batch=2, T=4), tol=Tolerance(1e-4, 1e-5), probe=gradient_probe),
        ),
    ),
    Part("count_parameters", diagnose=diagnose, checks=COUNT_CHECKS),
    Part(
        "parameter_breakdown",
        diagnose=diagnose,
        checks=(
            Check("tied", "GPT-2 small (tied)", 1, count_inputs(config_fields(50257, 1024, 768, 12, 12)),
                  probe=breakdown_probe),
            Check("untied", "a small untied model with d_ff=20", 1, count_inputs(SMALL_UNTIED), probe=breakdown_probe),
            Check("odd", "d_model 12, 3 layers, 3 heads (tied)", 1, count_inputs(ODD), probe=breakdown_probe),
        ),
    ),
    Part(
        "rope",
        diagnose=diagnose,
        checks=(
            Check("default_positions", "x (2, 5, 8), positions 0..4", 1, rope_inputs((2, 5, 8)), tol=F32,
                  oracle=rope_oracle),
            Check("given_positions", "x (3, 4, 6) at positions [7, 3, 0, 11] (d not a power of two)", 1,
                  rope_inputs((3, 4, 6), positions=[7, 3, 0, 11]), tol=F32, oracle=rope_oracle),
            Check("float64_heads", "x (2, 2, 6, 4) in float64 (batch and heads), base 100", 1,
                  rope_inputs((2, 2, 6, 4), torch.float64, base=100.0), tol=F64, oracle=rope_oracle),
            Check("single_position", "x (1, 1, 8) at position 0 (the identity)", 1, rope_inputs((1, 1, 8)),
                  tol=F32, oracle=rope_oracle),
            Check("offset_only", "rope(q, m) . rope(k, n) is the same for (3, 1), (7, 5) and (12, 10)", 1,
                  offset_inputs, tol=F64, probe=offset_probe),
            Check("inputs_unchanged", "x is not modified", 1, rope_inputs((2, 3, 4)), kind="unchanged"),
        ),
    ),
)

UNIT = Unit(
    UNIT_NAME,
    parts=PARTS,
    misconceptions=MISCONCEPTIONS,
    # The course's finished GPT (for units 06 and 07) is what this unit asks students to write:
    # their sandbox shows its file empty, so it cannot be imported, read or rebuilt there.
    hidden=("coursekit/gpt.py",),
    sample_bug=SampleBug("rope", "[:, None] * theta", "[:, None] * -theta", "rope_wrong_direction"),
)
