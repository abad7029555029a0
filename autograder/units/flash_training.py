"""Unit 07, FlashAttention and training (PyTorch): the hidden checks and the misconception catalogue.

The reference is the solution notebook (`solutions/07_flash_training/flash_training.ipynb`);
attention results are also checked against an oracle written here in float64.

- `flash_attention`'s structure is checked by its memory, measured by the grader from outside
  the student's process (`memory_call`: the peak resident size the call added, read from /proc,
  while no process or thread may start in the sandbox), on a sequence long enough that the
  (T, T) scores would take 256 MB and a query block against all the keys 8 MB, where tiles and
  input-sized tensors need a few. Whatever builds the scores (PyTorch, NumPy, a thread) shows.
  The catalogued variants, which are the course's own code, show theirs by a census of the
  tensors they create.
- `time_fn` is handed a function of the grader's whose calls take known, different times, so the
  median, the warm-up and the per-call division show; and once a
  `coursekit.simulated_gpu.SimulatedGPU`, built where the timer runs, whose calls only queue work
  that `torch.cuda.synchronize` waits for, with an argument that says it is on a CUDA device: a
  timer that does not synchronise measures nothing. The timer runs on a clock the grader controls
  (`autograder/trust/worker/virtual_clock.py`): the clocks it reads stand still but for what the
  grader's function says each call took (the grader keeps the function and counts its calls) and
  for the simulated GPU's waits, so its answer is exact, however busy the machine, and so are the
  catalogued variants' (run here on the same clock). It is compared exactly, to float rounding.
- `train` trains the course's own GPT (`coursekit.gpt.GPT`, built in the worker from a start the
  grader chose) for a few steps on the CPU. The trained weights then cross to the grader as data,
  and every facet is the grader's own measurement on them: the training loss before and after
  (it drops; it keeps pace with the reference's training from the same start, which gradients
  that pile up do not), the improvement on held-out text against training text (training on
  the held-out part shows), and what the model predicts (the next byte, not the current or the
  previous one). The list `train` returns is checked against those measurements, and for how much
  it jumps from step to step (a loss over the last position of each window only jumps about
  sqrt(T) times as much as a mean over all of them); the gradients left in the model after
  training tell a loop that never steps from one that clears them between backward and step.
"""

from __future__ import annotations

import functools
import math
import time
import types
import weakref

import numpy as np
import torch

from ..engine.compare import Tolerance, as_array, compare_arrays, describe
from ..engine.locate import close, located_mask, shown, what
from ..engine.probes import ProbeFailed
from ..engine.spec import (
    OPTIMIZER_IMPORTS,
    Check,
    Inputs,
    Misconception,
    Part,
    SampleBug,
    StepFailed,
    Unit,
    diagnose_facet,
    exception_text,
    facet,
    facet_oracle,
)
from ..trust.sandbox import quiet
from ..trust.worker.virtual_clock import Took

UNIT_NAME = "07_flash_training"
MODEL = "coursekit.gpt.GPT"
F32 = Tolerance(rtol=1e-4, atol=2e-5)
F64 = Tolerance(rtol=1e-9, atol=1e-10)
FORBID = ("torch.nn.functional.scaled_dot_product_attention", "torch.nn.MultiheadAttention")
TINY = dict(vocab_size=256, context_length=32, d_model=32, n_layers=2, n_heads=2, d_ff=None, tie_weights=True)


# ---------------------------------------------------------------- what is graded


def graded() -> Unit:
    """The graded parts: each check, what it shows, and its points. What the checks use (their
    inputs, diagnoses and probes) and the catalogue of mistakes they name are below; this is
    called at the end of the module, once all of it is defined."""
    NAIVE_CHECKS = (
        Check("causal", "causal, (2, 3, 7, 8) float32", 1, qkv_inputs((2, 3, 7, 8)), tol=F32, oracle=attention_oracle),
        Check("not_causal", "causal=False, (1, 2, 5, 4)", 1, qkv_inputs((1, 2, 5, 4), causal=False), tol=F32,
              oracle=attention_oracle),
        Check("float64", "causal, float64 (1, 1, 9, 16)", 1, qkv_inputs((1, 1, 9, 16), torch.float64), tol=F64,
              oracle=attention_oracle),
        Check("one_position", "T = 1", 0.5, qkv_inputs((2, 2, 1, 8)), tol=F32, oracle=attention_oracle),
        Check("inputs_unchanged", "q, k and v are not modified", 0.5, qkv_inputs((1, 2, 4, 4)), kind="unchanged"),
    )

    FLASH_CHECKS = (
        Check("ragged_16", "T = 100, block_size 16 (a partial last block), causal", 1,
              qkv_inputs((1, 2, 100, 8), block_size=16), tol=F32, oracle=attention_oracle),
        Check("ragged_64", "T = 150, block_size 64, causal", 1, qkv_inputs((2, 2, 150, 16), block_size=64), tol=F32,
              oracle=attention_oracle),
        Check("not_causal", "T = 70, block_size 16, causal=False", 1,
              qkv_inputs((1, 3, 70, 8), causal=False, block_size=16), tol=F32, oracle=attention_oracle),
        Check("block_128", "T = 300, block_size 128, causal", 1, qkv_inputs((1, 2, 300, 32), block_size=128), tol=F32,
              oracle=attention_oracle),
        Check("float64", "float64, T = 45, block_size 16, causal", 1,
              qkv_inputs((1, 2, 45, 8), torch.float64, block_size=16), tol=F64, oracle=attention_oracle),
        Check("one_position", "T = 1", 0.5, qkv_inputs((2, 2, 1, 8), block_size=16), tol=F32, oracle=attention_oracle),
        Check("large_scores",
              "scores of several hundred (inputs scaled by 30): the running maximum keeps exp finite", 1,
              lambda rng: Inputs(tuple(torch.from_numpy(rng.normal(size=(1, 1, 40, 8)) * s).float() for s in (30, 30,
                                 1)),
                                 {"block_size": 16}), tol=Tolerance(1e-3, 1e-4), oracle=attention_oracle),
        Check("block_invariance", "block sizes 16 and 128 give the same result (T = 200)", 1,
              qkv_inputs((1, 2, 200, 8)), probe=invariance_probe),
        Check("tiles_only", "T = 8192, block_size 256: the most memory the call adds at once, measured from outside "
              "your process, fits tiles and tensors shaped like the inputs (no (T, T) scores or mask, no query block "
              "against all keys)", 2,
              qkv_inputs((1, 1, 8192, 4), block_size=256), probe=structure_probe, oracle=structure_oracle),
        Check("inputs_unchanged", "q, k and v are not modified", 0.5, qkv_inputs((1, 2, 40, 8), block_size=16),
              kind="unchanged"),
    )

    TIME_CHECKS = (
        Check("median", "fn takes 40, 120, 80, 400, 100 ms after three warm-up calls of 300 ms: the median is 100 ms",
              1.5, time_inputs(WARMUP, TIMED), probe=time_probe, oracle=time_oracle),
        Check("defaults", "time_fn(fn) with no warmup or repeats given: 3 warm-up calls of 300 ms, then 10 timed calls "
              "(the median is 75 ms)", 0.5, time_inputs([0.3] * 3, DEFAULT_TIMED, defaults=True), probe=time_probe,
              oracle=time_oracle),
        Check("passes_args", "the extra arguments are passed on to fn", 1,
              time_inputs([0.05], [0.03, 0.09, 0.06], positional=True), probe=time_probe, oracle=time_oracle),
        # The first timed call is the shortest: a timer that synchronises after each call but not
        # before the first adds the warm-up's queued work to that call (80 ms), which moves the median.
        Check("synchronises", "fn(x) with x on a (simulated) GPU only queues work (30, 90, 60 ms after a warm-up "
              "call of 50 ms) and returns at once: the median is 60 ms when the timer waits for the GPU before and "
              "after each timed call", 0.75,
              time_inputs([0.05], [0.03, 0.09, 0.06], gpu=True), probe=time_probe, oracle=time_oracle),
        Check("gpu_argument", "the same, with the GPU tensor given as fn's second argument (fn(3, x)): the inputs are "
              "on the GPU whichever argument holds it", 0.25,
              time_inputs([0.05], [0.03, 0.09, 0.06], gpu=True, tensor_second=True), probe=time_probe,
              oracle=time_oracle, requires=("synchronises",)),
        Check("even_repeats", "4 timed calls of 20, 140, 60, 100 ms: either middle value (60 or 100 ms) is accepted, "
              "as is their mean", 1, time_inputs([0.1, 0.1], [0.02, 0.14, 0.06, 0.10]), probe=time_probe,
              oracle=time_oracle),
    )

    # Every facet is measured by the grader on the trained weights (and compared with the list
    # train returns): a small GPT, trained on the CPU from a start the grader chose.
    TRAIN_CHECKS = tuple(
        Check(name, what, points, train_inputs(steps, seed), probe=train_probe(name), oracle=facet_oracle)
        for name, what, points, steps, seed in (
            ("losses", "returns one finite float per step (40 steps), which describe the model trained", 0.5, 40, 1),
            ("decreases", "the model's training loss, measured by the grader, drops over those 40 steps", 0.5, 40, 1),
            ("one_step", "train(config, 1) takes one AdamW step: AdamW's first step moves each weight by at most lr "
             "(3e-3)", 0.25, 1, 2),
            ("one_optimizer", "those 40 steps are taken by one AdamW, whose running averages carry over from step to "
             "step (a fresh AdamW moves every weight by lr, up or down, at each step)", 0.25, 40, 1),
            ("keeps_pace",
             f"after 100 steps the training loss is within {KEEP_PACE} nats of the reference's from the same "
             "start (each step follows its own batch's gradient)", 0.75, 100, 5),
            ("every_position", "the losses returned for those 100 steps vary from step to step no more than a mean "
             "over every position of the batch's windows does", 0.5, 100, 5),
            ("training_part", "the batches come from the training part (the first 90%): the model does not improve "
             "more on held-out text than on training text (30 steps)", 1, 30, 4),
            ("next_byte", "after those 100 steps the model predicts the next byte of held-out text", 0.75, 100, 5),
        )
    )

    # Two short runs from one start with one seed, and one with another: the seed decides the
    # batches, and progress is told every step, counted from 1, with the loss train returns.
    TRAIN_CHECKS += (
        Check("seed", f"{SEED_STEPS} steps from one start, twice with seed=11 and once with seed=12: the same seed "
              "gives the same losses (with batch_size and lr left out or given as their defaults), another seed other "
              "batches", 0.5, train_inputs(SEED_STEPS, 11),
              probe=seed_probe("seed"), oracle=facet_oracle),
        Check("progress", f"progress(step, loss) is called after each of those {SEED_STEPS} steps, step counted "
              "from 1, with the loss of that step", 0.5, train_inputs(SEED_STEPS, 11),
              probe=seed_probe("progress"), oracle=facet_oracle),
        Check("lr", f"the same {SEED_STEPS} steps with lr={OTHER_LR:g} give other losses than with the default lr "
              "(from the second step on): lr reaches the optimizer", 0.5, train_inputs(SEED_STEPS, 11),
              probe=seed_probe("lr"), oracle=facet_oracle),
    )

    parts = (
        Part("naive_attention", checks=NAIVE_CHECKS, diagnose=diagnose, forbid=FORBID, locate=locate_naive),
        Part("flash_attention", checks=FLASH_CHECKS, diagnose=diagnose, forbid=FORBID, locate=locate_flash),
        Part("time_fn", checks=TIME_CHECKS, diagnose=diagnose),
        # CPU seconds for one call of train (100 steps of a small GPT take the reference about 2 s)
        Part("train", checks=TRAIN_CHECKS, diagnose=diagnose, seconds=30.0),
    )

    return Unit(
        UNIT_NAME,
        # The slowest cell of the solution notebook takes under 2 s on a laptop CPU (its setup, importing
        # PyTorch): 15 s leaves room for a busy machine, and costs a looping notebook less.
        cell_seconds=15,
        reference_cpu_seconds=7,  # 6.98 s measured (spec.Unit.reference_cpu_seconds)
        notebook_cpu_seconds=6,  # 5.14 s measured (spec.Unit.notebook_cpu_seconds)
        parts=parts,
        misconceptions=MISCONCEPTIONS,
        sample_bug=SampleBug("flash_attention", "acc = acc * correction + p @ vj", "acc = acc + p @ vj",
                             "flash_no_rescale"),
        # `train` steps an optimizer, in the student's worker and in the grader (the reference's run)
        worker_imports=OPTIMIZER_IMPORTS,
        grader_imports=OPTIMIZER_IMPORTS,
    )


