"""Unit 06, generation and the KV cache (PyTorch): the hidden checks and the misconception catalogue.

The reference is the solution notebook (`solutions/06_generation/generation.ipynb`). The
student's functions are handed the course's own model, `coursekit.gpt.GPT`, built in the
student's worker with random weights (`api.given`), so nothing here depends on units 04-05.

How the cache is checked: the model the student's functions are handed keeps its weights in
the grader (`api.remote_model`): in the student's process it is a shell with the model's
structure whose every layer (embeddings, linear layers, layer norms) asks the grader to compute
it. So the grader sees every call of `token_emb`, `pos_emb`, each block's `k_proj` and `v_proj`,
and `lm_head` itself, whatever the student's process does: the positions looked up, how many
positions' keys each call computed, and the logits of every step, which it compares with a full
forward pass of the same prefix. Nothing can be computed from the shell's own parameters (they
hold NaN), so a step the grader did not see cannot have happened; rows read from an embedding's
weight (`model.pos_emb.weight[pos]`, `F.embedding(ids, weight)`) are asked of the grader as the
module's own lookup (worker/main.py: remote_gpt), so they are seen and graded alike. Whether gradients were being
recorded is a fact of the student's process alone, so it is not graded.

`sample_next` is checked for greedy and top-k support exactly, and for its distribution with a
chi-square test whose false-fail rate for a correct sampler is below one in a million
(`FALSE_FAIL`), on a fixed generator, so a given submission always gets the same grade.
"""

from __future__ import annotations

import math
import types

import numpy as np
import torch

from ..engine.compare import Tolerance, describe
from ..engine.probes import ProbeFailed
from ..engine.report import plural
from ..engine.spec import Check, Inputs, Misconception, Part, SampleBug, Unit, diagnose_facet, facet, facet_oracle
from ..engine.weights import random_state

UNIT_NAME = "06_generation"
MODEL = "coursekit.gpt.GPT"
LOGITS = Tolerance(rtol=1e-4, atol=1e-4)
FALSE_FAIL = 1e-6  # the chance that a correct sampler fails one statistical check
DRAWS = 20_000  # per row of logits in a statistical check

SMALL = dict(vocab_size=23, context_length=16, d_model=16, n_layers=2, n_heads=2, d_ff=None, tie_weights=True)
WIDE = dict(vocab_size=31, context_length=24, d_model=24, n_layers=3, n_heads=4, d_ff=40, tie_weights=False)


# ---------------------------------------------------------------- what is graded


def graded() -> Unit:
    """The graded parts: each check, what it shows, and its points. What the checks use (their
    inputs, diagnoses and probes) and the catalogue of mistakes they name are below; this is
    called at the end of the module, once all of it is defined."""
    SAMPLE_CHECKS = (
        Check("greedy", "temperature 0 on logits (5, 11): the argmax of each row", 1,
              logits_inputs((5, 11), temperature=0), tol=Tolerance(0, 0)),
        Check("greedy_float64", "temperature 0, float64 logits (1, 7)", 0.5, logits_inputs((1, 7), torch.float64,
                                                                                             temperature=0)),
        Check("top_k_one", "top_k=1 at temperature 1.3: greedy whatever the draw", 0.5,
              lambda rng: Inputs((torch.from_numpy(rng.normal(size=(6, 9)) * 2).float(),)), probe=top_k_one_probe),
        _stat("frequencies_t1", "frequencies at temperature 1 for two rows of 5 logits",
              [[1.0, 0.0, -0.5, 0.5, 0.2], [-1.0, 0.4, 0.4, 1.1, 0.0]], temperature=1.0),
        _stat("frequencies_t07", "frequencies at temperature 0.7", [[1.0, 0.0, -0.5, 0.5, 0.2]], points=0.5,
              temperature=0.7),
        Check("one_row", "a batch of one row (1, 7) at temperature 0.9, one logit 30 above the rest (any other "
              "draw has a chance of 2e-14): ids of shape (1,)", 0.5, one_row_inputs, probe=one_row_probe),
        _stat("frequencies_hot", "frequencies at temperature 2.5", [[2.0, -1.0, 0.5, 0.0]], temperature=2.5),
        _stat("top_k_ties", "top_k=2 where the 2nd largest logit is tied (three tokens stay in)", TIED_TOP_K,
              temperature=1.0, top_k=2),
        _stat("top_k_three", "top_k=3 at temperature 0.8", [[0.1, 1.5, -0.3, 0.9, 0.7, -2.0]], temperature=0.8,
              top_k=3),
        _stat("top_k_beyond_vocab", "top_k=8 for rows of 5 logits (a top_k larger than V keeps every token)",
              [[0.5, -1.0, 1.2, 0.0, 0.3], [1.0, 1.0, -0.5, 0.2, -2.0]], points=0.5, temperature=1.0, top_k=8),
        Check("same_seed", "two generators seeded alike give the same draws (64 rows of 6 logits)", 0.5,
              logits_inputs((64, 6)), probe=same_seed_probe),
        Check("defaults", "left out, temperature and top_k are 1.0 and None: the same draws as with them given, "
              "from generators seeded alike", 0.5, logits_inputs((64, 6)), probe=defaults_probe,
              requires=("same_seed",), requires_why="draws that ignore the generator would agree by chance or "
              "never"),
        Check("inputs_unchanged", "the logits are not modified", 0.25, logits_inputs((3, 5), temperature=0.5),
              kind="unchanged"),
        Check("inputs_unchanged_top_k", "the logits are not modified at temperature 1 with top_k=3 (where dividing "
              "by the temperature makes no copy to mask)", 0.25, logits_inputs((3, 5), temperature=1.0, top_k=3),
              kind="unchanged"),
    )

    GENERATE_CHECKS = (
        _tokens("generate", "greedy", "greedy, one prompt of 1 token, 8 new tokens", 1, SMALL, 1, 1, 8, temperature=0),
        _tokens("generate", "sampled", "temperature 1, 2 prompts of 4 tokens, 8 new tokens (the same generator state "
                "as the reference)", 1, SMALL, 2, 4, 8, temperature=1.0),
        _tokens("generate", "top_k", "temperature 0.7 with top_k=5, 3 prompts, a model with 3 layers and 4 heads", 1,
                WIDE, 3, 3, 6, temperature=0.7, top_k=5),
        _tokens("generate", "zero_new", "max_new_tokens=0 returns the prompt", 0.5, SMALL, 2, 3, 0, temperature=1.0),
        _tokens("generate", "past_context", "a 13-token prompt and 7 new tokens in a 16-token context (keep the last "
                "16 as input)", 1, SMALL, 2, 13, 7, temperature=0.9),
        Check("leaves_model", "leaves the model in training mode, its weights and gradients untouched", 0.5,
              generation_inputs(SMALL, 1, 3, 4, temperature=1.0), probe=leaves_model_probe("generate"),
              oracle=leaves_model_oracle),
        Check("restored_on_error", "an error that interrupts the loop (the draw raises: the generator handed over "
              "is not a torch.Generator) leaves the model in training mode", 0.5,
              generation_inputs(SMALL, 1, 3, 4, temperature=1.0), probe=error_restores_probe("generate"),
              oracle=error_restores_oracle, requires=("leaves_model",),
              requires_why="a function that raises before it starts (NotImplementedError) leaves every flag as it "
              "was"),
        Check("keeps_eval_mode", "leaves a model handed over in eval mode in eval mode", 0.5,
              generation_inputs(SMALL, 1, 2, 2, temperature=0), probe=leaves_model_probe("generate", "eval"),
              oracle=keeps_eval_oracle),
    )

    CACHED_CHECKS = (
        _tokens("generate_cached", "greedy_one_token", "greedy from a 1-token prompt, 10 new tokens: the same tokens "
                "as generate", 1, SMALL, 1, 1, 10, temperature=0),
        _tokens("generate_cached", "sampled_batch", "temperature 1, 3 prompts of 5 tokens: the same tokens as generate "
                "for the same generator state", 1, SMALL, 3, 5, 9, temperature=1.0),
        _tokens("generate_cached", "temperature_top_k", "temperature 0.7, top_k=4, a model with 3 layers and 4 heads",
                1, WIDE, 2, 6, 10, temperature=0.7, top_k=4),
        _tokens("generate_cached", "zero_new", "max_new_tokens=0 returns the prompt", 0.5, SMALL, 2, 4, 0),
        Check("called_twice", "called twice on the same model, the second time on 2 other prompts of 4 tokens: each "
              "call's tokens as generate's", 0.5, twice_inputs(SMALL, 2, 3, 4, 5, temperature=0),
              probe=twice_probe("generate_cached"), oracle=twice_oracle),
        _tokens("generate_cached", "fills_context", "prompt 4 + 12 new tokens = context_length 16 exactly", 0.5,
                SMALL, 1, 4, 12, temperature=0),
        _cache_facet("step_logits", "steps", "the logits of every cached step equal a full forward pass of the same "
                     "prefix", SMALL, 2, 5, 7, temperature=0),
        _cache_facet("step_logits_wide", "steps", "the same, 3 layers, 4 heads, untied", WIDE, 1, 3, 6,
                     temperature=1.0),
        _cache_facet("positions", "positions", "positions continue past the prompt (pos_emb sees every position once)",
                     SMALL, 2, 5, 6, temperature=1.0),
        _cache_facet("keys_once", "keys", "each step computes keys and values for its new token only, in every layer",
                     WIDE, 2, 4, 6, temperature=0),
        Check("context_limit", "T + max_new_tokens > context_length raises a ValueError naming the limit", 1,
              generation_inputs(SMALL, 1, 10, 7, temperature=0), probe=limit_probe("generate_cached"),
              oracle=limit_error_oracle),
        Check("leaves_model", "leaves the model in training mode, its weights and gradients untouched", 0.5,
              generation_inputs(SMALL, 1, 3, 4, temperature=1.0), probe=leaves_model_probe("generate_cached"),
              oracle=leaves_model_oracle),
        Check("restored_on_error", "an error that interrupts the loop (the draw raises: the generator handed over "
              "is not a torch.Generator) leaves the model in training mode", 0.5,
              generation_inputs(SMALL, 1, 3, 4, temperature=1.0), probe=error_restores_probe("generate_cached"),
              oracle=error_restores_oracle, requires=("leaves_model",),
              requires_why="a function that raises before it starts (NotImplementedError) leaves every flag as it "
              "was"),
        Check("keeps_eval_mode", "leaves a model handed over in eval mode in eval mode", 0.5,
              generation_inputs(SMALL, 1, 2, 2, temperature=0), probe=leaves_model_probe("generate_cached", "eval"),
              oracle=keeps_eval_oracle),
    )

    parts = (
        Part("sample_next", checks=SAMPLE_CHECKS, diagnose=diagnose),
        Part("generate", checks=GENERATE_CHECKS, diagnose=diagnose, uses=("sample_next",),
             locate_probe=locate_generate),
        Part("generate_cached", checks=CACHED_CHECKS, diagnose=diagnose, uses=("sample_next",),
             locate_probe=locate_cached),
    )

    return Unit(
        UNIT_NAME,
        # The slowest cell of the solution notebook takes under 2 s on a laptop CPU (its setup, importing
        # PyTorch): 15 s leaves room for a busy machine, and costs a looping notebook less.
        cell_seconds=15,
        reference_cpu_seconds=3.5,  # 3.09 s measured (spec.Unit.reference_cpu_seconds)
        notebook_cpu_seconds=3,  # 2.59 s measured (spec.Unit.notebook_cpu_seconds)
        parts=parts,
        misconceptions=MISCONCEPTIONS,
        sample_bug=SampleBug("generate_cached", "torch.arange(start, end, device=tokens.device)",
                             "torch.arange(0, end - start, device=tokens.device)", "cache_positions_restart"),
    )


# ---------------------------------------------------------------- the model the student is handed


def model_state(fields: dict, seed: int) -> dict:
    from coursekit.gpt import GPT

    torch.manual_seed(seed)
    state = random_state(GPT(types.SimpleNamespace(**fields)), seed, gain_spread=0.1)
    if fields["tie_weights"]:
        state["lm_head.weight"] = state["token_emb.weight"]
    return state


def trusted_model(inputs: Inputs):
    """The same model as the student's, in this process: the oracle for full forward passes."""
    from coursekit.gpt import GPT

    model = GPT(types.SimpleNamespace(**inputs.kwargs["fields"]))
    model.load_state_dict(inputs.kwargs["state"])
    return model.eval()


def given_model(api, inputs: Inputs, mode: str = "eval"):
    """The course's GPT with the check's weights, its layers computed (and watched) by the grader."""
    fields = inputs.kwargs["fields"]
    model = api.remote_model(fields, inputs.kwargs["state"], watch_spec(fields["n_layers"]))
    api.method(model, mode, keep=True)
    return model


def seeded_generator(api, seed: int):
    generator = api.given("torch.Generator")
    api.method(generator, "manual_seed", seed, keep=True)
    return generator


