"""`python3 course.py train [--minutes M] [--device D] [--steps N]`: train the course's GPT on
the Python standard library with unit 08's reference tokenizer and recipe, for a given time.

The text is `coursekit.corpus.stdlib_split()` (training and held-out files); the tokenizer is the
reference's byte-level BPE (`train_bpe` on a slice of the training text, then `encode`; both
cached under `.course_runs/tokens/`, so only the first run pays for them); the run is the
reference's `train_loop` (AdamW, warm-up + cosine, global-norm clipping, held-out evaluation,
early stopping, the best weights kept). A few steps are timed first, so that the schedule's
`total_steps` (where the cosine ends) fits the time asked for. On a GPU: bf16 autocast,
`torch.compile`, fused AdamW and the fused attention kernel, and the model FLOPs utilisation.

Prints the held-out loss in nats per token and per byte (comparable across tokenizers) beside
byte-level unigram and bigram baselines on the same held-out text, a sample, and saves the loss
curve (training and held-out) in `.course_runs/`. Its last line: `held-out loss L nats/token =
X nats/byte (unigram U, bigram B nats/byte) after S steps, K tokens/s on <device>`.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import itertools
import json
import math
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from ..engine.reference import load_reference
from ..paths import ROOT
from .tokenized_corpus import CACHE, ids_for, merges_for, token_bytes

RUNS = ROOT / ".course_runs"
PEAK_BF16_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0}  # dense bf16, from the vendors' sheets


@dataclass
class Recipe:
    """What a device trains: the tokenizer's size, the model's and the run's settings."""
    vocab_size: int
    bpe_chars: int  # the merges are learned from this many characters of the training text
    model: dict = field(default_factory=dict)  # GPTConfig's sizes, less vocab_size
    batch_size: int = 16
    max_lr: float = 3e-3
    min_lr: float = 3e-4
    warmup_steps: int = 20  # at most a tenth of the run
    evaluations: int = 8  # held-out evaluations during the run
    patience: int = 3
    heldout_tokens: int | None = None  # evaluate on a sample of this many held-out tokens (None: all of them)
    heldout_pieces: int = 16  # the sample's stretches, spread over the held-out text
    timing_steps: int = 4  # steps timed before the run to size the schedule
    sample_tokens: int = 120


RECIPES = {
    # Two shared cores: a model that learns in a couple of minutes at a few thousand tokens per
    # second, a vocabulary small enough that its embedding and softmax stay cheap, and held-out
    # evaluation on a slice (all of the held-out text, ~1.4M tokens, would take minutes here).
    "cpu": Recipe(vocab_size=1024, bpe_chars=1_000_000,
                  model=dict(context_length=128, d_model=96, n_layers=3, n_heads=4),
                  batch_size=16, max_lr=3e-3, min_lr=3e-4, warmup_steps=20, evaluations=6,
                  heldout_tokens=16 * 128 * 8 + 1, timing_steps=8, sample_tokens=80),
    # A GPU: the corpus is ~29 MB of training text, ~9M tokens at this vocabulary, and a run of
    # minutes streams hundreds of millions of tokens through the model, i.e. tens of passes over
    # the text. A model of ~6M parameters (less than one per training token) cannot memorise
    # that much text (it holds far fewer bits than the corpus carries), so held-out loss keeps
    # falling instead of turning up as it did for unit 07's 25M-parameter byte model on 420 KB.
    "cuda": Recipe(vocab_size=4096, bpe_chars=4_000_000,
                   model=dict(context_length=256, d_model=256, n_layers=6, n_heads=8),
                   batch_size=64, max_lr=2e-3, min_lr=2e-4, warmup_steps=200, evaluations=20, patience=4,
                   heldout_tokens=None, timing_steps=20, sample_tokens=300),
}


def peak_tflops(name: str) -> float | None:
    return next((v for k, v in PEAK_BF16_TFLOPS.items() if k in name), None)


@contextlib.contextmanager
def device_recipe(device: torch.device):
    """On a GPU: bf16 autocast (matmuls and the fused attention kernel in bf16; the reference's
    cross_entropy works in float32), TF32 for what stays in float32, and AdamW's fused kernel
    (one launch for the whole update: the same algorithm; the reference builds
    `torch.optim.AdamW` itself, so the class is swapped for the run's duration)."""
    if device.type != "cuda":
        yield
        return
    adamw = torch.optim.AdamW

    class FusedAdamW(adamw):
        def __init__(self, params, **settings):
            super().__init__(params, fused=True, **settings)

    torch.set_float32_matmul_precision("high")
    torch.optim.AdamW = FusedAdamW
    try:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            yield
    finally:
        torch.optim.AdamW = adamw