# ---------------------------------------------------------------- attention


def qkv_inputs(shape, dtype=torch.float32, **kwargs):
    def make(rng):
        q, k, v = (torch.from_numpy(rng.normal(size=shape)).to(dtype) for _ in range(3))
        return Inputs((q, k, v), kwargs)

    return make


def attention_oracle(inputs: Inputs):
    """softmax(q k^T / sqrt(d)) v in float64 with einsum, then back to the inputs' dtype."""
    q, k, v = (t.double() for t in inputs.args)
    scores = torch.einsum("bhid,bhjd->bhij", q, k) / math.sqrt(q.shape[-1])
    if inputs.kwargs.get("causal", True):
        T = q.shape[-2]
        scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), -math.inf)
    return torch.einsum("bhij,bhjd->bhid", torch.softmax(scores, dim=-1), v).to(inputs.args[0].dtype)


def invariance_probe(api, inputs: Inputs):
    """Block 16 against block 128 on the same inputs: the difference must be round-off."""
    small = api.call("flash_attention", *inputs.args, causal=True, block_size=16)
    large = api.call("flash_attention", *inputs.args, causal=True, block_size=128)
    if not isinstance(small, torch.Tensor) or not isinstance(large, torch.Tensor) or small.shape != large.shape:
        return {"difference": None}
    return {"difference": (small - large).abs().max().item()}


MEASURED_BYTES = 4  # the structure check's inputs are float32
MEASURE_SLACK = 4 << 20  # what an interpreter's own allocations may add to a call's peak


def memory_sizes(inputs: Inputs) -> dict:
    """Bytes, at the check's sizes: the (T, T) scores, a query block against every key, and the
    most that tiles and tensors shaped like the inputs may take (16 of each, and some slack)."""
    q = inputs.args[0]
    B, H, T, d = q.shape
    block = inputs.kwargs["block_size"]
    tile = B * H * block * max(block, d) * MEASURED_BYTES
    return {"scores": B * H * T * T * MEASURED_BYTES, "rows": B * H * block * T * MEASURED_BYTES,
            "allowed": 16 * q.numel() * MEASURED_BYTES + 16 * tile + MEASURE_SLACK,
            "largest": max(tile, q.numel() * MEASURED_BYTES),  # the contract's limit on one tensor
            "T": T, "block": block}


