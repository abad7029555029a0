"""Unit 05, the model (PyTorch): the hidden checks and the misconception catalogue.

The reference is the solution notebook (`solutions/05_model/model.ipynb`). Independent
oracles where there is one: `count_parameters` against `sum(p.numel())` of the reference
model built on PyTorch's meta device (shapes only) and against GPT-2's published size,
`sinusoidal_positions` and `rope` against formulas written here with complex numbers.

The counts are graded term by term (how the count changes with each field of the config;
each key of the breakdown), so that a slip in one small term costs less than a wrong big one.
`GPT`'s initialisation is graded on a freshly built model: its first loss and its weights'
statistics (GPT-2's scheme, see "initialisation" below).

The model and the counting functions are given plain records of the configuration
(`api.record`), not the student's `GPTConfig`: a mistake in one part never costs points
in another. The block comes from `coursekit.blocks`, so nothing here depends on unit 04.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..engine.compare import Tolerance, as_array, describe
from ..engine.locate import close, shown, what
from ..engine.probes import ProbeFailed
from ..engine.reference import load_reference
from ..engine.spec import Check, Inputs, Misconception, Part, SampleBug, Unit
from ..engine.weights import random_state as shared_random_state
from .block import diagnose as diagnose_tensors

UNIT_NAME = "05_model"
F32 = Tolerance(rtol=1e-4, atol=1e-5)
F64 = Tolerance(rtol=1e-7, atol=1e-9)
TABLE = Tolerance(rtol=0.0, atol=1e-4)  # the contract's tolerance for the sinusoid table
EXACT = Tolerance(rtol=0.0, atol=0.0)

GPT2_SMALL = 124_439_808  # the published parameter count of GPT-2 small (tied embeddings)


def ref():
    return load_reference(UNIT_NAME)


def config_fields(vocab_size, context_length, d_model, n_layers, n_heads, d_ff=None, tie_weights=True) -> dict:
    return dict(vocab_size=vocab_size, context_length=context_length, d_model=d_model, n_layers=n_layers,
                n_heads=n_heads, d_ff=d_ff, tie_weights=tie_weights)


# ---------------------------------------------------------------- what is graded


def graded() -> Unit:
    """The graded parts: each check, what it shows, and its points. What the checks use (their
    inputs, diagnoses and probes) and the catalogue of mistakes they name are below; this is
    called at the end of the module, once all of it is defined."""
    COUNT_CHECKS = tuple(
        Check(name, what, points, count_inputs(COUNT_BASE, should_be=should_be, term_name=name), tol=EXACT,
              probe=term_probe(measure, pieces=name == "block"))
        for name, (points, what, measure, should_be) in TERMS.items()
    ) + (
        Check("gpt2_small", "GPT-2 small (vocab 50257, context 1024, 12 layers, d_model 768, 12 heads): exactly", 0.5,
              count_inputs(config_fields(50257, 1024, 768, 12, 12), published=GPT2_SMALL), tol=EXACT,
              probe=count_probe, oracle=published_oracle),
        Check("untied_exact", "a small untied model (vocab 37, context 9, d_model 12, 3 layers, 3 heads, d_ff 20): "
              "exactly", 0.5, count_inputs({**ODD, "d_ff": 20, "tie_weights": False}), tol=EXACT, probe=count_probe,
              oracle=numel_oracle),
    )

    parts = (
        Part(
            "GPTConfig",
            kind="class",
            diagnose=diagnose,
            checks=(
                Check("defaults", "GPTConfig(vocab_size=50, context_length=16, d_model=8, n_layers=3, n_heads=2)", 1,
                      lambda rng: Inputs(()), probe=config_probe(positional=False)),
                Check("field_order", "GPTConfig(50, 16, 8, 3, 2): the fields in the contract's order", 1,
                      lambda rng: Inputs(()), probe=config_probe(positional=True)),
            ),
        ),
        Part(
            "sinusoidal_positions",
            diagnose=diagnose,
            locate=locate_sinusoid,
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
            locate_probe=locate_gpt,
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
                Check("initial_loss",
                      "a freshly built GPT (vocab 256, d_model 64, 2 layers): its loss on random tokens "
                      "is near ln 256", 1, init_inputs, probe=initial_loss_probe),
                Check("initial_weights", "a freshly built GPT (vocab 256, d_model 64, 2 layers): its weights drawn as "
                      "GPT-2 draws them", 1, init_inputs, probe=init_probe),
            ),
        ),
        # Counted with arithmetic on the config, as the visible checks ask: building the modules (and
        # summing their numel) would hand the count to PyTorch.
        Part("count_parameters", diagnose=diagnose, checks=COUNT_CHECKS, forbid=NO_BUILDING),
        Part(
            "parameter_breakdown",
            diagnose=diagnose,
            forbid=NO_BUILDING,
            checks=tuple(
                Check(term, what, points, lambda rng, term=term: Inputs((), {"term": term}),
                      probe=breakdown_probe)
                for term, what, points in (
                    ("embeddings",
                     "`embeddings` and `lm_head` (token_emb, pos_emb, an untied lm_head), for GPT-2 small, "
                     "a small untied model and one of d_model 12", 1),
                    ("attention", "`attention`, for the same three models", 0.5),
                    ("ffn", "`ffn`, for the same three models", 0.5),
                    ("norms", "`norms`, for the same three models", 0.5),
                    ("total", "the sum of the five, for the same three models: sum(p.numel()) of each", 0.5),
                )
            ),
        ),
        Part(
            "rope",
            diagnose=diagnose,
            locate=locate_rope,
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

    return Unit(
        UNIT_NAME,
        # The slowest cell of the solution notebook takes under 2 s on a laptop CPU (its setup, importing
        # PyTorch): 15 s leaves room for a busy machine, and costs a looping notebook less.
        cell_seconds=15,
        reference_cpu_seconds=2.5,  # 2.36 s measured (spec.Unit.reference_cpu_seconds)
        notebook_cpu_seconds=4,  # 4 s measured (spec.Unit.notebook_cpu_seconds)
        parts=parts,
        misconceptions=MISCONCEPTIONS,
        # The course's finished GPT (for units 06 and 07) is what this unit asks students to write:
        # their sandbox shows its file empty, so it cannot be imported, read or rebuilt there.
        hidden=("coursekit/gpt.py",),
        sample_bug=SampleBug("rope", "[:, None] * theta", "[:, None] * -theta", "rope_wrong_direction"),
    )


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
    if isinstance(expected, dict) and ("loss" in expected or "labels" in expected):
        return diagnose_init(result, expected)
    if isinstance(expected, dict) and "term" in expected:
        return diagnose_term(result, expected, inputs)
    if isinstance(expected, dict) and "breakdowns" in expected:
        return diagnose_breakdown(result, expected, inputs)
    if isinstance(expected, int | float) and not isinstance(expected, bool):
        if not isinstance(result, int | float | np.integer | np.floating) or isinstance(result, bool | np.bool_):
            return f"expected a number, got {describe(result)}"
        if isinstance(expected, int) and isinstance(result, float | np.floating) and float(result) == expected:
            return (f"counted {float(result)!r}: the right number, but a float, where a count is a Python int "
                    "(a true division `/` somewhere in the count makes every sum after it a float: divide with `//`, "
                    "or multiply before dividing)")
        floated = isinstance(expected, int) and isinstance(result, float | np.floating)
        result = int(result) if float(result).is_integer() else float(result)
        if result != expected:
            blocks = (_blocks_off(result - expected, inputs.kwargs["fields"])
                      if isinstance(result, int) and isinstance(inputs.kwargs.get("fields"), dict) else None)
            return (f"counted {result:,}, expected {expected:,} (off by {result - expected:+,})"
                    + (" (and it came back as a float, where a count is a Python int: a true division `/` "
                       "somewhere? divide with `//`)" if floated else "")
                    + (f". Where it goes wrong: {blocks}" if blocks else ""))
        return None
    if isinstance(expected, dict) and "tied" in expected:
        if not isinstance(result, dict) or result.get("tied") != expected["tied"]:
            want = "share token_emb's weight" if expected["tied"] else "have a weight of its own"
            return f"with tie_weights={expected['tied']}, lm_head should {want}"
        return (_ffn_width_differs(result.get("parameters"), expected["parameters"], inputs)
                or diagnose_tensors(result.get("parameters"), expected["parameters"], inputs, tol))
    if isinstance(expected, torch.Tensor) and isinstance(result, torch.Tensor) and result.dtype != expected.dtype \
            and all(isinstance(a, int) for a in inputs.args):  # a table made from sizes alone
        return f"the table has dtype {result.dtype}, expected {expected.dtype} (convert it with .float() at the end)"
    return diagnose_tensors(result, expected, inputs, tol)


def _ffn_width_differs(result, expected, inputs: Inputs) -> str | None:
    """The blocks' feed-forward built another width than config.d_ff (4 * d_model where d_ff is given, say)."""
    fields = inputs.kwargs.get("fields")
    got = result.get("parameters") if isinstance(result, dict) else None
    want = expected.get("parameters") if isinstance(expected, dict) else None
    if not isinstance(fields, dict) or not isinstance(got, dict) or not isinstance(want, dict):
        return None
    d, d_ff = fields["d_model"], fields.get("d_ff") or 4 * fields["d_model"]
    name = "blocks.0.ffn.fc1.weight"
    shape = got.get(name)
    if name not in want or not isinstance(shape, list) or len(shape) != 2 or shape[1] != d or shape[0] == d_ff:
        return None
    width = shape[0]
    because = (f" = 4 * d_model, the default, though config.d_ff = {d_ff} is given" if width == 4 * d
               and fields.get("d_ff") is not None else "")
    return (f"`{name}` has shape {tuple(shape)}, expected {(d_ff, d)}: the blocks' feed-forward is {width} wide"
            f"{because}. The width is config.d_ff (4 * d_model only where d_ff is None): pass it on to each "
            "block, TransformerBlock(d_model, n_heads, d_ff)")


def diagnose_breakdown(result, expected, inputs: Inputs) -> str | None:
    if not isinstance(result, dict) or not isinstance(result.get("breakdowns"), dict):
        return f"could not read the breakdowns ({describe(result)})"
    term = inputs.kwargs["term"]
    for name, want in expected["breakdowns"].items():
        got = result["breakdowns"].get(name)
        if not isinstance(got, dict):
            return f"{name}: expected a dict, got {describe(got)}"
        if set(got) != set(BREAKDOWN_KEYS):
            return f"{name}: the keys are {sorted(got)}, expected {sorted(BREAKDOWN_KEYS)}"
        if not all(_is_number(v) for v in got.values()):
            return f"{name}: every value should be a number of parameters"
        floats = [key for key, value in got.items() if isinstance(value, float | np.floating)]
        if term == "total" and floats and sum(got.values()) == expected["totals"][name]:
            which = ", ".join(f"`{key}`" for key in floats)
            return (f"{name}: {which} {'is a float' if len(floats) == 1 else 'are floats'} ({got[floats[0]]!r}), "
                    "where a count is a Python int (a true division `/` makes a float: divide with `//`, or "
                    "multiply before dividing)")
        total = expected["totals"][name]
        if term == "total" and sum(got.values()) != total:
            return f"{name}: the parts sum to {sum(got.values()):,}, but the model has {total:,} parameters"
        if term in ("attention", "ffn", "norms") and got[term] != want[term]:
            problem = f"{name}: `{term}` is {got[term]:,}, expected {want[term]:,}"
            explanation = explain_count_difference({
                config: (breakdown[term], expected["breakdowns"][config][term], BREAKDOWN_CONFIGS[config])
                for config, breakdown in result["breakdowns"].items()
                if config in expected["breakdowns"] and isinstance(breakdown, dict)
                and _is_number(breakdown.get(term))})
            return f"{problem}. Where it goes wrong: {explanation}" if explanation else problem
        if term == "embeddings":
            # A tied matrix may be counted under embeddings or under lm_head: both are accepted.
            tied = want["lm_head"] == 0
            if got["embeddings"] + got["lm_head"] != want["embeddings"] + want["lm_head"]:
                return (f"{name}: `embeddings` and `lm_head` together are {got['embeddings'] + got['lm_head']:,}, "
                        f"expected {want['embeddings'] + want['lm_head']:,}")
            if not tied and got["embeddings"] != want["embeddings"]:
                return f"{name}: `embeddings` is {got['embeddings']:,}, expected {want['embeddings']:,}"
    return None


