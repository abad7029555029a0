"""Makes `coursekit/data/tiny_gpt.pt`: the small trained GPT that chapter 06 samples from.

    python3 course.py build --checkpoint     (about two minutes on two CPU cores)

Instructor-side on purpose: the training loop is what unit 07's `train` exercise asks
students to write, so it is not in `coursekit/`, which students read. The model is
`coursekit.gpt.GPT`; the text is `coursekit.corpus` (CPython's help pages, bytes).
"""

from __future__ import annotations

import math
import time

import torch
import torch.nn.functional as F

from coursekit import corpus
from coursekit.gpt import GPT, GPTConfig
from coursekit.pretrained import CHECKPOINT

CONFIG = dict(vocab_size=corpus.VOCAB_SIZE, context_length=128, d_model=96, n_layers=4, n_heads=4)
STEPS, BATCH, PEAK_LR, SEED = 800, 16, 3e-3, 1234


def windows(data, generator, batch=BATCH, length=CONFIG["context_length"]):
    starts = torch.randint(0, len(data) - length - 1, (batch,), generator=generator)
    rows = torch.stack([data[s: s + length + 1] for s in starts.tolist()]).long()  # (B, T + 1)
    return rows[:, :-1], rows[:, 1:]  # inputs, and the byte after each one


@torch.no_grad()
def held_out_loss(model, data, generator, batches=20):
    model.eval()
    losses = [F.cross_entropy(model(x).flatten(0, 1), y.flatten()).item()
              for x, y in (windows(data, generator) for _ in range(batches))]
    model.train()
    return sum(losses) / len(losses)


def train_checkpoint(steps: int = STEPS, log=print) -> dict:
    torch.manual_seed(SEED)
    train, held = corpus.split()
    model = GPT(GPTConfig(**CONFIG))
    optimiser = torch.optim.AdamW(model.parameters(), lr=PEAK_LR, weight_decay=0.1, betas=(0.9, 0.95))
    generator = torch.Generator().manual_seed(SEED)
    started, losses = time.perf_counter(), []
    for step in range(steps):
        warm = min(1.0, (step + 1) / 50)  # linear warm-up, then a cosine down to 10%
        lr = PEAK_LR * warm * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / steps)))
        for group in optimiser.param_groups:
            group["lr"] = lr
        x, y = windows(train, generator)
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimiser.step()
        losses.append(round(loss.item(), 4))
        if step % 200 == 0 or step == steps - 1:
            log(f"step {step:5d}  loss {loss.item():.3f}  ({time.perf_counter() - started:.0f} s)")
    record = {"steps": steps, "batch": BATCH, "peak_lr": PEAK_LR, "seed": SEED, "train_losses": losses,
              "held_out_loss": round(held_out_loss(model, held, torch.Generator().manual_seed(0)), 4),
              "seconds": round(time.perf_counter() - started, 1), "torch": str(torch.__version__)}
    record["samples"] = samples(model)
    CHECKPOINT.parent.mkdir(parents=True, exist_ok=True)
    state = {name: value.half() for name, value in model.state_dict().items()}
    torch.save({"config": CONFIG, "state": state, "record": record}, CHECKPOINT)
    log(f"held-out loss {record['held_out_loss']:.3f} nats per byte; wrote {CHECKPOINT} "
        f"({CHECKPOINT.stat().st_size / 1e6:.1f} MB)")
    return record


SAMPLE_PROMPT = "The for statement is used to"
SAMPLE_TEMPERATURES = (0.0, 0.5, 1.0, 1.5)


def samples(model, new_tokens: int = 96) -> dict:
    """Text the model writes at a few temperatures, with the reference `generate_cached` of unit 06
    (chapter 06 shows it: the chapter itself never writes the generation loop)."""
    from ..engine.reference import load_reference

    generate_cached = load_reference("06_generation").generate_cached
    prompt = corpus.encode(SAMPLE_PROMPT)[None]
    out = {}
    for temperature in SAMPLE_TEMPERATURES:
        tokens = generate_cached(model.eval(), prompt, new_tokens, temperature=temperature,
                                 generator=torch.Generator().manual_seed(SEED))
        out[str(temperature)] = corpus.decode(tokens[0].tolist())
    return out


if __name__ == "__main__":
    train_checkpoint()
