"""Every fact a grade rests on is measured by the grader, where the submission cannot reach it.

Each submission below is the reference solution of its unit with one part replaced by code
that is wrong in a way the grader could once be talked out of seeing, because it believed a
record made inside the student's process: a tensor census, forward hooks, a class's lineage,
a returned loss curve. Each must lose the points of the fact it hides, whatever it does to the
records. Each is graded as the hidden tests grade it: in a sandboxed worker set up for its
unit, one part at a time (and once through `course.py check`).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from autograder.core import grade_part
from autograder.paths import ROOT, solution_notebook
from autograder.student import Student
from autograder.submission import code_cells
from autograder.units import UNITS

# unit 07: the (T, T) scores built outside PyTorch, or in a thread
FLASH_IN_NUMPY = """
import numpy as np
def flash_attention(q, k, v, causal=True, block_size=64):
    Q, K, V = (t.numpy() for t in (q, k, v))
    s = Q @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1])
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return torch.from_numpy((p / p.sum(-1, keepdims=True)) @ V).to(q.dtype)
"""

FLASH_IN_A_THREAD = """
import threading
def flash_attention(q, k, v, causal=True, block_size=64):
    box = {}
    def work():
        box["out"] = naive_attention(q, k, v, causal)
    worker = threading.Thread(target=work)
    worker.start()
    worker.join()
    return box["out"]
"""

# unit 06: the whole prefix recomputed every step, with the hooks cleared while it runs and
# decoy calls of the shapes a cache would make fed to the watched modules afterwards
CACHE_RECOMPUTED_WITH_DECOYS = """
def generate_cached(model, idx, max_new_tokens, temperature=1.0, top_k=None, generator=None):
    B, T = idx.shape
    if T + max_new_tokens > model.config.context_length:
        raise ValueError(f"exceeds context_length = {model.config.context_length}")
    watched = [m for m in model.modules() if m._forward_hooks]
    saved = [dict(m._forward_hooks) for m in watched]
    for m in watched:
        m._forward_hooks.clear()
    modes = [(m, m.training) for m in model.modules()]
    model.eval()
    finals = []
    with torch.no_grad():
        out = idx
        for step in range(max_new_tokens):
            x = model.token_emb(out) + model.pos_emb(torch.arange(out.shape[1]))
            for block in model.blocks:
                x = block(x)
            finals.append(model.ln_f(x)[:, -1])
            out = torch.cat([out, sample_next(model.lm_head(finals[-1]), temperature, top_k, generator)[:, None]], 1)
        for m, hooks in zip(watched, saved):
            m._forward_hooks.update(hooks)
        C = model.config.d_model
        for step in range(max_new_tokens):  # what a cache would have shown the hooks
            start, t = (0, T) if step == 0 else (T + step - 1, 1)
            model.token_emb(out[:, start:start + t])
            model.pos_emb(torch.arange(start, start + t))
            for block in model.blocks:
                block.attn.k_proj(torch.zeros(B, t, C))
                block.attn.v_proj(torch.zeros(B, t, C))
            model.lm_head(finals[step])
    for m, training in modes:
        m.training = training
    return out
"""

# unit 05: the course's own GPT, imported, or its source read and run under a new name
GPT_IMPORTED = """
from coursekit.gpt import GPT as _CourseGPT
class GPT(_CourseGPT):
    pass
"""

GPT_FROM_COURSE_SOURCE = """
import importlib.util, pathlib
_spec = importlib.util.find_spec("coursekit")
_source = (pathlib.Path(list(_spec.submodule_search_locations)[0]) / "gpt.py").read_text()
_namespace = {}
exec(_source.replace("class GPT(", "class Model(").replace("from .", "from coursekit."), _namespace)
GPT = _namespace["Model"]
"""

# unit 07: a training loop that never steps the optimizer, and returns a convincing curve
TRAIN_NEVER_STEPS = """
def train(config, steps, device=None, model=None, batch_size=16, lr=3e-3, seed=0, progress=None):
    model = model if model is not None else GPT(config)
    data = corpus.split()[0].long()
    window = data[: config.context_length + 1][None]
    with torch.no_grad():
        first = F.cross_entropy(model(window[:, :-1]).flatten(0, 1), window[:, 1:].flatten()).item()
    return [first - 2.5 * (1 - 0.97 ** step) for step in range(steps)]