def generation_inputs(fields: dict, batch: int, prompt: int, new: int, **settings):
    """A prompt (batch, prompt) of random ids, random weights, and the generation settings."""

    def make(rng):
        ids = torch.from_numpy(rng.integers(0, fields["vocab_size"], (batch, prompt)))
        return Inputs((ids,), {"fields": fields, "state": model_state(fields, int(rng.integers(0, 2**31))),
                               "new": new, "settings": settings, "seed": int(rng.integers(0, 2**31))})

    return make


def run_generator(api, name: str, inputs: Inputs, model, generator=None):
    prompt = inputs.args[0]
    settings = dict(inputs.kwargs["settings"])
    if generator is None:
        generator = seeded_generator(api, inputs.kwargs["seed"])
    return api.call(name, model, prompt, inputs.kwargs["new"], generator=generator, **settings)


# ---------------------------------------------------------------- probes: tokens


def tokens_probe(name: str):
    def probe(api, inputs: Inputs):
        return {"tokens": run_generator(api, name, inputs, given_model(api, inputs))}

    return probe


def twice_inputs(fields: dict, batch: int, prompt: int, second: int, new: int, **settings):
    """generation_inputs, and a second prompt (batch, second) for a second call on the same model."""
    first = generation_inputs(fields, batch, prompt, new, **settings)

    def make(rng):
        inputs = first(rng)
        inputs.kwargs["second"] = torch.from_numpy(rng.integers(0, fields["vocab_size"], (batch, second)))
        return inputs

    return make


def second_call(inputs: Inputs) -> Inputs:
    """The inputs of the second call: the second prompt, the rest alike."""
    return Inputs((inputs.kwargs["second"],), {k: v for k, v in inputs.kwargs.items() if k != "second"})


def twice_probe(name: str):
    """Two calls on the same model, the second on another prompt of another length: a cache (or
    anything else) kept from one call to the next shows in the second call's tokens. (The same
    prompt again would hide it: the kept keys of its positions are the ones it computes anew.)"""

    def probe(api, inputs: Inputs):
        model = given_model(api, inputs)
        first = run_generator(api, name, inputs, model)
        return {"tokens": first, "again": run_generator(api, name, second_call(inputs), model)}

    return probe


def twice_oracle(inputs: Inputs):
    return {"tokens": tokens_oracle(inputs)["tokens"], "again": tokens_oracle(second_call(inputs))["tokens"]}


def tokens_oracle(inputs: Inputs):
    """The reference `generate` (the full re-run) on a trusted model: what both parts must return."""
    from ..engine.reference import load_reference

    model = trusted_model(inputs)
    generator = torch.Generator().manual_seed(inputs.kwargs["seed"])
    tokens = load_reference(UNIT_NAME).generate(model, inputs.args[0].clone(), inputs.kwargs["new"],
                                                generator=generator, **inputs.kwargs["settings"])
    return {"tokens": tokens}


def limit_probe(name: str):
    """Past config.context_length: the tokens (generate), or the error raised (generate_cached)."""

    def probe(api, inputs: Inputs):
        model = given_model(api, inputs)
        try:
            return {"tokens": run_generator(api, name, inputs, model)}
        except ProbeFailed as failed:
            error_type, text = failed.outcome.error_type or "error", failed.outcome.error or ""
        except Exception as err:  # noqa: BLE001 - the reference or a variant raising
            error_type, text = type(err).__name__, str(err)
        return {"error": error_type, "names_limit": str(inputs.kwargs["fields"]["context_length"]) in text}

    return probe


def limit_error_oracle(inputs: Inputs):
    return {"error": "ValueError", "names_limit": True}


# ---------------------------------------------------------------- probes: what the model saw


def watch_spec(n_layers: int) -> dict:
    spec = {"token_emb": "shape", "pos_emb": "input", "lm_head": "last"}
    for layer in range(n_layers):
        spec[f"blocks.{layer}.attn.k_proj"] = "shape"
        spec[f"blocks.{layer}.attn.v_proj"] = "shape"
    return spec


def trace_probe(name: str, facet: str, mode: str = "eval"):
    """Run the part on a watched model; return one facet of what the trace shows (see `facets`)."""

    def probe(api, inputs: Inputs):
        model = given_model(api, inputs, mode)
        tokens = run_generator(api, name, inputs, model)
        return facets(api.watched(model), tokens, inputs)[facet]

    return probe


def facets(records, tokens, inputs: Inputs) -> dict:
    """Each facet: {"ok": bool, "detail": what was seen, "message": why it is wrong, or None}."""
    fields = inputs.kwargs["fields"]
    prompt, new = inputs.args[0], inputs.kwargs["new"]
    B, T0 = prompt.shape
    records = [r for r in records if isinstance(r, dict)] if isinstance(records, list) else []
    by_module: dict[str, list] = {}
    for r in records:
        by_module.setdefault(str(r.get("module")), []).append(r)

    out = {}
    # How many new tokens each forward step fed, from the calls of token_emb: (B, t) ids.
    fed = [_rows(r.get("shape"), B, last_dim=True) for r in by_module.get("token_emb", [])]
    needed = T0 + new - 1  # the last new token is never fed back
    if not fed:
        out["positions"] = out["keys"] = out["steps"] = facet(
            False, None, "the grader saw no call of `model.token_emb`: run the model's parts as modules "
            "(`model.token_emb(tokens)`, `model.pos_emb(positions)`, `block.attn.k_proj(h)`, ...) rather than "
            "reading their weights, so that their calls can be followed")
        return out

    # positions: every position looked up once, in order, continuing past the prompt
    seen = []
    for r in by_module.get("pos_emb", []):
        ids = r.get("input")
        if isinstance(ids, torch.Tensor) and ids.ndim == 0:  # one position (`pos_emb(torch.tensor(p))`, `weight[p]`)
            ids = ids.reshape(1)
        seen.append([int(v) for v in ids.reshape(-1, ids.shape[-1])[0].tolist()] if isinstance(ids, torch.Tensor)
                    and ids.ndim >= 1 and ids.numel() else [])
    flat = [p for step in seen for p in step]
    ok = flat[:needed] == list(range(needed)) and len(flat) in (needed, needed + 1) and len(seen) == len(fed)
    if not seen:
        message = "the grader saw no call of `model.pos_emb`: look the positions up with the module"
    else:
        message = _positions_message(seen, T0)
    out["positions"] = facet(ok, seen, message)

    # keys: each layer computes each position's keys and values once
    rows = {}
    for layer in range(fields["n_layers"]):
        for kind in ("k_proj", "v_proj"):
            rows[f"{layer}.{kind}"] = [_rows(r.get("shape"), B) for r in
                                       by_module.get(f"blocks.{layer}.attn.{kind}", [])]
    totals = {key: sum(v) for key, v in rows.items()}
    ok = all(total in (needed, needed + 1) for total in totals.values()) and all(rows.values())
    out["keys"] = facet(ok, rows, _keys_message(rows, fed, T0, needed))

    # steps: the logits that choose each new token equal a full forward pass of the same prefix
    out["steps"] = _steps_facet(_logits_by_prefix(records, B), tokens, inputs, new)
    return out


def _rows(shape, batch, last_dim=False) -> int:
    """Positions per sequence in one call: (B, t, C) -> t; (B * t, C) -> t; ids (B, t) -> t."""
    if not isinstance(shape, list) or not shape:
        return 0
    dims = shape if last_dim else shape[:-1]
    count = int(np.prod(dims)) if dims else 1
    return count // max(batch, 1)


def _positions_message(seen, T0) -> str:
    expected_next = 0
    fed = [len(positions) for positions in seen]
    for step, positions in enumerate(seen):
        want = list(range(expected_next, expected_next + len(positions)))
        if positions != want:
            where = _which_step(step, fed, T0)
            if step > 0 and len(positions) > 1 and positions == list(range(len(positions))):
                return (f"{where} fed the whole sequence again (positions 0 to {len(positions) - 1}): feed only the "
                        f"newest token, at position {expected_next}, and take the rest from the cache")
            shown = positions if len(positions) <= 8 else positions[:4] + ["..."] + positions[-2:]
            hint = ("; positions restart at 0, but the new token sits at position T + s, after the prompt and the "
                    "tokens already generated" if positions and positions[0] == 0 and expected_next > 0 else "")
            return f"{where} looked up positions {shown} in `pos_emb`, expected {want[:8]}{hint}"
        expected_next += len(positions)
    return f"`pos_emb` was asked for {plural(expected_next, 'position')} in all, expected every position once"


def _keys_message(rows, fed, T0, needed) -> str:
    for key, calls in rows.items():
        layer, kind = key.split(".")
        if not calls:
            return (f"the grader saw no call of block {layer}'s `attn.{kind}`: project with the module "
                    f"(`block.attn.{kind}(h)`), not with its weight")
        total = sum(calls)
        if total > needed + 1:
            step = next((i for i, (r, f) in enumerate(zip(calls, fed, strict=False)) if r > f), None)
            if step is None:
                step = next((i for i, r in enumerate(calls) if i > 0 and r > 1), len(calls) - 1)
            return (f"block {layer}'s `attn.{kind}` computed {total} positions in all for a prompt of "
                    f"{plural(T0, 'token')} and {plural(needed - T0 + 1, 'new token')} ({_which_step(step, fed, T0)} "
                    f"alone: {plural(calls[step], 'position')}): each step should compute keys and values for its new "
                    "token only and read the earlier ones from the cache")
        if total < needed:
            return (f"block {layer}'s `attn.{kind}` computed only {plural(total, 'position')}, but {needed} were fed "
                    "to the model: every position's keys and values are needed once")
    return "the keys and values were not computed once per position"


def _which_step(step: int, fed: list, T0: int) -> str:
    """A forward step (an index into the calls of token_emb) in the student's terms."""
    start = sum(fed[:step])
    if step == 0:
        return "the first forward step"
    if start < T0:
        return f"the forward step at prompt position {start}"
    return f"the forward step that fed new token {start - T0 + 1}"


def _logits_by_prefix(records, B) -> list:
    """Every call of lm_head, in order, with the number of positions fed to the model before it: [(length, last)].

    A prefill of the whole prompt in one call, or one token at a time (with lm_head on every
    prompt position, or on the last one only), tells each call apart by that length."""
    pairs, seen, steps = [], 0, 0
    for r in records:
        if r.get("module") == "token_emb":
            t = _rows(r.get("shape"), B, last_dim=True)
            # A step that fed the whole sequence again (no cache) predicts after t tokens, not after seen + t.
            seen = t if steps > 0 and t > 1 and t == seen + 1 else seen + t
            steps += 1
        elif r.get("module") == "lm_head":
            pairs.append((seen, r.get("last")))
    return pairs


def _steps_facet(calls, tokens, inputs, new) -> dict:
    """The logits that choose new token s + 1 are lm_head's last call after T0 + s positions were fed."""
    if not isinstance(tokens, torch.Tensor) or tokens.ndim != 2 or tokens.shape[0] != inputs.args[0].shape[0] \
            or tokens.dtype not in (torch.int64, torch.int32) or tokens.shape[1] < 1:
        return {"ok": False, "detail": None, "message": f"the tokens returned are {describe(tokens)}"}
    fields = inputs.kwargs["fields"]
    T0 = inputs.args[0].shape[1]
    tokens = tokens.long().clamp(0, fields["vocab_size"] - 1)[:, : fields["context_length"]]
    with torch.no_grad():
        full = trusted_model(inputs)(tokens)  # (B, T, V): position p predicts token p + 1
    latest = dict(calls)  # prefix length -> the logits of its last lm_head call
    verdicts = []  # per new token: True, False (wrong logits), None (no logits computed after that prefix)
    for length in range(T0, T0 + new):
        last = latest.get(length)
        if last is None or length > full.shape[1]:
            verdicts.append(None)
        elif not isinstance(last, torch.Tensor) or tuple(last.shape) != tuple(full[:, length - 1].shape):
            verdicts.append(False)
        else:
            verdicts.append(bool(torch.allclose(last.float(), full[:, length - 1], rtol=LOGITS.rtol,
                                                atol=LOGITS.atol)))
    ok = all(v is True for v in verdicts)
    if not calls:
        message = "the grader saw no call of `model.lm_head`: compute the logits with the module"
    elif ok:
        message = None
    else:
        bad = next(i for i, v in enumerate(verdicts) if v is not True)
        length, last = T0 + bad, latest.get(T0 + bad)
        after = "the prompt" if bad == 0 else f"the prompt and {plural(bad, 'new token')}"
        if verdicts[bad] is None:
            message = (f"no logits were computed after {after}, where new token {bad + 1} is chosen: `lm_head` ran "
                       f"{plural(len(calls), 'time')} for {plural(new, 'new token')}, and every new token needs "
                       "the logits of the position before it")
        elif isinstance(last, torch.Tensor) and tuple(last.shape) == tuple(full[:, length - 1].shape):
            gap = float((last.float() - full[:, length - 1]).abs().max())
            message = (f"the logits that choose new token {bad + 1} (after {after}) differ from a full forward "
                       f"pass of the same prefix by up to {gap:.3g}")
            if bad == 0:  # wrong before any new token was fed: the forward pass itself, or the prefill's mask
                message += ("; these come from the prompt alone, so compare your forward step with the model's own: "
                            "ln1 before the projections, both residual additions, ln2 and ffn, ln_f before lm_head, "
                            "and the causal mask on the prompt")
        else:
            message = (f"the logits that choose new token {bad + 1} have shape {describe(last)}, expected the last "
                       f"position's ({inputs.args[0].shape[0]}, {fields['vocab_size']})")
    return {"ok": ok, "detail": verdicts, "message": message}


