"""The CUDA paths of unit 07 and the benchmarks. They run on a machine with a GPU and skip
elsewhere, saying why. (CI has no GPU: these ran on an H200 when the unit was written; the
figures are on the unit's issue.)"""

from __future__ import annotations

import pytest
import torch

from autograder.reference import load_reference

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(),
                               reason="no CUDA GPU here: the GPU paths (synchronisation, bf16 autocast, fused AdamW, "
                                      "the forced flash kernel, the GPU benchmarks) need one")


def sleeper(cycles: int):
    def fn(x):
        torch.cuda._sleep(cycles)  # keeps the GPU busy for a known time, asynchronously
    return fn


@needs_gpu
def test_time_fn_synchronises_and_an_unsynchronised_timer_does_not():
    from autograder.units.flash_training import time_with

    ref = load_reference("07_flash_training")
    x = torch.zeros(1, device="cuda")
    fn = sleeper(50_000_000)  # tens of milliseconds of device time
    synced = ref.time_fn(fn, x, warmup=1, repeats=3)
    unsynced = time_with()(ref, fn, x, warmup=1, repeats=3)
    torch.cuda.synchronize()
    assert synced > 10 * unsynced, (synced, unsynced)


@needs_gpu
def test_train_on_the_gpu_uses_bf16_fused_adamw_and_the_flash_kernel():
    from coursekit.gpt import GPT, GPTConfig

    ref = load_reference("07_flash_training")
    config = GPTConfig(vocab_size=256, context_length=128, d_model=128, n_layers=2, n_heads=4)
    model = GPT(config)
    seen = []
    hook = model.blocks[0].attn.q_proj.register_forward_hook(lambda m, i, o: seen.append(o.dtype))
    losses = ref.train(config, 30, device="cuda", model=model)
    hook.remove()
    assert len(losses) == 30 and losses[-1] < losses[0] - 0.5
    assert seen and all(dtype == torch.bfloat16 for dtype in seen), "the forward pass should run under bf16 autocast"
    assert next(model.parameters()).is_cuda


@needs_gpu
def test_the_forced_flash_kernel_runs_and_matches_the_math_path():
    from coursekit.attention_bench import fused_attention, inputs, math_attention

    q, k, v = inputs(2, 4, 1024, 64, dtype=torch.bfloat16, device="cuda")
    assert (fused_attention(q, k, v).float() - math_attention(q, k, v).float()).abs().max() < 0.05


@needs_gpu
def test_the_benchmark_measures_memory_on_the_gpu():
    from coursekit.attention_bench import fused_attention, math_attention, measure

    rows = {r["implementation"]: r for r in measure({"naive": math_attention, "fused": fused_attention}, [4096],
                                                      dtype=torch.bfloat16, device="cuda", repeats=2)}
    assert rows["naive"]["cuda_peak_bytes"] > 10 * rows["fused"]["cuda_peak_bytes"]