def _one_block(fields: dict) -> int:
    """The parameters of one block of a model of these fields (the reference's own count)."""
    return (_reference_numel(tuple(sorted({**fields, "n_layers": fields["n_layers"] + 1}.items())))
            - _reference_numel(tuple(sorted(fields.items()))))


def _blocks_off(difference: int, fields: dict, more: bool = True) -> str | None:
    """A count off by exactly one block, in words: a loop over the blocks that runs one time too few
    (range(1, n_layers)) or, with `more`, one too many; None otherwise. (Off by more blocks is left
    unsaid: a count of one block for n_layers of them reads so too, and is named by the catalogue.)"""
    block = _one_block(fields)
    many, rest = divmod(abs(difference), block)
    if difference == 0 or rest or many != 1 or fields["n_layers"] < 2 or (difference > 0 and not more):
        return None
    fewer = difference < 0
    blocks = f"{MANY[many]} block{'s' if many > 1 else ''}"
    whose = f"{MANY[many]} {'blocks' if many > 1 else 'block'}'{'' if many > 1 else 's'}"
    loop = ("range(1, n_layers) or range(n_layers - 1)?" if fewer else
            "range(n_layers + 1), or ln_f counted as a block?")
    return (f"the blocks counted. The count is off by {difference:+,}, {whose} parameters ({block:,} a block here: "
            "ln1, ln2, q_proj, k_proj, v_proj, out_proj, fc1 and fc2 with their biases): yours counts "
            f"{blocks} {'fewer' if fewer else 'more'} than n_layers (a loop over the blocks that runs {loop}): "
            "count n_layers blocks, for layer in range(n_layers)")


def _d_ff(config: dict) -> int:
    return 4 * config["d_model"] if config["d_ff"] is None else config["d_ff"]


# What a count that is off by some number of parameters left out or added, read from how far off
# it is in models of different sizes: the difference is a small multiple of one of these, the same
# in each model (per block: times n_layers). Each is (one, several, what it is, its size).
COUNT_PIECES_PER_BLOCK = (
    ("a vector of d_model", "vectors of d_model", "biases, or LayerNorms' weights or biases", lambda c: c["d_model"]),
    ("a vector of d_ff", "vectors of d_ff", "fc1's bias", lambda c: _d_ff(c)),
    ("a vector of d_ff and one of d_model", "vectors of d_ff and of d_model", "fc1's and fc2's biases",
     lambda c: _d_ff(c) + c["d_model"]),
    ("a vector of d_ff where one of d_model belongs", "vectors of d_ff where ones of d_model belong",
     "fc1's bias is of d_ff, fc2's of d_model", lambda c: _d_ff(c) - c["d_model"]),
    ("a d_model x d_model matrix", "d_model x d_model matrices", "attention projections' weights",
     lambda c: c["d_model"] ** 2),
    ("a d_model x d_model projection with its bias", "d_model x d_model projections with their biases",
     "q_proj, k_proj, v_proj, out_proj", lambda c: c["d_model"] ** 2 + c["d_model"]),
    ("a d_model x d_ff matrix", "d_model x d_ff matrices", "fc1's and fc2's weights",
     lambda c: c["d_model"] * _d_ff(c)),
)
COUNT_PIECES = (
    ("a vector of d_model outside the blocks", "vectors of d_model outside the blocks", "ln_f's weight and bias",
     lambda c: c["d_model"]),
    ("a vector of d_model in every LayerNorm (2 a block and ln_f)", "vectors of d_model in every LayerNorm",
     "a LayerNorm's weight and bias", lambda c: (2 * c["n_layers"] + 1) * c["d_model"]),
    ("a bias over the vocabulary", "biases over the vocabulary", "lm_head has none", lambda c: c["vocab_size"]),
    ("a vocab_size x d_model matrix", "vocab_size x d_model matrices", "token_emb's and lm_head's weights",
     lambda c: c["vocab_size"] * c["d_model"]),
    ("a context_length x d_model matrix", "context_length x d_model matrices", "pos_emb",
     lambda c: c["context_length"] * c["d_model"]),
)
MANY = {1: "one", 2: "two", 3: "three", 4: "four"}


def explain_count_difference(differences: dict[str, tuple[int, int, dict]], kinds=(True, False)) -> str | None:
    """How far off a count of one kind of parameter is: {model: (yours, expected, its config)},
    said as pieces of a model ("two vectors of d_model too few in every block"), where exactly one
    reading fits every model's difference: one multiple (1-4) of one piece, per block or for the
    whole model, or the blocks' count taken for one block (or n_layers times over). `kinds`: the
    pieces to read it with, those of a block (True) and those outside the blocks (False)."""
    off = {name: (got - want, want, config) for name, (got, want, config) in differences.items() if got != want}
    if not off:
        return None
    fits = []
    if all(want and difference == -want * (config["n_layers"] - 1) // config["n_layers"]
           and want % config["n_layers"] == 0 and config["n_layers"] > 1 for difference, want, config in off.values()):
        fits.append("the count of one block, not of n_layers blocks")
    if all(want and difference == want * (config["n_layers"] - 1) and config["n_layers"] > 1
           for difference, want, config in off.values()):
        fits.append("n_layers times the right count: the blocks multiplied by n_layers twice?")
    for pieces, per_block in ((COUNT_PIECES_PER_BLOCK, True), (COUNT_PIECES, False)):
        if per_block not in kinds:
            continue
        for one, several, gloss, size in pieces:
            for many in MANY:
                for sign in (1, -1):
                    if all(difference == sign * many * size(config) * (config["n_layers"] if per_block else 1)
                           for difference, _, config in off.values()):
                        what = one if many == 1 else f"{MANY[many]} {several}"
                        if " where " in what:  # a piece of one size in place of another: no "too many"
                            told = what if sign > 0 else what.replace("d_ff", "@").replace(
                                "d_model", "d_ff").replace("@", "d_model")
                        else:
                            told = f"{what} {'too many' if sign > 0 else 'too few'}"
                        fits.append(f"{told}{' in every block' if per_block else ''} ({gloss})")
    if len(fits) != 1:  # none, or more than one reading: say nothing rather than guess
        return None
    told = "; ".join(f"{difference:+,} in {name}" for name, (difference, _, _) in off.items())
    return f"the count is off by {told}: each time {fits[0]}"


# ---------------------------------------------------------------- probes


def config_probe(positional):
    fields = config_fields(50, 16, 8, 3, 2)  # every size different, so that a swap shows

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
    state = inputs.kwargs["state"]
    # What the contract does not name (a persistent buffer of position ids, say) keeps the
    # model's own value: the weights are loaded strictly, by the contract's names, and an extra
    # parameter is the structure checks' business.
    own = api.method(model, "state_dict")
    if isinstance(own, dict):
        state = {**{name: value for name, value in own.items() if name not in state}, **state}
    api.method(model, "load_state_dict", state)
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
    """Whether lm_head shares token_emb's Parameter (named_parameters lists a shared Parameter
    once), and the parameters' names and shapes: parameters only, since a buffer the contract
    does not ask for (position ids, say) is the student's own affair."""
    config = api.record(**inputs.kwargs["fields"])
    model = api.new("GPT", config)
    names = set(api.grads(model))
    state = api.method(model, "state_dict")
    if not isinstance(state, dict):
        return state  # the comparison says what it is
    return {"tied": "lm_head.weight" not in names,
            "parameters": {"parameters": {k: list(getattr(v, "shape", ())) for k, v in state.items() if k in names}}}


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


BREAKDOWN_CONFIGS = {  # what a message calls it: its configuration
    "GPT-2 small (tied)": config_fields(50257, 1024, 768, 12, 12),
    "a small untied model with d_ff=20": config_fields(40, 12, 8, 2, 2, d_ff=20, tie_weights=False),
    "d_model 12, 3 layers, 3 heads (tied)": config_fields(37, 9, 12, 3, 3),
}
BREAKDOWN_KEYS = ("embeddings", "attention", "ffn", "norms", "lm_head")


def breakdown_probe(api, inputs: Inputs):
    """The student's breakdown of each of BREAKDOWN_CONFIGS, with what it must sum to; a check
    judges one term of it (`inputs.kwargs["term"]`), so that a slip in one term costs that term."""
    return {"breakdowns": {name: api.call("parameter_breakdown", api.record(**fields))
                           for name, fields in BREAKDOWN_CONFIGS.items()},
            "totals": {name: numel_oracle(Inputs((), {"fields": fields}))
                       for name, fields in BREAKDOWN_CONFIGS.items()}}


def numel_oracle(inputs: Inputs) -> int:
    """sum(p.numel()) of the reference GPT, built on the meta device (shapes, no memory)."""
    return _reference_numel(tuple(sorted(inputs.kwargs["fields"].items())))


@functools.cache
def _reference_numel(fields: tuple) -> int:
    import types

    with torch.device("meta"):
        model = ref().GPT(types.SimpleNamespace(**dict(fields)))
    return int(sum(p.numel() for p in model.parameters()))


def published_oracle(inputs: Inputs) -> int:
    return inputs.kwargs["published"]


def count_inputs(fields: dict, published: int | None = None, should_be: str | None = None,
                 term_name: str | None = None):
    def make(rng):
        kwargs = {"fields": fields}
        if published is not None:
            kwargs["published"] = published
        if should_be is not None:
            kwargs["should_be"] = should_be
        if term_name is not None:  # which of TERMS the check measures
            kwargs["term_name"] = term_name
        return Inputs((), kwargs)

    return make


# ---------------------------------------------------------------- counting, term by term
# A count is one number, but how it changes with the config says which term is off: one more
# position adds a row of pos_emb (d_model), one more token id a row of token_emb (and of an
# untied lm_head), one more layer a block. Each check measures one term from the student's
# own counts, so a slip in one term costs that term's check and the exact totals, not every
# check, and the variant whose term is off the same way is named.

# d_ff 19: no two pieces of a block (1 to 4 of each) have the same size, so that a block's count that is
# off reads one way only (with d_ff 20, two vectors of d_ff - d_model are three of d_model).
COUNT_BASE = config_fields(40, 12, 8, 2, 2, d_ff=19)


def _is_number(value) -> bool:
    return isinstance(value, int | float | np.integer | np.floating) and not isinstance(value, bool | np.bool_)


class _NotANumber(Exception):
    def __init__(self, value):
        super().__init__("not a number")
        self.value = value


def _slope_of_ffn(count, d_model):
    return count(d_model=d_model, d_ff=21) - count(d_model=d_model, d_ff=20)


def _final_norm(count, f):
    """The count less everything that grows with n_layers, vocab_size and context_length."""
    no_blocks = count() - f["n_layers"] * (count(n_layers=f["n_layers"] + 1) - count())
    return (no_blocks - f["vocab_size"] * (count(vocab_size=f["vocab_size"] + 1) - count())
            - f["context_length"] * (count(context_length=f["context_length"] + 1) - count()))


