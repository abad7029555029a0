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

from autograder.engine.grade import grade_part
from autograder.paths import ROOT, solution_notebook
from autograder.trust.student import Student
from autograder.trust.submission import code_cells
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

# unit 08: a checkpoint that never leaves the process: deep copies kept in a module-level dict, no
# file written, read back by load_checkpoint (a round trip and a resume in one process pass)
SAVE_IN_MEMORY = """
_KEPT = {}

def save_checkpoint(path, model, optimizer, step, **state):
    _KEPT[path] = copy.deepcopy({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step,
                                 "state": state, "rng": (random.getstate(), np.random.get_state(),
                                                         torch.get_rng_state())})
"""

LOAD_IN_MEMORY = """
def load_checkpoint(path, model, optimizer):
    kept = copy.deepcopy(_KEPT[path])
    model.load_state_dict(kept["model"])
    optimizer.load_state_dict(kept["optimizer"])
    random.setstate(kept["rng"][0])
    np.random.set_state(kept["rng"][1])
    torch.set_rng_state(kept["rng"][2])
    return kept["step"], kept["state"]
"""

# unit 08: the real checkpoint written beside the file asked for (elsewhere in /scratch, in /tmp,
# in /dev/shm and in the environment), a decoy at the path itself, and read back from there
SAVE_BESIDE = """
import base64, io, os

def _places(path):
    name = os.path.basename(path)
    return [os.path.join(os.path.dirname(path), "kept-" + name), "/tmp/kept-" + name, "/dev/shm/kept-" + name]

def save_checkpoint(path, model, optimizer, step, **state):
    buffer = io.BytesIO()
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step, "state": state,
                "rng": (random.getstate(), np.random.get_state(), torch.get_rng_state())}, buffer)
    for place in _places(path):
        with open(place, "wb") as f:
            f.write(buffer.getvalue())
    os.environ["KEPT_" + str(abs(hash(path)))] = base64.b64encode(buffer.getvalue()).decode()
    with open(path, "w") as f:
        f.write("see beside")
"""

LOAD_BESIDE = """
def load_checkpoint(path, model, optimizer):
    found = [place for place in _places(path) if os.path.exists(place)]
    if found:
        checkpoint = torch.load(found[0], weights_only=False)
    else:
        kept = os.environ["KEPT_" + str(abs(hash(path)))]
        checkpoint = torch.load(io.BytesIO(base64.b64decode(kept)), weights_only=False)
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    random.setstate(checkpoint["rng"][0])
    np.random.set_state(checkpoint["rng"][1])
    torch.set_rng_state(checkpoint["rng"][2])
    return checkpoint["step"], checkpoint["state"]
"""

# ... and the same code without the trick: a save that writes no file, and a load of the file
SAVE_NOTHING = """
def save_checkpoint(path, model, optimizer, step, **state):
    pass
"""

LOAD_THE_FILE = """
def load_checkpoint(path, model, optimizer):
    checkpoint = torch.load(path, weights_only=False)
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    random.setstate(checkpoint["rng"][0])
    np.random.set_state(checkpoint["rng"][1])
    torch.set_rng_state(checkpoint["rng"][2])
    return checkpoint["step"], checkpoint["state"]
"""

# unit 08: an evaluation with autograd on that runs 16 windows at a time whatever batch_size says,
# calling .item() at once: each batch's graph is freed before the next, so little memory shows
EVAL_16_AT_A_TIME = """
def evaluate(model, data, batch_size, context_length):
    C = context_length
    data = torch.as_tensor(data, dtype=torch.long)
    starts = list(range(0, len(data) - C, C))
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    for first in range(0, len(starts), 16):
        batch = starts[first:first + 16]
        x = torch.stack([data[i:i + C] for i in batch])
        y = torch.stack([data[i + 1:i + C + 1] for i in batch])
        total += cross_entropy(model(x), y).item() * y.numel()
        count += y.numel()
    model.train(was_training)
    return total / count
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


CHECKPOINT_PARTS = ("save_checkpoint", "load_checkpoint", "train_loop")


def checkpoint_points(save: str, load: str) -> tuple[float, dict]:
    """Unit 08's checkpoint parts and train_loop (whose resume reads the checkpoint), graded in one
    worker with these save_checkpoint and load_checkpoint: (the points, {check name: message})."""
    spec = UNITS["08_training"]
    student = Student(with_parts("08_training", {"save_checkpoint": save, "load_checkpoint": load}),
                      hidden=tuple(str(ROOT / h) for h in spec.hidden), imports=spec.worker_imports)
    with student:
        student.start()
        results = [r for part in CHECKPOINT_PARTS for r in grade_part(spec, part, student, name_mistakes=False)]
    return sum(r.points for r in results), {r.name: r.message for r in results if r.points}


@pytest.fixture(scope="module")
def checkpoint_without_the_trick():
    """What the checkpoint attacks below earn without their trick: a save that writes nothing."""
    points, _ = checkpoint_points(SAVE_NOTHING, LOAD_THE_FILE)
    return points


@pytest.mark.parametrize(("save", "load"), [(SAVE_IN_MEMORY, LOAD_IN_MEMORY), (SAVE_BESIDE, LOAD_BESIDE)],
                         ids=["kept_in_memory", "kept_beside_the_file"])
def test_a_checkpoint_kept_anywhere_but_its_file_earns_no_more_than_none(save, load, checkpoint_without_the_trick):
    points, passed = checkpoint_points(save, load)
    assert points <= checkpoint_without_the_trick, (points, checkpoint_without_the_trick, passed)


def test_an_evaluation_that_ignores_batch_size_loses_the_no_gradients_point_whatever_its_memory():
    evaluate = graded("08_training", "evaluate", EVAL_16_AT_A_TIME)
    assert evaluate["ragged"].passed  # the loss itself is right: only the batches are not
    assert not evaluate["no_gradients"].passed and "batch_size" in evaluate["no_gradients"].message, \
        evaluate["no_gradients"].message


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