def seconds_since_start() -> float:
    """How long this process has run already (importing torch takes seconds on a busy machine),
    so that `--minutes` counts from the command, not from here."""
    try:
        import psutil
    except ImportError:
        return 0.0
    return max(0.0, time.time() - psutil.Process().create_time())


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run(minutes: float = 5.0, device: str | None = None, max_steps: int | None = None, log=print, *,
        recipe: Recipe | None = None, max_chars: int | None = None, runs: Path | None = None,
        cache: Path | None = None, compile_model: bool | None = None, already: float = 0.0) -> dict:
    """Tokenize (or load the cached ids), time a few steps, train for what is left of `minutes`
    (at most `max_steps` steps), evaluate, sample, save the curve. `recipe`, `max_chars` (the
    characters of each side of the split) and the folders are for tests: tiny runs. `already`:
    seconds of the time spent before the call (the command line's start-up)."""
    from coursekit import corpus
    from coursekit.attention_bench import device_name
    from coursekit.gpt import GPT, GPTConfig
    from coursekit.training import TrainConfig

    started = time.perf_counter()
    deadline = started + 60 * minutes - already
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    recipe = recipe or RECIPES[device.type]
    runs, cache = runs or RUNS, cache or CACHE
    name = device_name(device)
    ref = load_reference("08_training")

    train_text, held_text = corpus.stdlib_split(max_chars)
    merges = merges_for(train_text[:recipe.bpe_chars], recipe.vocab_size, ref.train_bpe, cache, log)
    train_ids = torch.from_numpy(ids_for(train_text, merges, ref.encode, "training text", cache, log)).long()
    held_all = ids_for(held_text, merges, ref.encode, "held-out text", cache, log)
    tokenizing = time.perf_counter() - started
    table = token_bytes(merges)
    train_bytes = train_text.encode("utf-8")

    config = GPTConfig(vocab_size=256 + len(merges), **recipe.model)
    C, B = config.context_length, recipe.batch_size
    # The held-out windows evaluate() scores: 0, C, 2C, ... while a whole one fits; on a GPU a
    # whole number of batches, so a compiled model never sees a second batch shape.
    windows = (len(held_all) - 1) // C
    if recipe.heldout_tokens is not None and recipe.heldout_tokens <= windows * C:
        # A sample: `heldout_pieces` stretches of whole windows spread evenly over the held-out
        # files, joined (the first file alone would be one module's style). The model and the
        # baselines below score the same joined text, so they stay comparable.
        per_piece = max(1, (recipe.heldout_tokens - 1) // C // recipe.heldout_pieces) * C
        firsts = np.linspace(0, len(held_all) - per_piece - 1, recipe.heldout_pieces).astype(int)
        pieces = [held_all[first:first + per_piece] for first in firsts]
        sample_ids = np.concatenate(pieces + [held_all[firsts[-1] + per_piece:][:1]])  # + the last target
        windows = (len(sample_ids) - 1) // C
    else:
        sample_ids = held_all
    if device.type == "cuda" and windows >= B:
        windows -= windows % B
    held_ids = torch.from_numpy(sample_ids[:windows * C + 1]).long()
    held_bytes = b"".join(table[i] for i in held_ids.tolist())
    scored_from = len(table[int(held_ids[0])])  # the targets start at the second token
    held_scored_bytes = len(held_bytes) - scored_from
    base = corpus.byte_baselines(train_bytes, held_bytes, scored_from)
    # The tokenizer's own bar: each token predicted from the training counts of tokens alone. BPE
    # already captures the inside of words, so this is stiffer than the byte bigram; a model that
    # beats it has learned something from the context.
    token_counts = np.bincount(train_ids.numpy(), minlength=config.vocab_size) + 1
    token_unigram = float(-np.log(token_counts / token_counts.sum())[held_ids[1:].numpy()].sum()) / held_scored_bytes

    torch.manual_seed(0)
    model = GPT(config).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    compile_model = device.type == "cuda" if compile_model is None else compile_model
    trained = torch.compile(model) if compile_model else model
    log(f"corpus: the standard library's files, {len(train_bytes) / 1e6:.1f} MB for training "
        f"({len(train_ids):,} tokens), held out by file: {held_scored_bytes / 1e3:,.0f} KB evaluated "
        f"({windows * C:,} tokens{'' if sample_ids is held_all else ', a sample'}); vocabulary "
        f"{config.vocab_size}; tokenizing took {tokenizing:.1f} s")
    log(f"model: a GPT of {n_params / 1e6:.2f}M parameters (d_model {config.d_model}, {config.n_layers} layers, "
        f"context {C}), {len(train_ids) / n_params:.1f} training tokens per parameter, batch {B}, "
        f"lr {recipe.max_lr:g} to {recipe.min_lr:g}, on {name}"
        f"{', bf16 autocast, fused AdamW' if device.type == 'cuda' else ''}"
        f"{', torch.compile' if compile_model else ''}")

    # Time a few steps (and one evaluation), then start again from the same initial weights: the
    # cosine needs total_steps before the first step.
    initial = copy.deepcopy(model.state_dict())
    probe = TrainConfig(total_steps=recipe.timing_steps, batch_size=B, context_length=C, max_lr=recipe.max_lr,
                        min_lr=recipe.min_lr, warmup_steps=1, eval_every=10**9, seed=1)
    with device_recipe(device):
        # Untimed first: the first steps pay for allocation, thread start-up and, on a GPU, compiling.
        ref.train_loop(trained, train_ids, held_ids, dataclasses.replace(probe, total_steps=2))
        ref.evaluate(trained, held_ids, B, C)
        sync(device)
        # The median of the steps, each timed from one forward pass to the next (train_loop waits
        # for every step's loss): a shared machine's passing spike should not size the whole run.
        marks = []

        def mark(module, inputs, output):  # returns None: a forward hook's value would replace the output
            if module.training:
                marks.append(time.perf_counter())

        timer = trained.register_forward_hook(mark)
        clock = time.perf_counter()
        try:
            ref.train_loop(trained, train_ids, held_ids, probe)
            sync(device)
        finally:
            timer.remove()
        gaps = [later - earlier for earlier, later in itertools.pairwise(marks)]
        step_seconds = statistics.median(gaps) if gaps else (time.perf_counter() - clock) / recipe.timing_steps
        clock = time.perf_counter()
        ref.evaluate(trained, held_ids, B, C)
        sync(device)
        eval_seconds = time.perf_counter() - clock
    model.load_state_dict(initial)
    final_seconds = eval_seconds + (8 if device.type == "cpu" else 15)  # the final evaluation, the sample, the plot
    left = deadline - time.perf_counter() - final_seconds
    steps = max(1, int((left - recipe.evaluations * eval_seconds) / step_seconds))
    if max_steps is not None:
        steps = min(steps, max_steps)
    eval_every = max(1, steps // recipe.evaluations)
    settings = TrainConfig(total_steps=steps, batch_size=B, context_length=C, max_lr=recipe.max_lr,
                           min_lr=recipe.min_lr, warmup_steps=max(1, min(recipe.warmup_steps, steps // 10)),
                           eval_every=eval_every, patience=recipe.patience, seed=0)
    tokens_seen = steps * B * C
    log(f"schedule: {steps} steps ({step_seconds * 1000:.0f} ms a step, a held-out evaluation "
        f"{eval_seconds:.1f} s, timed), warm-up {settings.warmup_steps}, held-out every {eval_every} steps; "
        f"{tokens_seen / 1e6:.1f}M tokens, {tokens_seen / len(train_ids):.2f} passes over the training text")

    clock = time.perf_counter()
    done, cut_short = [0], []

    def progress(module, inputs, output):  # a forward hook: train_loop reports nothing as it goes
        if module.training:
            done[0] += 1
            if time.perf_counter() > deadline - final_seconds and settings.patience > 0:
                # The machine got slower than it was timed (it may be shared): end the run as
                # early stopping does, which the reference checks before every step, so that
                # train_loop still restores the best weights and returns its record.
                settings.patience = 0
                cut_short.append(done[0])
            if done[0] % max(1, steps // 20) == 0 or done[0] == steps:
                elapsed = time.perf_counter() - clock
                print(f"\rstep {done[0]:6d}/{steps}  {done[0] * B * C / elapsed:,.0f} tokens/s  {elapsed:5.0f} s",
                      end="", flush=True, file=sys.stderr)

    hook = trained.register_forward_hook(progress)
    try:
        with device_recipe(device):
            result = ref.train_loop(trained, train_ids, held_ids, settings)
            sync(device)
            train_seconds = time.perf_counter() - clock
            held = ref.evaluate(trained, held_ids, B, C)  # the best weights: train_loop restored them
    finally:
        hook.remove()
    print(file=sys.stderr)
    steps_done = len(result["train_losses"])
    tokens_per_second = steps_done * B * C / train_seconds  # held-out evaluations included
    held_per_byte = held * windows * C / held_scored_bytes
    train_bytes_per_token = len(train_bytes) / len(train_ids)
    held_bytes_per_token = held_scored_bytes / (windows * C)
    heldout_curve = [(eval_every * (i + 1), loss) for i, loss in enumerate(result["heldout_losses"])]
    for step, loss in heldout_curve:
        log(f"  held-out after step {step:6d}: {loss:.3f} nats/token = {loss / held_bytes_per_token:.3f} nats/byte")
    log(f"bars on the same held-out bytes, in nats/byte: byte unigram {base['unigram']:.3f}, byte bigram "
        f"{base['bigram']:.3f}, token unigram {token_unigram:.3f} (this tokenizer, no context); the model "
        f"{held_per_byte:.3f}")
    if cut_short:
        log(f"stopped at the time limit after {steps_done} of {steps} steps: the machine ran slower than it was "
            f"timed; " + (f"the weights of step {result['best_step']} (the best held-out evaluation) kept"
                          if result["best_step"] else "no held-out evaluation yet: the last weights kept"))
    elif steps_done < steps:
        log(f"stopped early after {steps_done} steps: held-out loss stopped improving "
            f"({settings.patience} evaluations without a new best); the weights of step {result['best_step']} kept")

    result_record = {
        "steps": steps_done, "scheduled_steps": steps, "best_step": result["best_step"],
        "seconds": round(train_seconds, 1), "tokenizing_seconds": round(tokenizing, 1),
        "tokens_per_second": round(tokens_per_second), "held_out_loss": round(held, 4),
        "held_out_nats_per_byte": round(held_per_byte, 4), "unigram": round(base["unigram"], 4),
        "bigram": round(base["bigram"], 4),
        "token_unigram": round(token_unigram, 4), "device": name, "parameters": n_params,
        "vocab_size": config.vocab_size, "context_length": C, "batch_size": B,
        "train_bytes_per_token": round(train_bytes_per_token, 4),
        "held_bytes_per_token": round(held_bytes_per_token, 4),
        "losses": [round(v, 4) for v in result["train_losses"]],
        "held_out": [[step, round(loss, 4)] for step, loss in heldout_curve],
    }
    peak = peak_tflops(name) if device.type == "cuda" else None
    if peak:
        mfu = 6 * n_params * tokens_per_second / (peak * 1e12)
        result_record["mfu"] = round(mfu, 4)
        log(f"model FLOPs utilisation: 6 x {n_params / 1e6:.1f}M x {tokens_per_second:,.0f} tokens/s / {peak:.0f} "
            f"TFLOP/s = {mfu:.1%} (attention's own FLOPs not counted, held-out evaluations in the time)")

    result_record["sample"] = sample(model, ref, merges, device, recipe.sample_tokens)
    log("sample (temperature 0.8, top 50, after 'def '):")
    log(result_record["sample"])
    save_curve(result_record, base, runs, f"{n_params / 1e6:.1f}M-parameter GPT on {name}", log)
    log(f"held-out loss {held:.3f} nats/token = {held_per_byte:.3f} nats/byte (unigram {base['unigram']:.3f}, "
        f"bigram {base['bigram']:.3f} nats/byte) after {steps_done} steps, {tokens_per_second:,.0f} tokens/s on {name}")
    return result_record


def sample(model, ref, merges, device: torch.device, new_tokens: int, prompt: str = "def ") -> str:
    """Unit 06's reference `generate` on the uncompiled model (a compiled one would recompile for
    every prefix length)."""
    generate = load_reference("06_generation").generate
    torch.manual_seed(0)
    idx = torch.tensor([ref.encode(prompt, merges)], device=device)
    with device_recipe(device):
        out = generate(model, idx, new_tokens, temperature=0.8, top_k=50)
    return ref.decode(out[0].tolist(), merges)


def save_curve(record: dict, base: dict, runs: Path, title: str, log=print) -> None:
    runs.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    (runs / f"train-{stamp}.json").write_text(json.dumps(record))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    per_byte_train = [v / record["train_bytes_per_token"] for v in record["losses"]]
    plt.figure(figsize=(7, 3.5))
    plt.plot(range(1, len(per_byte_train) + 1), per_byte_train, label="training loss", alpha=0.7)
    if record["held_out"]:
        plt.plot([step for step, _ in record["held_out"]],
                 [loss / record["held_bytes_per_token"] for _, loss in record["held_out"]], "o-",
                 label="held-out loss")
    plt.axhline(base["unigram"], color="gray", linestyle="--", label="byte unigram")
    plt.axhline(base["bigram"], color="black", linestyle=":", label="byte bigram")
    plt.axhline(record["token_unigram"], color="tab:red", linestyle="-.", label="token unigram")
    plt.xlabel("step")
    plt.ylabel("nats per byte")
    finite = [v for v in per_byte_train if math.isfinite(v)]
    if finite:
        plt.ylim(0, max(base["unigram"] * 1.3, min(max(finite), 2 * base["unigram"])))
    plt.title(title)
    plt.legend()
    plt.tight_layout()
    plt.savefig(runs / f"train-{stamp}.png", dpi=100)
    plt.close()
    log(f"loss curve: {runs / f'train-{stamp}.png'}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="course.py train")
    parser.add_argument("--minutes", type=float, default=5.0, help="the whole run, tokenizing included")
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    parser.add_argument("--steps", type=int, default=None, help="stop after this many steps at the latest")
    args = parser.parse_args(argv)
    run(args.minutes, args.device, args.steps, already=seconds_since_start())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