# check name: (points, what the check measures, measure(count, fields), what it should be). The
# message reads "<what>: your count gives <n>, expected <m> (<what it should be>)".
TERMS = {
    "token_emb": (1, "the increase for one more token id (tied)",
                  lambda count, f: count(vocab_size=f["vocab_size"] + 1) - count(),
                  "d_model: a row of token_emb, which a tied lm_head shares"),
    "lm_head": (0.5, "the increase for one more token id with tie_weights=False",
                lambda count, f: count(vocab_size=f["vocab_size"] + 1, tie_weights=False) - count(tie_weights=False),
                "2 * d_model: a row of token_emb and a row of lm_head's own weight"),
    "pos_emb": (1, "the increase for one more position (context_length + 1)",
                lambda count, f: count(context_length=f["context_length"] + 1) - count(),
                "d_model: a row of pos_emb"),
    "ffn_width": (1, "how much more one more unit of d_ff adds at d_model 10 than at d_model 8",
                  lambda count, f: _slope_of_ffn(count, 10) - _slope_of_ffn(count, 8),
                  "2 * (10 - 8) * n_layers: each unit of d_ff adds a column of fc1 and a row of fc2, "
                  "2 * d_model weights per block"),
    "d_ff_default": (0.5, "the count with d_ff=None less the count with d_ff=4 * d_model",
                     lambda count, f: count(d_ff=None) - count(d_ff=4 * f["d_model"]),
                     "0: d_ff=None means 4 * d_model"),
    "block": (1.5, "the increase for one more layer (n_layers + 1, d_ff=19)",
              lambda count, f: count(n_layers=f["n_layers"] + 1) - count(),
              "a block: ln1, ln2, q_proj, k_proj, v_proj, out_proj, fc1 and fc2, with their biases"),
    "final_norm": (0.5, "what is left of the count without the terms that grow with vocab_size, context_length "
                   "and n_layers",
                   _final_norm, "2 * d_model: ln_f's weight and bias"),
}


# A block's count as a sum of pieces: d_model x d_model matrices, d_model x d_ff matrices, vectors of d_model,
# vectors of d_ff and single numbers, read from one more layer's increase at several (d_model, d_ff).
BLOCK_PIECES = (("d_model x d_model matrices", "the weights of q_proj, k_proj, v_proj and out_proj"),
                ("d_model x d_ff matrices", "fc1's and fc2's weights"),
                ("vectors of d_model", "the biases of q_proj, k_proj, v_proj, out_proj and fc2, and ln1's and ln2's "
                 "weight and bias"),
                ("vectors of d_ff", "fc1's bias"),
                ("single numbers", "a block has none"))
BLOCK_PIECES_RIGHT = (4, 2, 9, 1, 0)
PIECE_SIZES = ((8, 19), (8, 23), (10, 19), (12, 19), (12, 29), (16, 21))


def _block_pieces(count, fields: dict) -> list[int] | None:
    """How many of each of BLOCK_PIECES one more layer adds, where a whole number of each fits every size."""
    rows, added = [], []
    for d, f in PIECE_SIZES:
        rows.append([d * d, d * f, d, f, 1])
        added.append(count(n_layers=fields["n_layers"] + 1, d_model=d, d_ff=f) - count(d_model=d, d_ff=f))
    solved = np.linalg.lstsq(np.array(rows, dtype=np.float64), np.array(added, dtype=np.float64), rcond=None)[0]
    pieces = [round(float(v)) for v in solved]
    if not np.allclose(np.array(rows) @ np.array(pieces), added, atol=1e-6):
        return None
    return pieces


def term_probe(measure, pieces: bool = False):
    """{"term": measure(count, fields)}, count(**changes) being the student's count_parameters of
    the check's configuration with those fields changed; or the first result that is not a number.
    With `pieces`, also one more layer's increase read as BLOCK_PIECES ("pieces")."""

    def probe(api, inputs: Inputs):
        fields = inputs.kwargs["fields"]

        def count(**changes):
            value = api.call("count_parameters", api.record(**{**fields, **changes}))
            if not _is_number(value):
                raise _NotANumber(value)
            return int(value) if float(value).is_integer() else float(value)

        try:
            term = {"term": measure(count, fields)}
            if pieces:
                try:
                    term["pieces"] = _block_pieces(count, fields)
                except (ProbeFailed, _NotANumber, TypeError, ValueError):
                    term["pieces"] = None
            return term
        except _NotANumber as odd:
            return odd.value

    return probe


def diagnose_term(result, expected, inputs: Inputs) -> str | None:
    if not isinstance(result, dict) or not _is_number(result.get("term")):
        return f"expected a number, got {describe(result)}"
    got, want = result["term"], expected["term"]
    if got == want:
        return None
    problem = f"your count gives {got:,}, expected {want:,} ({inputs.kwargs['should_be']})"
    # One block's count and what is left outside the blocks are sums of pieces of a model: how far
    # off they are says which piece, where exactly one reading fits.
    term_name = inputs.kwargs.get("term_name")
    fields = inputs.kwargs["fields"]
    # What is left outside the blocks (the count less n_layers times one more layer's increase) is off by
    # whole blocks when the count has a block too few or too many: each block's own count then still right.
    if term_name == "final_norm" and isinstance(got, int) and isinstance(want, int):
        # (only fewer: a count of one block for n_layers of them leaves one block over here)
        blocks = _blocks_off(got - want, fields, more=False)
        if blocks:
            return f"{problem}. Where it goes wrong: {blocks}"
    # A term that grows with n_layers, counted for n_layers + k blocks: got / want = (n_layers + k) / n_layers.
    if term_name == "ffn_width" and _is_number(got) and want and got != want:
        k = fields["n_layers"] * (got - want) / want
        if float(k).is_integer() and abs(int(k)) == 1 and fields["n_layers"] > 1:
            k = int(k)
            fewer = k < 0
            return (f"{problem}. Where it goes wrong: the blocks counted. Yours is (n_layers {'-' if fewer else '+'} "
                    f"{abs(k)}) / n_layers of it: {MANY[abs(k)]} block{'s' if abs(k) > 1 else ''} "
                    f"{'fewer' if fewer else 'more'} than n_layers counted (a loop over the blocks that runs "
                    f"{'range(1, n_layers)' if fewer else 'range(n_layers + 1)'}?)")
    kinds = {"block": (True,), "final_norm": (False,)}.get(term_name)
    if kinds and isinstance(got, int) and isinstance(want, int):
        config = {**inputs.kwargs["fields"], "n_layers": 1} if kinds == (True,) else inputs.kwargs["fields"]
        explanation = explain_count_difference({"the configuration checked": (got, want, config)}, kinds)
        if explanation:
            return f"{problem}. Where it goes wrong: {explanation}"
    pieces = result.get("pieces")
    if term_name == "block" and isinstance(pieces, list) and len(pieces) == len(BLOCK_PIECES) \
            and list(pieces) != list(BLOCK_PIECES_RIGHT):
        told = "; ".join(f"{theirs} {name} where a block has {right} ({what})" for (name, what), theirs, right
                         in zip(BLOCK_PIECES, pieces, BLOCK_PIECES_RIGHT, strict=True) if theirs != right)
        return (f"{problem}. Where it goes wrong: the block's pieces. Read at several d_model and d_ff, one more "
                f"layer adds in yours {told}: count each of these pieces once a block")
    return problem


# ---------------------------------------------------------------- initialisation
# GPT-2's: every nn.Linear and nn.Embedding weight from N(0, 0.02), the biases zero, and the two
# layers of a block that write into the residual stream (out_proj, fc2) from N(0, 0.02 / sqrt(2 L)).
# A freshly built model then gives near-uniform logits (a first loss near ln V) and a residual
# stream whose variance does not grow with depth. Measured on a model of unit 07's vocabulary,
# wide enough that a standard deviation is known to a few per cent.

INIT = config_fields(256, 32, 64, 2, 2)
GPT2_STD = 0.02
RESIDUAL_LAYERS = ("attn.out_proj", "ffn.fc2")
INNER_LAYERS = ("attn.q_proj", "attn.k_proj", "attn.v_proj", "ffn.fc1")
NORMS = ("ln1", "ln2")


def _std_label(target: float, weights: list, scaled: float | None = None) -> str:
    """Which of the usual draws a group of weight matrices looks like (20% either way); `scaled`: the
    residual layers' 0.02 / sqrt(2 * n_layers), for a linear layer (not a table)."""
    def near(value, want):
        return abs(value - want) <= 0.2 * want

    std = float(torch.cat([w.flatten() for w in weights]).std())
    each = [(float(w.std()), w.shape[-1], w.shape[0]) for w in weights]  # (std, fan_in, fan_out)
    if near(std, target):
        return "as GPT-2"
    if all(near(s, 1 / np.sqrt(3 * fan_in)) for s, fan_in, _ in each):
        return "nn.Linear's default"
    if all(near(s, np.sqrt(2 / (fan_in + fan_out))) for s, fan_in, fan_out in each):
        return "Xavier"
    if near(std, 1.0):
        return "N(0, 1)"
    if near(std, GPT2_STD):
        return "N(0, 0.02)"
    if scaled is not None and near(std, scaled):
        return "scaled"
    return "another scale"


def init_summary(state, fields: dict, untied_state=None) -> dict:
    """{"labels": {group: what its weights look like}, "std": {group: measured}} from a state dict
    (and an untied model's, for its lm_head). Each linear layer of the blocks is a group of its own
    (its weights in every block), so that one layer drawn otherwise shows beside the others."""
    def tensor(name, source=state):
        value = source.get(name) if isinstance(source, dict) else None
        if not isinstance(value, torch.Tensor) or not value.is_floating_point() or value.numel() == 0:
            raise KeyError(name)
        return value.detach().double()

    L = fields["n_layers"]
    scaled = GPT2_STD / np.sqrt(2 * L)
    labels, stds = {}, {}
    try:
        tables = {"token_emb": tensor("token_emb.weight"), "pos_emb": tensor("pos_emb.weight")}
        layers = {layer: [tensor(f"blocks.{b}.{layer}.weight") for b in range(L)]
                  for layer in INNER_LAYERS + RESIDUAL_LAYERS}
        biases = torch.cat([tensor(f"blocks.{b}.{layer}.bias").flatten() for b in range(L)
                            for layer in INNER_LAYERS + RESIDUAL_LAYERS])
        norms = [(tensor(f"{prefix}.weight"), tensor(f"{prefix}.bias"))
                 for prefix in [f"blocks.{b}.{n}" for b in range(L) for n in NORMS] + ["ln_f"]]
        if untied_state is not None:
            layers["lm_head"] = [tensor("lm_head.weight", untied_state)]
    except KeyError as missing:
        return {"labels": None, "missing": str(missing.args[0])}
    for group, table in tables.items():
        stds[group] = float(table.std())
        labels[group] = _std_label(GPT2_STD, [table])
    for group, weights in layers.items():
        stds[group] = float(torch.cat([w.flatten() for w in weights]).std())
        labels[group] = _std_label(scaled if group in RESIDUAL_LAYERS else GPT2_STD, weights, scaled)
    labels["biases"] = "zero" if float(biases.abs().max()) == 0.0 else "not zero"
    labels["norms"] = "ones and zeros" if all(bool((w == 1).all()) and bool((b == 0).all()) for w, b in norms) \
        else "changed"
    return {"labels": labels, "std": stds}


INIT_SEED = 1234  # the random weights a fresh model draws are the same on every run (and for every variant)


def init_probe(api, inputs: Inputs):
    """The weights of a freshly built model, and of an untied one (whose lm_head has a weight of its own)."""
    fields = inputs.kwargs["fields"]
    api.given("torch.manual_seed", INIT_SEED)
    model = api.new("GPT", api.record(**fields))
    state = api.method(model, "state_dict")
    api.given("torch.manual_seed", INIT_SEED)
    untied = api.new("GPT", api.record(**{**fields, "tie_weights": False}))
    return init_summary(state, fields, api.method(untied, "state_dict"))