def classify(footprint: dict, sizes: dict) -> tuple[str, int | None]:
    """("tiles" | "scores" | "rows" | "large" | "unmeasured", the peak in bytes)."""
    if "census" in footprint:  # trusted code: its largest tensor, in bytes, against the contract's limit
        peak = max((math.prod(shape) * MEASURED_BYTES for shape, _ in footprint["census"]), default=0)
        allowed = sizes["largest"]
    else:
        peak, allowed = footprint.get("peak_bytes"), sizes["allowed"]
        if not isinstance(peak, int):
            return "unmeasured", None
    if peak >= sizes["scores"] // 2:
        return "scores", peak
    if peak > allowed:
        return ("rows" if peak >= 3 * sizes["rows"] // 4 else "large"), peak
    return "tiles", peak


SPAWN_REFUSED = ("can't start new thread", "Resource temporarily unavailable", "BlockingIOError")


TRUSTED_LENGTH = 1024  # the catalogued variants' census, at a length where it takes a moment


def structure_probe(api, inputs: Inputs):
    if api.trusted:
        # The course's own variants: their census says what they build whatever T is (tiles, a
        # query block against all keys, the whole scores), and it is slow at T = 8192.
        inputs = Inputs(tuple(t[:, :, :TRUSTED_LENGTH] for t in inputs.args), inputs.kwargs)
    else:
        # A short run first: the first calls of PyTorch's operators page in code, which counts
        # as resident memory too.
        api.call("flash_attention", *(t[:, :, :300] for t in inputs.args), **inputs.kwargs)
    sizes = memory_sizes(inputs)
    try:
        out, footprint = api.memory_call("flash_attention", *inputs.args, **inputs.kwargs)
    except ProbeFailed as failed:
        if any(sign in (failed.outcome.error or "") for sign in SPAWN_REFUSED):
            return {"structure": "spawned", "peak": None, **sizes}
        raise
    structure, peak = classify(footprint, sizes)
    return {"structure": structure, "peak": peak, **sizes}


def structure_oracle(inputs: Inputs):
    return {"structure": "tiles", "peak": None, **memory_sizes(inputs)}


def diagnose_structure(result, expected) -> str | None:
    if not isinstance(result, dict) or "structure" not in result:
        return f"could not follow the call ({describe(result)})"
    if result["structure"] in (expected["structure"], "unmeasured"):  # unmeasured: /proc could not tell
        return None
    if result["structure"] == "spawned":
        return ("it tried to start a thread or a process, which this check refuses: the grader measures the "
                "memory of your own process while it runs, and work handed elsewhere would escape it")
    mb = lambda n: f"{n / 2**20:,.0f} MB"  # noqa: E731
    T, block = expected["T"], expected["block"]
    held = (f"while it ran, your process held up to {mb(result['peak'])} more than before"
            if isinstance(result.get("peak"), int) else "it held more memory than tiles need")
    if result["structure"] == "scores":
        what = (f"about what the whole (T, T) score matrix takes ({mb(expected['scores'])} at T = {T}), "
                "which tiling exists to avoid")
    elif result["structure"] == "rows":
        what = (f"about a block of queries against all the keys ({mb(expected['rows'])} at block_size = {block}): "
                "sweep the keys one block at a time too")
    else:
        what = f"more than tiles and tensors shaped like the inputs need (about {mb(expected['allowed'])} at most)"
    return f"{held}: {what}"


# ---------------------------------------------------------------- where a wrong attention goes wrong
# Inputs that show one step each: q and k of T = 12 positions and d = 4 (so 1/sqrt(d) = 1/2 is told
# apart from 1/sqrt(T), 1/d and 1), read through values that are slices of the identity (d columns
# at a time), so the output holds the weights themselves; flash_attention with tiles of 5, so the
# last tile (keys and queries 10, 11) is a partial one.
LOCATE_T, LOCATE_D, LOCATE_BLOCK = 12, 4, 5


def _weights(call, q, k, causal: bool, flash: bool):
    """(the (T, T) weights the student's attention gives q, k (T, d), None) or (None, what it gave)."""
    T, d = q.shape
    columns = []
    for start in range(0, T, d):
        v = torch.zeros(T, d, dtype=torch.float64)
        for j in range(start, min(T, start + d)):
            v[j, j - start] = 1.0
        kwargs = {"causal": causal, **({"block_size": LOCATE_BLOCK} if flash else {})}
        out = as_array(call(q[None, None].clone(), k[None, None].clone(), v[None, None], **kwargs))
        if out is None or out.shape != (1, 1, T, d):
            return None, out
        columns.append(out[0, 0][:, :min(d, T - start)])
    return np.concatenate(columns, axis=1), None


def _raw(rows: list[float] | None = None, keys: list[float] | None = None):
    """q, k (T, d) whose raw scores q k^T are rows[i] * keys[j] (a single shared dimension)."""
    q, k = torch.zeros(LOCATE_T, LOCATE_D, dtype=torch.float64), torch.zeros(LOCATE_T, LOCATE_D, dtype=torch.float64)
    if rows is not None:
        q[:, 0], k[:, 0] = torch.tensor(rows, dtype=torch.float64), torch.tensor(keys, dtype=torch.float64)
    return q, k


def _scale_sentence(used: float) -> str:
    d, T = LOCATE_D, LOCATE_T
    for value, name in ((1.0, "not scaled at all"), (1 / d, "divided by d"), (1 / math.sqrt(T), "divided by sqrt(T), "
                        "the number of positions"), (1 / math.sqrt(LOCATE_BLOCK), "divided by sqrt(block_size), the "
                        "tile's size"), (math.sqrt(d), "multiplied by sqrt(d)")):
        if abs(used - value) < 1e-3 * max(1.0, value):
            return name
    return f"multiplied by {used:.4g}"


def _per_tile(got, want) -> str:
    """Your weight over the right one, tile of keys by tile of keys (first row)."""
    tiles = [(j, min(LOCATE_T, j + LOCATE_BLOCK)) for j in range(0, LOCATE_T, LOCATE_BLOCK)]
    ratios = [float(np.mean(got[0, j:e] / want[0, j:e])) for j, e in tiles]
    return ", ".join(f"keys {j}-{e - 1}: x{r:.3g}" for (j, e), r in zip(tiles, ratios, strict=True))


def _located_scale(call, flash: bool) -> str | None:
    """The scale, read from two keys of the last tile (10 and 11), whose weights keep their ratio
    however the tiles are weighed against each other: so a wrong scale is told beside a slip in the
    online softmax that leaves only the last tile standing."""
    T, d = LOCATE_T, LOCATE_D
    rows = [0.5 * i for i in range(T)]  # raw scores: query i gives key T - 2 the score i / 2, every other key 0
    weights, _ = _weights(call, *_raw(rows, [0.0] * (T - 2) + [1.0, 0.0]), causal=False, flash=flash)
    if weights is None:
        return None
    row = weights[4]  # raw scores [0, ..., 0, 2, 0]
    if np.all(np.isfinite(row)) and row[T - 2] > 0 and row[T - 1] > 0:
        used = float(np.log(row[T - 2] / row[T - 1]) / 2.0)
        if abs(used - 1 / math.sqrt(d)) > 1e-3:
            return (f"the scale. With d = {d} and T = {T}, and raw scores q.k = [0, ..., 0, 2, 0] for one query, your "
                    f"weights over its last two keys, {shown(row[T - 2:])}, mean the scores were "
                    f"{_scale_sentence(used)} ({used:.4g} times q k^T), where the contract divides by sqrt(d) = "
                    f"{math.sqrt(d):g}")
    return None


def _locate_attention(call, flash: bool) -> str | None:
    found = _locate_attention_step(call, flash)
    if flash and found is not None and not found.startswith("the scale."):
        scale = _located_scale(call, flash)
        if scale is not None:
            return f"{scale}. Also: {found}"
    return found


def _locate_attention_step(call, flash: bool) -> str | None:
    T, d = LOCATE_T, LOCATE_D
    uniform = np.full((T, T), 1 / T)
    weights, got = _weights(call, *_raw(), causal=False, flash=flash)
    if weights is None:
        shape = tuple(getattr(got, "shape", ()))
        if flash and len(shape) == 4 and shape[-1] == d and 0 < shape[-2] < T and shape[-2] % LOCATE_BLOCK == 0:
            return (f"the query tiles' loop. With T = {T} and block_size = {LOCATE_BLOCK} the output has {T} rows; "
                    f"yours has {shape[-2]}: the last, partial tile of queries (rows {shape[-2]} to {T - 1}) is left "
                    "out. Loop over query tiles up to T (range(0, T, block_size)), slicing each with "
                    "min(T, start + block_size)")
        return (f"the output. With q, k and v of shape (1, 1, {T}, {d}) the output has v's shape, (1, 1, {T}, {d}); "
                f"yours is {what(got)}")
    partial = T % LOCATE_BLOCK  # the last tile's positions: T - partial .. T - 1
    rows_right = np.array([close(row, uniform[0]) for row in np.nan_to_num(weights, nan=-1.0)])
    keys_left_out = np.allclose(np.nan_to_num(weights[:T - partial, T - partial:], nan=1.0), 0)
    if flash and partial and not rows_right[T - partial:].any() and (rows_right[:T - partial].all() or (
            keys_left_out and np.isfinite(weights[:T - partial]).all())):
        return (f"the last, partial tile. With T = {T} and block_size = {LOCATE_BLOCK} the last tile holds {partial} "
                f"positions; yours leaves them out: rows {T - partial}-{T - 1} of the output are never computed"
                + (f", and keys {T - partial}-{T - 1} get no weight" if keys_left_out else "")
                + ": loop up to T, and slice tiles with min(T, start + block_size)")
    if flash and not np.all(np.isfinite(weights)):
        return ("the online softmax. With every score equal (q = k = 0) your output holds NaN or inf: each tile's "
                "exponentials are exp(s - m) with m the row's running maximum after that tile's scores are taken in "
                "(the first tile starts from m = -inf, so exp(s - m) with the old m overflows)")
    if not close(weights, uniform):
        if flash and np.allclose(weights[:, -(T % LOCATE_BLOCK):], 0) or flash and np.allclose(
                weights[-(T % LOCATE_BLOCK):], 0):
            return (f"the last, partial tile. With T = {T} and block_size = {LOCATE_BLOCK} the last tile holds 2 "
                    f"positions; yours leaves them out (their weights, or their rows, are 0): loop up to T, and slice "
                    "tiles with min(T, start + block_size)")
        sums = weights.sum(axis=-1)
        if flash and np.allclose(weights / sums[:, None], uniform, atol=1e-9):
            return (f"the final division. With every score equal each query's weights are 1/{T}; yours sum to "
                    f"{shown(sums[:3])}... per row: divide the accumulated output by the running sum l once every "
                    "tile of keys is in")
        causal = np.tril(np.ones((T, T), dtype=bool))
        reach = np.array([[j < min(T, (i // LOCATE_BLOCK + 1) * LOCATE_BLOCK) for j in range(T)] for i in range(T)])
        if flash and close(weights, reach / reach.sum(axis=-1, keepdims=True)):
            return (f"the key tiles' loop. With causal=False and block_size = {LOCATE_BLOCK}, every query reads every "
                    f"tile of keys; yours reads only the tiles up to the query's own (query 0 gives keys "
                    f"{LOCATE_BLOCK}-{T - 1} no weight): stop the loop over key tiles early only when causal is True")
        if close(weights, causal / causal.sum(axis=-1, keepdims=True)):
            return (f"the causal flag. With every score equal and causal=False, each query should spread its weight "
                    f"evenly, 1/{T} over every key; yours hides the keys after the query, as if causal were True: mask "
                    "only when causal is True")
        if flash:
            tiles = [(j, min(T, j + LOCATE_BLOCK)) for j in range(0, T, LOCATE_BLOCK)]
            first, last = tiles[0], tiles[-1]
            first_out = np.allclose(weights[:, first[0]:first[1]], 0)
            if first_out and np.allclose(weights[:, first[1]:], 1 / T):
                return (f"the rescaling of the accumulated output. With every score equal (q = k = 0, no mask) each "
                        f"query's weights are 1/{T}; yours give the first tile of keys "
                        f"(keys {first[0]}-{first[1] - 1}) no weight and every later key 1/{T}: the output "
                        "accumulated so far is multiplied by "
                        "exp(m_old - m_new) after the tile's p @ v is added, and on the first tile that factor is "
                        "exp(-inf) = 0. Rescale first, then add: acc = acc * exp(m_old - m_new) + p @ v")
            if np.allclose(weights[:, :last[0]], 0) and np.allclose(weights[:, last[0]:], 1 / (last[1] - last[0])):
                return (f"the running maximum. With every score equal (q = k = 0, no mask) each query's weights are "
                        f"1/{T}; yours give weight only to the last tile of keys (keys {last[0]}-{last[1] - 1}, "
                        f"1/{last[1] - last[0]} each), as if each tile were the first: exp(m_old - m_new) is 0 on "
                        "every tile, which is so when m is never updated (it stays -inf): after each tile, m = m_new "
                        "(and the output and the running sum carry over, rescaled, not overwritten)")
        if np.all(np.isfinite(weights)) and np.all(sums > 0) and np.allclose(sums, sums[0], rtol=1e-4) and close(
                weights / sums[:, None], uniform) and abs(sums[0] - 1) > 1e-3:
            where = (f"1/sqrt(d) = {1 / math.sqrt(d):.4g}" if abs(sums[0] * math.sqrt(d) - 1) < 1e-3 else
                     f"sqrt(d) = {math.sqrt(d):.4g}" if abs(sums[0] / math.sqrt(d) - 1) < 1e-3 else f"{sums[0]:.4g}")
            return (f"the scale's place. With every score equal (q = k = 0, no mask) each query's weights are 1/{T} "
                    f"and sum to 1; yours are even but sum to {where} per row, so a factor multiplies the weights "
                    "after the softmax (or the output): scale the scores, q k^T / sqrt(d), before the softmax")
        return (f"the output. With every score equal (q = k = 0, no mask) each query should spread its weight evenly, "
                f"1/{T} over every key; yours gives rows like {shown(weights[0])}")
    rows = [0.5 * i for i in range(T)]  # raw scores: query i gives key 0 the score i / 2, every other key 0
    weights, got = _weights(call, *_raw(rows, [1.0] + [0.0] * (T - 1)), causal=False, flash=flash)
    if weights is None:
        return None
    if np.allclose(weights.sum(axis=0), 1, atol=1e-6) and not np.allclose(weights.sum(axis=1), 1, atol=1e-6):
        return ("the softmax's axis. With queries that differ, your weights' columns sum to 1, not their rows: each "
                "query's weights over the keys (the last axis, dim=-1) sum to 1")
    row = weights[4]  # raw scores [2, 0, 0, ...]
    if np.all(np.isfinite(row)) and row[0] > 0 and row[1] > 0:
        used = float(np.log(row[0] / row[1]) / 2.0)
        if abs(used - 1 / math.sqrt(d)) > 1e-3:
            return (f"the scale. With d = {d} and T = {T}, and raw scores q.k = [2, 0, ..., 0] for one query, your "
                    f"weights {shown(row[:3])}... mean the scores were {_scale_sentence(used)} ({used:.4g} times "
                    f"q k^T), where the contract divides by sqrt(d) = {math.sqrt(d):g}")
    if flash:
        low = -3000.0 * math.sqrt(d)  # every score -3000 once scaled: exp(s) is 0, exp(s - m) is 1
        weights, _ = _weights(call, *_raw([low] * T, [1.0] * T), causal=False, flash=True)
        if weights is not None and not close(weights, uniform):
            return (f"the running maximum's start. With every score -3000 (all equal), each query's weights should be "
                    f"1/{T}; yours give rows like {shown(weights[0][:4])}...: exp(s - m) underflows to 0 when m starts "
                    "at 0 (or is not subtracted); start m at -inf, so that the first tile sets it")
    if flash:
        keys = [0.5 * j for j in range(T)]  # raw scores rise from key to key: a later tile raises the maximum
        weights, _ = _weights(call, *_raw([1.0] * T, keys), causal=False, flash=True)
        want = torch.softmax(torch.tensor(keys) / math.sqrt(d), dim=-1).numpy()[None].repeat(T, axis=0)
        if weights is not None and not close(weights, want):
            sums = weights.sum(axis=-1)
            why = ("the rows sum to more than 1: the output accumulated from earlier tiles is not rescaled by "
                   "exp(m_old - m_new) when a later tile raises the maximum" if np.all(sums > 1 + 1e-6) else
                   "the rows sum to less than 1: the running sum l is not rescaled by exp(m_old - m_new) when a later "
                   "tile raises the maximum" if np.all(sums < 1 - 1e-6) else
                   "the tiles are weighed against each other wrongly")
            return (f"the online softmax. With raw scores rising from key to key (0, 0.5, ..., 5.5), so that each tile "
                    f"of {LOCATE_BLOCK} keys raises the row's maximum, your weight over the right one is, tile by "
                    f"tile, {_per_tile(weights, want)}: {why}")
    for peak in (1.0, 1000.0) if flash else ():
        # tiles that peak at 6, then 1, then 3: the running maximum stays 6 from the first tile on. A
        # maximum that is the last tile's own is exact but for overflow, which peaks 1000 times as
        # high bring in float64 (exp(3000 - 500) is inf)
        keys = [peak * k for k in (6.0, 0, 0, 0, 0, 1.0, 0, 0, 0, 0, 3.0, 0)][:T]
        weights, _ = _weights(call, *_raw([1.0] * T, keys), causal=False, flash=True)
        want = torch.softmax(torch.tensor(keys) / math.sqrt(d), dim=-1).numpy()[None].repeat(T, axis=0)
        if weights is not None and not close(weights, want):
            peaks = ", then ".join(f"{peak * k:g}" for k in (6, 1)) + f", then {peak * 3:g}"
            got = (f"weight over the right one is, tile by tile, {_per_tile(weights, want)}"
                   if np.all(np.isfinite(weights)) else "output holds NaN (an exp(m_old - m_new) overflowed)")
            return (f"the running maximum. With raw scores whose tiles of {LOCATE_BLOCK} keys peak at {peaks}, your "
                    f"{got}: the maximum "
                    "carries over from tile to tile, m = max(m_old, the tile's maximum), and the rescaling uses it; "
                    "not the last tile's own maximum")
    weights, _ = _weights(call, *_raw(), causal=True, flash=flash)
    mask = np.tril(np.ones((T, T), dtype=bool))
    if weights is not None and not close(weights, mask / mask.sum(axis=-1, keepdims=True)):
        diagonal = np.nan_to_num(np.diag(weights))
        if np.any(np.isnan(weights)) or np.allclose(diagonal, 0):
            return ("the mask: each query attends to itself (query i to key i), but yours gives key i no weight (or "
                    "leaves a row with no key at all: NaN): hide only the keys after the query, j > i"
                    + (", and keep the tile on the diagonal" if flash else ""))
        below = " (the tiles below the diagonal have no key to hide)" if flash else ""
        for offset in range(1, T - 1):  # a mask that hides from j > i + offset on: the next key(s) leak
            band = np.tril(np.ones((T, T), dtype=bool), offset)
            if close(weights, band / band.sum(axis=-1, keepdims=True)):
                seen = "key i + 1" if offset == 1 else f"keys i + 1 to i + {offset}"
                return (f"the mask's diagonal. With every score equal and causal=True, query i should spread its "
                        f"weight evenly over keys 0..i{below}; yours also gives {seen}, the future, its share "
                        f"(query 0 spreads over keys 0..{offset}): the mask's offset is off by {offset}; hide every "
                        "key j > i (torch.triu(..., diagonal=1), or tril(ones) == 0)")
        return located_mask(weights, mask, "With every score equal and causal=True, query i should spread its weight "
                            f"evenly over keys 0..i{below}")
    generator = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(2, 3, 7, d, generator=generator, dtype=torch.float64) for _ in range(3))
    kwargs = {"block_size": 3} if flash else {}
    try:
        got = as_array(call(q.clone(), k.clone(), v.clone(), causal=True, **kwargs))
    except StepFailed as err:
        got = err
    want = attention_oracle(Inputs((q, k, v), {"causal": True})).numpy()
    if not isinstance(got, np.ndarray) or not np.allclose(got, want, atol=1e-9):
        told = f"it raised {got}" if isinstance(got, StepFailed) else f"it gave {what(got)}" if not isinstance(
            got, np.ndarray) or got.shape != want.shape else "the result differs"
        return (f"the batch and head axes. One head of one sequence is right, but with q, k, v of shape (2, 3, 7, {d}) "
                f"{told}: every (batch, head) pair attends on its own; index the sequence axis as dim -2 and the "
                "feature axis as dim -1 (k.transpose(-2, -1)), never a fixed axis number")
    # the default of causal: every explicit call is right, but the call without causal is not causal
    name, signature = ("flash_attention", "flash_attention(q, k, v, causal=True, block_size=64)") if flash else (
        "naive_attention", "naive_attention(q, k, v, causal=True)")
    try:
        weights, _ = _weights(lambda q, k, v, causal, **more: call(q, k, v, **more), *_raw(), causal=True, flash=flash)
    except StepFailed:
        weights = None
    if weights is not None and not close(weights, mask / mask.sum(axis=-1, keepdims=True)) and close(weights, uniform):
        return (f"the default of causal. With causal=True your function masks the future, but called as {name}(q, k, "
                f"v), without causal, each query spreads its weight evenly over every key (1/{T} each), the future "
                f"included, as with causal=False: the contract's signature is {signature}, so causal defaults to "
                "True")
    return None


def locate_naive(call) -> str | None:
    return _locate_attention(call, flash=False)


def locate_flash(call) -> str | None:
    return _locate_attention(call, flash=True)


# ---------------------------------------------------------------- time_fn


class KnownDurations:
    """A function whose calls take the given durations in turn, on the virtual clock the timer runs
    on: each call returns a `Took`, which moves that clock by its duration (and the call returns
    None to the timer). It stays here, in the grader, which counts its calls."""

    def __init__(self, seconds: list[float], args: tuple | None = None):
        self.seconds, self.calls, self.args = list(seconds), 0, args
        self.without_args: list[int] = []  # the calls (0-based) that were not given `args`

    def __call__(self, *args):
        duration = self.seconds[min(self.calls, len(self.seconds) - 1)]
        if self.args is not None and not same_arguments(args, self.args):
            self.without_args.append(self.calls)
        self.calls += 1
        return Took(duration)


def same_arguments(got: tuple, want: tuple) -> bool:
    return len(got) == len(want) and all(
        (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape and bool((a == b).all()))
        or (not isinstance(b, torch.Tensor) and a == b) for a, b in zip(got, want, strict=True))


# warm-up calls are slow (caches, allocation); the timed ones have one slow outlier
# (median 100 ms; the mean is 148, the fastest 40, the total 740, and with the warm-up timed too, 210)
WARMUP, TIMED = [0.3, 0.3, 0.3], [0.04, 0.12, 0.08, 0.40, 0.10]


# time_fn's defaults (3 warm-up calls, 10 timed): the median of these ten is 75 ms; with 5 repeats
# (or 1 warm-up call) it would be another number
DEFAULT_TIMED = [0.02, 0.09, 0.05, 0.3, 0.06, 0.11, 0.07, 0.08, 0.2, 0.04]


def time_inputs(warmup, timed, positional=False, gpu=False, defaults=False, tensor_second=False):
    def make(rng):
        return Inputs((), {"durations": warmup + timed, "warmup": len(warmup), "repeats": len(timed),
                           "positional": positional, "gpu": gpu, "defaults": defaults,
                           "tensor_second": tensor_second})

    return make


SIMULATED_GPU = "coursekit.simulated_gpu.SimulatedGPU"


def time_probe(api, inputs: Inputs):
    if inputs.kwargs.get("gpu"):
        return simulated_gpu_probe(api, inputs)
    args = (torch.zeros(2), "x") if inputs.kwargs["positional"] else ()  # to be passed on to every call of fn

    def timed(fn):
        counts = {} if inputs.kwargs.get("defaults") else {"warmup": inputs.kwargs["warmup"],
                                                           "repeats": inputs.kwargs["repeats"]}
        return api.call_on_virtual_clock("time_fn", fn, *args, **counts)

    fn = KnownDurations(inputs.kwargs["durations"], args)
    value = timed(fn)
    short = short_loop(api) if fn.calls == len(inputs.kwargs["durations"]) - 1 else None
    # Whether the answer reads the grader's clock, decided on that clock alone: every call
    # CLOCK_SCALE times as long must give CLOCK_SCALE times the answer. A timer on a clock the
    # grader does not move measures the machine instead, whose load then shows in the answer but
    # never in this verdict.
    scaled = timed(KnownDurations([CLOCK_SCALE * seconds for seconds in inputs.kwargs["durations"]]))
    return {"seconds": value, "calls": fn.calls, "follows_clock": follows_clock(value, scaled),
            "without_args": fn.without_args, "short_loop": short}


# Why a thousand and not two: a timer on a real clock answers a few microseconds under load, read
# in whole microseconds by datetime.now(); 3 us then 5 us is "twice" within the microsecond that
# time.time()'s rounding needs, and such a timer was once told it followed the clock. A real clock
# lands within a microsecond of a thousand times its first answer by chance alone almost never.
CLOCK_SCALE = 1000


def follows_clock(value, scaled) -> bool | None:
    """Whether a timer's answer grew CLOCK_SCALE-fold with every call's duration (None: no number,
    or 0 both times)."""
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in (value, scaled)) or not (
            value or scaled):
        return None
    return same_time(scaled, CLOCK_SCALE * value) and not same_time(scaled, value)


def simulated_gpu_probe(api, inputs: Inputs):
    """time_fn on work that runs asynchronously: a `SimulatedGPU` (coursekit), built where the
    timer runs, whose calls only queue their durations and whose torch.cuda.synchronize waits for
    them (on the virtual clock: it moves the clock to the end of the queued work); the argument is
    a tensor that says it is on a CUDA device. Only a timer that synchronises sees the durations:
    one that does not measures launches, which take no time."""
    def timed(durations):
        gpu = api.given(SIMULATED_GPU, durations)  # torch.cuda is faked until restore()
        try:
            tensor = api.method(gpu, "on_device", keep=True)
            args = (3, tensor) if inputs.kwargs.get("tensor_second") else (tensor,)
            value = api.call_on_virtual_clock("time_fn", gpu, *args, warmup=inputs.kwargs["warmup"],
                                              repeats=inputs.kwargs["repeats"])
            return value, api.attr(gpu, "calls")
        finally:
            try:
                api.method(gpu, "restore")
            except ProbeFailed:  # the worker was replaced: its torch.cuda went with it
                pass

    value, calls = timed(inputs.kwargs["durations"])
    scaled, _ = timed([CLOCK_SCALE * seconds for seconds in inputs.kwargs["durations"]])  # see time_probe
    # A timer on a clock the grader does not move reads about 0 here whether it synchronises or
    # not: the same durations as plain calls (no GPU) show whether it reads the grader's clock at all.
    try:
        plain = [api.call_on_virtual_clock("time_fn", KnownDurations(durations), warmup=inputs.kwargs["warmup"],
                                           repeats=inputs.kwargs["repeats"])
                 for durations in (inputs.kwargs["durations"],
                                   [CLOCK_SCALE * seconds for seconds in inputs.kwargs["durations"]])]
    except Exception:  # noqa: BLE001 (the student's timer raised: nothing to tell of its clock)
        plain = [None, None]
    return {"seconds": value, "calls": calls, "follows_clock": follows_clock(value, scaled),
            "plain_follows_clock": follows_clock(*plain),
            "short_loop": short_loop(api) if calls == len(inputs.kwargs["durations"]) - 1 else None}


# Which loop of a timer that calls fn once too few times is short: with warmup=3 and repeats=1,
# calls of 10, 20, 30 then 50 ms; a short warm-up times the third call (30 ms), a short timed loop
# times none.
SHORT_LOOP = [0.01, 0.02, 0.03, 0.05]


def short_loop(api) -> str | None:
    """In words, which of a timer's loops runs one call short, from where the timed call falls."""
    fn = KnownDurations(SHORT_LOOP)
    try:
        value, raised = api.call_on_virtual_clock("time_fn", fn, warmup=3, repeats=1), None
    except Exception as err:  # noqa: BLE001 (the student's timer: what it raised is told)
        value, raised = None, getattr(err, "outcome", None) and err.outcome.error or err
    if fn.calls != len(SHORT_LOOP) - 1:
        return None
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if number and any(same_time(value, SHORT_LOOP[2] * unit) for unit in (1, 1e3, 1e6)):
        return ("the warm-up. With warmup=3 and repeats=1 (calls of 10, 20, 30, then 50 ms) your timer called fn 3 "
                "times and returned 30.0 ms, the third call's duration: only 2 untimed warm-up calls ran before the "
                "timed one, so the last warm-up call was timed instead. Run fn warmup times, untimed (for _ in "
                "range(warmup)), then repeats timed calls")
    if raised is not None or not number or not any(same_time(value, d * unit) for d in SHORT_LOOP[:3]
                                                   for unit in (1, 1e3, 1e6)):
        told = (f"it raised {raised}" if raised is not None else f"it returned {describe(value)}" if not number else
                f"it returned {value:.4g}, no call's duration")
        return ("the timed loop. With warmup=3 and repeats=1 (calls of 10, 20, 30, then 50 ms) your timer called fn 3 "
                f"times, the warm-up ones, and timed none ({told}): time repeats calls (for _ in range(repeats)), "
                "after the warmup untimed ones")
    return None


def time_oracle(inputs: Inputs):
    timed = sorted(inputs.kwargs["durations"][inputs.kwargs["warmup"]:])
    middle = [timed[len(timed) // 2]] if len(timed) % 2 else [timed[len(timed) // 2 - 1], timed[len(timed) // 2]]
    # with an even count, either middle value is the contract's median, and so is their mean
    return {"seconds": float(np.median(timed)), "accept": sorted(set(middle) | {float(np.median(timed))}),
            "calls": len(inputs.kwargs["durations"]), "shortest": timed[0], "defaults": inputs.kwargs.get("defaults"),
            "tensor_second": inputs.kwargs.get("tensor_second"),
            "explanations": time_explanations(inputs.kwargs["durations"], inputs.kwargs["warmup"])}


def time_explanations(durations: list[float], warmup: int) -> list[tuple]:
    """What a timer computes instead, for answers other than the median of the timed calls: each
    (seconds, in words) or (seconds, in words, the step), the likelier slips first. Read against a
    wrong answer, the first that matches says which step of the timer departs (which calls it timed,
    what it took of them, the unit), from this check's own durations."""
    timed, every = durations[warmup:], durations
    sets = [("the timed calls", timed), (f"all {len(every)} calls, the warm-up ones included", every),
            ("the timed calls but the first", timed[1:]), ("the timed calls but the last", timed[:-1]),
            ("the warm-up calls", durations[:warmup])]
    statistics = [("the mean of", np.mean), ("the median of", np.median), ("the fastest of", np.min),
                  ("the slowest of", np.max), ("the total of", np.sum)]
    found = [(float(np.median(timed)) * 1000, "the median of the timed calls in milliseconds, not seconds"),
             (float(np.median(timed)) * 1e6, "the median of the timed calls in microseconds, not seconds"),
             (float(np.sum(timed)) / len(every),
              "the total of the timed calls divided by every call, warm-up included"),
             (float(timed[-1]), "the last timed call alone")]
    # the middle of the calls as they ran: a median taken without sorting them first
    middle = [timed[len(timed) // 2]] if len(timed) % 2 else [
        (timed[len(timed) // 2 - 1] + timed[len(timed) // 2]) / 2, timed[len(timed) // 2 - 1], timed[len(timed) // 2]]
    unsorted = ("the middle one of the timed calls in the order they ran (" + ", ".join(
        f"{1000 * t:g}" for t in timed) + " ms), not sorted by duration: the median is the middle of the sorted "
        "times (statistics.median(times) sorts them; or sorted(times) before taking the middle)")
    # the middle pair of an even count taken one place off in the sorted times (sorted[n // 2] and
    # sorted[n // 2 + 1]): told before the unsorted middle, and with it where both give the number
    ordered, half = sorted(timed), len(timed) // 2

    def nth(i):
        return f"{i + 1}{'st' if i == 0 else 'nd' if i == 1 else 'rd' if i == 2 else 'th'}"

    for first, where in ((half, "one past"), (half - 2, "one before")):
        if len(timed) % 2 or not 0 <= first < first + 1 < len(timed):
            continue
        value = (ordered[first] + ordered[first + 1]) / 2
        words = (f"the mean of the {nth(first)} and {nth(first + 1)} of the sorted times ({1000 * ordered[first]:g} "
                 f"and {1000 * ordered[first + 1]:g} ms), {where} the middle pair: of {len(timed)} sorted times the "
                 f"middle two are the {nth(half - 1)} and {nth(half)}, sorted(times)[n // 2 - 1] and "
                 "sorted(times)[n // 2] (statistics.median(times) takes their mean)")
        if any(same_time(value, other) for other in middle):
            words += f"; or, if yours are not sorted, {unsorted}"
        found.append((float(value), words, "the median"))
    found += [(float(value), unsorted, "the median") for value in middle if value != np.median(timed)]
    for words, calls in sets:
        for statistic, compute in statistics:
            if calls and (statistic, words) != ("the median of", "the timed calls"):
                found.append((float(compute(calls)), f"{statistic} {words}"))
    return found


def time_explanation(seconds: float, expected: dict) -> str | None:
    """The first of the check's explanations that gives `seconds`, in words: '210.0 ms is the median
    of all 8 calls, the warm-up ones included'."""
    for value, words, *step in expected.get("explanations") or ():
        if same_time(seconds, value):
            return "".join(f"{name}. " for name in step) + f"{seconds * 1000:.1f} ms is {words}"
    return None


# On the virtual clock a right answer is exact but for the float rounding of the clock readings:
# time.time() at today's dates is a float of about 1.7e9 seconds, which moves in steps of 0.24 us,
# and an answer in milliseconds (a catalogued mistake's) carries a thousand times that. Any two of
# the answers told apart here differ by 10 ms at least; the machine's load changes none of them.
TIME_ABSOLUTE, TIME_RELATIVE = 1e-6, 1e-5
CLOCKS_TO_USE = ("time your calls with time.perf_counter() (or perf_counter_ns(), time.monotonic(), time.time(), "
                 "timeit.default_timer()): the grader runs fn on a clock of its own, which those read and "
                 "datetime.now() or CPU-time clocks such as time.process_time() do not")


def same_time(got: float, want: float) -> bool:
    return abs(got - want) <= TIME_ABSOLUTE + TIME_RELATIVE * abs(want)


def diagnose_time(result, expected) -> str | None:
    if not isinstance(result, dict):
        return f"could not time ({describe(result)})"
    seconds = result.get("seconds")
    if not isinstance(seconds, int | float) or isinstance(seconds, bool):
        return f"time_fn returned {describe(seconds)}, expected a number of seconds"
    if result.get("calls") != expected["calls"]:
        if result.get("short_loop"):
            return (f"fn was called {result.get('calls')} times, expected {expected['calls']} (warmup + repeats). "
                    f"Where it goes wrong: {result['short_loop']}")
        if expected.get("defaults"):
            return (f"with no warmup or repeats given, fn was called {result.get('calls')} times, expected "
                    f"{expected['calls']}: the contract's defaults are warmup=3 and repeats=10 "
                    "(def time_fn(fn, *args, warmup=3, repeats=10))")
        return (f"fn was called {result.get('calls')} times, expected {expected['calls']} (warmup + repeats)")
    if result.get("without_args") and not expected.get("without_args"):
        calls = ", ".join(f"{i + 1}" for i in result["without_args"][:4])
        return (f"fn's call {calls} (counting from 1, warm-up calls first) did not get the extra arguments: pass "
                "*args on to every call of fn, the warm-up ones included")
    # A catalogued mistake's answer (no "accept": compared with the student's) is exact too.
    accept = expected.get("accept") or [expected["seconds"]]
    if all(not same_time(seconds, want) for want in accept):
        wanted = " or ".join(f"{want * 1000:.1f}" for want in accept)
        problem = f"returned {seconds * 1000:.1f} ms, expected {wanted} ms"
        if result.get("follows_clock") is False or result.get("plain_follows_clock") is False:
            # An answer that does not grow with every call's duration reads a clock the grader
            # does not move (`time_probe`), whatever the machine's load made it.
            problem += f": probably a clock the grader does not control; {CLOCKS_TO_USE}"
        elif explanation := time_explanation(seconds, expected):
            problem += f". Where it goes wrong: {explanation}"
        elif expected.get("tensor_second") and abs(seconds) < 1e-3:
            problem += (". Where it goes wrong: the synchronisation. With the GPU tensor as fn's second argument your "
                        "timer measured only the launches: look for a GPU tensor in every argument (any(isinstance(a, "
                        "torch.Tensor) and a.is_cuda for a in args)), not only the first")
        return problem
    return None


# ---------------------------------------------------------------- train


def train_inputs(steps, seed, **extra):
    def make(rng):
        return Inputs((), {"fields": TINY, "steps": steps, "seed": seed, **extra})

    return make


def train_probe(facet: str):
    def probe(api, inputs: Inputs):
        losses, state, grads_left = trained(api, inputs)
        return train_facet(facet, losses, state, inputs, grads_left)

    return probe


_RUNS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # submission -> {(steps, seed): its run}


def trained(api, inputs: Inputs) -> tuple:
    """(the losses `train` returned, the trained weights as data, whether gradients are left in the
    model) for the check's start. Checks
    that look at the same run (the same steps and seed) share it: one run per submission."""
    owner = getattr(api, "student", None)  # the submission; trusted code (the reference, a variant) is run anew
    runs = _RUNS.setdefault(owner, {}) if owner is not None else {}
    key = (inputs.kwargs["steps"], inputs.kwargs["seed"])
    if key not in runs:
        config = api.record(**inputs.kwargs["fields"])
        model = api.given(MODEL, config)
        api.method(model, "load_state_dict", initial_state(inputs))  # the same start everywhere
        losses = api.call("train", config, inputs.kwargs["steps"], device="cpu", model=model,
                          seed=inputs.kwargs["seed"])
        # The trained weights cross as data and are judged here, by the grader's own measurements
        # on the corpus: nothing the student's process records or returns about itself is believed.
        # Whether the parameters still hold gradients tells a loop that never steps (the last
        # backward's are left) from one that clears them between backward and step (none are).
        grads = api.grads(model)
        grads_left = isinstance(grads, dict) and any(
            isinstance(g, torch.Tensor) and bool(g.abs().sum() > 0) for g in grads.values())
        runs[key] = (losses, api.method(model, "state_dict"), grads_left)
    return runs[key]


SEED_STEPS = 3
OTHER_LR = 3e-2  # ten times the default: from the second step on, the losses differ
_SEED_RUNS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # submission -> its three short runs


def seed_probe(which: str):
    def probe(api, inputs: Inputs):
        return seed_facet(which, *seed_runs(api, inputs), inputs)

    return probe


def seed_runs(api, inputs: Inputs) -> tuple:
    """(losses with the check's seed and the progress calls seen, the same again without progress,
    losses with the next seed, the check's seed with batch_size and lr given as their defaults),
    each run from the check's start; once per submission."""
    owner = getattr(api, "student", None)
    if owner is not None and owner in _SEED_RUNS:
        return _SEED_RUNS[owner]
    seed, steps = inputs.kwargs["seed"], inputs.kwargs["steps"]

    def run(seed, **extra):
        config = api.record(**inputs.kwargs["fields"])
        model = api.given(MODEL, config)
        api.method(model, "load_state_dict", initial_state(inputs))
        return api.call("train", config, steps, device="cpu", model=model, seed=seed, **extra)

    seen = []
    first = run(seed, progress=lambda step, loss: seen.append((step, loss)))
    runs = ((first, seen), run(seed), run(seed + 1), run(seed, batch_size=16, lr=3e-3), run(seed, lr=OTHER_LR))
    if owner is not None:
        _SEED_RUNS[owner] = runs
    return runs


def _floats(losses, steps) -> list[float] | None:
    if isinstance(losses, list | tuple) and len(losses) == steps and all(
            isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) for x in losses):
        return [float(x) for x in losses]
    return None


def _progress_steps(seen: list, steps: int) -> str | None:
    """What is wrong with the step numbers train told progress, in words (None: 1 to steps)."""
    steps_seen = [step for step, _ in seen] if all(isinstance(c, tuple) and len(c) == 2 for c in seen) else None
    if steps_seen == list(range(1, steps + 1)):
        return None
    told = ", ".join(f"progress({step!r}, ...)" for step in (steps_seen or [])[:4]) or "no progress at all"
    more = " ..." if len(seen) > 4 else ""
    hint = ("count the steps from 1, not 0" if steps_seen and steps_seen[0] == 0 else
            "call it once after every step, with the number of steps done so far")
    return (f"over {steps} steps train called {told}{more}; expected progress(1, ...) after the first step up to "
            f"progress({steps}, ...) after the last: {hint}")


def seed_facet(which: str, first, again, other, given, faster, inputs: Inputs) -> dict:
    (losses, seen), steps, seed = first, inputs.kwargs["steps"], inputs.kwargs["seed"]
    runs = [_floats(run, steps) for run in (losses, again, other, given, faster)]
    if any(run is None for run in runs):
        # the steps progress is told need no losses: a miscount shows beside losses of another type
        miscount = _progress_steps(seen, steps) if which == "progress" else None
        if miscount is not None:
            return facet(False, "steps", miscount)
        return facet(False, "format", f"could not be judged: train should return a list of {steps} finite floats")
    losses, again, other, given, faster = runs
    if which == "lr":
        if np.allclose(again[1:], faster[1:], rtol=1e-5, atol=1e-6):
            return facet(False, "lr_ignored",
                         f"with lr={OTHER_LR:g}, train returned the same losses as with the default lr=3e-3 from the "
                         f"same start and seed ({again[-1]:.4f} at step {steps} both times): the lr argument never "
                         "reaches the optimizer. Pass it on: torch.optim.AdamW(model.parameters(), lr=lr)")
        return facet(True, None)
    if which == "seed":
        if not np.allclose(losses, again, rtol=1e-5, atol=1e-6):
            return facet(False, "unseeded",
                         f"two runs with seed={seed} from the same start returned different losses ({losses[0]:.4f} "
                         f"and {again[0]:.4f} at step 1): the batches should be drawn from a torch.Generator seeded "
                         "with `seed`, so that one seed gives one run")
        if np.allclose(losses, other, rtol=1e-5, atol=1e-6):
            return facet(False, "seed_ignored",
                         f"runs with seed={seed} and seed={seed + 1} from the same start returned the same losses: "
                         "the batches do not depend on `seed`. Seed the generator that draws them with it "
                         "(torch.Generator().manual_seed(seed)), not with a constant")
        if not np.allclose(again, given, rtol=1e-5, atol=1e-6):
            return facet(False, "defaults",
                         f"with seed={seed}, the losses differ when batch_size=16 and lr=3e-3 are given from when they "
                         "are left out: the defaults in the signature are batch_size=16 and lr=3e-3")
        return facet(True, None)
    miscount = _progress_steps(seen, steps)
    if miscount is not None:
        return facet(False, "steps", miscount)
    passed = [float(loss) if isinstance(loss, int | float) and not isinstance(loss, bool) else
              float(loss.item()) if isinstance(loss, torch.Tensor) and loss.numel() == 1 else None
              for _, loss in seen]
    if any(p is None for p in passed) or not np.allclose(passed, losses, rtol=1e-5, atol=1e-6):
        return facet(False, "loss",
                     "progress(step, loss) was not given the loss of that step (the one train returns for it)")
    return facet(True, None)


def initial_state(inputs: Inputs) -> dict:
    """The course GPT's own initialisation, drawn from the check's seed."""
    from coursekit.gpt import GPT

    torch.manual_seed(inputs.kwargs["seed"])
    return GPT(types.SimpleNamespace(**inputs.kwargs["fields"])).state_dict()


@functools.cache
def baselines() -> dict:
    """Unigram and bigram cross-entropy of the held-out bytes under counts from the training bytes
    (add-one smoothing), in nats per byte."""
    from coursekit import corpus

    train_bytes, held = (t.long() for t in corpus.split())
    unigram = torch.bincount(train_bytes, minlength=256).double() + 1
    unigram_loss = -torch.log(unigram / unigram.sum())[held].mean().item()
    pairs = torch.zeros(256, 256, dtype=torch.float64).index_put_(
        (train_bytes[:-1], train_bytes[1:]), torch.ones(len(train_bytes) - 1, dtype=torch.float64), accumulate=True)
    pairs += 1
    bigram = pairs / pairs.sum(dim=1, keepdim=True)
    bigram_loss = -torch.log(bigram[held[:-1], held[1:]]).mean().item()
    return {"unigram": unigram_loss, "bigram": bigram_loss}


def corpus_windows(part: str, length: int, count: int = 128, seed: int = 7):
    """(inputs, next bytes) of `count` fixed windows of the training or the held-out part."""
    from coursekit import corpus

    data = corpus.split()[0 if part == "train" else 1]
    starts = torch.randint(0, len(data) - length - 1, (count,), generator=torch.Generator().manual_seed(seed))
    rows = torch.stack([data[s:s + length + 1] for s in starts.tolist()]).long()
    return rows[:, :-1], rows[:, 1:]


def measure(fields: dict, state: dict) -> dict:
    """The grader's own losses of a model with these weights, in nats per byte: predicting the next
    byte of training and of held-out windows, and (models trained on targets that are not the next
    bytes) the current byte and the one before it."""
    from coursekit.gpt import GPT

    model = GPT(types.SimpleNamespace(**fields))
    model.load_state_dict(state)  # strict: the contract's GPT, nothing more, nothing less
    model.eval()
    length = fields["context_length"]
    out = {}
    with torch.no_grad():
        for part in ("train", "held"):
            x, y = corpus_windows(part, length)
            logits = model(x).float()
            out[part] = float(torch.nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten()))
            if part == "train":
                out["copy"] = float(torch.nn.functional.cross_entropy(logits.flatten(0, 1), x.flatten()))
                out["previous"] = float(torch.nn.functional.cross_entropy(logits[:, 1:].flatten(0, 1),
                                                                          x[:, :-1].flatten()))
    return {key: value if math.isfinite(value) else math.inf for key, value in out.items()}


@functools.cache
def _measured_start(fields_items: tuple, seed: int) -> dict:
    """The grader's measurements of a check's starting model (trusted, the same every time: kept)."""
    fields = dict(fields_items)
    return measure(fields, initial_state(Inputs((), {"fields": fields, "seed": seed})))


@functools.cache
def _measured_reference(fields_items: tuple, steps: int, seed: int) -> dict:
    """The grader's measurements of the model the reference's `train` makes from that start."""
    from coursekit.gpt import GPT

    from ..engine.reference import load_reference

    fields = dict(fields_items)
    model = GPT(types.SimpleNamespace(**fields))
    model.load_state_dict(initial_state(Inputs((), {"fields": fields, "seed": seed})))
    with quiet():
        losses = load_reference(UNIT_NAME).train(types.SimpleNamespace(**fields), steps, device="cpu", model=model,
                                                 seed=seed)
    return {**measure(fields, model.state_dict()), "jitter": jitter(losses)}


JITTER_STEPS = 30


def jitter(losses) -> float:
    """The median change of the loss from one step to the next over the last JITTER_STEPS steps: the
    loss of a batch is a mean over its B x T positions, whose noise shrinks with their number."""
    tail = [float(x) for x in losses[-JITTER_STEPS:]]
    return float(np.median(np.abs(np.diff(tail))))


KEEP_PACE = 0.4  # nats: how far behind the reference's training loss a correct loop may end (seen: 0.2)
# A loss over one position per window is a mean over B numbers instead of B x T: from step to step
# it changes about sqrt(T) times as much (seen: 5 times the reference's, where correct loops stay near 1).
JITTER_RATIO = 2.5
HELD_OUT_LEAD = 0.06  # nats: how much more a model may improve on held-out text than on training text


def _trained_elsewhere(losses, state, inputs: Inputs) -> str | None:
    """Said where the model given to train comes back exactly as it went in while the losses train
    returned fall: another model was trained (one built inside train, say), not the one given."""
    floats = _floats(losses, inputs.kwargs["steps"])
    if floats is None or len(floats) < 8 or np.mean(floats[:3]) - np.mean(floats[-5:]) < 0.5:
        return None
    start = initial_state(inputs)
    if not (isinstance(state, dict) and set(state) == set(start) and all(
            isinstance(state[name], torch.Tensor) and state[name].shape == value.shape
            and torch.equal(state[name].to(value.dtype), value) for name, value in start.items())):
        return None
    return (f"the model passed to train (model=...) comes back with exactly the weights it was given, yet the losses "
            f"train returned fall from {np.mean(floats[:3]):.2f} to {np.mean(floats[-5:]):.2f}: another model was "
            "trained. When a model is given, train that one (build GPT(config) only when model is None)")


def _summed_loss(losses, start: dict, fields: dict) -> str | None:
    """Said where the losses returned are a whole number of positions times the grader's own
    measurement of the same starting model: a sum over positions where the contract averages."""
    if not isinstance(losses, list | tuple) or not losses or not isinstance(losses[0], int | float) or \
            isinstance(losses[0], bool) or not math.isfinite(losses[0]) or not start["train"] > 0:
        return None
    ratio, T, B = float(losses[0]) / start["train"], fields["context_length"], 16
    for size, how in ((T, f"summed over each window's {T} positions, then averaged over the windows (reduction="
                          "'sum' divided by the batch size)"),
                      (B * T, f"summed over all {B} x {T} positions of the batch (reduction='sum')"),
                      (B, f"summed over the batch's {B} windows (a mean over positions, then a sum)")):
        if abs(ratio / size - 1) < 0.2:
            return (f"the loss returned at step 1 is {float(losses[0]):.2f}, about {size} times what the grader "
                    f"measures for the starting model ({start['train']:.2f}): it is {how}. The training loss is the "
                    "mean over every position of the batch, F.cross_entropy(logits.flatten(0, 1), targets.flatten()) "
                    "with its default reduction='mean'")
    return None


FRESH_SHARE = 0.6  # a fresh AdamW each step: nearly all moved weights; one AdamW: about one in ten (by chance)


def _lr_moves(state: dict, inputs: Inputs, lr: float = 3e-3) -> torch.Tensor:
    """How far each weight moved from the check's start, in units of lr."""
    start = initial_state(inputs)
    moves = [((state[name].double() - value.double()) / lr).abs().flatten()
             for name, value in start.items() if isinstance(state.get(name), torch.Tensor)
             and state[name].shape == value.shape]
    return torch.cat(moves) if moves else torch.zeros(0, dtype=torch.float64)


def _whole_lr_moves(state: dict, inputs: Inputs, lr: float = 3e-3) -> float:
    """The share of the weights that moved by over half of lr whose move is within 0.1 lr of an even
    multiple of lr: AdamW's first step moves each weight by lr (its update m / sqrt(v) is +-1), so an
    optimizer made anew at each step of an even number of steps leaves whole, even multiples."""
    moves = _lr_moves(state, inputs, lr)
    moved = moves[moves > 0.5]
    if moved.numel() == 0:
        return 0.0
    return float(((moved - 2 * torch.round(moved / 2)).abs() < 0.1).double().mean())


def train_facet(which: str, losses, state, inputs: Inputs, grads_left: bool = True) -> dict:
    """One facet (see `facet`) of a training run, from the weights it left (measured here), the
    losses it returned and whether it left gradients in the model: "losses", "decreases",
    "keeps_pace", "every_position", "training_part" or "next_byte"."""
    fields, steps = inputs.kwargs["fields"], inputs.kwargs["steps"]
    start = _measured_start(tuple(sorted(fields.items())), inputs.kwargs["seed"])
    try:
        if not isinstance(state, dict):
            raise TypeError(f"state_dict() gave {describe(state)}")
        now = measure(fields, state)
    except Exception as err:  # noqa: BLE001 - weights the course's GPT cannot load
        return facet(False, None, f"the grader could not read the trained model's weights ({exception_text(err)})")
    dropped = start["train"] - now["train"]
    elsewhere = _trained_elsewhere(losses, state, inputs)
    if elsewhere is not None and which in ("losses", "decreases", "keeps_pace", "next_byte"):
        return facet(False, "other_model", elsewhere)
    summed = _summed_loss(losses, start, fields)
    if summed is not None and which in ("losses", "every_position"):
        return facet(False, "summed", summed)

    if which == "losses":
        numbers = isinstance(losses, list | tuple) and len(losses) == steps and all(
            isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) for x in losses)
        if not numbers:
            return facet(False, "format", f"train should return a list of {steps} finite floats, one per step; got "
                         f"{describe(losses)}")
        first, last = float(np.mean(losses[:3])), float(np.mean(losses[-5:]))
        agree = abs(first - start["train"]) < 0.5 and abs(last - now["train"]) < 0.5
        return facet(
            agree, "disagree",
            f"the losses returned (first 3 steps: {first:.2f}, last 5: {last:.2f}) do not describe the model that "
            f"was trained: the grader measures {start['train']:.2f} before training and {now['train']:.2f} after, on "
            "training text. Return each step's training loss, loss.item() of the batch the step trained on")
    if which == "one_optimizer":
        share = _whole_lr_moves(state, inputs)
        return facet(share < FRESH_SHARE, "fresh_optimizer",
                     f"after {steps} steps, {100 * share:.0f}% of the weights that moved have moved by a whole, even "
                     f"number of times lr (3e-3), as when every step moves each weight by exactly lr, up or down: "
                     "what AdamW's first step does. An AdamW made anew at each step takes only first steps; create "
                     "the optimizer once, before the loop, so that its running averages carry over")
    if which == "one_step":
        moves = _lr_moves(state, inputs)
        typical = float(moves[moves > 0.5].median()) if bool((moves > 0.5).any()) else 0.0
        return facet(typical < 1.5, "extra_steps",
                     f"after train(config, 1) the weights that moved have moved by {typical:.2f} times lr (the "
                     "median), where one AdamW step moves each weight by at most lr (its first update m / sqrt(v) is "
                     "+-1): the optimizer steps more than once per training step. Call optimizer.step() once per step, "
                     "after loss.backward() (and leave lr as given)")
    if which == "decreases":
        why = ("is optimizer.step() called, on the model's parameters?" if grads_left else
               "after training the parameters hold no gradient: is optimizer.zero_grad() called between "
               "loss.backward() and optimizer.step()?")
        return facet(dropped > 0.5, "none" if grads_left else "cleared",
                     f"the model's training loss, measured by the grader, went from {start['train']:.2f} to "
                     f"{now['train']:.2f} in {steps} steps: it should drop by well over 0.5 nats ({why})")
    if which == "keeps_pace":
        reference = _measured_reference(tuple(sorted(fields.items())), steps, inputs.kwargs["seed"])
        return facet(
            now["train"] - reference["train"] < KEEP_PACE, "no_learning" if dropped <= 0.5 else "slow",
            f"after {steps} steps from the same start, the model's training loss is {now['train']:.2f}; the "
            f"reference's training reaches {reference['train']:.2f}. " + (
                f"On held-out text it predicts the next byte no better than counting bytes ({now['held']:.2f} nats; "
                f"unigram: {baselines()['unigram']:.2f}): {PAIRING}" if now["held"] >= baselines()["unigram"] - 0.1
                else "Each step should follow its own batch's gradient: is optimizer.zero_grad() called before every "
                "loss.backward()?"))
    if which == "every_position":
        if not (isinstance(losses, list | tuple) and len(losses) == steps and all(
                isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) for x in losses)):
            return facet(False, "format", "could not be judged: train should return one finite float per step")
        reference = _measured_reference(tuple(sorted(fields.items())), steps, inputs.kwargs["seed"])
        mine = jitter(losses)
        return facet(
            mine < JITTER_RATIO * reference["jitter"], "jumpy",
            f"over the last {JITTER_STEPS} steps, the loss train returned changed by {mine:.2f} nats from one step to "
            f"the next (the median), {mine / max(reference['jitter'], 1e-9):.0f} times as much as the reference's: a "
            "mean over every position of the batch's windows varies far less. Does the loss cover every position, "
            "F.cross_entropy(logits.flatten(0, 1), targets.flatten()), not only the last one?")
    if which == "training_part":
        lead = (start["held"] - now["held"]) - dropped
        return facet(
            lead < HELD_OUT_LEAD, "held",
            f"the model improved by {start['held'] - now['held']:.2f} nats on held-out text but only {dropped:.2f} "
            "on training text: the batches seem to come from the held-out part (the last 10%), which is for "
            "measuring, never for training. Use corpus.split()[0]")
    base = baselines()  # which == "next_byte"
    learned = now["held"] < base["unigram"] - 0.1
    copies = now["copy"] < now["train"] - 1.0
    backwards = now["previous"] < now["train"] - 0.5
    if backwards and not copies:
        return facet(False, "previous",
                     f"the trained model predicts the byte before the one it is given ({now['previous']:.2f} nats) "
                     f"better than the next one ({now['train']:.2f}): inputs and targets are swapped. The inputs are "
                     "window[:, :-1] and the targets window[:, 1:], so that position t learns byte t + 1")
    return facet(learned and not copies, [learned, copies],
                 (f"the trained model predicts the byte it is given ({now['copy']:.2f} nats) far better than the next "
                  f"one ({now['train']:.2f}): the targets leak the answer. The target of position t is the byte at "
                  "t + 1: inputs = window[:, :-1], targets = window[:, 1:]") if copies else
                 (f"after training, the model's held-out loss on the next byte is {now['held']:.2f} nats, no better "
                  f"than counting bytes (unigram: {base['unigram']:.2f}): {PAIRING}"))


# what a model that learns no more than byte counts points at: targets not paired with their positions
PAIRING = ("are the targets the next bytes, window[:, 1:], and paired position by position with the logits? Flatten "
           "both in the same order, logits.reshape(-1, V) with targets.reshape(-1) (never targets.t() or another "
           "axis order), or the loss pairs each position with a byte from elsewhere in the batch")


# ---------------------------------------------------------------- comparing results


def diagnose(result, expected, inputs: Inputs, tol: Tolerance) -> str | None:
    if isinstance(expected, dict) and "structure" in expected:
        return diagnose_structure(result, expected)
    if isinstance(expected, dict) and "calls" in expected:
        return diagnose_time(result, expected)
    if isinstance(expected, dict) and "difference" in expected:
        got = result.get("difference") if isinstance(result, dict) else None
        if got is None:
            return "block sizes 16 and 128 gave results of different shapes, or no tensor"
        if expected["difference"] is None or got > 1e-5:
            return f"block sizes 16 and 128 differ by up to {got:.3g}: the result should not depend on the tiling"
        return None
    if isinstance(expected, dict) and "ok" in expected:
        return diagnose_facet(result, expected, "the training")
    if not isinstance(result, torch.Tensor):
        return f"returned {describe(result)}, expected a tensor of shape {tuple(expected.shape)}"
    if result.dtype != expected.dtype:
        return f"the output has dtype {result.dtype}, expected {expected.dtype} (the inputs' dtype)"
    nan = torch.isnan(result)
    if nan.any() and isinstance(expected, torch.Tensor) and expected.shape == result.shape and bool(
            (nan == torch.isnan(expected)).all()):
        # NaN where the expected result has it too: a catalogued mistake's own output (the reference's
        # never holds NaN); the numbers elsewhere decide
        result, expected = result.nan_to_num(0.0), expected.nan_to_num(0.0)
    elif nan.any():
        return ("the output holds NaN: a row whose scores were all -inf (a masked diagonal?), or exp of a large "
                "number (is the running maximum subtracted?)")
    return compare_arrays(result, expected, tol)


# ---------------------------------------------------------------- the wrong variants


def naive_with(scale="sqrt_d", mask="lower", softmax_dim=-1, mask_value=-math.inf, mask_after_softmax=False):
    """scale: "sqrt_d" (right), "none" or "sqrt_T"; mask: "lower" (right), "upper" or "strict" (the
    diagonal hidden too)."""
    def variant(reference, q, k, v, causal=True):
        T, d = q.shape[-2], q.shape[-1]
        scores = q @ k.transpose(-2, -1) / {"sqrt_d": math.sqrt(d), "none": 1.0, "sqrt_T": math.sqrt(T)}[scale]
        allowed = torch.ones(T, T, dtype=torch.bool)
        allowed = {"lower": allowed.tril(), "upper": allowed.triu(), "strict": allowed.tril(-1)}[mask]
        if causal and not mask_after_softmax:
            scores = scores.masked_fill(~allowed, mask_value)
        weights = torch.softmax(scores, dim=softmax_dim)
        if causal and mask_after_softmax:
            weights = weights.masked_fill(~allowed, 0.0)
        return weights @ v

    return variant


def flash_with(no_rescale=False, no_division=False, diagonal="right", drop_partial=False, scale="sqrt_d",
               skip_diagonal_tile=False, sum_not_rescaled=False, full_rows=False, mask_value=-math.inf,
               hide_diagonal=False, exp_before_max=False):
    """scale: "sqrt_d" (right), "none" or "sqrt_T"."""
    def variant(reference, q, k, v, causal=True, block_size=64):
        B, H, T, d = q.shape
        factor = {"sqrt_d": 1.0 / math.sqrt(d), "none": 1.0, "sqrt_T": 1.0 / math.sqrt(T)}[scale]
        out = torch.zeros_like(q)
        last_row = T - T % block_size if drop_partial else T
        for i in range(0, last_row, block_size):
            qi = q[:, :, i:i + block_size] * factor
            bq = qi.shape[-2]
            m = torch.full((B, H, bq, 1), -math.inf, dtype=q.dtype)
            l = torch.zeros((B, H, bq, 1), dtype=q.dtype)
            acc = torch.zeros((B, H, bq, d), dtype=q.dtype)
            if full_rows:
                key_blocks = [(0, T)]
            else:
                # skipping the diagonal tile leaves the first query block with no key at all: 0 / 0
                end = (i if skip_diagonal_tile else min(T, i + bq)) if causal else T
                key_blocks = [(j, min(T, j + block_size)) for j in range(0, end, block_size)]
            for j, j_end in key_blocks:
                if drop_partial and j_end - j < block_size:
                    continue
                s = qi @ k[:, :, j:j_end].transpose(-2, -1)
                if causal:
                    rows = torch.arange(i, i + bq)[:, None] if diagonal == "right" else torch.arange(bq)[:, None]
                    cols = torch.arange(j, j_end)[None, :] if diagonal == "right" else torch.arange(j_end - j)[None, :]
                    s = s.masked_fill(cols >= rows if hide_diagonal else cols > rows, mask_value)
                m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
                p = torch.exp(s - (m if exp_before_max else m_new))
                correction = torch.exp(m - m_new)
                l = (l if sum_not_rescaled else l * correction) + p.sum(dim=-1, keepdim=True)
                acc = (acc if no_rescale else acc * correction) + p @ v[:, :, j:j_end]
                m = m_new
            out[:, :, i:i + bq] = acc if no_division else acc / l
        return out

    return variant


def time_with(average="median", warmup_timed=False, total=False, no_sync=False, milliseconds=False,
              sync_before=True):
    def variant(reference, fn, *args, warmup=3, repeats=10):
        on_gpu = not no_sync and any(isinstance(a, torch.Tensor) and a.is_cuda for a in args)

        def wait_for_gpu():
            if on_gpu:
                torch.cuda.synchronize()

        times = []
        for _ in range(0 if warmup_timed else warmup):
            fn(*args)
        for _ in range(repeats + (warmup if warmup_timed else 0)):
            if sync_before:
                wait_for_gpu()
            start = time.perf_counter()
            fn(*args)
            wait_for_gpu()
            times.append(time.perf_counter() - start)
        if total:
            return sum(times)
        seconds = {"median": float(np.median(times)), "mean": float(np.mean(times)), "min": min(times)}[average]
        return 1000 * seconds if milliseconds else seconds

    return variant


def train_with(no_zero_grad=False, unshifted=False, held_out=False, no_step=False, zero_grad_before_step=False,
               last_position=False, reversed_targets=False):
    def variant(reference, config, steps, device=None, model=None, batch_size=16, lr=3e-3, seed=0, progress=None):
        from coursekit import corpus

        generator = torch.Generator().manual_seed(seed)
        torch.manual_seed(seed)
        model = model.train()
        train_bytes, held_bytes = corpus.split()
        data = held_bytes if held_out else train_bytes
        T = config.context_length
        optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.1, betas=(0.9, 0.95))
        losses = []
        for _ in range(steps):
            starts = torch.randint(0, len(data) - T - 1, (batch_size,), generator=generator)
            window = torch.stack([data[s:s + T + 1] for s in starts.tolist()]).long()
            inputs, targets = window[:, :-1], window[:, 1:]
            if unshifted:
                targets = window[:, :-1]
            if reversed_targets:
                inputs, targets = window[:, 1:], window[:, :-1]
            logits = model(inputs)
            if last_position:
                logits, targets = logits[:, -1:], targets[:, -1:]
            loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())
            if not no_zero_grad and not zero_grad_before_step:
                optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if zero_grad_before_step:
                optimizer.zero_grad(set_to_none=True)
            if not no_step:
                optimizer.step()
            losses.append(loss.item())
            if progress is not None:
                progress(len(losses), losses[-1])
        return losses

    return variant


MISCONCEPTIONS = (
    Misconception("naive_no_scale", "scores not divided by sqrt(d)",
                  "Divide q k^T by sqrt(d), the head size, before the softmax.",
                  {"naive_attention": naive_with(scale="none")}),
    Misconception("naive_mask_upper", "a causal mask that keeps the upper triangle (the future)",
                  "Query i may see keys 0..i: keep the lower triangle, torch.ones(T, T).tril().",
                  {"naive_attention": naive_with(mask="upper")}),
    Misconception("naive_softmax_over_queries", "a softmax over the queries (dim=-2) instead of the keys",
                  "Each query's weights over the keys sum to 1: softmax(scores, dim=-1).",
                  {"naive_attention": naive_with(softmax_dim=-2)}),
    Misconception("scale_by_length", "scores divided by sqrt(T), the sequence length, instead of sqrt(d)",
                  "The scale is 1 / sqrt(d) with d = q.shape[-1], the size of one head's vectors: it keeps the dot "
                  "products' spread near 1 whatever the length.",
                  {"naive_attention": naive_with(scale="sqrt_T"), "flash_attention": flash_with(scale="sqrt_T")}),
    Misconception("naive_mask_after_softmax", "the causal mask applied to the weights after the softmax",
                  "Mask the scores before the softmax (masked_fill with -inf): zeroing weights afterwards leaves "
                  "rows that no longer sum to 1.",
                  {"naive_attention": naive_with(mask_after_softmax=True)}),
    Misconception("mask_with_zero", "masked scores set to 0 instead of -inf",
                  "A score of 0 still gets weight exp(0 - max) after the softmax: fill the masked scores with "
                  "float('-inf'), whose exponential is exactly 0.",
                  {"naive_attention": naive_with(mask_value=0.0), "flash_attention": flash_with(mask_value=0.0)}),
    Misconception("mask_hides_diagonal", "a causal mask that hides the diagonal too (query i cannot see key i)",
                  "Query i sees keys 0..i, itself included: mask only key > query (torch.triu(..., diagonal=1), "
                  "or cols > rows), never key >= query; the first query would see nothing at all.",
                  {"naive_attention": naive_with(mask="strict"), "flash_attention": flash_with(hide_diagonal=True)}),
    Misconception("flash_exp_before_max_update", "exponentials taken with the old running maximum",
                  "Update the maximum first, m_new = max(m, s.max(-1)), then p = exp(s - m_new): with the old m "
                  "(-inf on the first tile) the exponentials overflow.",
                  {"flash_attention": flash_with(exp_before_max=True)}),
    Misconception("flash_no_rescale", "a running output that is not rescaled when the running maximum grows",
                  "When m grows to m_new, the terms already summed were computed with the old maximum: multiply the "
                  "running output (and the running sum) by exp(m - m_new) before adding the new tile.",
                  {"flash_attention": flash_with(no_rescale=True)}),
    Misconception("flash_sum_not_rescaled", "a running sum l that is not rescaled when the running maximum grows",
                  "l = l * exp(m - m_new) + p.sum(-1): the running sum needs the same correction as the output.",
                  {"flash_attention": flash_with(sum_not_rescaled=True)}),
    Misconception("flash_no_final_division", "the final division by the running sum forgotten",
                  "After the sweep over the key blocks, divide the running output by l: the exponentials were "
                  "never normalised.",
                  {"flash_attention": flash_with(no_division=True)}),
    Misconception("flash_diagonal_local_indices", "the diagonal tile masked with the tile's own indices",
                  "Compare global positions: query i + r against key j + c, not r against c.",
                  {"flash_attention": flash_with(diagonal="local")}),
    Misconception("flash_partial_tile_dropped", "the last partial tile dropped when block_size does not divide T",
                  "range(0, T, block_size) and slicing q[:, :, i:i + block_size] handle a short last block; "
                  "do not stop at T - T % block_size.",
                  {"flash_attention": flash_with(drop_partial=True)}),
    Misconception("flash_no_scale", "tiles whose scores are not scaled by 1/sqrt(d)",
                  "Scale inside the tiles too: s = (q_i k_j^T) / sqrt(d) (or scale q_i once).",
                  {"flash_attention": flash_with(scale="none")}),
    Misconception("flash_skips_diagonal_tile", "a causal sweep that stops before the diagonal tile",
                  "With causal=True the key blocks run up to and including the one that holds the diagonal.",
                  {"flash_attention": flash_with(skip_diagonal_tile=True)}),
    Misconception("flash_full_rows", "a query block run against all the keys at once",
                  "Sweep the keys one block at a time as well; a (block, T) score tile is what tiling avoids.",
                  {"flash_attention": flash_with(full_rows=True)}),
    Misconception("time_mean", "the mean of the timed calls instead of their median",
                  "Return the median (statistics.median): one slow call (a context switch, say) drags the mean.",
                  {"time_fn": time_with(average="mean")}),
    Misconception("time_min", "the fastest timed call instead of the median",
                  "Return the median of the timed calls, as the contract asks.",
                  {"time_fn": time_with(average="min")}),
    Misconception("time_warmup_timed", "warm-up calls included in the timing",
                  "Run the warm-up calls first, untimed, then time `repeats` calls.",
                  {"time_fn": time_with(warmup_timed=True)}),
    Misconception("time_total", "the total time of all timed calls instead of the time per call",
                  "Time each call separately and return the median per call.",
                  {"time_fn": time_with(total=True)}),
    Misconception("time_no_sync", "a timer that does not wait for the GPU before it stops the clock (it measures "
                  "the launches only): no synchronise at all, or one behind a CUDA test that never holds",
                  "A GPU runs kernels asynchronously: fn returns once its work is queued. When an argument is a "
                  "CUDA tensor, call torch.cuda.synchronize() before starting the clock and again before stopping it. "
                  "If you do call it, check the test that guards it: a tensor's device is cuda:0, which is not equal "
                  "to torch.device('cuda'); test a.is_cuda (or a.device.type == 'cuda') instead.",
                  {"time_fn": time_with(no_sync=True)}),
    Misconception("time_no_sync_before", "a timer that waits for the GPU after each timed call but not before "
                  "the first, so the warm-up's queued work is timed with it",
                  "Call torch.cuda.synchronize() before starting the clock as well: fn's warm-up calls return "
                  "before their work is done, and whatever is still queued runs inside the first timed call.",
                  {"time_fn": time_with(sync_before=False)}),
    Misconception("time_milliseconds", "the median in milliseconds instead of seconds",
                  "Return seconds, as time.perf_counter() measures them: do not multiply by 1000 (convert only "
                  "when you print).",
                  {"time_fn": time_with(milliseconds=True)}),
    Misconception("train_no_zero_grad", "training without clearing the gradients",
                  "Call optimizer.zero_grad() before every loss.backward(): .grad adds up otherwise.",
                  {"train": train_with(no_zero_grad=True)}),
    Misconception("train_zero_grad_before_step", "zero_grad between backward and step: the step sees no gradient",
                  "Clear the gradients before loss.backward(), not after it: optimizer.zero_grad(), "
                  "loss.backward(), optimizer.step(), in that order.",
                  {"train": train_with(zero_grad_before_step=True)}),
    Misconception("train_last_position_only", "a loss over the last position of each window only",
                  "Every position t of a window predicts byte t + 1: take the cross-entropy over all B x T logits, "
                  "F.cross_entropy(logits.flatten(0, 1), targets.flatten()).",
                  {"train": train_with(last_position=True)}),
    Misconception("train_targets_reversed", "inputs and targets swapped (the model learns the previous byte)",
                  "inputs = window[:, :-1] and targets = window[:, 1:]: the target comes after the input.",
                  {"train": train_with(reversed_targets=True)}),
    Misconception("train_targets_not_shifted", "targets equal to the inputs (not shifted by one)",
                  "The target of position t is the byte at t + 1: inputs = window[:, :-1], targets = window[:, 1:].",
                  {"train": train_with(unshifted=True)}),
    Misconception("train_on_held_out", "training on the held-out part of the corpus",
                  "Train on the first 90% (corpus.split()[0]); the last 10% is only for measuring.",
                  {"train": train_with(held_out=True)}),
    Misconception("train_no_step", "a training loop that never calls optimizer.step()",
                  "After loss.backward(), optimizer.step() updates the parameters.",
                  {"train": train_with(no_step=True)}),
)


UNIT = graded()
