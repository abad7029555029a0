"""Unit 08, the runs: hidden checks and misconceptions for save_checkpoint, load_checkpoint, train_loop.

Everything runs on the CPU with the course's own GPT (`coursekit.gpt.GPT`, tiny: d_model 16, one
layer, context 16), built in the student's worker from a start the grader chose. The student's
functions run there; what crosses back is data (weights, numbers, draws), compared here.

- Checkpoints. The grader builds a model and an AdamW in the worker, takes two optimizer steps,
  seeds the three generators (Python's `random`, NumPy's global one, torch's) and calls the
  student's `save_checkpoint`, with a path in the worker's private scratch folder. Then it goes on
  in a new process, as a resumed job does: a fresh worker that has run the submission's cells again
  (`api.fresh_worker`), into whose scratch folder the grader copies that one file, read from
  outside the old sandbox (a plain file, at most 16 MB, never unpickled); nothing else the old
  worker held, in memory or in any other file, is there. In it the grader builds a fresh model from
  another seed and a fresh AdamW, moves every generator elsewhere and calls the student's
  `load_checkpoint` (and, for "loads twice", again into a third model). What comes back: the
  weights, one more optimizer step (AdamW's running averages and step count show in it), and the
  generators' next draws, which must be those drawn right after saving. A checkpoint can only be
  read by the code that wrote it (students choose its layout), so each facet is judged on the
  student's own pair, and hosted by one part: the weights, the optimizer state and "saving changes
  nothing" by `save_checkpoint`; the step, the state and the generators (which `load_checkpoint`
  restores itself) by `load_checkpoint`. Trusted code (the reference, a catalogued variant) runs in
  this process and writes to a real temporary folder; it keeps nothing between calls.
- `train_loop` trains from the grader's start with the grader's seed and settings; the trained
  weights cross as data and are compared with the reference's run from the same start (the
  schedule, clipping, AdamW's settings, the data order and the zero_grad order all show in
  them). The records it returns (train and held-out losses, best step) are compared with the
  reference's, and the held-out loss of the weights it leaves is measured here with the
  reference's `evaluate`. Early stopping and best-weights restoring run on held-out text unlike
  the training text (it gets worse as the model learns). Resuming: the student's run stopped at
  step 12 (`stop_after`), then resumed from its checkpoint in a fresh worker that gets that file
  alone (as above), in a model built from another seed, must equal the student's own straight
  run, bit for bit. While it is graded, `lr_at` is the
  reference's; `clip_grad_norm`, `cross_entropy` and `evaluate` stay the student's (they take the
  parameters or the model, or keep the autograd graph, which cannot cross to the grader).

The worker's generators and its AdamW are reached through `coursekit.training.process_modules`, a
course function the grader builds there (a trusted factory): the grader drives them by handle and
reads data back. Each new worker costs a start and the submission's cells again (about 3.4 s of CPU
for the reference, most of it importing torch): one for the round trip, one for the resume.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import math
import random
import shutil
import tempfile
import types
import weakref

import numpy as np
import torch

from ..engine.compare import Tolerance, describe
from ..engine.spec import OPTIMIZER_IMPORTS, Check, Inputs, Misconception, Part
from ..trust.sandbox import quiet
from ..trust.student import InProcessStudent, LocalHandle

MODEL = "coursekit.gpt.GPT"
TINY = dict(vocab_size=32, context_length=16, d_model=16, n_layers=1, n_heads=2, d_ff=None, tie_weights=True)
# The worker imports these before any timed call: an optimizer's first step imports torch._dynamo.
WORKER_IMPORTS = (*OPTIMIZER_IMPORTS, "numpy")
# Weights after a few AdamW steps, in the worker (one thread) against the reference here: the same
# operations, summed in other orders at most. Seen: 0 to 3e-7; a real mistake moves them by 1e-3 and more.
WEIGHTS = Tolerance(rtol=1e-4, atol=2e-5)
LOSSES = Tolerance(rtol=1e-4, atol=1e-5)
# The trained model's logits, against the reference's from the same start: correct loops written
# differently (another cross_entropy's rounding) agree to about 1e-5; a real mistake moves them by 0.05 and more.
LOGITS = Tolerance(rtol=1e-3, atol=1e-3)


# ---------------------------------------------------------------- what is graded


def graded_parts() -> tuple[Part, ...]:
    """The graded parts: each check, what it shows, and its points. What the checks use (their
    inputs, diagnoses and probes) and the catalogue of mistakes they name are below; this is
    called at the end of the module, once all of it is defined."""
    SAVE_CHECKS = (
        probe_check("optimizer", "saved, then loaded in a new process into a fresh model and a fresh AdamW: the next "
                    "optimizer step is the reference's (AdamW's state was saved)", 1.5, checkpoint_probe("optimizer")),
        # the round trip's generators, seen from this side too: a state never saved shows here as well as in
        # load_checkpoint's own check (the fresh set's 08/25 was told only there)
        probe_check("generators", "the same round trip: Python's, NumPy's and torch's generators draw again, after "
                    "loading, what they drew right after saving (their states were saved)", 0.5,
                    checkpoint_probe("generators")),
        probe_check("inputs_unchanged", "saving leaves the model and the three generators as they were", 1,
                    checkpoint_probe("saving_changes_nothing"), kind="unchanged"),
    )

    LOAD_CHECKS = (
        probe_check("step", f"returns the step saved ({STEP})", 0.5, checkpoint_probe("step")),
        probe_check("state", f"returns the state saved ({STATE})", 0.5, checkpoint_probe("state")),
        probe_check("weights",
                    "loaded into a fresh model built from another seed: the model holds the saved weights", 1,
                    checkpoint_probe("weights")),
        probe_check("generators", "Python's, NumPy's and torch's generators, moved after saving, draw again what they "
                    "drew right after saving", 1, checkpoint_probe("generators")),
        # the round trip's next optimizer step, seen from this side too: AdamW's state never loaded back shows
        # here as well as in save_checkpoint's own check (the fresh set's 08/29 was told only there)
        probe_check("optimizer", "loaded into a fresh model and a fresh AdamW: the next optimizer step is the "
                    "reference's (AdamW's state was loaded back)", 0.5, checkpoint_probe("optimizer")),
        probe_check("inputs_unchanged", "a second load of the same checkpoint gives the same again (the file is left "
                    "as it was)", 0.5, checkpoint_probe("loads_twice"), kind="unchanged"),
    )

    LOOP_CHECKS = (
        probe_check("recipe", f"{RECIPE['total_steps']} steps from the grader's start and seed (warm-up, cosine, "
                    "clipping at 0.5): the trained model predicts what the reference's does", 2, loop_probe("recipe")),
        probe_check("records", "that run's train_losses, heldout_losses (after steps 6, 12, 18, 24) and best_step", 1,
                    loop_probe("records")),
        probe_check("early_stopping", "held-out text that gets worse as the model learns, evaluations every 3 steps, "
                    "patience 2: the run stops where the reference's does", 1, loop_probe("stopping")),
        # the fresh set fresh29g's 08/31: a count of evaluations without a new best never reset kept full marks
        probe_check("patience_in_a_row", "a run whose held-out loss falls, rises twice, falls to new bests, then "
                    f"rises (lr {STREAK['max_lr']:g}, an evaluation every step, patience {STREAK['patience']}): it "
                    "stops after patience evaluations in a row without a new best, where the reference's does", 0.5,
                    loop_probe("streak")),
        probe_check("best_weights", "after early stopping, the model holds the best evaluation's weights", 1.5,
                    loop_probe("best_weights")),
        probe_check("resume", f"stopped after step {STOP_AT} and resumed from its checkpoint in a new process, in a "
                    "model built from another seed: the same losses, best step and weights, to the bit, as the run "
                    "that never stopped", 1.5, loop_probe("resume")),
        probe_check("inputs_unchanged", "train_ids, heldout_ids and the config are left as they were", 0.5,
                    loop_probe("inputs_unchanged"), kind="unchanged"),
    )

    return (
        Part("save_checkpoint", checks=SAVE_CHECKS, diagnose=diagnose, seconds=10.0),
        Part("load_checkpoint", checks=LOAD_CHECKS, diagnose=diagnose, seconds=10.0),
        # Every contract function train_loop calls is not the student's while it is graded, so that a
        # mistake there costs its own part's points once: lr_at is the reference's (called back, a
        # number each step); the others take the parameters or the model, or keep the autograd graph,
        # none of which can cross to the grader, so library code in the worker stands in for them
        # (trust/worker/stand_ins.py, the reference's arithmetic to the bit).
        Part("train_loop", checks=LOOP_CHECKS, diagnose=diagnose, uses=("lr_at",), library_stubs=RECIPE_STAND_INS,
             seconds=20.0),
    )


RECIPE_STAND_INS = tuple((name, f"autograder.trust.worker.stand_ins.{name}") for name in
                         ("cross_entropy", "clip_grad_norm", "evaluate", "save_checkpoint", "load_checkpoint"))


# ---------------------------------------------------------------- driving objects in the worker


class Ops:
    """Objects in the worker (the student's) or in this process (the reference, a variant), driven
    the same way. Trusted code gets the real modules; a worker's come from `process_modules`."""

    def __init__(self, api):
        self.api = api
        student = getattr(api, "student", None)
        self.wrap = isinstance(student, InProcessStudent)  # trusted code behind the student interface
        self.local = api.trusted or self.wrap
        self._modules: dict = {}
        self._process = None

    # objects handed to the api: a LocalHandle where InProcessStudent expects one
    def arg(self, obj):
        if self.wrap and not isinstance(obj, LocalHandle) and not isinstance(obj, str | int | float | dict | list):
            return LocalHandle(self.api.student, obj)
        return obj

    def raw(self, obj):
        return obj.obj if isinstance(obj, LocalHandle) else obj

    def module(self, name: str):
        """"random", "numpy.random" or "torch", in the process the api runs code in."""
        if name in self._modules:
            return self._modules[name]
        if self.local:
            import importlib

            found = importlib.import_module(name)
        else:
            if self._process is None:
                self._process = self.api.given("coursekit.training.process_modules")
            found = self.api.attr(self._process, name)
        self._modules[name] = found
        return found

    def method(self, obj, name, *args, keep=False):
        if self.local:
            return getattr(self.raw(obj), name)(*[self.raw(a) for a in args])
        return self.api.method(obj, name, *args, keep=keep)

    def build(self, cls, *args):
        if self.local:
            return cls(*[self.raw(a) for a in args])
        return self.api.forward(cls, *args, keep=True)

    def attr(self, obj, name):
        if self.local:
            for part in name.split("."):
                obj = getattr(self.raw(obj), part)
            return obj
        return self.api.attr(obj, name)

    def call(self, name, *args, **kwargs):
        """The function being graded (or another contract function), as the api runs it."""
        return self.api.call(name, *[self.arg(a) for a in args], **kwargs)

    def fresh_process(self, folder: str, *names: str) -> tuple[str, dict]:
        """Go on in a new process, as a job resumed after a restart does, with the files `names` of
        `folder` and nothing else: for a student, a fresh worker that has run the submission's cells
        again (`api.fresh_worker`: the handles from before, the cached ones here among them, are
        void); for trusted code, this process and the same folder. Returns (the folder in the new
        process, {name: why that file stayed behind})."""
        left = self.api.fresh_worker(*names)
        self._modules, self._process = {}, None
        return (folder if self.local else self.api.scratch_folder()), left

    # the course's model and an AdamW, in the worker
    def model(self, seed: int):
        config = self.api.record(**TINY)
        model = self.api.given(MODEL, config)
        self.api.method(model, "load_state_dict", initial_state(seed))
        return self.raw(model) if self.local else model

    def adamw(self, model):
        torch_ = self.module("torch")
        params = self.method(model, "parameters", keep=True)
        # eps 1e-4, not 1e-8: a gradient that is rounding noise (the key projection's bias, to which
        # the softmax is blind) would otherwise take steps of lr in whatever direction the noise says
        return self.build(self.attr(torch_, "optim.AdamW"), params, 1e-2, (0.9, 0.95), 1e-4, 0.1)

    def weights(self, model) -> dict:
        state = self.method(model, "state_dict")
        if not isinstance(state, dict):
            return {}
        return {k: v.detach().clone() if isinstance(v, torch.Tensor) else v for k, v in state.items()}

    def train_step(self, model, optimizer, seed: int):
        """One step on a fixed batch: forward and backward in the worker, then optimizer.step()."""
        x, upstream = batch(seed)
        if self.local:
            self.raw(model)(x).backward(upstream)
        else:
            self.api.forward(model, x, backward=upstream)
        self.method(optimizer, "step")
        self.method(optimizer, "zero_grad")

    # the three generators
    def generators(self):
        return {"python": self.module("random"), "numpy": self.module("numpy.random"), "torch": self.module("torch")}

    def seed(self, gens, base: int):
        self.method(gens["python"], "seed", base)
        self.method(gens["numpy"], "seed", base + 1)
        self.method(gens["torch"], "manual_seed", base + 2)

    def draws(self, gens) -> dict:
        out = {"python": [self.method(gens["python"], "random") for _ in range(2)],
               "numpy": self.method(gens["numpy"], "rand", 2),
               "torch": self.method(gens["torch"], "rand", 2)}
        return {k: [float(x) for x in np.asarray(_plain(v), dtype=float).ravel()] if _numbers(_plain(v)) else None
                for k, v in out.items()}


def _numbers(value) -> bool:
    try:
        np.asarray(value, dtype=float)
        return not isinstance(value, bool)
    except (TypeError, ValueError):
        return False


@functools.cache
def _initial_state(seed: int) -> dict:
    from coursekit.gpt import GPT

    with _own_generators():
        torch.manual_seed(seed)
        return GPT(types.SimpleNamespace(**TINY)).state_dict()


def initial_state(seed: int) -> dict:
    """The course GPT's own initialisation, drawn from `seed` (kept: the same every time)."""
    return {k: v.clone() for k, v in _initial_state(seed).items()}


def batch(seed: int):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(TINY["vocab_size"], (2, TINY["context_length"]), generator=g)
    upstream = torch.randn(2, TINY["context_length"], TINY["vocab_size"], generator=g)
    return x, upstream


@contextlib.contextmanager
def _own_generators():
    """Trusted runs seed this process's generators: put them back after, for whatever runs next."""
    saved = random.getstate(), np.random.get_state(), torch.get_rng_state()
    try:
        yield
    finally:
        random.setstate(saved[0])
        np.random.set_state(saved[1])
        torch.set_rng_state(saved[2])


@contextlib.contextmanager
def _folder(ops: Ops):
    """Where checkpoints go: a temporary folder here for trusted code; the worker's private scratch
    folder for a student's (a path the grader names in full, whatever folder the student's code
    moved to: the file is carried to the next worker from there)."""
    if ops.local:
        folder = tempfile.mkdtemp(prefix="grader-ckpt-")
        try:
            yield folder + "/"
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    else:
        yield ops.api.scratch_folder()


def _not_carried(err: Exception, left: dict, name: str, writer: str) -> Exception:
    """A student's load that failed in the new worker, told why its file may not have been there."""
    outcome = getattr(err, "outcome", None)
    if name in left and outcome is not None and outcome.error:
        outcome.error = (f"{outcome.error} (the grader loads the checkpoint in a new process, as a resumed run "
                         f"would, and only the file {writer} wrote at the path it was given goes there; that "
                         f"file did not: {left[name]})")
    return err


_SEEN: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # owner -> {run name: what it gave}


_TRUSTED_RUNS: dict = {}  # (the reference's or a variant's train_loop, run name) -> what it gave


def _trusted_key(fn):
    """The course's own function behind a namespace entry: the reference's, or the catalogued variant
    that catalogue.variant_namespace wraps in a fresh lambda each time (found in its closure). Both live
    as long as the process, so their runs (the same every time) are kept."""
    cells = getattr(fn, "__closure__", None) or ()
    inner = tuple(id(c.cell_contents) for c in cells)
    return (id(fn),) if not inner else inner


def once(api, name: str, compute):
    """The checks of a part that look at the same run share it: one run per submission, one per
    trusted train_loop (the reference, a catalogued variant) for the life of the process."""
    if api.trusted:
        key = (_trusted_key(api.namespace.get("train_loop")), name)
        if key not in _TRUSTED_RUNS:
            _TRUSTED_RUNS[key] = compute()
        return _TRUSTED_RUNS[key]
    runs = _SEEN.setdefault(api.student, {})
    if name not in runs:
        runs[name] = compute()
    return runs[name]


# ---------------------------------------------------------------- checkpoints

STATE = {"best_loss": 1.5, "history": [3.0, 2.5]}
STEP = 7


CHECKPOINT = "grader_checkpoint.pt"


def round_trip(api, inputs: Inputs) -> dict:
    """Save from one model and optimizer, load into fresh ones in a new process; see the module docstring."""
    ops = Ops(api)
    with _own_generators(), _folder(ops) as folder:
        model = ops.model(11)
        gens = ops.generators()
        optimizer = ops.adamw(model)
        ops.train_step(model, optimizer, 1)
        ops.train_step(model, optimizer, 2)
        ops.seed(gens, 20)
        # moved on from the seed: a state read back as a seed (np.random.seed(state[1][0]), the first
        # word of NumPy's key, which is the seed right after seeding) would then draw elsewhere
        ops.draws(gens)
        ops.call("save_checkpoint", folder + CHECKPOINT, model, optimizer, STEP, **copy.deepcopy(STATE))
        saved = ops.weights(model)
        drawn = ops.draws(gens)  # right after saving: what a resumed run must draw next

        # A new process, as a resumed run is (the file alone goes there), with another model, a new
        # optimizer, and generators elsewhere.
        folder, left = ops.fresh_process(folder, CHECKPOINT)
        path = folder + CHECKPOINT
        gens = ops.generators()
        fresh = ops.model(12)
        fresh_optimizer = ops.adamw(fresh)
        ops.seed(gens, 30)
        try:
            returned = ops.call("load_checkpoint", path, fresh, fresh_optimizer)
        except Exception as err:  # noqa: BLE001 - load_checkpoint's own checks report it; save's say so
            return {"saved": saved, "drawn": drawn,
                    "load_failed": _not_carried(err, left, CHECKPOINT, "save_checkpoint")}
        loaded = ops.weights(fresh)
        redrawn = ops.draws(gens)
        ops.train_step(fresh, fresh_optimizer, 3)
        stepped = ops.weights(fresh)

        again = ops.model(13)  # loading a second time gives the same: loading leaves the file alone
        again_optimizer = ops.adamw(again)
        ops.seed(gens, 40)
        try:
            returned_again = ops.call("load_checkpoint", path, again, again_optimizer)
            loaded_again, redrawn_again = ops.weights(again), ops.draws(gens)
        except Exception:  # noqa: BLE001 - the student's ProbeFailed, or a variant's own error
            returned_again = loaded_again = redrawn_again = None
        ops.seed(gens, GENUINE_SEED)  # are they the real generators? (see `genuine_draws`)
        seeded = ops.draws(gens)
    return {"saved": saved, "drawn": drawn, "returned": returned, "loaded": loaded, "redrawn": redrawn,
            "stepped": stepped, "returned_again": returned_again, "loaded_again": loaded_again,
            "redrawn_again": redrawn_again, "seeded": seeded}


GENUINE_SEED = 50


@functools.cache
def genuine_draws() -> dict:
    """What Python's, NumPy's and torch's generators draw after `Ops.seed(..., GENUINE_SEED)`, drawn
    here. The worker's draws are compared with these: code that replaces a generator's functions
    (by a constant, say) would otherwise make "draws again what it drew after saving" hold
    whatever load_checkpoint does."""
    ops = Ops(types.SimpleNamespace(trusted=True))
    with _own_generators():
        gens = ops.generators()
        ops.seed(gens, GENUINE_SEED)
        return ops.draws(gens)


_REFERENCE_ROUND_TRIP: dict = {}


def checkpoint_probe(view: str):
    def probe(api, inputs: Inputs):
        run = _round_trip_of(api, inputs)
        if "load_failed" in run and view != "saving_changes_nothing":
            if view != "optimizer":
                raise run["load_failed"]  # load_checkpoint's own failure, reported as such
            return {"view": view, "load_failed": _failure_text(run["load_failed"])}
        return checkpoint_view(view, run)

    return probe


def _failure_text(err) -> str:
    outcome = getattr(err, "outcome", None)
    return str(outcome.error if outcome is not None else f"{type(err).__name__}: {err}")


def _round_trip_of(api, inputs: Inputs) -> dict:
    """One round trip per submission (its checks share it), one for the reference."""
    if not api.trusted:
        return once(api, "checkpoint", lambda: round_trip(api, inputs))
    if _is_reference(api.namespace):  # the same every time: kept
        if "run" not in _REFERENCE_ROUND_TRIP:
            _REFERENCE_ROUND_TRIP["run"] = round_trip(api, inputs)
        return _REFERENCE_ROUND_TRIP["run"]
    return round_trip(api, inputs)  # a catalogued variant of one of the two functions: its own run


def _is_reference(namespace: dict) -> bool:
    from ..engine.reference import load_reference

    ref = load_reference("08_training")
    return namespace.get("save_checkpoint") is ref.save_checkpoint and namespace.get("load_checkpoint") is \
        ref.load_checkpoint


def _same_weights(a, b, exact=False) -> bool:
    if not isinstance(a, dict) or not isinstance(b, dict) or set(a) != set(b):
        return False
    for key in a:
        x, y = a[key], b[key]
        if not isinstance(x, torch.Tensor) or not isinstance(y, torch.Tensor) or x.shape != y.shape:
            return False
        if exact and not torch.equal(x, y):
            return False
        if not exact and not torch.allclose(x.double(), y.double(), rtol=WEIGHTS.rtol, atol=WEIGHTS.atol):
            return False
    return True


def _largest_difference(a: dict, b: dict) -> float:
    try:
        return max(float((a[k].double() - b[k].double()).abs().max()) for k in b)
    except Exception:  # noqa: BLE001 - shapes or keys that do not match
        return math.inf


def checkpoint_view(view: str, run: dict) -> dict:
    """What one check looks at, as data that a catalogued variant's run can match."""
    if view == "weights":
        return {"view": view, "restored": _same_weights(run["loaded"], run["saved"], exact=True)}
    if view == "optimizer":
        return {"view": view, "stepped": run["stepped"]}
    if view == "saving_changes_nothing":
        return {"view": view, "saved": run["saved"], "drawn": run["drawn"]}
    if view in ("step", "state"):
        returned = run["returned"]
        pair = isinstance(returned, tuple | list) and len(returned) == 2
        if view == "step":
            return {"view": view, "pair": pair, "value": returned[0] if pair else None}
        state = returned[1] if pair else None
        # the keys, and whether it is the state saved: the values of a wrong one (a whole checkpoint) are noise
        return {"view": view, "pair": pair, "same": pair and _plain(state) == _plain(STATE),
                "keys": sorted(map(str, state)) if isinstance(state, dict) else describe(state)}
    if view == "generators":
        drawn, redrawn = run["drawn"], run["redrawn"]
        return {"view": view, "restored": {k: drawn[k] is not None and redrawn[k] == drawn[k] for k in drawn},
                "genuine": run["seeded"] == genuine_draws()}
    # "loads_twice": the second load restores what the first restored (a mistake the other checks see,
    # such as generators never restored, is not counted again here)
    def restored(weights, draws):
        return _same_weights(weights, run["saved"], exact=True), draws == run["drawn"]

    same = (restored(run["loaded_again"], run["redrawn_again"]) == restored(run["loaded"], run["redrawn"])
            and _plain(run["returned_again"]) == _plain(run["returned"]))
    return {"view": view, "same": same}


def _plain(value):
    """Returned values compared as plain Python data (tensors as lists)."""
    if isinstance(value, torch.Tensor):
        return value.tolist()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


GENERATOR_NAMES = {"python": "Python's `random`", "numpy": "NumPy's global generator", "torch": "torch's generator"}


def diagnose_checkpoint(result, expected) -> str | None:
    view = expected["view"]
    if not isinstance(result, dict) or result.get("view") != view:
        return f"could not follow the save and load ({describe(result)})"
    if view == "weights":
        if result["restored"] != expected["restored"]:
            return ("after save_checkpoint and then load_checkpoint into a fresh model (built from another seed), "
                    "the model does not hold the saved weights: save model.state_dict() and load it with "
                    "model.load_state_dict(...)")
        return None
    if view == "optimizer":
        if "load_failed" in result:
            return (f"could not be judged: a checkpoint is read back by your load_checkpoint, which raised "
                    f"{result['load_failed']}")
        if not _same_weights(result["stepped"], expected["stepped"]):
            return (f"after loading into a fresh model and a fresh AdamW, the next optimizer step differs from the "
                    f"reference's by up to {_largest_difference(result['stepped'], expected['stepped']):.3g}: "
                    "AdamW's state (its running averages exp_avg, exp_avg_sq and its step count) must be saved "
                    "(optimizer.state_dict()) and loaded back (optimizer.load_state_dict(...)), or the resumed run "
                    "takes differently sized steps")
        return None
    if view == "saving_changes_nothing":
        if not _same_weights(result["saved"], expected["saved"]):
            return "saving changed the model's weights: save_checkpoint should only write, never modify"
        if result["drawn"] != expected["drawn"]:
            moved = [GENERATOR_NAMES[k] for k in expected["drawn"] if result["drawn"].get(k) != expected["drawn"][k]]
            return (f"saving moved {', '.join(moved)}: the draws after save_checkpoint are not those a run that did "
                    "not save would make. Read the states (random.getstate(), np.random.get_state(), "
                    "torch.get_rng_state()): do not seed or draw while saving")
        return None
    if view in ("step", "state"):
        if not result["pair"]:
            return "load_checkpoint should return a pair (step, state)"
        if view == "step" and _plain(result["value"]) != expected["value"]:
            return (f"load_checkpoint returned step {_short(result['value'])}, but {expected['value']} was saved: "
                    "return the step given to save_checkpoint, unchanged")
        if view == "state" and (result["same"], result["keys"]) != (expected["same"], expected["keys"]):
            return (f"load_checkpoint returned a state with keys {_short(result['keys'])}, but save_checkpoint was "
                    f"given {_short(STATE)}: return exactly the keyword arguments that were saved, as a dict")
        return None
    if view == "generators":
        if not result["genuine"]:
            return ("seeded with known seeds, Python's, NumPy's and torch's generators in your code's process do "
                    "not draw what those generators draw: something replaced them (random.random, np.random.rand "
                    "or torch.rand), so whether load_checkpoint restores them cannot be seen")
        lost = [GENERATOR_NAMES[k] for k, ok in result["restored"].items() if not ok]
        if lost:
            return (f"after load_checkpoint, {', '.join(lost)} did not draw what it drew right after saving: "
                    "save every generator's state and restore it in load_checkpoint (random.setstate, "
                    "np.random.set_state, torch.set_rng_state), or the resumed run trains on other batches")
        return None
    if not result["same"]:
        return ("loading the same checkpoint a second time gave something else: load_checkpoint must leave the "
                "file as it is")
    return None


def _short(value) -> str:
    text = repr(_plain(value))
    return text if len(text) <= 80 else text[:77] + "..."


# ---------------------------------------------------------------- train_loop

RECIPE = dict(total_steps=24, batch_size=4, context_length=16, max_lr=1e-2, min_lr=1e-3, warmup_steps=4,
              weight_decay=0.1, grad_clip=0.5, eval_every=6, patience=10, seed=3, checkpoint_path=None,
              checkpoint_every=0, resume_from=None, stop_after=None)
# Held-out text unlike the training text gets worse as the model learns: early stopping after
# `patience` evaluations without a new best, and the best weights restored.
STOPPING = {**RECIPE, "total_steps": 30, "eval_every": 3, "patience": 2, "seed": 4}
# Held-out losses that go up and down (a large lr, an evaluation every step): a new best after two
# evaluations without one, then three in a row without one (the reference's losses: 4.14, 4.70,
# 5.16, 4.09, 3.60, 3.70, 3.95, 4.12; each comparison apart by 0.05 at least). A count never reset
# at a new best stops two evaluations early.
STREAK = {**RECIPE, "total_steps": 30, "eval_every": 1, "patience": 3, "max_lr": 0.3, "min_lr": 0.03,
          "warmup_steps": 0, "batch_size": 2, "seed": 4}
STOP_AT = 12  # the interrupted run: checkpoints every 6 steps, stopped after step 12, resumed


def chain(seed: int, length: int, multiplier: int, offset: int, keep: float = 0.85) -> torch.Tensor:
    """Token ids where each id is followed by (multiplier * id + offset) % V most of the time."""
    rng = np.random.default_rng(seed)
    V = TINY["vocab_size"]
    ids = [int(rng.integers(V))]
    for _ in range(length - 1):
        ids.append((multiplier * ids[-1] + offset) % V if rng.random() < keep else int(rng.integers(V)))
    return torch.tensor(ids, dtype=torch.long)


@functools.cache
def corpus(kind: str) -> tuple[torch.Tensor, torch.Tensor]:
    train = chain(1, 3000, 5, 3)
    heldout = chain(2, 16 * 8 + 1, 5, 3) if kind == "like" else chain(3, 16 * 8 + 1, 7, 11)
    return train, heldout


def run_loop(api, config: dict, data: str, model_seed: int = 21, check_inputs: bool = False) -> dict:
    """The student's (or trusted) train_loop from the grader's start; the weights it leaves, and what it returned."""
    ops = Ops(api)
    train, heldout = corpus(data)
    with _own_generators():
        model = ops.model(model_seed)
        # the global generator as a fresh process has it: a loop that forgets to seed draws from here
        ops.method(ops.module("torch"), "manual_seed", 1234)
        record = api.record(**config)
        given = (train.clone(), heldout.clone())
        if check_inputs:  # held in the worker, read back after the run
            torch_ = ops.module("torch")
            given = tuple(ops.build(ops.attr(torch_, "clone"), t) for t in (train, heldout))
        result = ops.call("train_loop", model, *given, ops.raw(record) if ops.local else record)
        out = {"result": _records(result), "weights": ops.weights(model)}
        if check_inputs:
            after = [ops.method(t, "tolist") for t in given]
            out["inputs_changed"] = [name for name, t, a in zip(("train_ids", "heldout_ids"), (train, heldout), after,
                                                                strict=True) if a != t.tolist()]
            fields = ops.attr(ops.arg(record) if not ops.local else record, "__dict__")
            if isinstance(fields, dict):
                out["inputs_changed"] += [f"config.{k}" for k in config if fields.get(k, None) != config[k]]
    return out


RUN_CHECKPOINT = "grader_run.pt"


def run_resumed(api) -> dict:
    """Stopped after step STOP_AT with checkpoints every 6 steps, then resumed in a new process (the
    checkpoint file alone goes there), in a model built from another seed."""
    ops = Ops(api)
    with _folder(ops) as folder:
        first = run_loop(api, {**RECIPE, "checkpoint_path": folder + RUN_CHECKPOINT, "checkpoint_every": 6,
                               "stop_after": STOP_AT}, "like")
        folder, left = ops.fresh_process(folder, RUN_CHECKPOINT)
        try:
            second = run_loop(api, {**RECIPE, "resume_from": folder + RUN_CHECKPOINT}, "like", model_seed=22,
                              check_inputs=True)
        except Exception as err:  # the student's ProbeFailed, or a variant's own error: told why, and raised
            _not_carried(err, left, RUN_CHECKPOINT, "the stopped run")
            raise
    return {"first": first, "second": second}


def _records(result) -> dict:
    if not isinstance(result, dict):
        return {"what": describe(result)}
    out = {}
    for key in ("train_losses", "heldout_losses"):
        value = result.get(key)
        out[key] = [float(x) for x in value] if isinstance(value, list | tuple) and all(
            isinstance(x, int | float) and not isinstance(x, bool) for x in value) else None
    best = result.get("best_step")
    out["best_step"] = int(best) if isinstance(best, int | np.integer) and not isinstance(best, bool) else None
    return out


def loop_probe(view: str):
    def probe(api, inputs: Inputs):
        if view in ("recipe", "records", "inputs_unchanged"):
            run = once(api, "recipe", lambda: run_loop(api, RECIPE, "like", check_inputs=True))
        elif view in ("stopping", "best_weights"):
            run = once(api, "stopping", lambda: run_loop(api, STOPPING, "unlike"))
        elif view == "streak":
            return {"view": view, **once(api, "streak", lambda: run_loop(api, STREAK, "like"))["result"]}
        else:
            straight = once(api, "recipe", lambda: run_loop(api, RECIPE, "like", check_inputs=True))
            resumed = once(api, "resumed", lambda: run_resumed(api))
            return resume_view(straight, resumed)
        if view == "recipe":  # (the losses only word the message: see _recipe_part)
            return {"view": view, "logits": predictions(run["weights"]), "losses": run["result"].get("train_losses")}
        if view in ("records", "stopping"):
            return {"view": view, **run["result"]}
        if view == "best_weights":
            return {"view": view, "logits": predictions(run["weights"]),
                    "measured": heldout_loss(run["weights"], "unlike"),
                    "reported": reported_best(run["result"], STOPPING["eval_every"])}
        # the straight run's inputs, and the resumed run's (its config names a checkpoint)
        try:
            resumed = once(api, "resumed", lambda: run_resumed(api))["second"]
        except Exception:  # noqa: BLE001 - a resume that fails costs the resume check, not this one
            resumed = {}
        ran = run["result"].get("train_losses")
        changed = run.get("inputs_changed", []) + [f"{name} (resuming)" for name in resumed.get("inputs_changed", [])
                                                   if name not in run.get("inputs_changed", [])]
        return {"view": view, "changed": changed, "ran": ran is not None and len(ran) > 0}

    return probe


def reported_best(result: dict, every: int):
    losses, best = result.get("heldout_losses"), result.get("best_step")
    if not losses or not isinstance(best, int) or best % every or not 1 <= best // every <= len(losses):
        return None
    return losses[best // every - 1]


def trained_model(weights: dict):
    """The course's GPT with these weights, here (None where they do not fit it)."""
    from coursekit.gpt import GPT

    try:
        model = GPT(types.SimpleNamespace(**TINY))
        model.load_state_dict(weights)
    except Exception:  # noqa: BLE001 - weights the course's GPT cannot take
        return None
    return model.eval()


def predictions(weights: dict):
    """The trained model's logits on fixed held-out windows, computed here. Compared rather than the
    weights: the key projection's bias does not change any output (the softmax is blind to it), its
    gradient is rounding noise, and AdamW turns that noise into steps of lr either way."""
    model = trained_model(weights)
    if model is None:
        return None
    with torch.no_grad():
        return model(corpus("like")[1][:-1].view(-1, TINY["context_length"]))


def heldout_loss(weights: dict, data: str) -> float | None:
    """The grader's own measurement: the reference's `evaluate` on the held-out ids, with these weights."""
    from ..engine.reference import load_reference

    model = trained_model(weights)
    if model is None:
        return None
    with quiet():
        return float(load_reference("08_training").evaluate(model, corpus(data)[1], RECIPE["batch_size"],
                                                            RECIPE["context_length"]))


def resume_view(straight: dict, resumed: dict) -> dict:
    """What differs between the straight run and the stopped-and-resumed one (both the same code's)."""
    a, b = straight, resumed["second"]
    differs = [key for key in ("train_losses", "heldout_losses", "best_step")
               if a["result"].get(key) != b["result"].get(key)]
    if not _same_weights(a["weights"], b["weights"], exact=True):
        differs.append("weights")
    ours, theirs = a["result"].get("train_losses") or [], b["result"].get("train_losses") or []
    first = next((i for i, (x, y) in enumerate(zip(ours, theirs, strict=False)) if x != y), min(len(ours), len(theirs)))
    return {"view": "resume", "differs": differs, "first": first if differs else None,
            "lengths": [len(ours), len(theirs)]}


def _close(a, b, tol: Tolerance) -> bool:
    if a is None or b is None or len(a) != len(b):
        return a == b
    return bool(np.allclose(a, b, rtol=tol.rtol, atol=tol.atol))


def _steps(losses) -> str:
    return "none" if losses is None else f"{len(losses)}"


def _stops_after(held: list[float], patience: int, reset: bool = True) -> int:
    """After how many of these evaluations a loop with this patience stops (len(held): it never does)."""
    best, misses = math.inf, 0
    for at, loss in enumerate(held, 1):
        if loss < best:
            best, misses = loss, (0 if reset else misses)
        else:
            misses += 1
        if misses >= patience:
            return at
    return len(held)


def diagnose_streak(result, expected) -> str | None:
    steps, want = result.get("train_losses"), expected["train_losses"]
    want_held = expected["heldout_losses"]
    if steps is not None and len(steps) == len(want):
        return None
    setting = (f"with an evaluation every step and patience {STREAK['patience']}, on held-out losses that fall, rise "
               "and fall again")
    patience = STREAK["patience"]
    nth = {1: "first", 2: "second", 3: "third"}.get(patience, f"{patience}th")
    total = _stops_after(want_held, patience, reset=False)
    if steps is not None and len(steps) == total * STREAK["eval_every"] and total < len(want_held):
        shown = ", ".join(f"{x:.2f}" for x in want_held)
        return (f"{setting}, the run took {len(steps)} steps; the reference's held-out losses are {shown} and it "
                f"stops after {len(want)}, at the {nth} evaluation in a row without a new best. Yours stopped "
                f"at the {nth} evaluation without a new best counted since the start, though new bests came "
                "in between: set the count of evaluations without a new best back to 0 at each new best, and stop "
                "after `patience` in a row")
    return (f"{setting}, the run took {_steps(steps)} steps; the reference stops after {len(want)}: stop after "
            "`patience` evaluations in a row without a new best (the count starts again at each new best)")


def diagnose_loop(result, expected) -> str | None:
    view = expected["view"]
    if not isinstance(result, dict) or result.get("view") != view:
        return f"could not follow the run ({describe(result)})"
    if view in ("recipe", "best_weights"):
        got, want = result["logits"], expected["logits"]
        if got is None or not torch.allclose(got, want, rtol=LOGITS.rtol, atol=LOGITS.atol):
            gap = "unreadable weights" if got is None else f"{float((got - want).abs().max()):.3g}"
            if view == "recipe" and (alone := _recipe_part(got, result.get("losses"))) is not None:
                return (f"after {RECIPE['total_steps']} steps from the grader's start and seed, the model's "
                        f"predictions differ from the reference's by up to {gap}; the run is the recipe's with one "
                        f"part of it changed ({alone[2]}): {alone[0]}. {alone[1].rstrip('.')}")
            if view == "recipe":
                return (f"after {RECIPE['total_steps']} steps from the grader's start and seed, the model's "
                        f"predictions differ from the reference's by up to {gap}: follow the notebook's recipe "
                        "exactly (seed all three "
                        "generators; AdamW with betas (0.9, 0.95) and weight_decay=config.weight_decay; each step's "
                        "lr from lr_at(step, ...); the batch "
                        "from torch.randint(len(train_ids) - C, (B,)); zero_grad, backward, clip_grad_norm, "
                        "step, in that order)")
            return (f"the weights left in the model after early stopping predict differently from the "
                    f"reference's (by up to {gap}; their held-out loss, measured by the grader: "
                    f"{_fmt(result['measured'])}; the best "
                    f"evaluation's: {_fmt(expected['measured'])}): at the end, load the weights of the best evaluation "
                    "back into the model (a copy taken when it was made: copy.deepcopy(model.state_dict()))")
        # (against a catalogued variant, whose own report may not fit its weights, only the predictions count)
        if view == "best_weights" and _consistent(expected) and not _consistent(result):
            return (f"the held-out loss the grader measures on the weights left in the model "
                    f"({_fmt(result['measured'])}) is not the one reported for best_step ({_fmt(result['reported'])}): "
                    "best_step is the 1-based step of the best evaluation, whose weights the model holds at the end")
        return None
    if view == "streak":
        return diagnose_streak(result, expected)
    if view in ("records", "stopping"):
        steps, want = result.get("train_losses"), expected["train_losses"]
        held, want_held = result.get("heldout_losses"), expected["heldout_losses"]
        if view == "stopping" and (steps is None or len(steps) != len(want)) and held and len(held) >= 3 and all(
                b < a for a, b in zip(held, held[1:], strict=False)) and want_held and len(want_held) >= 2 and \
                want_held[-1] > min(want_held):
            return (f"on held-out text that gets worse as the model learns (evaluations every "
                    f"{STOPPING['eval_every']} steps, patience {STOPPING['patience']}), the run took {_steps(steps)} "
                    f"steps; the reference stops after {len(want)}. The held-out losses it recorded fall at every "
                    f"evaluation ({_rounded(held[:4])}...), as only the training text's do; the reference's rise "
                    f"({_rounded(want_held)}): evaluate on heldout_ids (evaluate(model, heldout_ids, ...)), never on "
                    "train_ids")
        if view == "stopping" and (steps is None or len(steps) != len(want)):
            return (f"on held-out text that gets worse as the model learns (evaluations every {STOPPING['eval_every']} "
                    f"steps, patience {STOPPING['patience']}), the run took {_steps(steps)} steps; the reference stops "
                    f"after {len(want)}: stop after `patience` evaluations in a row without a new best")
        if not _close(steps, want, LOSSES):
            return (f"train_losses ({_steps(steps)} values) are not the losses of the steps the reference takes from "
                    f"the same start ({len(want)} values): record loss.item() of each step's batch")
        if not _close(held, want_held, LOSSES):
            return (f"heldout_losses are {_rounded(held)}, the reference's {_rounded(want_held)}: evaluate on the "
                    f"held-out ids after steps eval_every, 2 * eval_every, ... (counting steps from 1)")
        if result.get("best_step") != expected["best_step"]:
            return (f"best_step is {result.get('best_step')}, the reference's {expected['best_step']}: the 1-based "
                    "step of the evaluation with the lowest held-out loss")
        return None
    if view == "resume":
        straight_steps, resumed_steps = result["lengths"]
        if result["differs"] and abs(resumed_steps - straight_steps) == 1 and straight_steps > STOP_AT:
            again = resumed_steps > straight_steps
            return (f"a run stopped after step {STOP_AT} (stop_after, checkpoints every 6 steps) and resumed from "
                    f"its checkpoint in a new process returned {resumed_steps} train_losses, where the run that never "
                    f"stopped returned {straight_steps}: the resumed loop "
                    + (f"takes step {STOP_AT} again, though the checkpoint was saved after it: the step saved is one "
                       "short (the 0-based index of the last step done)" if again else
                       f"skips step {STOP_AT + 1}, the first step the stopped run had not taken: the step saved is one "
                       "too many")
                    + ". Save the number of steps done (done = step + 1) and start the resumed loop from the step "
                    "loaded: for step in range(step_loaded, total_steps)")
        if result["differs"] and 0 < resumed_steps == straight_steps - STOP_AT:
            return (f"a run stopped after step {STOP_AT} (stop_after, checkpoints every 6 steps) and resumed from "
                    f"its checkpoint in a new process returned {resumed_steps} train_losses, where the run that never "
                    f"stopped returned {straight_steps}: the losses of the first {STOP_AT} steps are missing. The "
                    "history is not restored: save train_losses and heldout_losses in the checkpoint and put them back "
                    "from the state load_checkpoint returns, then append to them")
        if result["differs"]:
            where = (f" (train_losses first differ at step {result['first'] + 1})" if result["first"] is not None
                     and result["first"] < min(result["lengths"]) else "")
            return (f"a run stopped after step {STOP_AT} (stop_after, checkpoints every 6 steps) and resumed from its "
                    f"checkpoint in a new process, in a model built from another seed, differs from the run that never "
                    f"stopped in {', '.join(result['differs'])}{where}: load the checkpoint first, do not seed again "
                    "when resuming, and keep the loop's whole state (losses, best loss, best weights, evaluations "
                    "since the best) in the checkpoint file: nothing else of the stopped process is there")
        return None
    if not result["ran"]:
        return "could not be judged: the run returned no train_losses"
    if result["changed"]:
        return f"train_loop changed its inputs: {', '.join(result['changed'])}"
    return None


# The parts of the recipe whose change alone shows in the trained model's predictions: a recipe run
# with each (the catalogued mistake's variant, trusted) says which part an answer's run departs in,
# even where another slip elsewhere (in its evaluations, say) keeps the mistake from being named.
RECIPE_PARTS = ("train_default_betas", "train_no_weight_decay", "train_default_weight_decay", "train_no_clipping",
                "train_constant_lr", "train_lr_from_one", "train_zero_grad_before_step")


@functools.cache
def _recipe_runs() -> tuple:
    """(description, hint, the trained model's logits, its train_losses) of the recipe run with each
    of RECIPE_PARTS."""
    from ..engine.probes import probe_trusted
    from ..engine.reference import load_reference

    ref, runs = load_reference("08_training"), []
    for mistake in (m for m in MISCONCEPTIONS if m.name in RECIPE_PARTS):
        variant = mistake.variants["train_loop"]
        namespace = {**vars(ref), "train_loop": _in_place(ref, variant)}
        with quiet():
            got = probe_trusted(loop_probe("recipe"), namespace, Inputs((), {})).value
        if isinstance(got, dict) and isinstance(got.get("logits"), torch.Tensor):
            runs.append((mistake.description, mistake.hint, got["logits"], got.get("losses")))
    return tuple(runs)


def _in_place(ref, variant):
    """The variant as catalogue.variant_namespace puts it in place: its run is kept under the same key."""
    return lambda *a, **k: variant(ref, *a, **k)


def _recipe_part(logits, losses) -> tuple[str, str, str] | None:
    """(description, hint, what shows it) of the one recipe part whose change alone gives these
    predictions, or these train_losses (which no slip in the evaluations or the weights kept at the
    end changes)."""
    try:
        runs = _recipe_runs()
    except Exception:  # noqa: BLE001 - the alternatives only word the message
        return None
    found = []
    for words, hint, want, want_losses in runs:
        if isinstance(logits, torch.Tensor) and want.shape == logits.shape and torch.allclose(
                logits, want, rtol=LOGITS.rtol, atol=LOGITS.atol):
            found.append((words, hint, "its predictions are that run's"))
        elif want_losses and isinstance(losses, list) and len(losses) == len(want_losses) and np.allclose(
                losses, want_losses, rtol=LOSSES.rtol, atol=LOSSES.atol):
            found.append((words, hint, "its train_losses are that run's, step by step"))
    return found[0] if len(found) == 1 else None


def _consistent(best: dict) -> bool:
    """The held-out loss measured here on the weights left equals the one reported for best_step."""
    return best["measured"] is not None and best["reported"] is not None and abs(
        best["measured"] - best["reported"]) <= 1e-4


def _fmt(x) -> str:
    return "unreadable" if x is None else f"{x:.4f}"


def _rounded(xs) -> str:
    return "none" if xs is None else "[" + ", ".join(f"{x:.3f}" for x in xs) + "]"


def diagnose(result, expected, inputs: Inputs, tol: Tolerance) -> str | None:
    if isinstance(expected, dict) and expected.get("view") in CHECKPOINT_VIEWS:
        return diagnose_checkpoint(result, expected)
    return diagnose_loop(result, expected)


CHECKPOINT_VIEWS = ("weights", "optimizer", "saving_changes_nothing", "step", "state", "generators", "loads_twice")


# ---------------------------------------------------------------- the wrong variants


def save_with(no_optimizer=False, reseeds=False):
    def variant(ref, path, model, optimizer, step, **state):
        if reseeds:  # seeds "so that the resumed run is reproducible": the states saved are the seeded ones
            random.seed(step)
            np.random.seed(step)
            torch.manual_seed(step)
        ref.save_checkpoint(path, model, optimizer, step, **state)
        if no_optimizer:  # the file without AdamW's state: the fresh optimizer keeps its empty one
            checkpoint = torch.load(path, weights_only=False)
            checkpoint["optimizer"] = {"state": {}, "param_groups": checkpoint["optimizer"]["param_groups"]}
            torch.save(checkpoint, path)

    return variant


def load_with(rng="all", step_offset=0, whole=False, removes=False, into_copy=False):
    """rng: "all" (right), "none" or "no_torch"."""
    def variant(ref, path, model, optimizer):
        saved = random.getstate(), np.random.get_state(), torch.get_rng_state()
        checkpoint = torch.load(path, weights_only=False)
        # into_copy: `model = torch.load(...)["model"]` and the like: a model, but not the caller's
        step, state = ref.load_checkpoint(path, copy.deepcopy(model) if into_copy else model, optimizer)
        if rng in ("none", "no_torch"):
            torch.set_rng_state(saved[2])
        if rng == "none":
            random.setstate(saved[0])
            np.random.set_state(saved[1])
        if removes:
            import os

            os.remove(path)
        if whole:
            return checkpoint["step"], checkpoint
        return step + step_offset, state

    return variant


def loop_with(clip=True, constant_lr=False, eval_from_zero=False, patience_extra=0, restore_best=True,
              zero_grad_after_backward=False, reseed_on_resume=False, lr_from_one=False, save_before_eval=False,
              history_saved=True, clears_config=False, weight_decay="config", betas=(0.9, 0.95)):
    """The reference's recipe with one rule broken (see the misconceptions). weight_decay: "config"
    (right), "none" (0) or "default" (AdamW's own, 0.01)."""
    def variant(ref, model, train_ids, heldout_ids, config):
        train_ids = torch.as_tensor(train_ids, dtype=torch.long)
        C, B = config.context_length, config.batch_size
        decay = {"config": config.weight_decay, "none": 0.0, "default": 0.01}[weight_decay]
        optimizer = torch.optim.AdamW(model.parameters(), lr=config.max_lr, betas=betas, weight_decay=decay)
        step, state = 0, {"train_losses": [], "heldout_losses": [], "best_step": 0, "best_loss": math.inf,
                          "best_weights": None, "evals_since_best": 0}
        resuming = bool(config.resume_from)
        if resuming:
            step, loaded = ref.load_checkpoint(config.resume_from, model, optimizer)
            state.update(loaded)
            if clears_config:  # "so that a later call does not resume again": the caller's config, changed
                config.resume_from = None
        if not resuming or reseed_on_resume:
            random.seed(config.seed)
            np.random.seed(config.seed)
            torch.manual_seed(config.seed)
        model.train()
        last = config.total_steps if config.stop_after is None else min(config.total_steps, config.stop_after)

        def save():
            if config.checkpoint_path and config.checkpoint_every and step % config.checkpoint_every == 0:
                kept = state if history_saved else {k: v for k, v in state.items()
                                                    if k not in ("train_losses", "heldout_losses")}
                ref.save_checkpoint(config.checkpoint_path, model, optimizer, step, **kept)

        while step < last and state["evals_since_best"] < config.patience + patience_extra:
            lr = config.max_lr if constant_lr else ref.lr_at(step + lr_from_one, config.max_lr, config.warmup_steps,
                                                             config.total_steps, config.min_lr)
            for group in optimizer.param_groups:
                group["lr"] = lr
            starts = torch.randint(len(train_ids) - C, (B,))
            x = torch.stack([train_ids[i:i + C] for i in starts.tolist()])
            y = torch.stack([train_ids[i + 1:i + C + 1] for i in starts.tolist()])
            loss = ref.cross_entropy(model(x), y)
            if not zero_grad_after_backward:
                optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if clip:
                ref.clip_grad_norm(model.parameters(), config.grad_clip)
            if zero_grad_after_backward:
                optimizer.zero_grad(set_to_none=True)
            optimizer.step()
            state["train_losses"].append(loss.item())
            step += 1
            if save_before_eval:
                save()
            if (step - 1 if eval_from_zero else step) % config.eval_every == 0:
                heldout = ref.evaluate(model, heldout_ids, B, C)
                state["heldout_losses"].append(heldout)
                if heldout < state["best_loss"]:
                    state.update(best_loss=heldout, best_step=step, evals_since_best=0,
                                 best_weights=copy.deepcopy(model.state_dict()))
                else:
                    state["evals_since_best"] += 1
            if not save_before_eval:
                save()
        if restore_best and state["best_weights"] is not None:
            model.load_state_dict(state["best_weights"])
        return {"train_losses": state["train_losses"], "heldout_losses": state["heldout_losses"],
                "best_step": state["best_step"]}

    return variant


MISCONCEPTIONS = (
    Misconception("checkpoint_no_optimizer", "a checkpoint round trip without the optimizer's state (not saved, or "
                  "not loaded back)",
                  "Save optimizer.state_dict() with the weights and load it with optimizer.load_state_dict(...): "
                  "AdamW's running averages and step count decide the size of the next steps.",
                  {"save_checkpoint": save_with(no_optimizer=True)}),
    Misconception("save_reseeds", "a save_checkpoint that seeds the generators instead of reading their states",
                  "Saving must leave the run as it was: read random.getstate(), np.random.get_state() and "
                  "torch.get_rng_state() into the checkpoint, and never call a seed function there.",
                  {"save_checkpoint": save_with(reseeds=True)}),
    Misconception("checkpoint_no_rng", "generator states that are not saved, or not restored by load_checkpoint",
                  "Save the states of Python's random, NumPy's and torch's generators, and restore all three in "
                  "load_checkpoint (random.setstate, np.random.set_state, torch.set_rng_state): they decide the "
                  "next batches.",
                  {"load_checkpoint": load_with(rng="none")}),
    Misconception("checkpoint_no_torch_rng", "torch's generator state left out of the checkpoint (or not restored)",
                  "The batches come from torch.randint, so torch's generator matters most: save "
                  "torch.get_rng_state() and restore it with torch.set_rng_state(...) (and every CUDA device's "
                  "when there is one).",
                  {"load_checkpoint": load_with(rng="no_torch")}),
    Misconception("checkpoint_step_plus_one", "a step one past the one saved",
                  "Return the step exactly as it was given to save_checkpoint: the loop already counts it as done.",
                  {"load_checkpoint": load_with(step_offset=1)}),
    Misconception("load_returns_whole_checkpoint", "the whole checkpoint returned as `state`",
                  "Return (step, state) with state the dict of keyword arguments save_checkpoint was given "
                  "(**state), not the checkpoint with the weights and everything else in it.",
                  {"load_checkpoint": load_with(whole=True)}),
    Misconception("load_weights_not_into_model", "weights loaded into another model than the one given",
                  "Load into the model you are given: model.load_state_dict(checkpoint[...]). Rebinding the name "
                  "(model = ...) or loading into a copy leaves the caller's model as it was.",
                  {"load_checkpoint": load_with(into_copy=True)}),
    Misconception("load_removes_checkpoint", "a load_checkpoint that deletes the file it read",
                  "Leave the checkpoint where it is: a run may need to resume from it again.",
                  {"load_checkpoint": load_with(removes=True)}),
    Misconception("train_no_weight_decay", "AdamW without weight decay (config.weight_decay not passed on)",
                  "Create the optimizer with the config's decay: torch.optim.AdamW(model.parameters(), lr=..., "
                  "betas=(0.9, 0.95), weight_decay=config.weight_decay).",
                  {"train_loop": loop_with(weight_decay="none")}),
    Misconception("train_default_weight_decay", "AdamW's default weight decay (0.01) instead of config.weight_decay",
                  "AdamW's weight_decay defaults to 0.01; pass weight_decay=config.weight_decay.",
                  {"train_loop": loop_with(weight_decay="default")}),
    Misconception("train_default_betas", "AdamW's default betas (0.9, 0.999) instead of the recipe's (0.9, 0.95)",
                  "Pass betas=(0.9, 0.95) to AdamW: the recipe's second beta forgets old squared gradients faster.",
                  {"train_loop": loop_with(betas=(0.9, 0.999))}),
    Misconception("train_no_clipping", "no gradient clipping before the optimizer step",
                  "Call clip_grad_norm(model.parameters(), config.grad_clip) after loss.backward() and before "
                  "optimizer.step(), every step.",
                  {"train_loop": loop_with(clip=False)}),
    Misconception("train_constant_lr", "a constant learning rate (lr_at never applied)",
                  "Each step, before optimizer.step(), set every parameter group's lr: for group in "
                  "optimizer.param_groups: group['lr'] = lr_at(step, ...).",
                  {"train_loop": loop_with(constant_lr=True)}),
    Misconception("train_lr_from_one", "the schedule read at step + 1 (steps counted from 1)",
                  "lr_at takes the 0-based step: the first step uses lr_at(0, ...).",
                  {"train_loop": loop_with(lr_from_one=True)}),
    Misconception("train_zero_grad_before_step", "zero_grad between backward and step: the step sees no gradient",
                  "optimizer.zero_grad(), loss.backward(), clip_grad_norm(...), optimizer.step(), in that order.",
                  {"train_loop": loop_with(zero_grad_after_backward=True)}),
    Misconception("train_eval_counted_from_zero", "evaluations counted from step 0 (off by one)",
                  "Evaluate after steps eval_every, 2 * eval_every, ... counting steps from 1: after the step "
                  "counter is incremented, evaluate when step % eval_every == 0.",
                  {"train_loop": loop_with(eval_from_zero=True)}),
    Misconception("train_patience_off_by_one", "one evaluation too many before stopping (patience off by one)",
                  "Stop as soon as `patience` evaluations in a row brought no new best: with patience 2, a best then "
                  "two worse evaluations ends the run.",
                  {"train_loop": loop_with(patience_extra=1)}),
    # Its outputs are those of a loop that keeps model.state_dict() itself as the best weights (the
    # same tensors, which every later step overwrites) and loads that back: both end with the last
    # weights, and the words name both.
    Misconception("train_best_not_restored", "the last weights kept instead of the best evaluation's (the best "
                  "weights never loaded back, or kept as model.state_dict() itself, whose tensors later steps "
                  "overwrite)",
                  "Keep a copy of the weights at each new best (copy.deepcopy(model.state_dict()), not the state "
                  "dict itself) and load it back into the model before returning.",
                  {"train_loop": loop_with(restore_best=False)}),
    Misconception("train_resume_reseeds", "a resumed run that seeds the generators again (its data order restarts)",
                  "Seed only when starting from scratch: with config.resume_from, the generators' states come from "
                  "the checkpoint, and seeding afterwards throws them away.",
                  {"train_loop": loop_with(reseed_on_resume=True)}),
    Misconception("train_checkpoint_before_eval", "a checkpoint saved before that step's evaluation",
                  "Save after evaluating: a checkpoint written at step 12 before the evaluation at step 12 misses "
                  "it, and the resumed run never makes it.",
                  {"train_loop": loop_with(save_before_eval=True)}),
    Misconception("train_writes_config", "a train_loop that writes to the config it is given",
                  "Read the config, never change it (config.resume_from = None, say): the caller may use it again. "
                  "Keep what changes in your own variables.",
                  {"train_loop": loop_with(clears_config=True)}),
    Misconception("train_resume_loses_history", "a resumed run without the loop's loss history (not saved in "
                  "the checkpoint, or not put back from it)",
                  "Save everything the loop keeps in **state (train_losses, heldout_losses, the best loss, step and "
                  "weights, the evaluations since the best), and take it back from load_checkpoint.",
                  {"train_loop": loop_with(history_saved=False)}),
)


# ---------------------------------------------------------------- what the graded parts use


def _no_inputs(rng) -> Inputs:
    return Inputs(())


def probe_check(name, what, points, probe, **kwargs) -> Check:
    return Check(name, what, points, _no_inputs, probe=probe, **kwargs)


PARTS = graded_parts()