# ---------------------------------------------------------------- probes: leaving the model alone


def leaves_model_probe(name: str, mode: str = "train"):
    """Start in `mode` ("train" or "eval") with no gradients; afterwards the flags, the parameters and
    the gradients must be as they were (the weights and gradients as the grader holds them). Both
    modes are checked: `model.eval()` ... `model.train()` restores the first and breaks the second."""

    def probe(api, inputs: Inputs):
        model = given_model(api, inputs, mode=mode)
        run_generator(api, name, inputs, model)
        flags = {path: bool(api.attr(model, f"{path}.training" if path else "training"))
                 for path in ("", "blocks.0", "blocks.0.attn", "ln_f")}
        state, grads = api.model_state(model)
        same = all(isinstance(state.get(k), torch.Tensor) and torch.equal(state[k], v)
                   for k, v in inputs.kwargs["state"].items())
        return {"training": flags, "parameters_kept": bool(same),
                "no_gradients": all(g is None for g in grads.values())}

    return probe


def error_restores_probe(name: str):
    """Start in training mode; the draw raises inside the loop (a generator that is not one): the flags must
    be put back all the same (a finally block), whether or not the error is passed on."""

    def probe(api, inputs: Inputs):
        model = given_model(api, inputs, mode="train")
        try:
            run_generator(api, name, inputs, model, generator="not a torch.Generator")
        except ProbeFailed:
            pass
        except Exception:  # noqa: BLE001, S110 - the reference or a variant raising, as it should
            pass
        flags = {path: bool(api.attr(model, f"{path}.training" if path else "training"))
                 for path in ("", "blocks.0", "blocks.0.attn", "ln_f")}
        return {"training": flags, "parameters_kept": True, "no_gradients": True, "after_error": True}

    return probe


def error_restores_oracle(inputs: Inputs):
    return {"training": {"": True, "blocks.0": True, "blocks.0.attn": True, "ln_f": True},
            "parameters_kept": True, "no_gradients": True, "after_error": True}


def leaves_model_oracle(inputs: Inputs):
    return {"training": {"": True, "blocks.0": True, "blocks.0.attn": True, "ln_f": True},
            "parameters_kept": True, "no_gradients": True}


def keeps_eval_oracle(inputs: Inputs):
    return {"training": {"": False, "blocks.0": False, "blocks.0.attn": False, "ln_f": False},
            "parameters_kept": True, "no_gradients": True}


# ---------------------------------------------------------------- sample_next


def logits_inputs(shape, dtype=torch.float32, scale=2.0, **settings):
    def make(rng):
        return Inputs((torch.from_numpy(rng.normal(size=shape) * scale).to(dtype),), settings)

    return make


def one_row_inputs(rng):
    """One row of logits, one of them so far above the rest that any sampler draws it: a batch of one
    through the sampling path (a greedy check takes the argmax path), its result decided."""
    logits = torch.zeros(1, 7)
    logits[0, int(rng.integers(0, 7))] = 30.0
    return Inputs((logits,))


def one_row_probe(api, inputs: Inputs):
    """From a seeded generator, so that a catalogued mistake (whose draw is another) can be matched by a rerun."""
    return api.call("sample_next", inputs.args[0], generator=seeded_generator(api, 8), temperature=0.9)


def draws_inputs(rows, **settings):
    """Rows of logits, each repeated DRAWS times in one (R * DRAWS, V) call."""

    def make(rng):
        return Inputs((torch.tensor(rows, dtype=torch.float32),), {"settings": settings, "seed": 2026})

    return make


def draws_probe(api, inputs: Inputs):
    rows = inputs.args[0]
    generator = seeded_generator(api, inputs.kwargs["seed"])
    ids = api.call("sample_next", rows.repeat_interleave(DRAWS, dim=0), generator=generator,
                   **inputs.kwargs["settings"])
    if not isinstance(ids, torch.Tensor) or ids.numel() != rows.shape[0] * DRAWS or ids.dtype.is_floating_point:
        return {"ids": ids}
    ids = ids.reshape(rows.shape[0], DRAWS).long()
    counts = torch.stack([torch.bincount(row.clamp(0, rows.shape[1]), minlength=rows.shape[1] + 1)
                          for row in ids])  # (R, V + 1): the last column counts ids out of range
    return {"counts": counts}


def draws_oracle(inputs: Inputs):
    """The distribution the contract defines, written here from scratch: softmax of
    logits / temperature over the tokens at least as large as the k-th largest."""
    rows = inputs.args[0].double()
    settings = inputs.kwargs["settings"]
    scaled = rows / settings.get("temperature", 1.0)
    k = settings.get("top_k")
    if k is not None:
        kth = scaled.sort(dim=-1, descending=True).values[:, min(k, rows.shape[1]) - 1: min(k, rows.shape[1])]
        scaled = torch.where(scaled >= kth, scaled, torch.tensor(-math.inf, dtype=scaled.dtype))
    return {"probabilities": torch.softmax(scaled, dim=-1)}


def top_k_one_probe(api, inputs: Inputs):
    """top_k=1 from a seeded generator (so that a catalogued mistake can be matched by a rerun)."""
    return api.call("sample_next", inputs.args[0], generator=seeded_generator(api, 7), temperature=1.3, top_k=1)


def same_seed_probe(api, inputs: Inputs):
    """Two generators with the same seed, the global random state moved on between them."""
    logits = inputs.args[0]
    first = api.call("sample_next", logits, generator=seeded_generator(api, 5), temperature=1.0)
    second = api.call("sample_next", logits, generator=seeded_generator(api, 5), temperature=1.0)
    if not isinstance(first, torch.Tensor) or not isinstance(second, torch.Tensor) or first.shape != second.shape:
        return {"same": False}
    return {"same": bool(torch.equal(first, second))}


def defaults_probe(api, inputs: Inputs):
    """sample_next with its defaults against the contract's values given, from generators seeded alike."""
    logits = inputs.args[0]
    left_out = api.call("sample_next", logits, generator=seeded_generator(api, 6))
    given, again = (api.call("sample_next", logits, temperature=1.0, top_k=None, generator=seeded_generator(api, 6))
                    for _ in range(2))
    if not all(isinstance(t, torch.Tensor) and t.shape == logits.shape[:1] for t in (left_out, given, again)):
        return {"defaults": False}
    if not torch.equal(given, again):  # draws that do not follow the generator: same_seed says so
        return {"defaults": None}
    return {"defaults": bool(torch.equal(left_out, given))}


def chi_square_survival(statistic: float, dof: int) -> float:
    """P(X >= statistic) for X chi-square with `dof` degrees of freedom."""
    if dof <= 0:
        return 1.0
    return float(torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64),
                                         torch.tensor(statistic / 2, dtype=torch.float64)))


def _distribution(rows, temperature: float, top_k, whole_batch: bool = False):
    """softmax(rows / temperature) over the top k of each row, or over the entries at least as large
    as the k-th largest of the whole batch the sampler was given (each row repeated DRAWS times);
    None where that leaves a row with nothing to draw."""
    scaled = rows.double() / temperature
    if top_k is not None:
        if whole_batch:
            flat = scaled.repeat_interleave(DRAWS, dim=0).flatten()
            kth = flat.topk(min(top_k, flat.numel())).values[-1]
        else:
            kth = scaled.sort(dim=-1, descending=True).values[:, min(top_k, rows.shape[1]) - 1:][:, :1]
        scaled = torch.where(scaled >= kth, scaled, torch.tensor(-math.inf, dtype=scaled.dtype))
    if bool(torch.isinf(scaled).all(dim=-1).any()):
        return None
    return torch.softmax(scaled, dim=-1)


def _filled(rows, temperature: float, top_k, fill: float):
    """softmax of rows / temperature whose entries below the k-th largest are set to `fill` (a finite
    value: those tokens keep a probability exp(fill)-weighted) instead of -inf."""
    scaled = rows.double() / temperature
    kth = scaled.sort(dim=-1, descending=True).values[:, min(top_k, rows.shape[1]) - 1:][:, :1]
    return torch.softmax(torch.where(scaled >= kth, scaled, torch.tensor(fill, dtype=scaled.dtype)), dim=-1)


def _fits(counts, probs) -> bool:
    """The counts (R, V) are a plausible draw from probs (R, V): none outside its support, and the
    chi-square test passes."""
    support = probs > 0
    if bool(((~support) & (counts > 0)).any()):
        return False
    want = probs * DRAWS
    statistic = float((((counts - want) ** 2) / want.where(support, torch.ones_like(want)))[support].sum())
    return chi_square_survival(statistic, int(support.sum()) - probs.shape[0]) >= FALSE_FAIL


def _draws_reading(counts, expected_probs, inputs: Inputs | None) -> str:
    """" They match <a mistake>: <what to do>", where the frequencies fit exactly one of the usual
    wrong distributions (and not the contract's), or ""."""
    if inputs is None or not inputs.args or not isinstance(inputs.args[0], torch.Tensor):
        return ""
    rows, settings = inputs.args[0], inputs.kwargs.get("settings", {})
    T, k = settings.get("temperature", 1.0), settings.get("top_k")
    readings = {}
    if T != 1.0:
        readings[f"the logits not divided by the temperature ({T:g}){' on the path with top_k' if k else ''}: "
                 "divide them by the temperature before the top-k cut and the softmax, whether or not top_k is "
                 "given"] = _distribution(rows, 1.0, k)
        readings[f"the logits divided by the temperature ({T:g}) twice: divide once, before the softmax"] = \
            _distribution(rows / T, T, k)
    if k is not None:
        readings["a top-k threshold taken over the whole batch (the k-th largest of every row's logits flattened "
                 "together: here the largest logit of all, the batch checked being copies of a few rows), not each "
                 "row's own: take the k-th largest along the vocabulary, "
                 "torch.topk(scaled, k, dim=-1).values[:, -1:]"] = \
            _distribution(rows, T, k, whole_batch=True)
        readings["the dropped logits set to 0 instead of -inf: a logit of 0 still weighs exp(0) = 1 in the softmax, "
                 "so the tokens outside the top k keep a probability; set them to -inf (masked_fill(scaled < kth, "
                 "float('-inf')))"] = _filled(rows, T, k, 0.0)
    fits = [sentence for sentence, probs in readings.items()
            if probs is not None and not torch.allclose(probs, expected_probs.double()) and _fits(counts, probs)]
    return f". They match {fits[0]}" if len(fits) == 1 else ""


def diagnose_draws(result, expected, inputs: Inputs | None = None) -> str | None:
    if not isinstance(result, dict) or "counts" not in result:
        ids = result.get("ids") if isinstance(result, dict) else result
        return f"expected {DRAWS} ids per row, shape (B,) and an integer dtype; got {describe(ids)}"
    counts = result["counts"].double()
    if counts[:, -1].sum() > 0:
        return "some ids are not valid token ids (below 0 or not below V)"
    counts = counts[:, :-1]
    if "probabilities" in expected:  # against the contract's distribution: a goodness-of-fit test
        probs = expected["probabilities"]
        outside = (probs == 0) & (counts > 0)
        kept = (probs > 0).sum(dim=1)  # k, row by row (more where the k-th logit ties)
        if outside.any() and all(counts[r, int(k):].sum() == 0 for r, k in enumerate(kept)):
            return (f"every draw is one of ids 0..{int(kept.max()) - 1}, though the top {int(kept.max())} logits sit "
                    "elsewhere: those are positions within the top k, not token ids. Map a drawn position back to "
                    "its id with the indices torch.topk returns (indices.gather(-1, choice))")
        if outside.any():
            row, token = (int(v) for v in outside.nonzero()[0])
            return (f"row {row} drew token {token} {int(counts[row, token])} times, though it is outside the top k "
                    "and should have probability 0" + _draws_reading(counts, probs, inputs))
        support = probs > 0
        want = probs * DRAWS
        statistic = float((((counts - want) ** 2) / want.where(support, torch.ones_like(want)))[support].sum())
        dof = int(support.sum()) - probs.shape[0]
        p = chi_square_survival(statistic, dof)
        if p < FALSE_FAIL:
            row = int(((counts / DRAWS - probs).abs().sum(dim=1)).argmax())
            return (f"the frequencies do not follow the contract's distribution (chi-square {statistic:.0f} on {dof} "
                    f"degrees of freedom, p = {p:.1g}): row {row} drew {_fractions(counts[row] / DRAWS)} where "
                    f"{_fractions(probs[row])} was expected{_draws_reading(counts, probs, inputs)}")
        return None
    # Against another sampler's counts (a catalogued variant): a test of homogeneity.
    other = expected["counts"].double()[:, :-1]
    statistic, dof = 0.0, 0
    for a, b in zip(counts, other, strict=True):
        used = (a + b) > 0
        a, b = a[used], b[used]
        total = a + b
        for observed in (a, b):
            share = observed.sum() / (a.sum() + b.sum())
            statistic += float((((observed - total * share) ** 2) / (total * share)).sum())
        dof += int(used.sum()) - 1
    return None if chi_square_survival(statistic, dof) >= FALSE_FAIL else "the two samplers draw differently"


