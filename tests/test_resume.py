"""A resumed run is the same run: the reference's train_loop stopped at step k (`stop_after`) and
resumed from its checkpoint, in a model built from another seed, gives the very losses, best step
and weights (to the bit, on the CPU) of the run that never stopped; and the test notices when
load_checkpoint forgets to restore the generators."""

from __future__ import annotations

import types

import pytest
import torch

from autograder.engine.reference import load_reference
from coursekit.gpt import GPT
from coursekit.training import TrainConfig

FIELDS = dict(vocab_size=32, context_length=16, d_model=16, n_layers=1, n_heads=2)
STEPS, STOP_AT = 20, 8


def ids(seed: int, length: int) -> torch.Tensor:
    """Each id is followed by (5 * id + 3) % 32 most of the time: something to learn."""
    g = torch.Generator().manual_seed(seed)
    out = [int(torch.randint(32, (1,), generator=g))]
    for _ in range(length - 1):
        keep = float(torch.rand(1, generator=g)) < 0.85
        out.append((5 * out[-1] + 3) % 32 if keep else int(torch.randint(32, (1,), generator=g)))
    return torch.tensor(out)


def model(seed: int) -> GPT:
    torch.manual_seed(seed)
    return GPT(types.SimpleNamespace(**FIELDS, d_ff=None, tie_weights=True))


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny matrices: threads only wait for each other (and the suite shares two cores)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def straight_and_resumed(namespace, tmp_path):
    train, heldout = ids(1, 2000), ids(2, 16 * 6 + 1)
    run = TrainConfig(total_steps=STEPS, batch_size=4, context_length=16, max_lr=1e-2, min_lr=1e-3, warmup_steps=4,
                      grad_clip=0.5, eval_every=4, patience=10, seed=3)
    straight_model = model(0)
    straight = namespace.train_loop(straight_model, train, heldout, run)
    path = str(tmp_path / "run.pt")
    stopped = model(0)
    namespace.train_loop(stopped, train, heldout,
                         TrainConfig(**{**vars(run), "checkpoint_path": path, "checkpoint_every": 4,
                                        "stop_after": STOP_AT}))
    torch.manual_seed(99)  # whatever a new process's generator holds: the checkpoint overrides it
    resumed_model = model(1)  # another start: the checkpoint overwrites all of it
    resumed = namespace.train_loop(resumed_model, train, heldout, TrainConfig(**{**vars(run), "resume_from": path}))
    return straight, straight_model, resumed, resumed_model


def same_run(straight, straight_model, resumed, resumed_model) -> bool:
    weights = straight_model.state_dict()
    return (straight == resumed  # the lists of floats and the best step, compared exactly
            and all(torch.equal(weights[k], v) for k, v in resumed_model.state_dict().items()))


def test_a_resumed_run_equals_the_straight_run_bit_for_bit(tmp_path):
    straight, straight_model, resumed, resumed_model = straight_and_resumed(load_reference("08_training"), tmp_path)
    assert len(straight["train_losses"]) == STEPS and len(straight["heldout_losses"]) == STEPS // 4
    assert straight["train_losses"][-1] < straight["train_losses"][0]  # it trains
    assert same_run(straight, straight_model, resumed, resumed_model), (straight, resumed)


@pytest.fixture
def load_without_generators(monkeypatch):
    """The reference with a load_checkpoint that restores everything but the generators' states."""
    import random

    import numpy as np

    ref = load_reference("08_training")
    namespace = vars(ref)["train_loop"].__globals__  # the notebook's own namespace: train_loop reads it
    restore = namespace["load_checkpoint"]

    def load_checkpoint(path, model, optimizer):
        states = random.getstate(), np.random.get_state(), torch.get_rng_state()
        step, state = restore(path, model, optimizer)
        random.setstate(states[0])
        np.random.set_state(states[1])
        torch.set_rng_state(states[2])
        return step, state

    monkeypatch.setitem(namespace, "load_checkpoint", load_checkpoint)
    return ref


def test_the_comparison_notices_generators_left_unrestored(load_without_generators, tmp_path):
    straight, straight_model, resumed, resumed_model = straight_and_resumed(load_without_generators, tmp_path)
    assert resumed["train_losses"][:STOP_AT] == straight["train_losses"][:STOP_AT]  # the history came back
    assert not same_run(straight, straight_model, resumed, resumed_model)
