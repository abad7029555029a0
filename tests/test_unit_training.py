"""Unit 08 (the training recipe): `train_loop` is graded with the contract functions it calls
standing in for the student's own (`lr_at` called back to the reference; the others library code
in the worker, `autograder/trust/worker/stand_ins.py`), so a wrong loss, clip, evaluation or
checkpoint costs its own part's points once, not `train_loop`'s as well."""

from __future__ import annotations

import random

import numpy as np
import torch

from autograder.engine.grade import grade_part
from autograder.engine.reference import load_reference
from autograder.paths import ROOT
from autograder.trust.student import Student
from autograder.trust.worker import stand_ins
from autograder.units import UNITS
from autograder.units.training_runs import RECIPE_STAND_INS

UNIT = UNITS["08_training"]
SUBMISSIONS = ROOT / "tests" / "submissions" / "08_training"

# Each helper of the recipe wrong in a way that still lets a training loop run to the end.
WRONG_HELPERS = '''

def cross_entropy(logits, targets):  # the sum over positions, not the mean
    rows = logits.reshape(-1, logits.shape[-1]).float()
    return (torch.logsumexp(rows, 1) - rows.gather(1, targets.reshape(-1, 1)).squeeze(1)).sum()


def clip_grad_norm(parameters, max_norm):  # never clips
    grads = [p.grad for p in parameters if p.grad is not None]
    return torch.sqrt(sum((g ** 2).sum() for g in grads))


def evaluate(model, data, batch_size, context_length):  # the first window only, in training mode
    data = torch.as_tensor(data, dtype=torch.long)
    x, y = data[:context_length][None], data[1:context_length + 1][None]
    return float(cross_entropy(model(x), y)) / y.numel()


def save_checkpoint(path, model, optimizer, step, **state):  # no optimizer and no RNG states
    torch.save({"model": model.state_dict(), "step": step, "state": state}, path)


def load_checkpoint(path, model, optimizer):
    saved = torch.load(path, weights_only=False)
    model.load_state_dict(saved["model"])
    return saved["step"], saved["state"]
'''


def graded_in_worker(source: str, parts) -> list:
    student = Student([("answer", source)], budget=UNIT.budget)
    student.start()
    try:
        return [r for part in parts for r in grade_part(UNIT, part, student)]
    finally:
        student.close()


def test_the_stand_ins_are_every_contract_function_train_loop_calls():
    part = UNIT.part("train_loop")
    assert dict(part.library_stubs) == dict(RECIPE_STAND_INS)
    contract = {p.name for p in UNIT.parts} - {"train_loop", "pretokenize", "train_bpe", "encode", "decode"}
    assert set(part.uses) | {name for name, _ in part.library_stubs} == contract


def test_the_stand_ins_compute_what_the_reference_does_to_the_bit():
    ref = load_reference(UNIT.name)
    torch.manual_seed(5)
    logits, targets = torch.randn(3, 7, 11) * 20, torch.randint(11, (3, 7))
    assert torch.equal(stand_ins.cross_entropy(logits, targets), ref.cross_entropy(logits, targets))

    def model_with_grads(seed):
        torch.manual_seed(seed)
        model = torch.nn.Sequential(torch.nn.Embedding(11, 6), torch.nn.Linear(6, 11))
        stand_ins.cross_entropy(model(targets), targets).backward()
        return model

    for max_norm in (1e-3, 1e3):  # clipped, and left alone
        mine, theirs = model_with_grads(1), model_with_grads(1)
        assert torch.equal(stand_ins.clip_grad_norm(mine.parameters(), max_norm),
                           ref.clip_grad_norm(theirs.parameters(), max_norm))
        assert all(torch.equal(a.grad, b.grad) for a, b in zip(mine.parameters(), theirs.parameters(), strict=True))
    model, data = model_with_grads(2), torch.randint(11, (50,))
    assert stand_ins.evaluate(model, data, 2, 6) == ref.evaluate(model, data, 2, 6)


def test_a_checkpoint_written_by_the_stand_in_restores_what_the_reference_does(tmp_path):
    ref = load_reference(UNIT.name)
    steps = {}
    for name, save, load in (("stand_ins", stand_ins.save_checkpoint, stand_ins.load_checkpoint),
                             ("reference", ref.save_checkpoint, ref.load_checkpoint)):
        torch.manual_seed(0)
        model = torch.nn.Linear(3, 2)
        optimizer = torch.optim.AdamW(model.parameters())
        random.seed(1), np.random.seed(1), torch.manual_seed(1)
        save(tmp_path / f"{name}.pt", model, optimizer, 7, best_step=3)
        drawn = (random.random(), np.random.rand(), torch.rand(1).item())
        steps[name] = (load(tmp_path / f"{name}.pt", model, optimizer),
                       (random.random(), np.random.rand(), torch.rand(1).item()) == drawn)
    assert steps["stand_ins"] == steps["reference"] == (((7, {"best_step": 3})), True)


def test_wrong_helpers_cost_their_own_parts_and_not_train_loop():
    source = (SUBMISSIONS / "correct_written_plainly.py").read_text() + WRONG_HELPERS
    results = graded_in_worker(source, ["cross_entropy", "clip_grad_norm", "evaluate", "load_checkpoint",
                                        "train_loop"])
    for part in ("cross_entropy", "clip_grad_norm", "evaluate", "load_checkpoint"):
        assert not all(r.passed for r in results if r.name.split("/")[0] == part), f"{part} should lose points"
    loop = [r for r in results if r.name.split("/")[0] == "train_loop"]
    assert loop and all(r.passed for r in loop), [r.message for r in loop if not r.passed]


STEAL_BY_NAME = "from stand_ins import cross_entropy  # noqa: F401\n"
STEAL_BY_PATH = '''
import importlib.util, os, sys

_path = os.path.join(os.path.dirname(os.path.abspath(sys.modules["__main__"].__file__)), "stand_ins.py")
_spec = importlib.util.spec_from_file_location("x", _path)
_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_module)
cross_entropy = _module.cross_entropy
'''


def test_the_stand_ins_cannot_be_taken_as_an_answer():
    """Their source reaches the worker only with the train_loop call that needs it: no file in the
    sandbox holds it, so a submission can neither import it nor load it by path."""
    for source in (STEAL_BY_NAME, STEAL_BY_PATH):
        results = graded_in_worker(source, ["cross_entropy"])
        assert results and not any(r.passed for r in results), [r.message for r in results if r.passed]