def _fractions(row) -> str:
    return "[" + ", ".join(f"{float(v):.3f}" for v in row) + "]"


# ---------------------------------------------------------------- comparing results


def diagnose(result, expected, inputs: Inputs, tol: Tolerance) -> str | None:
    if isinstance(expected, dict) and ("probabilities" in expected or "counts" in expected):
        return diagnose_draws(result, expected, inputs)
    if isinstance(expected, dict) and "ok" in expected:  # a facet of the trace
        return diagnose_facet(result, expected, "the calls")
    if isinstance(expected, dict) and "error" in expected:
        if not isinstance(result, dict) or result.get("error") != expected["error"]:
            got = result.get("error") if isinstance(result, dict) else None
            return (f"T + max_new_tokens exceeds context_length: expected a {expected['error']}, "
                    f"got {got + ' raised' if got else 'no error'}")
        if expected.get("names_limit") and not result.get("names_limit"):
            return "the ValueError should name the limit (the value of context_length) in its message"
        return None
    if isinstance(expected, dict) and "defaults" in expected:
        if isinstance(result, dict) and result.get("defaults") is None:
            return ("could not be judged: two generators seeded alike gave different draws (see the check of "
                    "generators seeded alike)")
        if result != expected:
            return ("with temperature and top_k left out, the draws differ from those with temperature=1.0 and "
                    "top_k=None given (from generators seeded alike): the defaults in the signature are "
                    "temperature=1.0 and top_k=None")
        return None
    if isinstance(expected, dict) and "same" in expected:
        if result != expected:
            return ("two generators seeded alike gave different draws: pass `generator=generator` to "
                    "torch.multinomial rather than using the global random state")
        return None
    if isinstance(expected, dict) and "training" in expected:
        return diagnose_left_alone(result, expected)
    if isinstance(expected, dict) and "tokens" in expected:
        if not isinstance(result, dict) or "tokens" not in result:
            return f"could not read the tokens ({describe(result)})"
        problem = diagnose_ids(result["tokens"], expected["tokens"], inputs, prompt=inputs.args[0])
        if problem is None and "again" in expected:
            second = second_call(inputs)
            again = diagnose_ids(result.get("again"), expected["again"], second, prompt=second.args[0])
            if again is not None:
                return (f"the first call was right, but a second call on the same model, on another prompt of "
                        f"{plural(second.args[0].shape[1], 'token')}, went wrong ({again}): is something (a cache?) "
                        "kept from one call to the next, in a global, a dict keyed by the model, or a mutable default "
                        "argument? Start every call with an empty cache")
        return problem
    return diagnose_ids(result, expected, inputs)