"""


def with_parts(unit: str, replacements: dict[str, str]) -> list[tuple[str, str]]:
    """The reference solution of `unit`'s code cells, each named part's definition replaced."""
    cells = []
    for label, source in code_cells(solution_notebook(unit)):
        for part, replacement in replacements.items():
            if f"def {part}(" in source or f"class {part}(" in source:
                source = replacement
        cells.append((label, source))
    return cells


def graded(unit: str, part: str, replacement: str) -> dict:
    """`part` graded, with the reference's other answers, in a sandboxed worker set up as the hidden
    tests set one up for `unit` (its hidden course files, its imports): {check name: result}."""
    spec = UNITS[unit]
    student = Student(with_parts(unit, {part: replacement}), hidden=tuple(str(ROOT / h) for h in spec.hidden),
                      imports=spec.worker_imports)
    with student:
        student.start()
        return {r.name.split("/", 1)[1]: r for r in grade_part(spec, part, student, name_mistakes=False)}


@pytest.mark.parametrize("code", [FLASH_IN_NUMPY, FLASH_IN_A_THREAD], ids=["numpy", "thread"])
def test_the_whole_score_matrix_shows_in_the_memory_the_grader_measures(code):
    flash = graded("07_flash_training", "flash_attention", code)
    assert flash["ragged_16"].passed  # the answer itself is right: only the structure is not
    assert not flash["tiles_only"].passed and flash["tiles_only"].points == 0, flash["tiles_only"].message


def test_a_train_that_never_steps_loses_the_training_points_whatever_it_returns():
    train = graded("07_flash_training", "train", TRAIN_NEVER_STEPS)
    lost = {name for name, result in train.items() if not result.passed}
    assert {"losses", "decreases", "keeps_pace", "next_byte"} <= lost, {n: r.message for n, r in train.items()}


def test_a_cache_that_recomputes_the_prefix_loses_the_cache_points_whatever_it_does_to_hooks():
    cached = graded("06_generation", "generate_cached", CACHE_RECOMPUTED_WITH_DECOYS)
    assert cached["greedy_one_token"].passed  # the tokens are right: only the work behind them is not
    assert not cached["keys_once"].passed and "computed" in cached["keys_once"].message, cached["keys_once"].message


@pytest.mark.parametrize("code", [GPT_IMPORTED, GPT_FROM_COURSE_SOURCE], ids=["imported", "from_course_source"])
def test_a_gpt_made_from_the_courses_own_scores_zero(code):
    gpt = graded("05_model", "GPT", code)
    assert gpt and all(not result.passed for result in gpt.values()), {n: r.message for n, r in gpt.items()}


def test_a_gpt_pasted_from_the_courses_source_scores_zero_through_the_cli(tmp_path):
    course_source = (ROOT / "coursekit" / "gpt.py").read_text()
    pasted = course_source.replace("class GPT(", "class MyModel(").replace("positions", "where") + "\nGPT = MyModel\n"
    path = tmp_path / "pasted.py"
    path.write_text("\n\n".join(source for _, source in with_parts("05_model", {"GPT": pasted})))
    proc = subprocess.run([sys.executable, "-m", "autograder", "check", "05_model", str(path), "--json"], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    gpt = [c for c in json.loads(proc.stdout)["checks"] if c["name"].startswith("GPT/")]
    assert gpt and all(not c["passed"] and "copied from the course" in c["message"] for c in gpt)