def initial_loss_probe(api, inputs: Inputs):
    """The cross-entropy of a freshly built model's logits on random ids and targets, against ln V."""
    fields = inputs.kwargs["fields"]
    api.given("torch.manual_seed", INIT_SEED)
    model = api.new("GPT", api.record(**fields))
    api.method(model, "eval", keep=True)
    idx, targets = inputs.args
    logits = api.forward(model, idx)
    V = fields["vocab_size"]
    if not isinstance(logits, torch.Tensor) or tuple(logits.shape) != (*idx.shape, V) or \
            not logits.is_floating_point():
        return logits  # the comparison says what it is
    loss = float(torch.nn.functional.cross_entropy(logits.detach().double().reshape(-1, V), targets.reshape(-1)))
    uniform = float(np.log(V))
    near = abs(loss - uniform) <= INITIAL_LOSS_MARGIN
    return {"loss": "near ln V" if near else ("above ln V" if loss > uniform else "below ln V"), "value": loss}


INITIAL_LOSS_MARGIN = 0.25  # nats: GPT-2's init starts about 0.01 above ln V; nn.Embedding's N(0, 1), tied, 30 above


def init_inputs(rng):
    # Half the context: a model that refuses a full-length sequence loses that point elsewhere.
    shape = (4, INIT["context_length"] // 2)
    idx = torch.from_numpy(rng.integers(0, INIT["vocab_size"], shape))
    targets = torch.from_numpy(rng.integers(0, INIT["vocab_size"], shape))
    return Inputs((idx, targets), {"fields": INIT})


INIT_GROUPS = {  # group: how a message names it, and what GPT-2 draws
    "token_emb": ("token_emb", "N(0, 0.02)"),
    "pos_emb": ("pos_emb", "N(0, 0.02)"),
    **{layer: (layer.split(".")[1], "N(0, 0.02)") for layer in INNER_LAYERS},
    **{layer: (layer.split(".")[1], "N(0, 0.02 / sqrt(2 * n_layers))") for layer in RESIDUAL_LAYERS},
    "lm_head": ("lm_head", "N(0, 0.02), as every nn.Linear"),
    "biases": ("the linear layers' biases", "zero"),
    "norms": ("the LayerNorms' weights and biases", "ones and zeros, as nn.LayerNorm makes them"),
}


def _and(names: list) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def diagnose_init(result, expected) -> str | None:
    if "loss" in expected:
        if not isinstance(result, dict) or "loss" not in result:
            return (f"expected logits of shape (4, {INIT['context_length'] // 2}, {INIT['vocab_size']}), "
                    f"got {describe(result)}")
        if result["loss"] == expected["loss"]:
            return None
        return (f"a freshly built model's loss on random tokens is {result['value']:.3g} nats, {result['loss']} "
                f"(ln 256 = {np.log(256):.2f}, what a uniform guess scores): are the weights drawn as GPT-2 draws "
                "them, small enough that the first logits are near zero?")
    if expected["labels"] is None:  # a catalogued variant whose weights could not be read either
        same = isinstance(result, dict) and result.get("missing") == expected["missing"]
        return None if same else f"the weights could not be read the same way ({describe(result)})"
    if not isinstance(result, dict) or not isinstance(result.get("labels"), dict):
        missing = result.get("missing") if isinstance(result, dict) else None
        return f"could not read the freshly built model's `{missing}`" if missing else \
            f"could not read the freshly built model's weights ({describe(result)})"
    # The groups drawn the same wrong way, told together: {(what they look like, GPT-2's draw): groups}
    wrong: dict[tuple, list] = {}
    for group, want in expected["labels"].items():
        got = result["labels"].get(group)
        if got != want:
            wrong.setdefault((got, INIT_GROUPS[group][1]), []).append(group)
    problems = []
    for (got, draw), groups in wrong.items():
        names = [INIT_GROUPS[group][0] for group in groups]
        measured = [result.get("std", {}).get(group) for group in groups]
        if any(m is None for m in measured):
            problems.append(f"{_and(names)} are {got}, where GPT-2 starts them at {draw}")
            continue
        weights = f"{_and(names)}'s weight" if len(names) == 1 else f"{_and(names)}'s weights"
        spread = f"a standard deviation of about {np.mean(measured):.2g}" if max(measured) <= 1.2 * min(measured) \
            else f"standard deviations from {min(measured):.2g} to {max(measured):.2g}"
        where = (" (the layers that write into the residual stream)" if set(groups) <= set(RESIDUAL_LAYERS)
                 else " (in a model built with tie_weights=False)" if groups == ["lm_head"] else "")
        problems.append(f"{weights}{where} {'has' if len(names) == 1 else 'have'} {spread} "
                        f"({LOOKS_LIKE.get(got, got)}), where GPT-2 draws {'it' if len(names) == 1 else 'them'} "
                        f"from {draw}")
    return "; ".join(problems) or None


LOOKS_LIKE = {
    "N(0, 1)": "nn.Embedding's default, N(0, 1)",
    "nn.Linear's default": "nn.Linear's default",
    "N(0, 0.02)": "N(0, 0.02), not scaled down",
    "Xavier": "Xavier's, sqrt(2 / (fan_in + fan_out))",
    "another scale": "not a scale GPT-2 uses",
    "as GPT-2": "GPT-2's",
    "scaled": "N(0, 0.02 / sqrt(2 * n_layers)), the scaled draw GPT-2 keeps for out_proj and fc2",
}


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


# ---------------------------------------------------------------- where a wrong table or rotation goes wrong
# Each column pair i turns at its own rate w_i = base ** (-2i / d) per position. The locators read
# the rates off the student's output at position 1, where every one is below pi / 2, and match them
# against the slips that give other rates.

RATES = {  # the rate of pair i, as each way of writing the exponent gives it
    "2i / d": lambda i, d, base: base ** (-2 * i / d),
    "i / d (the pair's index where 2i belongs)": lambda i, d, base: base ** (-i / d),
    "4i / d (the column index 2i doubled again)": lambda i, d, base: base ** (-4 * i / d),
    "+2i / d (a positive exponent: the rates grow)": lambda i, d, base: base ** (2 * i / d),
}


def _rates_named(sines, cosines, d: int, base: float) -> str | None:
    """Which exponent gives these sines and cosines of one position's pairs (None: none of RATES)."""
    pairs = np.arange(len(sines))
    for name, rate in RATES.items():
        angle = rate(pairs, d, base)
        if np.allclose(sines, np.sin(angle), atol=1e-4) and np.allclose(cosines, np.cos(angle), atol=1e-4):
            return name
    return None


def locate_sinusoid(call) -> str | None:
    n, d = 6, 8
    raw = call(n, d)
    got = as_array(raw)
    want = sinusoid_oracle(Inputs((n, d))).numpy()
    if got is None or got.shape != (n, d):
        return f"the shape. sinusoidal_positions(6, 8) is a (6, 8) table, a row per position; yours is {what(got)}"
    if isinstance(raw, torch.Tensor) and raw.dtype != torch.float32:
        return (f"the dtype. The table is float32, to be added to float32 embeddings; yours is "
                f"{str(raw.dtype).removeprefix('torch.')} (compute in float64 if you like, then .float())")
    row0 = np.tile([0.0, 1.0], d // 2)
    if not close(got[0], row0, 1e-5):
        if close(got[0], np.tile([1.0, 0.0], d // 2), 1e-5):
            return ("the columns' functions. At position 0 every sine is 0 and every cosine 1, so row 0 is [0, 1, 0, "
                    f"1, ...] (sin on even columns, cos on odd); yours is {shown(got[0])}: sin and cos are swapped")
        if close(got[0], np.repeat([0.0, 1.0], d // 2), 1e-5):
            return (f"the columns' layout. Row 0 (position 0) is [0, 1, 0, 1, ...]; yours is {shown(got[0])}: the "
                    "sines fill one half and the cosines the other. Interleave them: table[:, 0::2] = sin, "
                    "table[:, 1::2] = cos")
        if close(got[0], want[1], 1e-4):
            return ("the positions. Row 0 is position 0 ([0, 1, 0, 1, ...]); yours is the row of position 1: "
                    "positions count from 0 (torch.arange(n_positions))")
        return (f"position 0. Row 0 is sin(0) = 0 on even columns, cos(0) = 1 on odd: [0, 1, ...]; yours is "
                f"{shown(got[0])}")
    # The positions each row stands for, read from the slowest pair (whose angle stays below pi):
    # where the whole table is the contract's formula at those positions, only the positions are wrong.
    rates = RATES["2i / d"](np.arange(d // 2), d, 10000.0)
    positions = np.arctan2(got[:, -2], got[:, -1]) / rates[-1]
    at_positions = np.zeros((n, d))
    at_positions[:, 0::2], at_positions[:, 1::2] = (f(positions[:, None] * rates) for f in (np.sin, np.cos))
    if not close(positions, np.arange(n), 1e-2) and close(got, at_positions, 1e-3):
        return (f"the positions. Row t is position t, so the table's rows stand for positions {list(range(n))}; "
                f"yours stand for {shown(positions)}: the positions are torch.arange(n_positions), not spread "
                "over another range or scaled")
    sines, cosines = got[1, 0::2], got[1, 1::2]
    if not (close(sines, want[1, 0::2], 1e-4) and close(cosines, want[1, 1::2], 1e-4)):
        from_sine, from_cosine = np.arcsin(np.clip(sines, -1, 1)), np.arccos(np.clip(cosines, -1, 1))
        if not _rates_named(sines, cosines, d, 10000.0) and not np.allclose(sines ** 2 + cosines ** 2, 1, atol=1e-3):
            return (f"the frequencies. At position 1 the sine and the cosine of pair i (columns 2i and 2i + 1) share "
                    f"one angle, 10000 ** (-2i / d); yours turn at {shown(from_sine)} (sines) and "
                    f"{shown(from_cosine)} (cosines): the exponent is the pair's 2i, not each column's own index")
        named = _rates_named(sines, cosines, d, 10000.0)
        because = f": the exponent is {named}, not 2i / d" if named else ""
        right = RATES["2i / d"](np.arange(d // 2), d, 10000.0)
        return (f"the frequencies. At position 1, pair i turns by 10000 ** (-2i / 8) = {shown(right)} radians; yours "
                f"by {shown(from_sine)}{because}")
    return None


def _rope_columns_at_zero(call, T: int, d: int) -> str | None:
    """At position 0 rope is the identity: on x = [1, 2, ..., d] an output that is x's columns in another
    order tells which columns the answer reads a pair from and where it writes the pair back."""
    values = np.arange(1, d + 1, dtype=np.float64)
    distinct = torch.from_numpy(np.broadcast_to(values, (1, T, d)).copy())
    got = as_array(call(distinct.clone()))
    if got is None or got.shape != (1, T, d):
        return None
    row = got[0, 0]
    order = [next((int(k) for k in range(d) if abs(row[j] - values[k]) < 1e-6), None) for j in range(d)]
    if None in order or sorted(order) != list(range(d)) or order == list(range(d)):
        return None
    halves_side_by_side = np.stack([np.arange(d // 2), np.arange(d // 2) + d // 2], axis=-1).ravel().tolist()
    pairs = (f"At position 0 every angle is 0, so rope leaves x as it is; on x = {shown(values)} yours gives "
             f"{shown(row)}")
    if order == halves_side_by_side:
        return (f"the pairs. {pairs}: pair i is read from columns i and i + d/2 (the two halves, x[..., :d//2] and "
                "x[..., d//2:]) but written back side by side to columns 2i and 2i + 1. Pair i is the columns "
                "(2i, 2i + 1), side by side: read a = x[..., 0::2], b = x[..., 1::2], and write each back to the "
                "columns it came from")
    return (f"the pairs. {pairs}, x's columns in another order (column j of yours holds x's column {order}[j]): a "
            "pair is written back to other columns than it was read from. Pair i is the columns (2i, 2i + 1): read "
            "a = x[..., 0::2], b = x[..., 1::2], and write each back to the same columns")


def locate_rope(call) -> str | None:
    T, d = 5, 8
    pairs = np.arange(d // 2)
    ones = torch.zeros(1, T, d, dtype=torch.float64)
    ones[..., 0::2] = 1.0  # every pair (a, b) = (1, 0): rotated by t, it is (cos t, sin t)
    got = as_array(call(ones.clone()))
    if got is None or got.shape != (1, T, d):
        return f"the shape. rope(x) has x's shape, here (1, 5, 8); yours is {what(got)}"
    if not close(got[0, 0], ones[0, 0].numpy(), 1e-6):
        x = ones[0, 0].numpy()
        if close(got[0, 0], np.concatenate([x[0::2], x[1::2]]), 1e-6):
            return (f"the pairs. At position 0 every angle is 0, so rope leaves x as it is; on x = [1, 0, 1, 0, ...] "
                    f"yours gives {shown(got[0, 0])}: the turned pairs are written back as two halves. Write a pair "
                    "back to the columns it came from: out[..., 0::2], out[..., 1::2]")
        moved_columns = _rope_columns_at_zero(call, T, d)
        if moved_columns is not None:
            return moved_columns
        return (f"position 0. At position 0 every angle is 0, so rope leaves x as it is; on x = [1, 0, 1, 0, ...] "
                f"yours gives {shown(got[0, 0])}")
    single = torch.zeros(1, T, d, dtype=torch.float64)
    single[..., 0] = 1.0  # only column 0: its partner column shows where the pairs are
    moved = as_array(call(single.clone()))
    if moved is not None and moved.shape == (1, T, d) and abs(moved[0, 1, 1]) < 1e-6 \
            and abs(moved[0, 1, d // 2]) > 1e-3:
        return ("the pairs. Pair i is the columns (2i, 2i + 1), side by side: x = [1, 0, 0, ...] turned by t at "
                f"position 1 is [cos t, sin t, 0, ...]; yours puts the sine in column {d // 2}, pairing i with "
                "i + d/2 (or writing the turned pairs back as two halves): read a = x[..., 0::2], b = x[..., 1::2] "
                "and write them back to the same columns")
    explicit = as_array(call(ones.clone(), torch.arange(T)))
    if explicit is not None and close(explicit[0], rope_oracle(Inputs((ones, torch.arange(T)))).numpy()[0], 1e-6) \
            and not close(got, explicit, 1e-6):
        unturned = close(got[0], np.broadcast_to(ones[0, 0].numpy(), (T, d)), 1e-6)
        return ("the default positions. With positions left out, row t of x (1, 5, 8) turns by t times each rate, "
                "t = 0..T-1, T being x.shape[-2]; given positions=torch.arange(5), yours is right, but left out, "
                + ("it leaves every row as at position 0: is T read from the first axis (len(x), here the batch of "
                   "1) rather than x.shape[-2]?" if unturned else "it turns the rows by other angles: make the "
                   "default torch.arange(x.shape[-2])"))
    cosines, sines = got[0, 1, 0::2], got[0, 1, 1::2]
    want = RATES["2i / d"](pairs, d, 10000.0)
    if not (np.allclose(cosines, np.cos(want), atol=1e-6) and np.allclose(sines, np.sin(want), atol=1e-6)):
        c, s = np.cos(want), np.sin(want)
        for new_a, new_b, first, second in ((c, c * s, "a", "b"), (c - s * s, s, "b", "a")):
            if np.allclose(cosines, new_a, atol=1e-6) and np.allclose(sines, new_b, atol=1e-6):
                return ("writing the rotated pairs. A pair (a, b) turned by t is "
                        "(a cos t - b sin t, a sin t + b cos t), both made from the old a and b; on "
                        f"x = [1, 0, 1, 0, ...] at position 1 yours gives "
                        f"{shown(cosines)}, {shown(sines)}: the new {second} is made from {first} already turned. Is "
                        f"{first} written back (into x, or a view of it such as x[..., 0::2], or into the output) "
                        f"before the new {second} is computed from it? Compute both from the old values, then write "
                        "them into a new tensor (x itself must stay unchanged)")
        if np.allclose(cosines, np.cos(want), atol=1e-6) and np.allclose(sines, -np.sin(want), atol=1e-6):
            return ("the direction. A pair (a, b) turned by t is (a cos t - b sin t, a sin t + b cos t); at position 1 "
                    f"yours turns each pair by -t (its sines are {shown(sines)}, where {shown(np.sin(want))} is right)")
        named = _rates_named(sines, cosines, d, 10000.0)
        because = f": the exponent is {named}, not -2i / d" if named else ""
        return (f"the frequencies. At position 1, pair i turns by 10000 ** (-2i / 8) = {shown(want)} radians, so its "
                f"(cos, sin) are {shown(np.cos(want))}, {shown(np.sin(want))}; yours are {shown(cosines)}, "
                f"{shown(sines)}{because}")
    positions = torch.tensor([3, 1, 4, 1, 5])
    given = as_array(call(ones.clone(), positions))
    if given is None or not close(given[0], rope_oracle(Inputs((ones, positions))).numpy()[0], 1e-6):
        ignored = given is not None and close(given, got, 1e-6)
        return ("the positions. With positions = [3, 1, 4, 1, 5], row t turns by positions[t] times each rate"
                + ("; yours turns by t, as if positions were not given: use them when they are" if ignored else
                   f"; yours gives {what(given) if given is None or given.shape != got.shape else 'other angles'}"))
    based = as_array(call(ones.clone(), None, 100.0))
    if based is None or not close(based[0], rope_oracle(Inputs((ones,), {"base": 100.0})).numpy()[0], 1e-6):
        ignored = based is not None and close(based, got, 1e-6)
        return ("the base. With base = 100, pair i turns by 100 ** (-2i / d) per position"
                + ("; yours still uses 10000: use the argument" if ignored else "; yours turns otherwise"))
    return None


# ---------------------------------------------------------------- where a wrong GPT goes wrong
# The model is loaded with the contract's weights, first with every block silenced (its out_proj and
# fc2 zero, so that it passes the stream through): the logits are then lm_head(ln_f(token_emb +
# pos_emb)) alone, and what differs is read against that pipeline with one stage changed.


def _reference_logits(fields: dict, state: dict, idx):
    import types

    model = ref().GPT(types.SimpleNamespace(**fields))
    model.load_state_dict(state)
    model.eval()
    with torch.no_grad():
        return model(idx).numpy()


def _reference_stream_logits(fields: dict, state: dict, idx, order: str):
    """The reference GPT's logits with its blocks and ln_f put together another way: "ln_f first"
    (ln_f before the blocks, not after), "reversed" (the blocks last to first), "first block only",
    "last block only", "first block repeated" (blocks[0], n_layers times)."""
    import types

    model = ref().GPT(types.SimpleNamespace(**fields))
    model.load_state_dict(state)
    model.eval()
    blocks = list(model.blocks)
    chain = {"ln_f first": blocks, "reversed": blocks[::-1], "first block only": blocks[:1],
             "last block only": blocks[-1:], "first block repeated": blocks[:1] * len(blocks)}[order]
    with torch.no_grad():
        x = model.token_emb(idx) + model.pos_emb(torch.arange(idx.shape[1]))
        if order == "ln_f first":
            x = model.ln_f(x)
        for block in chain:
            x = block(x)
        if order != "ln_f first":
            x = model.ln_f(x)
        return model.lm_head(x).numpy()


def _reference_late_positions_logits(fields: dict, state: dict, idx, after: int | None):
    """The reference GPT's logits with pos_emb added to the stream after `after` blocks (None: after ln_f, just
    before lm_head), not at the start with token_emb."""
    import types

    model = ref().GPT(types.SimpleNamespace(**fields))
    model.load_state_dict(state)
    model.eval()
    with torch.no_grad():
        positions = model.pos_emb(torch.arange(idx.shape[1]))
        x = model.token_emb(idx)
        for k, block in enumerate(model.blocks):
            if k == after:
                x = x + positions
            x = block(x)
        if after == len(model.blocks):
            x = x + positions
        x = model.ln_f(x)
        if after is None:
            x = x + positions
        return model.lm_head(x).numpy()


BLOCK_CHAINS = (  # (how the stream went, what it should do)
    ("ln_f first", "the final norm's place", "yours apply ln_f before the blocks; it comes after the last block, just "
     "before lm_head"),
    ("reversed", "the blocks' order", "yours run the blocks last to first; the stream goes through self.blocks in "
     "order"),
    ("first block only", "the blocks", "only the first block acts on the stream (a return or break inside the loop?)"),
    ("last block only", "the blocks", "only the last block's output reaches ln_f: each block should read the "
     "previous block's output, x = block(x), not the embeddings"),
    ("first block repeated", "the blocks", "the first block runs n_layers times: index the loop's own block, "
     "not blocks[0]"),
)


def _silenced_blocks(state: dict) -> dict:
    return {k: torch.zeros_like(v) if ".attn.out_proj." in k or ".ffn.fc2." in k else v for k, v in state.items()}


def locate_gpt(api) -> str | None:
    fields = SMALL
    state = _silenced_blocks(random_state(fields, 17))
    idx = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6]])
    got = as_array(api.forward(built_model(api, Inputs((idx,), {"fields": fields, "state": state})), idx))
    want = _reference_logits(fields, state, idx)
    if got is None or got.shape != want.shape:
        return (f"the logits' shape. For idx (1, 8) with vocab_size 40 the logits are (1, 8, 40); yours are "
                f"{what(got)}")
    if not np.allclose(got, want, rtol=1e-4, atol=1e-5):
        setting = ("With every block silenced (attn.out_proj and ffn.fc2 zero, so each passes the stream through), "
                   "the logits are lm_head(ln_f(token_emb(idx) + pos_emb(positions)))")
        stream = (state["token_emb.weight"][idx] + state["pos_emb.weight"][:idx.shape[1]]).numpy()
        shifted = {**state, "pos_emb.weight": torch.roll(state["pos_emb.weight"], -1, dims=0)}
        candidates = (
            ("the positions", _reference_logits(fields, {**state, "pos_emb.weight": torch.zeros_like(
                state["pos_emb.weight"])}, idx), "yours leave the positions out: add pos_emb(torch.arange(T))"),
            ("the positions", _reference_logits(fields, shifted, idx), "yours count the positions from 1: position t "
             "is pos_emb row t, t = 0..T-1"),
            ("the final norm", stream @ state["lm_head.weight"].numpy().T, "yours skip ln_f before lm_head"),
            ("the position embedding's place", (F.layer_norm(state["token_emb.weight"][idx], (fields["d_model"],),
                                                             state["ln_f.weight"], state["ln_f.bias"], 1e-5)
                                                + state["pos_emb.weight"][:idx.shape[1]]).numpy()
             @ state["lm_head.weight"].numpy().T, "yours add pos_emb(positions) after ln_f, just before lm_head: "
             "the stream starts as token_emb(idx) + pos_emb(torch.arange(T)), before the first block"),
            ("the output", torch.softmax(torch.from_numpy(want), dim=-1).numpy(), "yours returns probabilities: "
             "forward returns the logits, before any softmax"),
        )
        for step, theirs, told in candidates:
            if np.allclose(got, theirs, rtol=1e-4, atol=1e-5):
                return f"{step}. {setting}: {told}"
        return (_silenced_stage(api, fields, state, idx, got, want, setting)
                or f"the embeddings, the final norm and the head. {setting}; yours differ from them by up to "
                   f"{float(np.abs(got - want).max()):.3g}")
    state = random_state(fields, 17)
    got = as_array(api.forward(built_model(api, Inputs((idx,), {"fields": fields, "state": state})), idx))
    want = _reference_logits(fields, state, idx)
    if got is None or not np.allclose(got, want, rtol=1e-4, atol=1e-5):
        if got is not None and got.shape == want.shape:
            for order, step, told in BLOCK_CHAINS:
                if np.allclose(got, _reference_stream_logits(fields, state, idx, order), rtol=1e-4, atol=1e-5):
                    return (f"{step}. With the blocks silenced your logits are right; with them on they are those of "
                            f"a GPT whose stream goes another way: {told}")
            for after in range(1, fields["n_layers"] + 1):
                if np.allclose(got, _reference_late_positions_logits(fields, state, idx, after), rtol=1e-4, atol=1e-5):
                    where = ("after the last block" if after == fields["n_layers"] else
                             "after the first block (which sees the tokens without their positions)" if after == 1
                             else f"after block {after - 1} (the first {after} blocks see the tokens without their "
                             "positions)")
                    return ("the position embedding's place. With the blocks silenced your logits are right (the "
                            "blocks then pass the stream through, so where pos_emb is added does not show); with "
                            f"them on they are those of a GPT that adds pos_emb(positions) {where}: the stream "
                            "starts as token_emb(idx) + pos_emb(torch.arange(T)), before the first block, so that "
                            "every block sees the positions")
        by = f"{float(np.abs(got - want).max()):.3g}" if got is not None and got.shape == want.shape else "all"
        return (f"the blocks. With the blocks silenced your logits are right; with them on they differ by up to "
                f"{by}: the "
                "stream goes through every block of self.blocks once, in order, each block's output the next one's "
                "input (an nn.ModuleList of n_layers distinct TransformerBlocks)")
    return _locate_gpt_batch(api, fields, state) or _locate_gpt_untied(api)


def _named_factor(value: float, d: int) -> str:
    """A scale read from the logits, said as the number it is and, where it is one, its name."""
    names = {"sqrt(d_model)": math.sqrt(d), "d_model": float(d), "1 / sqrt(d_model)": 1 / math.sqrt(d),
             "1 / d_model": 1 / d, "2": 2.0, "1 / 2": 0.5}
    name = next((n for n, v in names.items() if abs(value / v - 1) < 1e-3), None)
    return f"{value:.4g}" + (f" = {name}" if name else "")


def _best_scale(error, low=-3.0, high=3.0) -> float:
    """The s in [10^low, 10^high] that makes error(s) least: a grid, then golden sections around its best."""
    grid = np.linspace(low, high, 241)
    best = int(np.argmin([error(10 ** g) for g in grid]))
    a, b = grid[max(best - 1, 0)], grid[min(best + 1, len(grid) - 1)]
    for _ in range(60):
        c, d = b - (b - a) / 1.618034, a + (b - a) / 1.618034
        if error(10 ** c) < error(10 ** d):
            b = d
        else:
            a = c
    return float(10 ** ((a + b) / 2))


def _silenced_stage(api, fields: dict, state: dict, idx, got, want, setting: str) -> str | None:
    """With every block silenced, the logits are lm_head(ln_f(token_emb(idx) + pos_emb(positions))): which of
    its stages departs. The pipeline with one stage changed (ln_f applied more than once, one embedding scaled,
    the logits scaled), then each module called on its own (token_emb, pos_emb, ln_f, lm_head)."""
    d, n_layers = fields["d_model"], fields["n_layers"]
    w, b = state["ln_f.weight"], state["ln_f.bias"]
    head = state["lm_head.weight"]
    tokens, positions = state["token_emb.weight"][idx], state["pos_emb.weight"][:idx.shape[1]]

    def logits(stream, norms=1):
        for _ in range(norms):
            stream = F.layer_norm(stream, (d,), w, b, 1e-5)
        return (stream @ head.T).numpy()

    def close(theirs):
        return np.allclose(got, theirs, rtol=1e-4, atol=1e-5)

    # the final norm applied more than once: after every block (inside the loop), and at the end as well
    for times in range(2, n_layers + 2):
        if close(logits(tokens + positions, times)):
            where = ("after every block, inside the loop" if times == n_layers else
                     "after every block and once more after the loop" if times == n_layers + 1 else "")
            return (f"the final norm. {setting}: yours apply ln_f {times} times to the stream"
                    f"{f' ({where}?)' if where else ''}: ln_f acts once, after the last block, just before lm_head")
    # one embedding scaled: read the scale from the logits, the one that fits them best
    for name, scaled, other, unscaled in (("token_emb(idx)", tokens, positions, "pos_emb(positions)"),
                                          ("pos_emb(positions)", positions, tokens, "token_emb(idx)")):
        def error(scale, scaled=scaled, other=other):
            return float(np.abs(got - logits(scale * scaled + other)).max())

        scale = _best_scale(error)
        if abs(scale - 1) > 1e-3 and close(logits(scale * scaled + other)):
            return (f"the embeddings. {setting}: yours are those of a stream that starts as {name} times "
                    f"{_named_factor(scale, d)}, plus {unscaled}: the stream starts as token_emb(idx) + "
                    "pos_emb(positions), neither scaled (no sqrt(d_model) factor here, as in GPT-2)")
    # the logits scaled: the head's output times a constant
    if np.all(want != 0):
        ratio = got / want
        if np.allclose(ratio, ratio.flat[0], rtol=1e-4) and abs(ratio.flat[0] - 1) > 1e-3:
            return (f"the head. {setting}: yours are those logits times {_named_factor(float(ratio.flat[0]), d)}: "
                    "forward returns lm_head(ln_f(x)) as it is, unscaled")
    return _gpt_modules_alone(api, fields, state, idx, setting)


def _gpt_modules_alone(api, fields: dict, state: dict, idx, setting: str) -> str | None:
    """token_emb, pos_emb, ln_f and lm_head of the student's model, each called on its own: one that departs is
    that stage (a norm of the student's own without its bias, say); all right, it is how forward joins them."""
    model = built_model(api, Inputs((idx,), {"fields": fields, "state": state}))
    d = fields["d_model"]
    generator = torch.Generator().manual_seed(29)
    stream = torch.randn(1, idx.shape[1], d, generator=generator)
    positions = torch.arange(idx.shape[1])
    w, b = state["ln_f.weight"], state["ln_f.bias"]
    stages = (
        ("token_emb", "the token embedding", idx, state["token_emb.weight"][idx], "token_emb(idx) is row idx of "
         "token_emb.weight"),
        ("pos_emb", "the position embedding", positions, state["pos_emb.weight"][positions], "pos_emb(positions) is "
         "row t of pos_emb.weight for position t"),
        ("ln_f", "the final norm", stream, F.layer_norm(stream, (d,), w, b, 1e-5), "ln_f(x) is a LayerNorm: "
         "normalised * ln_f.weight + ln_f.bias, eps 1e-5"),
        ("lm_head", "the head", stream, stream @ state["lm_head.weight"].T, "lm_head(x) is x @ lm_head.weight.T, "
         "with no bias"),
    )
    for name, step, given, right, what_it_is in stages:
        try:
            module = api.method(model, "get_submodule", name, keep=True)
            theirs = as_array(api.forward(module, given))
        except ProbeFailed:
            return None
        right = right.numpy()
        if theirs is None or theirs.shape != right.shape:
            return f"{step}. Called on its own, your {name} returns {what(theirs)}, not {tuple(right.shape)}"
        if not np.allclose(theirs, right, rtol=1e-4, atol=1e-5):
            told = ""
            if name == "ln_f":
                normalised = F.layer_norm(stream, (d,), eps=1e-5)
                for value, how in ((normalised * w, "normalised * weight, without adding the bias"),
                                   (normalised + b, "normalised + bias, without multiplying by the weight"),
                                   (normalised * b + w, "normalised * bias + weight: the weight and bias swapped"),
                                   (normalised, "the normalised x alone, neither weight nor bias applied")):
                    if np.allclose(theirs, value.numpy(), rtol=1e-4, atol=1e-5):
                        told = f"; yours returns {how}"
            return (f"{step}. Called on its own with the model's weights, your {name} differs from what it should "
                    f"compute by up to {float(np.abs(theirs - right).max()):.3g}{told}: {what_it_is}")
    return (f"the forward's wiring. {setting}; yours differ from them, though token_emb, pos_emb, ln_f and lm_head "
            "each give the right output called on their own: look at how forward joins them (the stream starts as "
            "token_emb(idx) + pos_emb(torch.arange(T)), goes through the blocks, then ln_f once, then lm_head)")


def _locate_gpt_batch(api, fields: dict, state: dict) -> str | None:
    """One sequence alone is right: a batch of two, each row read as it would be alone."""
    batch = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6], [2, 7, 1, 8, 2, 8, 1, 8]])
    B, T = batch.shape
    for quiet in (True, False):
        weights = _silenced_blocks(state) if quiet else state
        got = as_array(api.forward(built_model(api, Inputs((batch,), {"fields": fields, "state": weights})), batch))
        want = _reference_logits(fields, weights, batch)
        if got is not None and np.allclose(got, want, rtol=1e-4, atol=1e-5):
            continue
        if got is None or got.shape != want.shape:
            return (f"a batch. For idx (2, 8) with vocab_size 40 the logits are (2, 8, 40); yours are {what(got)}, "
                    "though one sequence alone is right")
        if quiet:  # each logit row is then lm_head(ln_f(token_emb[v] + pos_emb[p])): find the p it used
            every = {v: _reference_logits(fields, weights, torch.full((1, fields["context_length"]), v))[0]
                     for v in batch.unique().tolist()}
            read = [[next((p for p, row in enumerate(every[int(batch[b, t])])
                           if np.allclose(got[b, t], row, rtol=1e-4, atol=1e-5)), None) for t in range(T)]
                    for b in range(B)]
            if all(p is not None for row in read for p in row):
                return ("the position ids for a batch. With every block silenced, one sequence alone gets the right "
                        f"logits, but in a batch of 2 sequences of {T} tokens each row should read pos_emb rows "
                        f"{list(range(T))}; yours reads rows {read[0]} for the first sequence and {read[1]} for the "
                        "second: build torch.arange(T) once and let it broadcast over the batch (or expand it to "
                        "(B, T)), without repeat, repeat_interleave or view mixing the two axes")
        return ("a batch. One sequence alone gets the right logits, but in a batch of 2 sequences of 8 tokens yours "
                f"differ by up to {float(np.abs(got - want).max()):.3g}"
                + (" with every block silenced" if quiet else "") + ": each row of a batch should be computed as it "
                "would be alone (its own tokens, positions torch.arange(T), nothing mixed across the batch axis)")
    return None


def _locate_gpt_untied(api) -> str | None:
    """A tied model is right: an untied one must use lm_head's own weight."""
    fields = {**SMALL, "tie_weights": False}
    state = _silenced_blocks(random_state(fields, 23))
    idx = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6]])
    got = as_array(api.forward(built_model(api, Inputs((idx,), {"fields": fields, "state": state})), idx))
    want = _reference_logits(fields, state, idx)
    if got is None or (got.shape == want.shape and np.allclose(got, want, rtol=1e-4, atol=1e-5)):
        return None
    setting = ("With tie_weights=False lm_head has a weight of its own (here loaded with other values than "
               "token_emb's), and the logits are lm_head(ln_f(x))")
    if got.shape == want.shape:
        table = _reference_logits(fields, {**state, "lm_head.weight": state["token_emb.weight"]}, idx)
        if np.allclose(got, table, rtol=1e-4, atol=1e-5):
            return (f"the output layer. {setting}; yours are those of token_emb.weight (the tied table): compute "
                    "them with self.lm_head, which is token_emb's table only when tie_weights is True")
        # loaded in the state's order, token_emb first: a table shared by both keeps lm_head's values
        shared = {**state, "token_emb.weight": state["lm_head.weight"]}
        if np.allclose(got, _reference_logits(fields, shared, idx), rtol=1e-4, atol=1e-5):
            return ("the weight tying. With tie_weights=False token_emb and lm_head each have a weight of their "
                    "own (here loaded with different values); yours share one table between them, so loading "
                    "one overwrites the other: tie them only when config.tie_weights is True")
        return (f"the output layer. A tied model is right, but {setting[0].lower()}{setting[1:]}; yours differ by up "
                f"to {float(np.abs(got - want).max()):.3g}")
    return f"the output layer. {setting}; yours are {what(got)}, though a tied model is right"


# ---------------------------------------------------------------- the wrong variants


def sinusoid_with(swap=False, halves=False, exponent="2i", float64=False, from_one=False):
    def variant(reference, n_positions, d_model):
        if float64:
            return reference.sinusoidal_positions(n_positions, d_model).double()
        if from_one:
            return reference.sinusoidal_positions(n_positions + 1, d_model)[1:]
        p = torch.arange(n_positions, dtype=torch.float64)[:, None]
        if exponent == "j":  # every column its own exponent: the cosine of pair i turns at (2i + 1) / d
            j = torch.arange(d_model, dtype=torch.float64)
            angle = p / 10000.0 ** (j / d_model)
            return torch.where(j % 2 == 0, torch.sin(angle), torch.cos(angle)).float()
        i = {"2i": torch.arange(0, d_model, 2, dtype=torch.float64),
             "i": torch.arange(d_model // 2, dtype=torch.float64),
             "4i": torch.arange(0, 2 * d_model, 4, dtype=torch.float64)}[exponent]
        angle = p / 10000.0 ** (i / d_model)
        first, second = (torch.cos(angle), torch.sin(angle)) if swap else (torch.sin(angle), torch.cos(angle))
        if halves:
            return torch.cat([first, second], dim=-1).float()
        table = torch.empty(n_positions, d_model, dtype=torch.float64)
        table[:, 0::2], table[:, 1::2] = first, second
        return table.float()

    return variant


def rope_with(halves=False, exponent="2i", sign=1.0, ignore_positions=False, ignore_base=False,
              concatenated=False, exponent_sign=-1.0):
    def variant(reference, x, positions=None, base=10000.0):
        base = 10000.0 if ignore_base else base
        *_, T, d = x.shape
        p = torch.arange(T) if positions is None or ignore_positions else positions
        i = torch.arange(0, d, 2) if exponent == "2i" else torch.arange(d // 2)
        theta = sign * p[:, None].double() * base ** (exponent_sign * i.double() / d)
        cos, sin = torch.cos(theta).to(x.dtype), torch.sin(theta).to(x.dtype)
        if halves:  # rotate the first half against the second (the "rotate_half" layout)
            a, b = x[..., : d // 2], x[..., d // 2:]
            return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)
        a, b = x[..., 0::2], x[..., 1::2]
        if concatenated:  # the pairs turned, then written back as two halves
            return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)
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
                if knobs.get("plain_list"):
                    blocks = list(self.blocks)
                    del self.blocks
                    self.blocks = blocks  # a plain list: its modules are not the model's
                if knobs.get("init"):
                    with torch.no_grad():
                        initialise_as(self, knobs["init"])
                if knobs.get("head_bias"):  # nn.Linear's default bias=True, zeroed by GPT-2's init
                    self.lm_head = nn.Linear(config.d_model, config.vocab_size)
                    nn.init.zeros_(self.lm_head.bias)
                    nn.init.normal_(self.lm_head.weight, std=GPT2_STD)
                    self.lm_head.weight = self.token_emb.weight if config.tie_weights else self.lm_head.weight

            def forward(self, idx):
                B, T = idx.shape
                if T > self.config.context_length or (knobs.get("full_context_refused")
                                                      and T == self.config.context_length):
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
                logits = self.lm_head(x)
                return logits.softmax(dim=-1) if knobs.get("softmax") else logits

        return Wrong

    return make


# how: (token_emb's std, pos_emb's std, linear weights: "default" (nn.Linear's), "scaled" (GPT-2's) or
# "flat" (N(0, 0.02) everywhere), whether the biases are zeroed)
HALF_RIGHT_INITS = {
    "pytorch_defaults": (1.0, 1.0, "default", False),
    "embeddings_default": (1.0, 1.0, "scaled", True),  # the blocks only: an untied lm_head left as nn.Linear draws it
    "pos_emb_default": (GPT2_STD, 1.0, "scaled", True),
    "embeddings_only": (GPT2_STD, GPT2_STD, "default", False),
    "not_scaled": (GPT2_STD, GPT2_STD, "flat", True),
    "biases_kept": (GPT2_STD, GPT2_STD, "scaled", False),
    "xavier": (None, GPT2_STD, "xavier", True),
    "pos_emb_small": (GPT2_STD, GPT2_STD / 2, "scaled", True),  # token_emb: Xavier's, through the tied lm_head
}


def initialise_as(model, how: str) -> None:
    """Redraw a freshly built model's weights the way a half-right initialisation leaves them."""
    if how == "every_parameter":  # `for p in self.parameters(): normal_(p, std=0.02)`: the LayerNorms too
        for p in model.parameters():
            nn.init.normal_(p, std=GPT2_STD)
        return
    token_std, pos_std, linear, zero_biases = HALF_RIGHT_INITS[how]
    if token_std is None:
        nn.init.xavier_uniform_(model.token_emb.weight)
    else:
        nn.init.normal_(model.token_emb.weight, std=token_std)
    nn.init.normal_(model.pos_emb.weight, std=pos_std)
    residual_std = GPT2_STD / np.sqrt(2 * model.config.n_layers) if linear == "scaled" else GPT2_STD
    for block in model.blocks:
        for name, layer in block.named_modules():
            if not isinstance(layer, nn.Linear):
                continue
            if linear == "default":
                layer.reset_parameters()
            elif linear == "xavier":
                nn.init.xavier_uniform_(layer.weight)
            else:
                nn.init.normal_(layer.weight, std=residual_std if name in RESIDUAL_LAYERS else GPT2_STD)
            if zero_biases:
                nn.init.zeros_(layer.bias)
            elif linear != "default":  # the weights redrawn, the biases put back as nn.Linear draws them
                bound = 1 / np.sqrt(layer.in_features)
                nn.init.uniform_(layer.bias, -bound, bound)
    if not model.config.tie_weights:
        if linear == "default" or how == "embeddings_default":
            model.lm_head.reset_parameters()
        elif linear == "xavier":
            nn.init.xavier_uniform_(model.lm_head.weight)
        else:
            nn.init.normal_(model.lm_head.weight, std=GPT2_STD)


def terms_with(config, **knobs) -> dict:
    """parameter_breakdown's five terms, with one of them wrong."""
    d, L, V, T = config.d_model, config.n_layers, config.vocab_size, config.context_length
    d_ff = 4 * d if config.d_ff is None or knobs.get("ignores_d_ff") else config.d_ff
    if config.d_ff is None and knobs.get("d_ff_default_d_model"):
        d_ff = d
    biases = 0 if knobs.get("no_biases") else 1
    projections = 3 if knobs.get("no_out_proj") else 4
    if knobs.get("per_head_qkv"):  # every head with its own d x d query, key and value matrices
        projections = 3 * config.n_heads + 1
    blocks = 1 if knobs.get("one_block") else L
    per_norm = d if knobs.get("norm_weight_only") else 2 * d  # a LayerNorm's weight and bias
    block_norms = 0 if knobs.get("no_norms") else (3 if knobs.get("ln_f_per_block") else 2) * per_norm  # ln1, ln2
    final_norm = 0 if knobs.get("no_norms") or knobs.get("no_final_norm") or knobs.get("ln_f_per_block") \
        else per_norm
    if knobs.get("tied_counted_twice"):
        head = V * d
    elif knobs.get("untied_no_head"):
        head = 0
    else:
        head = 0 if config.tie_weights else V * d + (V if knobs.get("head_bias") else 0)
    if knobs.get("ln_f_in_head"):  # ln_f counted as part of the output layer
        head, final_norm = head + final_norm, 0
    return {
        "embeddings": V * d + (0 if knobs.get("no_positions") else T * d),
        "attention": blocks * projections * (d * d + d * biases),
        "ffn": blocks * (2 * d * d_ff + (d_ff + d) * biases),
        "norms": blocks * block_norms + final_norm,
        "lm_head": head,
    }


def count_with(**knobs):
    """A closed form with one term wrong."""

    def variant(reference, config):
        if knobs.get("chapter_estimate"):  # chapter 05's 12 L d^2 + (V + T) d, handed in as the count
            d = config.d_model
            return 12 * config.n_layers * d * d + (config.vocab_size + config.context_length) * d
        return sum(terms_with(config, **knobs).values())

    return variant


def breakdown_with(**knobs):
    return lambda reference, config: terms_with(config, **knobs)


def count_and_breakdown_with(**knobs) -> dict:
    """One slip in a term, made in both parts: the total and the dict by kind."""
    return {"count_parameters": count_with(**knobs), "parameter_breakdown": breakdown_with(**knobs)}


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
        "config_heads_before_layers", "a GPTConfig with n_heads before n_layers",
        "Keep the contract's order, vocab_size, context_length, d_model, n_layers, n_heads: GPTConfig(50257, 1024, "
        "768, 12, 12) is read by position, and 12 and 12 hide a swap that GPTConfig(50, 16, 8, 3, 2) shows.",
        {"GPTConfig": lambda reference: _config_heads_before_layers(reference)},
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
        "sinusoid_exponent_column", "the exponent taken from the column index j (10000 ** (j / d_model)), so each "
        "cosine turns at a different rate from the sine beside it",
        "Pair i = j // 2 shares one angle: both columns 2i and 2i + 1 use 10000 ** (2i / d_model).",
        {"sinusoidal_positions": sinusoid_with(exponent="j")},
    ),
    Misconception(
        "sinusoid_exponent_doubled", "the exponent doubled twice: 10000 ** (2 * j / d_model) with j already the even "
        "column 2i",
        "A loop over the even columns j = 0, 2, 4, ... already has j = 2i: the exponent is j / d_model, not "
        "2 * j / d_model.",
        {"sinusoidal_positions": sinusoid_with(exponent="4i")},
    ),
    Misconception(
        "sinusoid_from_one", "a table whose rows start at position 1 instead of 0",
        "Row p is position p, from 0: row 0 is [0, 1, 0, 1, ...] (sin 0 and cos 0).",
        {"sinusoidal_positions": sinusoid_with(from_one=True)},
    ),
    Misconception(
        "sinusoid_float64", "a table left in float64",
        "Computing in float64 is right; return the table as float32, the contract's dtype (.float()).",
        {"sinusoidal_positions": sinusoid_with(float64=True)},
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
        "gpt_head_bias", "an lm_head with a bias (nn.Linear's default bias=True)",
        "The output layer has no bias: nn.Linear(d_model, vocab_size, bias=False), so that tied, it is exactly "
        "the token table.",
        {"GPT": gpt_variant(head_bias=True)},
    ),
    Misconception(
        "gpt_returns_probabilities", "forward returning softmax probabilities instead of logits",
        "Return the logits, lm_head's output as it is: the loss (cross_entropy) and sampling apply the softmax "
        "themselves.",
        {"GPT": gpt_variant(softmax=True)},
    ),
    Misconception(
        "gpt_blocks_plain_list", "the blocks kept in a plain Python list instead of an nn.ModuleList",
        "A plain list hides its modules from the model: their weights are not in parameters() or state_dict(), "
        "and .double() or an optimizer never reaches them. Wrap the list in nn.ModuleList.",
        {"GPT": gpt_variant(plain_list=True)},
    ),
    Misconception(
        "gpt_full_context_refused", "a ValueError for a sequence of exactly context_length tokens (T >= "
        "context_length instead of T > context_length)",
        "context_length is the longest sequence the model takes: raise only when T > context_length.",
        {"GPT": gpt_variant(full_context_refused=True)},
    ),
    Misconception(
        "gpt_init_pytorch_defaults", "no initialisation: the embeddings left at nn.Embedding's default N(0, 1) "
        "and the linear layers at nn.Linear's",
        "Draw token_emb, pos_emb and every linear weight from N(0, 0.02), zero the biases and scale out_proj and fc2 "
        "by 1 / sqrt(2 * n_layers), as GPT-2 does: tied to N(0, 1) embeddings, lm_head gives logits so large that "
        "the first loss is tens of nats instead of ln V.",
        {"GPT": gpt_variant(init="pytorch_defaults")},
    ),
    Misconception(
        "gpt_init_embeddings_default", "GPT-2's init applied to the blocks only: the embeddings left at "
        "nn.Embedding's default N(0, 1), an untied lm_head at nn.Linear's",
        "Initialise the whole model, not only the blocks: token_emb and pos_emb from N(0, 0.02) (at N(0, 1) the tied "
        "lm_head starts with huge logits), and an untied lm_head's weight from N(0, 0.02) as every nn.Linear.",
        {"GPT": gpt_variant(init="embeddings_default")},
    ),
    Misconception(
        "gpt_init_pos_emb_default", "pos_emb left at nn.Embedding's default N(0, 1)",
        "Draw pos_emb from N(0, 0.02) as well as token_emb (an init that reaches nn.Linear layers only reaches "
        "token_emb through the tied lm_head, not pos_emb).",
        {"GPT": gpt_variant(init="pos_emb_default")},
    ),
    Misconception(
        "gpt_init_embeddings_only", "only the embeddings drawn from N(0, 0.02), the linear layers left at "
        "nn.Linear's default",
        "Draw every nn.Linear weight from N(0, 0.02) too (out_proj and fc2 scaled by 1 / sqrt(2 * n_layers)), and "
        "zero the biases.",
        {"GPT": gpt_variant(init="embeddings_only")},
    ),
    Misconception(
        "gpt_init_residual_not_scaled", "out_proj and fc2 drawn from N(0, 0.02) like the other layers, not scaled "
        "down",
        "The layers that write into the residual stream get std 0.02 / sqrt(2 * n_layers): each block adds two "
        "terms to the stream, and the scaling keeps its variance from growing with depth.",
        {"GPT": gpt_variant(init="not_scaled")},
    ),
    Misconception(
        "gpt_init_biases_kept", "the linear weights redrawn but their biases left at nn.Linear's default",
        "Set every nn.Linear bias to zero (nn.init.zeros_), as GPT-2 does.",
        {"GPT": gpt_variant(init="biases_kept")},
    ),
    Misconception(
        "gpt_init_pos_emb_small", "pos_emb drawn from N(0, 0.01), as GPT-2's released code did, not from N(0, 0.02)",
        "This course's GPT draws pos_emb from N(0, 0.02), like token_emb.",
        {"GPT": gpt_variant(init="pos_emb_small")},
    ),
    Misconception(
        "gpt_init_xavier", "linear layers (and the tied token table) drawn with Xavier's uniform init",
        "Xavier's scale, sqrt(2 / (fan_in + fan_out)), is 0.08 for a (256, 64) table: GPT-2 draws every weight from "
        "N(0, 0.02) (out_proj and fc2 from N(0, 0.02 / sqrt(2 * n_layers))), so the first logits are near zero.",
        {"GPT": gpt_variant(init="xavier")},
    ),
    Misconception(
        "gpt_init_every_parameter", "every parameter drawn from N(0, 0.02), the LayerNorms' weights and biases too",
        "Only the embeddings' and the linear layers' weights are drawn; a LayerNorm starts at weight 1 and bias 0 "
        "(a weight of 0.02 would shrink every normalised vector 50 times).",
        {"GPT": gpt_variant(init="every_parameter")},
    ),
    Misconception(
        "gpt_one_block_repeated", "the same block repeated n_layers times ([block] * n_layers)",
        "Make a new TransformerBlock for every layer: a list of n copies of one module shares its weights.",
        {"GPT": gpt_variant(shared_block=True)},
    ),
    Misconception(
        "count_tied_twice", "a count that includes the tied lm_head matrix as well as token_emb",
        "A tied matrix is one set of parameters: count V * d once when tie_weights is True.",
        count_and_breakdown_with(tied_counted_twice=True),
    ),
    Misconception(
        "count_untied_no_head", "a count that leaves out lm_head's own weight when tie_weights is False",
        "Untied, lm_head has a (vocab_size, d_model) weight of its own: add V * d when tie_weights is False.",
        {"count_parameters": count_with(untied_no_head=True)},
    ),
    Misconception(
        "count_head_bias", "an untied lm_head counted with a bias",
        "lm_head is nn.Linear(d_model, vocab_size, bias=False): untied, it adds V * d and nothing more.",
        count_and_breakdown_with(head_bias=True),
    ),
    Misconception(
        "count_norm_weight_only", "LayerNorms counted as d_model parameters each, their biases left out",
        "nn.LayerNorm(d) holds a weight and a bias, 2 * d: two per block and ln_f.",
        count_and_breakdown_with(norm_weight_only=True),
    ),
    Misconception(
        "count_ln_f_per_block", "ln_f counted in every block (three LayerNorms per block) instead of once",
        "Each block has two LayerNorms, ln1 and ln2; ln_f comes once, after the last block.",
        count_and_breakdown_with(ln_f_per_block=True),
    ),
    Misconception(
        # The checks see `embeddings` and `lm_head` only as their sum (a tied head has no count of
        # its own), so ln_f put under either is this mistake.
        "breakdown_ln_f_in_head", "ln_f counted under `lm_head` (or `embeddings`) instead of `norms`",
        "`norms` holds every LayerNorm, ln_f included; `embeddings` only token_emb and pos_emb, `lm_head` "
        "only the output layer's own weight.",
        {"parameter_breakdown": breakdown_with(ln_f_in_head=True)},
    ),
    Misconception(
        "count_per_head_qkv", "attention counted with a d x d query, key and value matrix for every head",
        "The heads share q_proj, k_proj and v_proj: each head reads d_model / n_heads of their columns, so "
        "attention is four d x d matrices with biases, whatever n_heads is.",
        count_and_breakdown_with(per_head_qkv=True),
    ),
    Misconception(
        "count_no_biases", "a count that leaves out the linear layers' biases",
        "q_proj, k_proj, v_proj, out_proj, fc1 and fc2 each have a bias: 4 d + d_ff + d per block.",
        count_and_breakdown_with(no_biases=True),
    ),
    Misconception(
        "count_no_norms", "a count that leaves out the LayerNorms",
        "Every LayerNorm holds a weight and a bias of d_model each: two per block, plus ln_f.",
        count_and_breakdown_with(no_norms=True),
    ),
    Misconception(
        "count_no_final_norm", "a count that forgets ln_f",
        "The final LayerNorm adds 2 * d_model, once (it is not in a block).",
        count_and_breakdown_with(no_final_norm=True),
    ),
    Misconception(
        "count_no_positions", "a count that forgets the position embedding",
        "pos_emb holds context_length * d_model parameters.",
        count_and_breakdown_with(no_positions=True),
    ),
    Misconception(
        "count_d_ff_default", "a count that takes d_ff = d_model when d_ff is None",
        "When d_ff is None the block uses 4 * d_model.",
        {"count_parameters": count_with(d_ff_default_d_model=True)},
    ),
    Misconception(
        "count_ignores_d_ff", "a count that always takes d_ff = 4 * d_model, even when the config gives d_ff",
        "4 * d_model is only the default: when config.d_ff is a number, fc1 and fc2 are that wide.",
        count_and_breakdown_with(ignores_d_ff=True),
    ),
    Misconception(
        "count_no_out_proj", "a count with three d x d projections in attention instead of four",
        "Attention has q_proj, k_proj, v_proj and out_proj: four (d_model, d_model) weights and four biases.",
        {"count_parameters": count_with(no_out_proj=True)},
    ),
    Misconception(
        "count_one_block", "a count with a single block instead of n_layers of them",
        "Every layer has its own block: multiply a block's count by n_layers.",
        {"count_parameters": count_with(one_block=True)},
    ),
    Misconception(
        "count_chapter_estimate", "the chapter's estimate 12 L d^2 + (V + T) d, not the exact count",
        "The estimate leaves out the biases, the LayerNorms, a d_ff other than 4 d and an untied lm_head: add "
        "each module's exact count (part 4 lists them).",
        {"count_parameters": count_with(chapter_estimate=True)},
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
    Misconception(
        "rope_ignores_base", "rotary embedding with 10000 written in, ignoring the `base` argument",
        "Use the base you are given: theta_i = base ** (-2i / d).",
        {"rope": rope_with(ignore_base=True)},
    ),
    Misconception(
        "rope_output_concatenated", "neighbouring pairs turned, but the results concatenated ([new a's, new b's]) "
        "instead of put back in their columns",
        "Each turned pair goes back where it came from, columns 2i and 2i + 1: torch.stack((new_a, new_b), dim=-1)"
        ".flatten(-2), not torch.cat.",
        {"rope": rope_with(concatenated=True)},
    ),
    Misconception(
        "rope_exponent_positive", "rotary angles p * base ** (2i / d), growing with i, instead of base ** (-2i / d)",
        "The frequencies fall with i: theta_i = base ** (-2i / d), one radian per position for pair 0 and less and "
        "less after it.",
        {"rope": rope_with(exponent_sign=1.0)},
    ),
)


def _config_heads_before_layers(reference):
    import dataclasses

    fields = {f.name: f for f in dataclasses.fields(reference.GPTConfig)}
    order = ["vocab_size", "context_length", "d_model", "n_heads", "n_layers", "d_ff", "tie_weights"]
    return dataclasses.make_dataclass("GPTConfig", [
        (name, fields[name].type, dataclasses.field(default=fields[name].default)
         if fields[name].default is not dataclasses.MISSING else dataclasses.field()) for name in order])


def _config_with_default(reference, field, value):
    import dataclasses

    fields = [(f.name, f.type, dataclasses.field(default=value) if f.name == field else
               (dataclasses.field(default=f.default) if f.default is not dataclasses.MISSING else dataclasses.field()))
              for f in dataclasses.fields(reference.GPTConfig)]
    return dataclasses.make_dataclass("GPTConfig", fields)


# ---------------------------------------------------------------- what the graded parts use

SMALL = config_fields(40, 12, 8, 2, 2)
SMALL_UNTIED = config_fields(40, 12, 8, 2, 2, d_ff=20, tie_weights=False)
ODD = config_fields(37, 9, 12, 3, 3)
SMALL_64 = config_fields(30, 8, 8, 1, 2)

NO_BUILDING = ("torch.nn.Embedding", "torch.nn.Linear", "torch.nn.LayerNorm")


UNIT = graded()