def _same_values(a, b) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.shape == b.shape and a.dtype == b.dtype and bool(torch.equal(a, b))
    if isinstance(a, tuple | list) and isinstance(b, tuple | list):
        return len(a) == len(b) and all(_same_values(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def diagnose_ids(result, expected, inputs: Inputs, prompt=None) -> str | None:
    if not isinstance(expected, torch.Tensor):  # a catalogued variant's odd result, compared with the student's
        return None if _same_values(result, expected) else "the results differ"
    if not isinstance(result, torch.Tensor):
        return f"returned {describe(result)}, expected a tensor of token ids of shape {tuple(expected.shape)}"
    if result.dtype.is_floating_point or result.dtype == torch.bool:
        return f"the ids have dtype {result.dtype}, expected torch.long (argmax and multinomial return it)"
    if tuple(result.shape) != tuple(expected.shape):
        hint = ""
        if prompt is not None and tuple(result.shape) == (expected.shape[0], expected.shape[1] - prompt.shape[1]):
            hint = ": return the prompt followed by the new tokens"
        elif result.ndim == expected.ndim + 1 and result.shape[-1] == 1:
            hint = ": squeeze the last dimension (multinomial returns (B, 1))"
        elif result.ndim == 0 and tuple(expected.shape) == (1,):
            hint = (": a batch of one row gave a single number, as .squeeze() does to multinomial's (1, 1) (it drops "
                    "every dimension of size 1, the batch's too). Squeeze the last dimension only, .squeeze(-1), or "
                    "take [:, 0]")
        elif prompt is None and inputs.args and isinstance(inputs.args[0], torch.Tensor) and \
                inputs.args[0].ndim == 2 and result.ndim == 1 and result.shape[0] == inputs.args[0].shape[1] \
                != inputs.args[0].shape[0]:
            hint = (": one id for each of the V columns, as an argmax down the batch (over dim 0) gives. Take the "
                    "argmax over the vocabulary, the last axis (argmax(dim=-1)): one id for each row")
        return f"the ids have shape {tuple(result.shape)}, expected {tuple(expected.shape)}{hint}"
    if torch.equal(result.long(), expected.long()):
        return None
    if prompt is not None and not torch.equal(result[:, : prompt.shape[1]].long(), prompt.long()):
        return "the output should start with the prompt, unchanged"
    differ = (result.long() != expected.long()).nonzero()
    if len(differ) == 0:
        return None
    if prompt is None:
        if result.ndim != 1:  # ids of the wrong shape (a catalogued variant's, compared with the student's)
            got, want = result.reshape(-1), expected.reshape(-1)
            first = int((got != want).nonzero()[0][0])
            return f"id {first} of the flattened ids is {int(got[first])}, expected {int(want[first])}"
        row = int(differ[0][0])
        if bool((result == 0).all()) and bool((expected != 0).any()):
            return (f"every row gave id 0, where the largest logits sit at {expected[:4].tolist()}...: is it a "
                    "position within the top k (with top_k=1 always 0) rather than a token id? Map a drawn position "
                    "back to its id with the indices torch.topk returns (indices.gather(-1, choice))")
        told = f"row {row} gave id {int(result[row])}, expected {int(expected[row])}"
        return told + _greedy_reading(result, inputs)
    row, position = (int(v) for v in differ[0])
    return (f"new token {position - prompt.shape[1] + 1} of row {row} (position {position}) is "
            f"{int(result[row, position])}, the reference's is {int(expected[row, position])}")


def _greedy_reading(result, inputs: Inputs) -> str:
    """At temperature 0, ids that are the argmax of logits / 0: divided before the test for 0."""
    logits = inputs.args[0] if inputs.args else None
    if inputs.kwargs.get("temperature") != 0 or not isinstance(logits, torch.Tensor) or logits.ndim != 2:
        return ""
    with torch.no_grad():
        divided = logits / 0.0
        for read in (divided, torch.softmax(divided, dim=-1)):
            if torch.equal(result.long(), read.argmax(dim=-1)):
                return (": these are the argmax of logits / 0, where every positive logit becomes inf (the first "
                        "of them wins) and 0 gives nan. Test temperature == 0 first and take the argmax of the "
                        "logits themselves, before dividing by the temperature")
    return ""


def diagnose_left_alone(result, expected) -> str | None:
    if not isinstance(result, dict):
        return f"could not read the model afterwards ({describe(result)})"
    changed = [path or "the model" for path, flag in expected["training"].items()
               if result.get("training", {}).get(path) != flag]
    if changed and not expected["training"][""]:
        return (f"the model was in eval mode and is in training mode afterwards ({changed[0]}): put back the flags "
                "you found (remember each module's `training` before calling model.eval()), rather than calling "
                "model.train()")
    if changed and expected.get("after_error"):
        return (f"after an error inside the loop the model is left in eval mode ({changed[0]}): put every module's "
                "training flag back in a finally block (try: ... finally: ...), so that they are restored even when "
                "the generation raises")
    if changed:
        return (f"the model was in training mode and is not any more ({changed[0]}): if you call model.eval(), "
                "put every module's training flag back afterwards (in a finally block)")
    if not result.get("parameters_kept"):
        return "the model's parameters changed: generation must not modify the weights"
    if not result.get("no_gradients"):
        return "parameters have gradients afterwards: generate under torch.no_grad() and never call backward"
    return None


# ---------------------------------------------------------------- locating the step of a generation

# A small model whose every layer call the grader keeps whole (input and output), so that the
# locator can replay the generation layer by layer: three heads, so that a head mix-up shows.
LOCATE_FIELDS = dict(vocab_size=19, context_length=12, d_model=12, n_layers=2, n_heads=3, d_ff=20, tie_weights=False)
LOCATE_NEW = 4  # new tokens per call
LOCATE_TOL = dict(rtol=1e-4, atol=1e-5)


def locate_generate(api) -> str | None:
    """Where `generate` first departs: greedy generation past the context's length on a model whose
    embedding and head calls the grader keeps, replayed step by step (the window the model was
    given, the token chosen from its logits, the number of steps, what is returned)."""
    fields, new = dict(LOCATE_FIELDS, context_length=6), 5
    prompt = torch.from_numpy(np.random.default_rng(31).integers(0, fields["vocab_size"], (2, 4)))
    model = api.remote_model(fields, model_state(fields, 7), {"token_emb": "io", "lm_head": "io"})
    api.method(model, "eval", keep=True)
    tokens = api.call("generate", model, prompt, new, temperature=0)
    found = replay_generate(api.watched(model), prompt, tokens, fields["context_length"], new)
    if found is None:
        return sampled_departure(api, "generate", fields, prompt, new)
    return f"{found[0]}. {found[1]}"


SAMPLED_SEED = 2027  # the generator of the locators' sampled generation
SAMPLED_SETTINGS = dict(temperature=0.8, top_k=6)  # of V = 19: the temperature and top_k both show in the draws


def _handed_readings(temperature: float, top_k: int) -> dict:
    """(step, what it does) -> the sampler call it makes of the last position's logits, for the usual
    slips in what a generator hands sample_next."""
    return {
        ("what is handed to sample_next", "The draws are those sample_next makes from softmax(logits), not from the "
         "logits: sample_next takes the last position's logits themselves (it divides by the temperature and takes "
         "the softmax); handed probabilities, it takes a softmax again and draws from a flatter distribution "
         "(greedy is unaffected)"):
            lambda sample, logits, g: sample(torch.softmax(logits, dim=-1), temperature, top_k, g),
        ("what is handed to sample_next", f"The draws are those sample_next makes from logits / {temperature:g}, "
         "logits already divided by the temperature, which sample_next divides again: hand it the raw logits of the "
         "last position"):
            lambda sample, logits, g: sample(logits / temperature, temperature, top_k, g),
        ("the call to sample_next", f"The draws are those of sample_next without top_k (top_k={top_k} was given): "
         "call sample_next(logits, temperature, top_k, generator) with every setting the generator was given"):
            lambda sample, logits, g: sample(logits, temperature, None, g),
        ("the call to sample_next", f"The draws are those of sample_next at temperature 1 ({temperature:g} was "
         "given): call sample_next(logits, temperature, top_k, generator) with every setting the generator was "
         "given"):
            lambda sample, logits, g: sample(logits, 1.0, top_k, g),
    }


def sampled_departure(api, name: str, fields: dict, prompt, new: int) -> str | None:
    """A sampled generation (SAMPLED_SETTINGS, a seeded generator) whose head calls the grader keeps,
    replayed here with the reference's sampler on generators seeded alike: where the tokens are not
    the contract's draws but every one of them is the draw one of the usual slips makes (softmax(logits)
    or logits / temperature handed over, top_k or the temperature not passed on), that slip's step.
    (A slip that shows at temperature 0 is found by the greedy replay before this is tried.)"""
    from ..engine.reference import load_reference

    model = api.remote_model(fields, model_state(fields, 7), {"lm_head": "io"})
    api.method(model, "eval", keep=True)
    tokens = api.call(name, model, prompt, new, generator=seeded_generator(api, SAMPLED_SEED), **SAMPLED_SETTINGS)
    heads = [r.get("output") for r in api.watched(model) if isinstance(r, dict) and r.get("module") == "lm_head"]
    B, T = prompt.shape
    if len(heads) == new + T - 1:  # a prompt fed a token at a time: its first T - 1 heads are not sampled from
        heads = heads[T - 1:]
    if len(heads) != new or not isinstance(tokens, torch.Tensor) or tuple(tokens.shape) != (B, T + new) or \
            not all(isinstance(h, torch.Tensor) and h.numel() % B == 0 for h in heads):
        return None
    sample_next = load_reference(UNIT_NAME).sample_next
    last = [head.detach().reshape(B, -1, head.shape[-1])[:, -1].float() for head in heads]
    got = tokens[:, T:].long()

    def replay(draw) -> bool:
        generator = torch.Generator().manual_seed(SAMPLED_SEED)
        return all(torch.equal(got[:, step], draw(sample_next, logits, generator).long())
                   for step, logits in enumerate(last))

    settings = SAMPLED_SETTINGS
    if replay(lambda sample, logits, g: sample(logits, settings["temperature"], settings["top_k"], g)):
        return None
    fits = [reading for reading, draw in _handed_readings(**settings).items() if replay(draw)]
    if len(fits) == 1:
        return f"{fits[0][0]}. {fits[0][1]}"
    # The same generation again, from a generator seeded alike: other tokens mean the draws follow
    # something else than the generator handed over (torch's global random state, most often).
    again = api.call(name, model, prompt, new, generator=seeded_generator(api, SAMPLED_SEED), **SAMPLED_SETTINGS)
    if isinstance(again, torch.Tensor) and again.shape == tokens.shape and not torch.equal(again, tokens):
        return ("the call to sample_next. Two generations from generators seeded alike (the same prompt and "
                f"settings) gave different tokens: {tokens[:, T:].tolist()}, then {again[:, T:].tolist()}. The draws "
                "do not come from the generator handed over: pass generator on to sample_next (which passes it to "
                "torch.multinomial); without it they follow torch's global random state")
    return None


def replay_generate(records, prompt, tokens, context: int, new: int) -> tuple[str, str] | None:
    """(the step that first departs, what it does) from a greedy generation's calls, or None."""
    B = prompt.shape[0]
    records = [r for r in records if isinstance(r, dict)] if isinstance(records, list) else []
    steps: list[list] = []  # [the ids the model was given (B, t), its logits (B, t, V)]
    for record in records:
        if record.get("module") == "token_emb":
            steps.append([record.get("input"), None])
        elif record.get("module") == "lm_head" and steps:
            steps[-1][1] = record.get("output")
    sequence = prompt.long()  # the prompt, then each token as greedy decoding chooses it
    for step, (ids, logits) in enumerate(steps):
        if step >= new:
            return ("the number of steps", f"the model ran {plural(len(steps), 'time')} for max_new_tokens = {new}: "
                    "each step appends one token, so the loop runs max_new_tokens times")
        if not isinstance(ids, torch.Tensor) or not isinstance(logits, torch.Tensor) or ids.numel() % B:
            return None
        ids, window = ids.long().reshape(B, -1), sequence[:, -context:]
        so_far = f"with {plural(sequence.shape[1], 'token')} so far"
        if not torch.equal(ids, window):
            instead = next((words for words, seen in (
                (f"the first {context} (context_length) tokens, not the last ones", sequence[:, :context]),
                (f"the last {window.shape[1] - 1} tokens, one fewer than the context holds", sequence[:, 1 - context:]),
                ("the last token only: without a cache the model must see the whole sequence so far",
                 sequence[:, -1:]),
            ) if seen.shape == ids.shape and torch.equal(seen, ids)), None)
            if instead is None and ids.shape == window.shape and torch.equal(ids[:, :-1], window[:, :-1]) and step:
                before = steps[step - 1][1]
                before = before.reshape(B, -1, before.shape[-1])
                first = torch.equal(ids[:, -1], before[:, 0].argmax(dim=-1)) and before.shape[1] > 1
                return (f"the token chosen at step {step}", "at temperature 0 the new token is the argmax of the last "
                        "position's logits; " + ("this is the first position's argmax: the last position predicts the "
                                                 "next token (logits[:, -1, :])" if first else
                                                 "it is another: pass temperature (and top_k, generator) on to "
                                                 "sample_next as they were given"))
            return (f"the model's input, at step {step + 1}", f"{so_far}, the model was given "
                    f"{instead or ids.tolist()}: expected the last min(T, context_length) = {window.shape[1]} tokens "
                    "of the sequence")
        sequence = torch.cat([sequence, logits.reshape(B, ids.shape[1], -1)[:, -1].argmax(dim=-1)[:, None]], dim=1)
    if len(steps) < new:
        return ("the number of steps", f"the model ran {plural(len(steps), 'time')} for max_new_tokens = {new}: each "
                "step appends one token, so the loop runs max_new_tokens times")
    if isinstance(tokens, torch.Tensor) and not (tokens.shape == sequence.shape and torch.equal(tokens.long(),
                                                                                              sequence)):
        end = tokens.ndim == 2 and tokens.shape[1] < sequence.shape[1] and torch.equal(
            tokens.long(), sequence[:, sequence.shape[1] - tokens.shape[1]:])
        why = ("" if not end else ": the new tokens only; return the prompt followed by them" if tokens.shape[1] == new
               else ": the end of the sequence only; keep the whole sequence (crop only what the model is given) and "
               "return it, prompt included")
        return ("what is returned", f"it returned ids of shape {tuple(tokens.shape)}, where the prompt followed by "
                f"the {plural(new, 'token')} chosen has shape {tuple(sequence.shape)}{why}")
    return None


def trace_spec(n_layers: int) -> dict:
    """Every layer of the model, each call's input and output kept (watch.call_record's "io")."""
    names = ["token_emb", "pos_emb", "ln_f", "lm_head"]
    for layer in range(n_layers):
        names += [f"blocks.{layer}.{leaf}" for leaf in ("ln1", "attn.q_proj", "attn.k_proj", "attn.v_proj",
                                                         "attn.out_proj", "ln2", "ffn.fc1", "ffn.fc2")]
    return dict.fromkeys(names, "io")


def locate_cached(api) -> str | None:
    """Where a cached generation first departs from the model's own computation.

    Greedy generation on a model whose layers the grader computes, every call kept: the calls
    are replayed in order, and each layer's input is compared with what the steps before it
    should have made of the layers' outputs (which the grader computed, so they are right for
    the inputs they were given). The first input that differs names the step between two
    layers that went wrong: the embeddings' sum, a block's attention over the cache, a residual
    addition, the final norm, the token chosen. Twice, on two calls on the same model: a cache
    kept from one call to the next (in a global, or in a dict keyed by the model) shows on the
    second, which is replayed from its own calls."""
    fields, rng = LOCATE_FIELDS, np.random.default_rng(29)
    state = model_state(fields, 5)
    model = api.remote_model(fields, state, trace_spec(fields["n_layers"]))
    api.method(model, "eval", keep=True)
    done = 0  # the calls the model saw before this generation
    for call, prompt_length in enumerate((4, 3)):
        prompt = torch.from_numpy(rng.integers(0, fields["vocab_size"], (2, prompt_length)))
        try:
            api.call("generate_cached", model, prompt, LOCATE_NEW, temperature=0)
        except ProbeFailed as failed:
            if call == 0:
                # the calls made before it raised: a batch's tokens fed along the sequence show there
                found = replay_cached(api.watched(model), prompt, fields)
                if found is not None and found[0].startswith("the shape of the tokens fed"):
                    step, _, where = found[0].partition(", in ")
                    return f"{step}. In {where}: {found[1]}"
                return _batch_of_one(api, fields, state, prompt, failed.outcome)
            raise
        records = api.watched(model)
        found = replay_cached(records[done:], prompt, fields)
        done = len(records)
        if found is not None:
            # "block 0's attention, in the prompt's forward step" -> the step, then where it shows: the
            # same slip shows in another forward step when the prompt is fed a token at a time.
            step, _, where = found[0].partition(", in ")
            detail = f"In {where}: {found[1]}" if where else found[1]
            if call == 0:
                return f"{step}. {detail}"
            return (f"{step}, on a second call. {detail.rstrip('.')}. The first call, on another prompt, went right: "
                    "is a cache (or anything else) kept from one call to the next, in a global, a dict keyed by the "
                    "model or a mutable default argument (`cache={}`)? Start every call with an empty cache")
    prompt = torch.from_numpy(rng.integers(0, fields["vocab_size"], (2, 3)))
    return _batch_limit(api, fields, state) or sampled_departure(api, "generate_cached", fields, prompt, LOCATE_NEW)


def _batch_of_one(api, fields: dict, state: dict, prompt, outcome) -> str | None:
    """A generation that raised on a batch of prompts: if each prompt alone is generated right,
    something in it (the cache, most often, allocated as torch.zeros(1, ...)) is sized for another
    batch than idx's. A write into it names the buffer's shape in its error ("Target sizes: [1,
    ...]"), whose first dimension is the batch the cache was made for."""
    for row in range(prompt.shape[0]):
        model = api.remote_model(fields, state, trace_spec(fields["n_layers"]))
        api.method(model, "eval", keep=True)
        api.call("generate_cached", model, prompt[row:row + 1], LOCATE_NEW, temperature=0)  # a failure: no step
        if replay_cached(api.watched(model), prompt[row:row + 1], fields) is not None:
            return None
    import re

    error = str(outcome.error or "")
    sized = re.search(r"Target sizes: \[(\d+)((?:, \d+)*)\]", error)
    if sized and int(sized.group(1)) != prompt.shape[0]:
        held = int(sized.group(1))
        raised = (f"{outcome.error_type or 'an error'} writing into a buffer of shape [{sized.group(1)}"
                  f"{sized.group(2)}] (the error's target sizes): a cache made for a batch of {held}")
    else:
        held, raised = "another size", error[:240] or "an error"
    return (f"the cache's batch size. Each of {prompt.shape[0]} prompts alone is generated right, but together, as "
            f"one batch idx of shape {tuple(prompt.shape)}, they raise {raised}. Allocate the cache for every "
            "sequence of the batch, (B, n_heads, T + max_new_tokens, d_head) with B = idx.shape[0], not for a batch "
            f"of {held}")


def _batch_limit(api, fields: dict, state: dict) -> str | None:
    """A batch of 4 prompts of 3 tokens and 5 new ones: 8 positions in a context of 12, though 4 * 3 + 5
    is more (a limit counted on idx.numel() raises)."""
    batch = torch.arange(12).reshape(4, 3) % fields["vocab_size"]
    model = api.remote_model(fields, state, trace_spec(fields["n_layers"]))
    api.method(model, "eval", keep=True)
    try:
        api.call("generate_cached", model, batch, 5, temperature=0)
    except ProbeFailed as failed:
        if failed.outcome.error_type != "ValueError":
            raise
        return ("the context-length check. A batch of 4 prompts of 3 tokens with max_new_tokens=5 makes sequences "
                f"of 3 + 5 = 8 tokens, within context_length {fields['context_length']}, yet yours raises "
                "ValueError: the limit is on each sequence's length, idx.shape[1] + max_new_tokens, not on "
                "idx.numel() (B * T), which grows with the batch")
    return None


def _same(got, want) -> bool:
    """The values agree, laid out alike (a (B, 1, C) input for a (B, C) one is the same input)."""
    if not isinstance(got, torch.Tensor) or not isinstance(want, torch.Tensor) or got.numel() != want.numel():
        return False
    return bool(torch.allclose(got.detach().double().reshape(want.shape), want.double(), equal_nan=True,
                               **LOCATE_TOL))


def _gap(got, want) -> str:
    if not isinstance(got, torch.Tensor) or not isinstance(want, torch.Tensor) or got.numel() != want.numel():
        return f"it was given {describe(got)}, expected shape {tuple(want.shape)}"
    gap = float((got.detach().double().reshape(want.shape) - want.double()).abs().max())
    return f"the largest difference is {gap:.3g}"


def _which(candidates: dict, got) -> str | None:
    """The first candidate (sentence -> value) that `got` equals."""
    return next((sentence for sentence, value in candidates.items() if _same(got, value)), None)


def _forward_steps(records: list) -> list[dict]:
    """The calls, cut into forward steps (one starts at an embedding call after a block's or the
    head's): for each step, each layer's calls in order."""
    steps: list[dict] = []
    for record in records:
        module = record["module"]
        if not steps or (module in ("token_emb", "pos_emb") and any(
                name not in ("token_emb", "pos_emb") for name in steps[-1])):
            steps.append({})
        steps[-1].setdefault(module, []).append(record)
    return steps


def _step_name(start: int, t: int, T0: int) -> str:
    if start == 0:
        return "the prompt's forward step" if t > 1 else "the first forward step"
    if start < T0:
        return f"the forward step at prompt position {start}"
    return f"the forward step that fed new token {start - T0 + 1}"


def _attention(q, keys, values, start: int | None, scale: float, merge: bool = True, softmax_dim: int = -1,
               inverted: bool = False):
    """softmax(q kᵀ · scale + causal mask) v for queries at positions start .. start + t - 1 over
    the keys of positions 0 .. n - 1 (start None: no mask): (B, nh, t, hs) -> (B, t, C)."""
    B, nh, t, hs = q.shape
    scores = q @ keys.transpose(-2, -1) * scale  # (B, nh, t, n)
    if start is not None:
        allowed = torch.ones(t, keys.shape[2], dtype=torch.bool).tril(diagonal=start)
        scores = scores.masked_fill(allowed if inverted else ~allowed, -math.inf)
    y = torch.softmax(scores, dim=softmax_dim) @ values  # (B, nh, t, hs)
    return (y.transpose(1, 2) if merge else y).reshape(B, t, nh * hs)


def replay_cached(records, prompt, fields: dict) -> tuple[str, str] | None:
    """(the step that first departs, what it does) from a cached generation's calls, or None."""
    B, T0 = prompt.shape
    C, nh = fields["d_model"], fields["n_heads"]
    hs = C // nh
    records = [r for r in records if isinstance(r, dict) and isinstance(r.get("module"), str)] \
        if isinstance(records, list) else []
    sequence = prompt.long()  # the prompt, then each token as greedy decoding chooses it
    raw = {layer: ([], []) for layer in range(fields["n_layers"])}  # each step's k_proj, v_proj outputs (B, t, C)
    fed, others, chosen_in = 0, {}, ""  # others: the tokens a slip would have chosen instead, by the slip
    for calls in _forward_steps(records):
        def first(name, calls=calls):  # each layer's first call in this step
            found = calls.get(name)
            return found[0] if found else None

        ids, positions = first("token_emb"), first("pos_emb")
        if ids is None or positions is None or "input" not in ids or "input" not in positions:
            missing = "token_emb" if ids is None else "pos_emb"
            return (f"the embeddings, in {_step_name(fed, 1, T0)}",
                    f"the grader saw no call of `model.{missing}` in this step: look the tokens and the positions up "
                    "with the model's modules")
        shape = tuple(ids["input"].shape)
        if B > 1 and len(shape) == 2 and shape[0] != B:
            # the batch's tokens laid out along the sequence (a (1, B) view of the B new tokens, say)
            where = _step_name(fed, 1 if fed else T0, T0)
            along = " as one row, along the sequence, so each is taken for a position" if shape[0] == 1 else ""
            return (f"the shape of the tokens fed, in {where}", f"`token_emb` was given ids of shape {shape} for a "
                    f"batch of {B} sequences: the batch's tokens are laid out{along} (the positions and the cache "
                    f"then go wrong after it). Feed a (B, t) tensor, one row per sequence: the new tokens as a column, "
                    "(B, 1), e.g. `nxt[:, None]` or `nxt.view(-1, 1)`, not `nxt.view(1, -1)`")
        tokens = ids["input"].long().reshape(B, -1)
        t = tokens.shape[1]
        where = _step_name(fed, t, T0)
        want = torch.arange(fed, fed + t)
        looked = positions["input"].long().reshape(-1, positions["input"].shape[-1])[0] \
            if positions["input"].ndim else positions["input"].reshape(1)
        if not torch.equal(looked, want):
            restart = " (the positions restart at 0: the new token sits after the prompt and the tokens before it)" \
                if fed > 0 and len(looked) and int(looked[0]) == 0 else ""
            return (f"the positions, in {where}", f"`pos_emb` was asked for positions {looked.tolist()}, expected "
                    f"{want.tolist()}: each step continues where the cache ends{restart}")
        if fed + t > sequence.shape[1] or not torch.equal(tokens, sequence[:, fed:fed + t]):
            expected = sequence[:, fed:fed + t]
            instead = next((k for k, v in others.items() if t == 1 and torch.equal(tokens[:, -1], v)), None)
            if instead:
                return (f"the token chosen after {chosen_in}", f"the token fed back is {instead} "
                        "(the prediction for the next token is at the last position)")
            if t == 1 and fed == sequence.shape[1] - 1 and fed >= T0 and not any(
                    torch.equal(tokens[:, 0], sequence[:, j]) for j in range(fed)):
                # not the argmax, nor a token fed before: drawn, as sample_next does at its default temperature
                return (f"the token chosen after {chosen_in}", f"at temperature 0 the new token is the argmax of the "
                        f"last position's logits; `token_emb` was given {tokens.tolist()}, expected "
                        f"{expected.tolist()}, which is not the argmax nor a token of the sequence so far: pass "
                        "temperature (and top_k, generator) on to sample_next as they were given")
            return (f"the tokens fed, in {where}", f"`token_emb` was given {tokens.tolist()}, expected "
                    f"{expected.tolist() if expected.numel() else 'none (no token had been chosen yet)'}: the prompt, "
                    "then each new token once, as it is chosen")
        token_out, position_out = ids["output"], positions["output"]
        x = token_out.reshape(B, t, C) + position_out.reshape(-1, t, C)  # (B, t, C)
        before = {"`token_emb(tokens)` alone (the positions' embeddings are not added)": token_out,
                  "`pos_emb(positions)` alone": position_out}
        leaving = f"the embeddings, in {where}"
        for layer in range(fields["n_layers"]):
            name = f"blocks.{layer}"
            ln1 = first(f"{name}.ln1")
            if ln1 is None:
                return (f"block {layer}'s ln1, in {where}", "the grader saw no call of `block.ln1`: normalise a "
                        "copy of the stream with it before the projections")
            if not _same(ln1.get("input"), x):
                instead = _which(before, ln1.get("input"))
                should = "token_emb(tokens) + pos_emb(positions)" if layer == 0 else f"what block {layer - 1} returns"
                return (leaving, f"the stream entering block {layer} should be {should}; "
                        f"{'it is ' + instead if instead else _gap(ln1.get('input'), x)}")
            h = ln1["output"]
            projected = {}
            for kind in ("q", "k", "v"):
                record = first(f"{name}.attn.{kind}_proj")
                if record is None:
                    return (f"block {layer}'s attention, in {where}", f"the grader saw no call of "
                            f"`attn.{kind}_proj`: project ln1(x) with the module")
                if not _same(record.get("input"), h):
                    instead = "x itself, not ln1(x)" if _same(record.get("input"), x) else None
                    return (f"block {layer}'s projections, in {where}", f"`attn.{kind}_proj` should be given ln1(x); "
                            f"{'it was given ' + instead if instead else _gap(record.get('input'), h)}")
                projected[kind] = record["output"].reshape(B, t, C)
            raw[layer][0].append(projected["k"])
            raw[layer][1].append(projected["v"])
            located = _located_attention(first(f"{name}.attn.out_proj"), projected, raw[layer], fed, T0, B, nh, hs)
            if located is not None:
                return f"block {layer}'s attention, in {where}", located
            o = first(f"{name}.attn.out_proj")["output"].reshape(B, t, C)
            x_mid = x + o
            ln2 = first(f"{name}.ln2")
            fc1 = first(f"{name}.ffn.fc1")
            if ln2 is None and fc1 is not None:
                normed = next((r for r in calls.get(f"{name}.ln1", [])[1:] if _same(fc1.get("input"), r.get("output"))),
                              None)
                if normed is not None or _same(fc1.get("input"), h):
                    given = ("ln1(x + attn_out), the stream after the attention's update normalised by ln1"
                             if normed is not None and _same(normed.get("input"), x_mid) else
                             "ln1(x), the attention's own normalised copy" if normed is None else "ln1 of another "
                             "tensor")
                    return (f"block {layer}'s feed-forward norm, in {where}", f"`ffn` should be given ln2(x + "
                            f"attn_out); it was given {given}: the grader saw no call of `block.ln2`. The "
                            "feed-forward branch has a norm of its own, block.ln2")
            if ln2 is None and fc1 is not None and _same(fc1.get("input"), x_mid):
                return (f"block {layer}'s feed-forward, in {where}", "`ffn` should be given ln2(x); it was given the "
                        "stream itself, x + attn_out: the grader saw no call of `block.ln2`")
            if ln2 is None or not _same(ln2.get("input"), x_mid):
                instead = None if ln2 is None else _which({
                    "the attention's output added to ln1(x), the normalised copy, instead of to x": h + o,
                    "the stream before the attention's output is added: update x first, then compute the "
                    "feed-forward from it": x,
                    "the attention's output alone: x is not added back": o}, ln2.get("input"))
                return (f"block {layer}'s attention residual, in {where}",
                        "the grader saw no call of `block.ln2`" if ln2 is None else
                        f"ln2 should be given x + attn_out, the stream after the attention's update; "
                        f"{'it was given ' + instead if instead else _gap(ln2.get('input'), x_mid)}")
            h2 = ln2["output"]
            fc1, fc2 = first(f"{name}.ffn.fc1"), first(f"{name}.ffn.fc2")
            if fc1 is None or fc2 is None:
                return (f"block {layer}'s feed-forward, in {where}", "the grader saw no call of `ffn.fc1` and "
                        "`ffn.fc2`: run the block's feed-forward (`block.ffn(h)`)")
            if not _same(fc1.get("input"), h2):
                instead = "the stream itself, not ln2(x)" if _same(fc1.get("input"), x_mid) else None
                return (f"block {layer}'s feed-forward, in {where}", f"`ffn` should be given ln2(x); "
                        f"{'it was given ' + instead if instead else _gap(fc1.get('input'), h2)}")
            if not _same(fc2.get("input"), torch.nn.functional.gelu(fc1["output"].double())):
                return (f"block {layer}'s feed-forward, in {where}", "between fc1 and fc2 comes the exact GELU "
                        f"(`block.ffn(h)` does it); {_gap(fc2.get('input'), torch.nn.functional.gelu(fc1['output']))}")
            f = fc2["output"].reshape(B, t, C)
            x = x_mid + f
            before = {"the stream before the feed-forward's output is added (x + attn_out)": x_mid,
                      "the feed-forward's output alone: x is not added back": f,
                      "the feed-forward's output added to ln2(x), the normalised copy, instead of to x": h2 + f}
            leaving = f"block {layer}'s feed-forward residual, in {where}"
        ln_f, head = first("ln_f"), first("lm_head")
        last = x[:, -1]  # (B, C): only the last position predicts
        if ln_f is None:
            return (f"the final layer norm, in {where}", "the grader saw no call of `model.ln_f`: the logits are "
                    "lm_head(ln_f(x)), as in the model's forward")
        got = ln_f.get("input")
        if t > 1 and _same(got, x[:, 0]):
            return (f"the logits, in {where}", "ln_f was given the first position's stream, x[:, 0]: the prediction "
                    "for the next token is the last position's, x[:, -1]")
        if not (_same(got, x) or _same(got, last)):
            instead = _which({f"it was given {k}": v for k, v in before.items()} | {
                f"it was given {k} at the last position": v[:, -1] for k, v in before.items()}, got)
            return (leaving, f"ln_f should be given the stream the last block returns; {instead or _gap(got, last)}")
        if head is None or not isinstance(head.get("input"), torch.Tensor) or not isinstance(head.get("output"),
                                                                                             torch.Tensor):
            return (f"the logits, in {where}", "the grader saw no call of `model.lm_head`: compute the logits with "
                    "the module")
        normed = ln_f.get("output")
        if not _same(head["input"], normed) and not (isinstance(normed, torch.Tensor) and normed.numel() >= B * C
                                                     and _same(head["input"], normed.reshape(B, -1, C)[:, -1])):
            instead = "the stream itself, not ln_f(x)" if _same(head["input"], x) or _same(head["input"], last) \
                else None
            return (f"the logits, in {where}", f"lm_head should be given ln_f(x); "
                    f"{'it was given ' + instead if instead else _gap(head['input'], ln_f['output'])}")
        logits = head["output"].reshape(B, -1, head["output"].shape[-1])  # (B, t or 1, V)
        fed += t
        if fed == sequence.shape[1]:  # caught up: this step's last position chooses the next token
            chosen = logits[:, -1].argmax(dim=-1)
            sequence = torch.cat([sequence, chosen[:, None]], dim=1)
            # What the next step feeds is checked there, against these too.
            chosen_in = where
            others = {"the token the first position's logits choose, not the last position's":
                      logits[:, 0].argmax(dim=-1)} if logits.shape[1] > 1 else {}
    return None


def _span(first: int, last: int) -> str:
    return f"position {first}" if first == last else f"positions {first} to {last}"


def _located_attention(out_proj, projected: dict, raw: tuple, start: int, T0: int, B: int, nh: int,
                       hs: int) -> str | None:
    """None where `attn.out_proj` was given the attention of this step's queries over every cached
    position; else what it was given, named where a slip explains it."""
    if out_proj is None:
        return "the grader saw no call of `attn.out_proj`: project the heads' output with the module"
    got, C = out_proj.get("input"), nh * hs
    t = projected["q"].shape[1]
    end = start + t

    def split(r, heads_view=False):  # (B, t, C) -> (B, nh, t, hs)
        r = r.double()
        return r.reshape(B, nh, -1, hs) if heads_view else r.reshape(B, -1, nh, hs).transpose(1, 2)

    q, keys, values = split(projected["q"]), torch.cat([split(k) for k in raw[0]], 2), torch.cat(
        [split(v) for v in raw[1]], 2)  # (B, nh, t, hs), (B, nh, end, hs) twice
    scale = 1 / math.sqrt(hs)
    if _same(got, _attention(q, keys, values, start, scale)):
        return None
    candidates = {
        f"the scores divided by sqrt(d_model) = {math.sqrt(C):.3g} instead of sqrt(d_head) = {math.sqrt(hs):.3g}":
            _attention(q, keys, values, start, 1 / math.sqrt(C)),
        "the scores not scaled: divide them by sqrt(d_head)": _attention(q, keys, values, start, 1.0),
        "the scores divided by d_head instead of its square root": _attention(q, keys, values, start, 1 / hs),
    }
    if t > 1:
        candidates |= {
            "no causal mask: query i of this step sits at position start + i and sees the keys of positions "
            "0 to start + i only": _attention(q, keys, values, None, scale),
            "the heads put side by side without moving the head axis back: transpose (B, n_heads, t, d_head) "
            "to (B, t, n_heads, d_head) before the reshape to (B, t, C)": _attention(q, keys, values, start, scale,
                                                                                  merge=False),
            "the heads split with a view to (B, n_heads, t, d_head): view as (B, t, n_heads, d_head), then "
            "transpose": _attention(split(projected["q"], True), torch.cat([split(k, True) for k in raw[0]], 2),
                                    torch.cat([split(v, True) for v in raw[1]], 2), start, scale),
            "the weights normalised over the queries (softmax over dim=-2) instead of over the keys":
                _attention(q, keys, values, start, scale, softmax_dim=-2),
            "the mask inverted: it hides the positions a query may see and shows the later ones":
                _attention(q, keys, values, start, scale, inverted=True),
        }
    if start > 0:
        new_k, new_v = keys[:, :, start:], values[:, :, start:]
        candidates["a causal mask aligned to the first key instead of each query's own position (query i sits at "
                   "position start + i: tril(diagonal=start))"] = _attention(q, keys, values, 0, scale)
        for kept in range(1, start):
            candidates[f"the keys and values of {_span(0, kept - 1)} and this step's own: those of "
                       f"{_span(kept, start - 1)} never joined the cache"] = _attention(
                q, torch.cat([keys[:, :, :kept], new_k], 2), torch.cat([values[:, :, :kept], new_v], 2), kept, scale)
        candidates |= {
            f"only this step's own keys and values: the cache of {_span(0, start - 1)} is not read":
                _attention(q, new_k, new_v, 0, scale),
            "the earlier positions' keys and values swapped (stored as (values, keys), read as (keys, values))":
                _attention(q, torch.cat([values[:, :, :start], new_k], 2),
                           torch.cat([keys[:, :, :start], new_v], 2), start, scale),
            "the keys used as values and the values as keys": _attention(q, values, keys, start, scale),
        }
    if t == 1:
        for capacity in sorted({T0 + LOCATE_NEW, LOCATE_FIELDS["context_length"]}):
            if capacity > end:
                pad = keys.new_zeros(B, nh, capacity - end, hs)
                candidates[f"the whole cache as allocated ({capacity} positions), the {capacity - end} slots not "
                           f"written yet (zeros) included: read positions 0 to {end - 1} only"] = _attention(
                    q, torch.cat([keys, pad], 2), torch.cat([values, pad], 2), None, scale)
        for twice in range(end):
            candidates[f"position {twice}'s keys and values in the cache twice"] = _attention(
                q, torch.cat([keys[:, :, :twice + 1], keys[:, :, twice:]], 2),
                torch.cat([values[:, :, :twice + 1], values[:, :, twice:]], 2), None, scale)
    instead = _which(candidates, got)
    if instead:
        return f"`attn.out_proj` was given the attention computed with {instead}"
    return (f"`attn.out_proj` should be given softmax(q kᵀ / sqrt(d_head) + causal mask) v over the keys and values "
            f"of positions 0 to {end - 1}, the heads side by side; "
            f"{_gap(got, _attention(q, keys, values, start, scale))}: look at how this step's keys and values join "
            "the cache and which of them its queries read")


# ---------------------------------------------------------------- the wrong variants


def sample_with(after_softmax=False, k_plus_one=False, exactly_k=False, over_batch=False, ignore_generator=False,
                no_greedy=False, keepdim=False, multiplied=False, drops_kth=False, ignore_top_k=False,
                on_logits=False, flat_argmax=False, max_pair=False):
    def variant(reference, logits, temperature=1.0, top_k=None, generator=None):
        if temperature == 0 and not no_greedy:
            if max_pair:
                return torch.max(logits, dim=-1)
            return logits.argmax() if flat_argmax else logits.argmax(dim=-1, keepdim=keepdim)
        scaled = logits if after_softmax else logits * temperature if multiplied else logits / temperature
        if top_k is not None and not ignore_top_k:
            k = min(top_k + (1 if k_plus_one else 0), logits.shape[-1])
            kth = scaled.topk(k, dim=-1).values[:, -1:]
            if exactly_k:
                keep = torch.zeros_like(scaled, dtype=torch.bool).scatter(-1, scaled.topk(k, dim=-1).indices, True)
                scaled = scaled.masked_fill(~keep, -math.inf)
            else:
                scaled = scaled.masked_fill(scaled <= kth if drops_kth else scaled < kth, -math.inf)
        probs = scaled if on_logits else torch.softmax(scaled, dim=0 if over_batch else -1)
        if after_softmax:
            probs = probs / temperature
        ids = torch.multinomial(probs, 1, generator=None if ignore_generator else generator)
        return ids if keepdim else ids.squeeze(-1)

    return variant


def modes_kept_as(model, modes: str):
    """How a wrong generator treats the training flags: "restored" (right), "leaves_eval", "forces_train"
    (model.eval(), then model.train()), "top_flag_only" (model.training = was). Returns the undo."""
    flags = [(module, module.training) for module in model.modules()]
    was = model.training
    model.eval()

    def undo():
        if modes == "restored":
            for module, training in flags:
                module.training = training
        elif modes == "forces_train":
            model.train()
        elif modes == "top_flag_only":
            model.training = was

    return undo


def generate_with(first_position=False, no_crop=False, new_only=False, modes="restored", last_token_only=False,
                  keeps_front=False, crop_kept=False, drop_top_k=False, one_short=False, double_temperature=False):
    def variant(reference, model, idx, max_new_tokens, temperature=1.0, top_k=None, generator=None):
        prompt_length = idx.shape[1]
        limit = model.config.context_length
        undo = modes_kept_as(model, modes)
        try:
            with torch.no_grad():
                for _ in range(max_new_tokens - 1 if one_short else max_new_tokens):
                    context = (idx if no_crop else idx[:, -1:] if last_token_only else idx[:, :limit] if keeps_front
                               else idx[:, -limit:])
                    if crop_kept:  # the cropped sequence replaces the whole one
                        idx = context
                    logits = model(context)[:, 0 if first_position else -1, :]
                    if double_temperature:  # divided here, and again in sample_next
                        logits = logits / (temperature or 1.0)
                    next_id = reference.sample_next(logits.detach(), temperature, None if drop_top_k else top_k,
                                                    generator)
                    idx = torch.cat([idx, next_id[:, None]], dim=1)
        finally:
            undo()
        return idx[:, prompt_length:] if new_only else idx

    return variant


def cached_with(restart_positions=False, not_appended=False, recompute=False, causal_one_query=False,
                prefill_unmasked=False, no_limit_check=False, own_sampler=False, scale="d_head", not_read=False,
                one_ahead=False, limit_early=False, shared=False, modes="untouched", assert_limit=False,
                skip_ln_f=False, heads_view=False, whole_sequence=False, drop_top_k=False, slot_one_ahead=False,
                write_at_step=False, unnamed_limit=False, first_position=False, mask_inverted=False,
                softmax_dim=-1):
    """A KV-cache generator with one thing wrong: attention written out, so every knob is visible."""

    def variant(reference, model, idx, max_new_tokens, temperature=1.0, top_k=None, generator=None):
        B, T = idx.shape
        limit = model.config.context_length
        too_long = T + max_new_tokens >= limit if limit_early else T + max_new_tokens > limit
        if assert_limit:
            assert not too_long, "the sequence is too long"
        elif too_long and not no_limit_check:
            raise ValueError("the sequence is too long" if unnamed_limit else f"exceeds context_length = {limit}")
        if max_new_tokens == 0:
            return idx.clone()
        undo = (lambda: None) if modes == "untouched" else modes_kept_as(model, modes)
        C, nh = model.config.d_model, model.blocks[0].attn.n_heads
        hs = C // nh
        cache = [[None, None] for _ in model.blocks]
        # slot_one_ahead and write_at_step: a cache allocated once (zeros) and filled in place, as the
        # exercise suggests, where a slot's index can go wrong; calls[0] counts the forward steps.
        allocated, calls = slot_one_ahead or write_at_step, [0]

        def forward(tokens, start):
            t = tokens.shape[1]
            positions = torch.arange(t) if restart_positions else torch.arange(start, start + t)
            x = model.token_emb(tokens) + model.pos_emb(positions)
            for layer, block in enumerate(model.blocks):
                slot = 0 if shared else layer  # shared: one cache that every layer appends to and reads
                h = block.ln1(x)
                q, k, v = (p(h).view(B, nh, t, hs) if heads_view else p(h).view(B, t, nh, hs).transpose(1, 2)
                           for p in (block.attn.q_proj, block.attn.k_proj, block.attn.v_proj))
                old_k, old_v = cache[slot]
                if allocated:
                    if old_k is None:
                        cache[slot] = old_k, old_v = [k.new_zeros(B, nh, T + max_new_tokens, hs) for _ in "kv"]
                    where = calls[0] - 1 if write_at_step and calls[0] else start  # step s written at slot s
                    old_k[:, :, where:where + t], old_v[:, :, where:where + t] = k, v
                    k_all, v_all = old_k[:, :, :start + t], old_v[:, :, :start + t]
                elif old_k is not None and not recompute:
                    k_all, v_all = torch.cat([old_k, k], dim=2), torch.cat([old_v, v], dim=2)
                else:
                    k_all, v_all = k, v
                if not allocated and (not not_appended or old_k is None):
                    cache[slot] = [k_all, v_all]
                if not_read:  # stored, but the new queries attend over this step's own keys only
                    k_all, v_all = k, v
                scores = q @ k_all.transpose(-2, -1) / math.sqrt(C if scale == "d_model" else hs)
                n_keys = k_all.shape[2]
                if causal_one_query or (t > 1 and not prefill_unmasked):
                    offset = 0 if causal_one_query else n_keys - t
                    allowed = torch.ones(t, n_keys, dtype=torch.bool).tril(diagonal=offset)
                    scores = scores.masked_fill(allowed if mask_inverted else ~allowed, -math.inf)
                y = torch.softmax(scores, dim=softmax_dim) @ v_all
                x = x + block.attn.out_proj(y.transpose(1, 2).reshape(B, t, C))
                x = x + block.ffn(block.ln2(x))
            calls[0] += 1
            return model.lm_head(x if skip_ln_f else model.ln_f(x))[:, 0 if first_position else -1]

        def sample(logits):
            if own_sampler and temperature != 0:  # Gumbel-max: the right distribution, other random numbers
                scaled = logits / temperature
                if top_k is not None:
                    scaled = scaled.masked_fill(scaled < scaled.topk(top_k, dim=-1).values[:, -1:], -math.inf)
                uniform = torch.rand(scaled.shape, generator=generator).clamp_min(1e-12)
                return (scaled - torch.log(-torch.log(uniform))).argmax(dim=-1)
            return reference.sample_next(logits, temperature, None if drop_top_k else top_k, generator)

        try:
            with torch.no_grad():
                logits = forward(idx, 0)
                out = idx
                for step in range(max_new_tokens):
                    out = torch.cat([out, sample(logits)[:, None]], dim=1)
                    if step + 1 < max_new_tokens:
                        logits = forward(out if recompute or whole_sequence else out[:, -1:],
                                         0 if recompute or whole_sequence else out.shape[1]
                                         if one_ahead or slot_one_ahead else T + step)
        finally:
            undo()
        return out

    return variant


MISCONCEPTIONS = (
    Misconception(
        "temperature_after_softmax", "the temperature applied to the probabilities instead of the logits",
        "Divide the logits by the temperature before the softmax: dividing probabilities by a constant is undone "
        "when they are normalised, so the temperature has no effect.",
        {"sample_next": sample_with(after_softmax=True)},
    ),
    Misconception(
        "temperature_multiplied", "the logits multiplied by the temperature instead of divided by it",
        "Divide: logits / temperature. A temperature below 1 must sharpen the distribution and one above 1 flatten "
        "it; multiplying does the opposite.",
        {"sample_next": sample_with(multiplied=True)},
    ),
    Misconception(
        "top_k_keeps_k_plus_one", "top-k that keeps k + 1 tokens",
        "Keep the logits at least as large as the k-th largest, `topk(logits, k).values[:, -1:]`, not the (k+1)-th.",
        {"sample_next": sample_with(k_plus_one=True)},
    ),
    Misconception(
        "top_k_drops_ties", "top-k that keeps exactly k tokens and drops the ones tied with the k-th",
        "Compare with the k-th largest value (`logits < kth` goes to -inf), so that ties with it stay in; "
        "scattering topk's k indices keeps an arbitrary one of the tied tokens.",
        {"sample_next": sample_with(exactly_k=True)},
    ),
    Misconception(
        "top_k_drops_kth", "top-k that sends the k-th largest logit to -inf too (keeping k - 1 tokens)",
        "Only the logits strictly below the k-th largest go: `logits < kth`, not `logits <= kth`. (With top_k=1 "
        "nothing is left, and the softmax of a row of -inf is NaN.)",
        {"sample_next": sample_with(drops_kth=True)},
    ),
    Misconception(
        "top_k_ignored", "a sampler that ignores top_k",
        "When top_k is given, send every logit below the k-th largest of its row to -inf before the softmax.",
        {"sample_next": sample_with(ignore_top_k=True)},
    ),
    Misconception(
        "multinomial_on_logits", "torch.multinomial given the logits instead of probabilities",
        "torch.multinomial needs non-negative weights: take softmax(logits / temperature, dim=-1) first.",
        {"sample_next": sample_with(on_logits=True)},
    ),
    Misconception(
        "softmax_over_batch", "the softmax taken over the batch (dim=0) instead of the vocabulary",
        "Each row is one sequence's distribution: softmax(scaled, dim=-1).",
        {"sample_next": sample_with(over_batch=True)},
    ),
    Misconception(
        "sampler_ignores_generator", "a sampler that draws from the global random state and ignores `generator`",
        "Pass it on: torch.multinomial(probs, num_samples=1, generator=generator).",
        {"sample_next": sample_with(ignore_generator=True)},
    ),
    Misconception(
        "temperature_zero_divides", "temperature 0 handled by dividing by it",
        "Temperature 0 means greedy: return logits.argmax(dim=-1) before dividing by anything.",
        {"sample_next": sample_with(no_greedy=True)},
    ),
    Misconception(
        "greedy_argmax_flat", "greedy as logits.argmax() with no dim: one index into the flattened batch",
        "Take the largest logit of each row: logits.argmax(dim=-1), which returns (B,).",
        {"sample_next": sample_with(flat_argmax=True)},
    ),
    Misconception(
        "greedy_returns_max_pair", "greedy as torch.max(logits, dim=-1), which returns the values and the indices",
        "torch.max with a dim returns a pair (values, indices): take .indices, or use logits.argmax(dim=-1).",
        {"sample_next": sample_with(max_pair=True)},
    ),
    Misconception(
        "ids_keep_last_dim", "ids of shape (B, 1) instead of (B,)",
        "torch.multinomial(probs, 1) returns (B, 1): .squeeze(-1) it (and argmax without keepdim).",
        {"sample_next": sample_with(keepdim=True)},
    ),
    Misconception(
        "generate_first_position", "the next token sampled from the first position's logits",
        "The last position predicts the next token: logits[:, -1, :].",
        {"generate": generate_with(first_position=True), "generate_cached": cached_with(first_position=True)},
    ),
    Misconception(
        "generate_no_crop", "a generator that feeds the model more than context_length tokens",
        "Run the model on idx[:, -model.config.context_length:] once the sequence outgrows the context.",
        {"generate": generate_with(no_crop=True)},
    ),
    Misconception(
        "generate_new_only", "a generator that returns only the new tokens",
        "Return the prompt followed by the new tokens: (B, T + max_new_tokens).",
        {"generate": generate_with(new_only=True), "generate_cached": lambda reference, model, idx, n, **kw:
            reference.generate_cached(model, idx, n, **kw)[:, idx.shape[1]:]},
    ),
    Misconception(
        "generate_leaves_eval", "a generator that switches the model to eval mode and leaves it there (the flags "
        "never put back, or read only after model.eval(), so that what is put back is eval)",
        "Read every module's training flag before model.eval(), and restore those afterwards, in a finally block.",
        {"generate": generate_with(modes="leaves_eval"), "generate_cached": cached_with(modes="leaves_eval")},
    ),
    Misconception(
        "model_forced_to_train", "a generator that calls model.train() at the end instead of restoring the modes",
        "Remember each module's `training` flag before model.eval() and put those flags back: a model handed over in "
        "eval mode must stay in eval mode.",
        {"generate": generate_with(modes="forces_train"), "generate_cached": cached_with(modes="forces_train")},
    ),
    Misconception(
        "generate_restores_top_flag_only", "a generator that restores the model's own training flag only",
        "model.eval() sets the flag of every submodule; `model.training = was` puts back the top one only. Save "
        "`[(m, m.training) for m in model.modules()]` and restore each, or call model.train(was).",
        {"generate": generate_with(modes="top_flag_only")},
    ),
    Misconception(
        "generate_last_token_only", "a generator that feeds the model only the last token at every step",
        "Without a cache the model must see the whole sequence so far (up to context_length tokens): "
        "model(idx[:, -context_length:]), then take the last position's logits.",
        {"generate": generate_with(last_token_only=True)},
    ),
    Misconception(
        "generate_crop_replaces_sequence", "a generator that crops the sequence itself, dropping its start",
        "Crop only what the model is given, `model(idx[:, -context_length:])`, and keep appending to the whole "
        "sequence: the output is still (B, T + max_new_tokens).",
        {"generate": generate_with(crop_kept=True)},
    ),
    Misconception(
        "top_k_not_passed", "a generator that does not pass top_k on to sample_next",
        "Call sample_next(logits, temperature, top_k, generator): every setting the generator was given.",
        {"generate": generate_with(drop_top_k=True), "generate_cached": cached_with(drop_top_k=True)},
    ),
    Misconception(
        "generate_one_token_short", "a generator whose loop makes max_new_tokens - 1 tokens",
        "Loop `for _ in range(max_new_tokens)`: each pass appends one token, and max_new_tokens=0 makes none.",
        {"generate": generate_with(one_short=True)},
    ),
    Misconception(
        "generate_double_temperature", "a generator that divides the logits by the temperature before sample_next, "
        "which divides them again",
        "Hand sample_next the raw logits of the last position: it applies the temperature (and top_k) itself.",
        {"generate": generate_with(double_temperature=True)},
    ),
    Misconception(
        "generate_crops_front", "a generator that keeps the first context_length tokens instead of the last",
        "Once the sequence outgrows the context, the next token depends on the most recent tokens: "
        "idx[:, -context_length:], not idx[:, :context_length].",
        {"generate": generate_with(keeps_front=True)},
    ),
    Misconception(
        "cache_positions_restart", "cached steps that look up positions from 0 again",
        "The token fed at step s sits at position T + s: pos_emb(torch.arange(start, start + t)).",
        {"generate_cached": cached_with(restart_positions=True)},
    ),
    Misconception(
        "cache_never_appended", "a cache that keeps the prompt's keys and values but never appends the new ones",
        "Append every step's keys and values to its layer's cache before attending.",
        {"generate_cached": cached_with(not_appended=True)},
    ),
    Misconception(
        "cache_not_read", "a cache that is filled but not read: each step attends over its own keys only",
        "Attend with the cached keys and values (the earlier ones and this step's, concatenated), not with the "
        "new token's k and v alone.",
        {"generate_cached": cached_with(not_read=True)},
    ),
    Misconception(
        "cache_shared_across_layers", "one cache shared by every layer instead of one per layer",
        "Each layer has its own keys and values: keep a cache per block (cache[layer]) and let each block read "
        "only its own.",
        {"generate_cached": cached_with(shared=True)},
    ),
    Misconception(
        "cache_positions_one_ahead", "cached steps that look the new token up one position too far",
        "The token fed at step s was just appended at position T + s, which is the sequence's length minus one, "
        "not its length.",
        {"generate_cached": cached_with(one_ahead=True)},
    ),
    Misconception(
        "cache_slot_one_ahead", "a cache allocated once whose cached steps write and look up the new token one "
        "position too far",
        "The token fed at step s sits at position T + s (the sequence's length minus one): both its pos_emb lookup "
        "and its slot in the cache. One too far leaves slot T empty, and every later step attends to it.",
        {"generate_cached": cached_with(slot_one_ahead=True)},
    ),
    Misconception(
        "cache_written_at_step", "a cache allocated once whose new keys are written at the step's index instead of "
        "the token's position",
        "Step s's keys and values go into slot T + s, after the prompt's; slot s holds a prompt token's, and "
        "writing there overwrites them.",
        {"generate_cached": cached_with(write_at_step=True)},
    ),
    Misconception(
        "cache_limit_error_unnamed", "a ValueError for a too-long request that does not say what the limit is",
        "Put the value of context_length in the message (f\"... exceeds context_length = {limit}\"): the caller "
        "then knows how far to shorten the prompt or max_new_tokens.",
        {"generate_cached": cached_with(unnamed_limit=True)},
    ),
    Misconception(
        "cache_limit_one_early", "a context check that refuses a sequence of exactly context_length tokens",
        "Raise only when T + max_new_tokens > context_length: a sequence that fills the context exactly fits.",
        {"generate_cached": cached_with(limit_early=True)},
    ),
    Misconception(
        "cache_limit_assert", "the context limit checked with assert instead of raising a ValueError",
        "An assert is for the programmer's own bugs (and vanishes under python -O); a caller's too-long request is "
        "a ValueError: `raise ValueError(f\"... context_length = {limit}\")`.",
        {"generate_cached": cached_with(assert_limit=True)},
    ),
    Misconception(
        "cache_skips_ln_f", "cached steps that compute the logits without the final layer norm",
        "The model's own forward ends with lm_head(ln_f(x)): apply model.ln_f before model.lm_head.",
        {"generate_cached": cached_with(skip_ln_f=True)},
    ),
    Misconception(
        "cache_heads_split_wrong", "heads split with view(B, n_heads, t, d_head) instead of a view and a transpose",
        "The projection's columns are grouped by head: view(B, t, n_heads, d_head).transpose(1, 2). Viewing as "
        "(B, n_heads, t, d_head) directly mixes positions and heads.",
        {"generate_cached": cached_with(heads_view=True)},
    ),
    Misconception(
        "cache_appends_whole_sequence", "cached steps that feed the whole sequence and append all of it to the cache",
        "After the prefill, feed only the newest token (B, 1) at its position: the cache already holds the keys "
        "and values of everything before it, so appending the whole sequence stores them again.",
        {"generate_cached": cached_with(whole_sequence=True)},
    ),
    Misconception(
        "cache_recomputes_prefix", "cached steps that recompute the keys and values of the whole prefix",
        "Feed only the newest token at each step: its key and value are the only new ones.",
        {"generate_cached": cached_with(recompute=True)},
    ),
    Misconception(
        "cache_causal_one_query", "a causal mask aligned to the top-left corner on the cached steps",
        "One new query may see every cached position: no mask. (is_causal=True with one query and many keys lets "
        "it see key 0 only.)",
        {"generate_cached": cached_with(causal_one_query=True)},
    ),
    Misconception(
        "cache_mask_inverted", "a prefill mask that hides the allowed positions instead of the future ones",
        "masked_fill(mask, -inf) fills where the mask is True: give it the future positions (above the diagonal), "
        "or give scaled_dot_product_attention the allowed ones (True where attending is allowed). The two "
        "conventions are opposite.",
        {"generate_cached": cached_with(mask_inverted=True)},
    ),
    Misconception(
        "cache_softmax_wrong_axis", "attention weights normalised over the queries (dim=-2) instead of the keys",
        "Each query's weights over the keys sum to one: softmax(scores, dim=-1) on (B, heads, queries, keys).",
        {"generate_cached": cached_with(softmax_dim=-2)},
    ),
    Misconception(
        "cache_prefill_unmasked", "a prompt run through the cache without the causal mask",
        "In the prefill, query i may only see keys 0..i: apply the causal mask when t > 1.",
        {"generate_cached": cached_with(prefill_unmasked=True)},
    ),
    Misconception(
        # The check asks for one position over the limit: a check one token late lets it through too.
        "cache_no_limit_check", "no check of T + max_new_tokens against context_length before generating with the "
        "cache, or one that leaves a part out (max_new_tokens alone, without the prompt's T) or lets one position "
        "over through (T + max_new_tokens - 1 compared with the limit)",
        "Check the total, T + max_new_tokens (the prompt's length included), against model.config.context_length up "
        "front and raise a ValueError naming it when it is larger: with no check, or one of max_new_tokens alone, a "
        "run past the limit goes on until pos_emb's table runs out (or not at all, one position over).",
        {"generate_cached": cached_with(no_limit_check=True)},
    ),
    Misconception(
        "cache_own_sampler", "a cached generator that draws its tokens its own way instead of calling sample_next",
        "Draw with sample_next(logits, temperature, top_k, generator), exactly as generate does: another sampler "
        "(Gumbel-max, say) may have the right distribution but consumes the generator differently, so the same "
        "generator state no longer gives the same tokens.",
        {"generate_cached": cached_with(own_sampler=True)},
    ),
    Misconception(
        "cache_scale_d_model", "cached attention scaled by sqrt(d_model) instead of sqrt(d_head)",
        "Each head's scores are divided by sqrt(d_model // n_heads).",
        {"generate_cached": cached_with(scale="d_model")},
    ),
)


# ---------------------------------------------------------------- what the graded parts use

TIED_TOP_K = [[2.0, 1.0, 1.0, 0.5, -1.0, 0.0], [0.3, 0.3, 0.3, 2.0, -0.5, 1.2]]


def _stat(name, what, rows, points=1, **settings):
    return Check(name, f"{what} ({DRAWS:,} draws per row; a chi-square test that a correct sampler fails with "
                 f"probability below {FALSE_FAIL:g})", points, draws_inputs(rows, **settings), probe=draws_probe,
                 oracle=draws_oracle)


def _tokens(part, name, what, points, fields, batch, prompt, new, **settings):
    return Check(name, what, points, generation_inputs(fields, batch, prompt, new, **settings),
                 probe=tokens_probe(part), oracle=tokens_oracle)


def _cache_facet(name, facet, what, fields, batch, prompt, new, **settings):
    return Check(name, what, 1, generation_inputs(fields, batch, prompt, new, **settings),
                 probe=trace_probe("generate_cached", facet), oracle=facet_oracle, tol=LOGITS)


UNIT = graded()
