"""Every fact a grade rests on is measured by the grader, where the submission cannot reach it.

Each submission below is the reference solution of its unit with one part replaced by code
that is wrong in a way the grader could once be talked out of seeing, because it believed a
record made inside the student's process: a tensor census, forward hooks, a class's lineage,
a returned loss curve. Graded through `course.py check`, each must lose the points of the fact
it hides, whatever it does to the records.
"""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from autograder.paths import ROOT, solution_notebook
from autograder.submission import code_cells

pytestmark = pytest.mark.xdist_group("trusted_measurements")  # one worker grades the submissions, once

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


def with_parts(unit: str, replacements: dict[str, str]) -> str:
    """The reference solution of `unit` as one .py file, each named part's definition replaced."""
    cells = []
    for _, source in code_cells(solution_notebook(unit)):
        for part, replacement in replacements.items():
            if f"def {part}(" in source or f"class {part}(" in source:
                source = replacement
        cells.append(source)
    return "\n\n".join(cells)


# Each submission hides one fact per part (parts are graded independently), graded once.
SUBMISSIONS = {
    "numpy_flash_and_idle_train": ("07_flash_training", {"flash_attention": FLASH_IN_NUMPY,
                                                         "train": TRAIN_NEVER_STEPS}),
    "flash_in_a_thread": ("07_flash_training", {"flash_attention": FLASH_IN_A_THREAD}),
    "cache_recomputed_with_decoys": ("06_generation", {"generate_cached": CACHE_RECOMPUTED_WITH_DECOYS}),
    "gpt_imported": ("05_model", {"GPT": GPT_IMPORTED}),
    "gpt_from_course_source": ("05_model", {"GPT": GPT_FROM_COURSE_SOURCE}),
}
CASES = {"flash_in_numpy": "numpy_flash_and_idle_train", "train_never_steps": "numpy_flash_and_idle_train",
         **{name: name for name in SUBMISSIONS}}


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    folder = tmp_path_factory.mktemp("trusted_measurements")

    def grade(name):
        unit, replacements = SUBMISSIONS[name]
        path = folder / f"{name}.py"
        path.write_text(with_parts(unit, replacements))
        proc = subprocess.run([sys.executable, "-m", "autograder", "check", unit, str(path), "--json"], cwd=ROOT,
                              capture_output=True, text=True, timeout=1200)
        return name, json.loads(proc.stdout)

    with ThreadPoolExecutor(2) as pool:
        graded = dict(pool.map(grade, SUBMISSIONS))
    return {case: graded[submission] for case, submission in CASES.items()}


def checks(report: dict, part: str) -> dict:
    return {c["name"].split("/", 1)[1]: c for c in report["checks"] if c["name"].startswith(part + "/")}


@pytest.mark.parametrize("case", ["flash_in_numpy", "flash_in_a_thread"])
def test_the_whole_score_matrix_shows_in_the_memory_the_grader_measures(reports, case):
    flash = checks(reports[case], "flash_attention")
    assert flash["ragged_16"]["passed"]  # the answer itself is right: only the structure is not
    assert not flash["tiles_only"]["passed"], flash["tiles_only"]["message"]
    assert flash["tiles_only"]["points"] == 0


def test_a_train_that_never_steps_loses_the_training_points_whatever_it_returns(reports):
    train = checks(reports["train_never_steps"], "train")
    lost = {name for name, check in train.items() if not check["passed"]}
    assert {"losses", "decreases", "keeps_pace", "next_byte"} <= lost, {n: c["message"] for n, c in train.items()}


def test_a_cache_that_recomputes_the_prefix_loses_the_cache_points_whatever_it_does_to_hooks(reports):
    cached = checks(reports["cache_recomputed_with_decoys"], "generate_cached")
    assert cached["greedy_one_token"]["passed"]  # the tokens are right: only the work behind them is not
    assert not cached["keys_once"]["passed"], cached["keys_once"]["message"]
    assert "computed" in cached["keys_once"]["message"]


@pytest.mark.parametrize("case", ["gpt_imported", "gpt_from_course_source"])
def test_a_gpt_made_from_the_courses_own_scores_zero(reports, case):
    gpt = checks(reports[case], "GPT")
    assert gpt and all(not check["passed"] for check in gpt.values()), {n: c["message"] for n, c in gpt.items()}


def test_a_gpt_pasted_from_the_courses_source_scores_zero(tmp_path):
    course_source = (ROOT / "coursekit" / "gpt.py").read_text()
    pasted = course_source.replace("class GPT(", "class MyModel(").replace("positions", "where") + "\nGPT = MyModel\n"
    path = tmp_path / "pasted.py"
    path.write_text(with_parts("05_model", {"GPT": pasted}))
    from autograder.cli import check

    report = check("05_model", path)
    gpt = checks(report, "GPT")
    assert all(not c["passed"] and "copied from the course" in c["message"] for c in gpt.values())
