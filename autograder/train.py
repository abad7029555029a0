"""`python3 course.py train [--minutes M] [--device D] [--steps N]`: train the course's GPT on the
shipped corpus with unit 07's reference `train`, for a given time.

Prints a progress line, the held-out loss against the unigram and bigram baselines, tokens per
second and, on a GPU, the model FLOPs utilisation; saves the loss curve beside the log in
`.course_runs/`. Its last line: `held-out loss L nats/token (unigram U, bigram B) after S steps,
K tokens/s on <device>`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch

from .paths import ROOT
from .reference import load_reference

RUNS = ROOT / ".course_runs"
SIZES = {  # per device: a model that trains usefully in minutes there
    "cpu": dict(vocab_size=256, context_length=128, d_model=128, n_layers=4, n_heads=4),
    "cuda": dict(vocab_size=256, context_length=256, d_model=384, n_layers=6, n_heads=6),
}
BATCH = {"cpu": 16, "cuda": 64}
# A first H200 run (25.6M parameters, lr 3e-3) stalled at the bigram baseline: too high a rate
# for that size, and the corpus is small (about 420 KB of training bytes).
LR = {"cpu": 3e-3, "cuda": 1e-3}
PEAK_BF16_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0}  # dense bf16, from the vendors' sheets


class TimeUp(Exception):
    pass


def peak_tflops(name: str) -> float | None:
    return next((v for k, v in PEAK_BF16_TFLOPS.items() if k in name), None)


def run(minutes: float = 5.0, device: str | None = None, max_steps: int | None = None, log=print) -> dict:
    from coursekit.attention_bench import device_name
    from coursekit.gpt import GPT, GPTConfig

    from .units.flash_training import baselines, corpus_windows

    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    config = GPTConfig(**SIZES[device.type])
    batch = BATCH[device.type]
    torch.manual_seed(0)
    model = GPT(config)
    n_params = sum(p.numel() for p in model.parameters())
    name = device_name(device)
    log(f"training a GPT of {n_params / 1e6:.2f}M parameters (d_model {config.d_model}, {config.n_layers} layers, "
        f"context {config.context_length}), batch {batch}, lr {LR[device.type]:g}, on {name} for {minutes:g} minutes")
    losses: list[float] = []
    started = time.perf_counter()
    deadline = started + 60 * minutes

    def progress(step, loss):
        losses.append(loss)
        elapsed = time.perf_counter() - started
        if step % 25 == 0:
            rate = step * batch * config.context_length / elapsed
            print(f"\rstep {step:6d}  loss {loss:.3f}  {rate:,.0f} tokens/s  {elapsed:5.0f} s", end="", flush=True,
                  file=sys.stderr)
        if time.perf_counter() > deadline or (max_steps and step >= max_steps):
            raise TimeUp

    try:
        load_reference("07_flash_training").train(config, 10**9, device=str(device), model=model, batch_size=batch,
                                                  lr=LR[device.type], progress=progress)
    except TimeUp:
        pass
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    seconds = time.perf_counter() - started
    print(file=sys.stderr)
    tokens_per_second = len(losses) * batch * config.context_length / seconds
    model.eval()
    x, y = corpus_windows("held", config.context_length, count=32)
    with torch.no_grad():
        logits = model(x.to(device)).float()
        held = torch.nn.functional.cross_entropy(logits.flatten(0, 1), y.to(device).flatten()).item()
    base = baselines()
    result = {"steps": len(losses), "seconds": round(seconds, 1), "tokens_per_second": round(tokens_per_second),
              "held_out_loss": round(held, 4), "unigram": round(base["unigram"], 4), "bigram": round(base["bigram"], 4),
              "device": name, "parameters": n_params, "losses": [round(v, 4) for v in losses]}
    peak = peak_tflops(name) if device.type == "cuda" else None
    if peak:
        mfu = 6 * n_params * tokens_per_second / (peak * 1e12)
        result["mfu"] = round(mfu, 4)
        log(f"model FLOPs utilisation: 6 x {n_params / 1e6:.1f}M x {tokens_per_second:,.0f} tokens/s / {peak:.0f} "
            f"TFLOP/s = {mfu:.1%} (attention's own FLOPs not counted)")
    RUNS.mkdir(exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    (RUNS / f"train-{stamp}.json").write_text(json.dumps(result))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        plt.figure(figsize=(7, 3.5))
        plt.plot(losses, label="training loss")
        plt.axhline(base["unigram"], color="gray", linestyle="--", label="unigram baseline")
        plt.axhline(base["bigram"], color="black", linestyle=":", label="bigram baseline")
        plt.xlabel("step")
        plt.ylabel("nats per byte")
        plt.title(f"{n_params / 1e6:.1f}M-parameter GPT on {name}")
        plt.legend()
        plt.tight_layout()
        plt.savefig(RUNS / f"train-{stamp}.png", dpi=100)
        log(f"loss curve: {RUNS / f'train-{stamp}.png'}")
    except ImportError:
        pass
    log(f"held-out loss {held:.3f} nats/token (unigram {base['unigram']:.3f}, bigram {base['bigram']:.3f}) after "
        f"{len(losses)} steps, {tokens_per_second:,.0f} tokens/s on {name}")
    return result


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="course.py train")
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    parser.add_argument("--steps", type=int, default=None, help="stop after this many steps at the latest")
    args = parser.parse_args(argv)
    run(args.minutes, args.device, args.steps)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
