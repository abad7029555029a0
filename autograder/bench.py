"""`python3 course.py bench <what>`: benchmarks that print figures (nothing here is a test).

    bench generation   the reference `generate` against `generate_cached` (unit 06)

Figures are measured side by side in one run, on the GPU when there is one (else the CPU).
"""

from __future__ import annotations

import statistics
import sys
import time

import torch

from .reference import load_reference


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def bench_generation(new_tokens=(128, 256, 512), prompt_length=64, repeats=3, log=print) -> dict:
    """A GPT of about 10M parameters (d_model 384, 6 layers, 6 heads, bytes), greedy decoding."""
    from coursekit.gpt import GPT, GPTConfig

    reference = load_reference("06_generation")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    config = GPTConfig(vocab_size=256, context_length=1024, d_model=384, n_layers=6, n_heads=6)
    model = GPT(config).to(device).eval()
    n_params = sum(p.numel() for p in model.parameters())
    prompt = torch.randint(0, config.vocab_size, (1, prompt_length), device=device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    log(f"GPT: {n_params / 1e6:.1f}M parameters (d_model {config.d_model}, {config.n_layers} layers, "
        f"{config.n_heads} heads), prompt {prompt_length} tokens, greedy, on {name}; torch {torch.__version__}")
    reference.generate_cached(model, prompt, 8, temperature=0)  # warm-up: first calls pay for allocation
    reference.generate(model, prompt, 8, temperature=0)
    rows = []
    log(f"{'new tokens':>10} {'generate':>10} {'cached':>10} {'ms/token':>9} {'ms/token':>9} {'speed-up':>9}"
        "  identical")
    log(f"{'':>10} {'(s)':>10} {'(s)':>10} {'(full)':>9} {'(cached)':>9} {'':>9}")
    for n in new_tokens:
        times = {}
        outputs = {}
        for fn in (reference.generate, reference.generate_cached):
            runs = []
            for _ in range(repeats):
                _sync(device)
                started = time.perf_counter()
                outputs[fn.__name__] = fn(model, prompt, n, temperature=0)
                _sync(device)
                runs.append(time.perf_counter() - started)
            times[fn.__name__] = statistics.median(runs)
        same = torch.equal(outputs["generate"], outputs["generate_cached"])
        speedup = times["generate"] / times["generate_cached"]
        rows.append({"new_tokens": n, "generate_s": times["generate"], "cached_s": times["generate_cached"],
                     "speedup": speedup, "identical": same})
        log(f"{n:>10} {times['generate']:>10.2f} {times['generate_cached']:>10.3f} "
            f"{1000 * times['generate'] / n:>9.1f} {1000 * times['generate_cached'] / n:>9.2f} {speedup:>8.1f}x  "
            f"{'yes' if same else 'NO'}")
    positions = prompt_length + max(new_tokens)
    cache_bytes = 2 * config.n_layers * positions * config.d_model * model.lm_head.weight.element_size()
    log(f"KV cache at {positions} positions: 2 x {config.n_layers} layers x {positions} positions x "
        f"{config.d_model} x {model.lm_head.weight.element_size()} bytes = {cache_bytes / 2**20:.1f} MiB per sequence "
        f"(the weights: {n_params * 4 / 2**20:.1f} MiB)")
    last = rows[-1]
    log(f"kv-cache speedup at {last['new_tokens']} new tokens: {last['speedup']:.1f}x "
        f"(tokens identical: {'yes' if last['identical'] else 'no'})")
    return {"rows": rows, "cache_bytes": cache_bytes, "device": name}


BENCHES = {"generation": bench_generation}


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in BENCHES:
        print(f"usage: python3 course.py bench {{{','.join(BENCHES)}}}")
        return 2
    BENCHES[argv[0]]()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
