"""The grading engine every unit shares.

A unit (`autograder/units/<name>.py`) declares, for each function of the contract (a
`Part`): its checks (inputs with a fixed seed, points, tolerance), how to compare a result
with the expected one (`diagnose`), and a catalogue of `Misconception`s: wrong variants
built from the reference. Grading a part calls the student's function and the reference on
the same inputs; when they disagree, the engine runs every catalogued variant on those
inputs, and if the student's answer matches one it names the mistake and how to fix it.

The student's function never runs here: `student` is a `Student` (`student.py`), whose
code runs in a sandboxed worker and whose results come back as data. The reference and
the variants are the course's own code and run in this process.
"""

from __future__ import annotations

import copy
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .budget import Budget, budget_for
from .compare import Tolerance, compare_arrays
from .reference import load_reference
from .sandbox import TimeLimitExceeded, quiet, time_limit
from .student import Outcome

CHECK_SECONDS = 5.0  # per call of a student's function on the small inputs of a check


@dataclass(frozen=True)
class Inputs:
    args: tuple
    kwargs: dict = field(default_factory=dict)

    def copy(self) -> Inputs:
        return Inputs(copy.deepcopy(self.args), copy.deepcopy(self.kwargs))


@dataclass(frozen=True)
class Misconception:
    name: str  # a stable identifier, reported in JSON: "no_scaling"
    description: str  # what the student probably did: "the scores are not divided by sqrt(d_k)"
    hint: str  # what to do about it
    # part name -> the wrong variant of that part: variant(ref, *args, **kwargs)
    variants: dict[str, Callable]


# ---------------------------------------------------------------- facets
# A probe that watches how the student's code ran (the calls a model saw, the gradients a
# training loop left) reports one facet per check: {"ok", "detail", "message"}. The reference
# passes every facet; a catalogued variant matches a student whose facet fails with the same detail.


def facet(ok, detail, message=None) -> dict:
    return {"ok": bool(ok), "detail": detail, "message": None if ok else message}


def facet_oracle(inputs) -> dict:
    return facet(True, None)


def diagnose_facet(result, expected: dict, what: str) -> str | None:
    if not isinstance(result, dict) or "ok" not in result:
        from .compare import describe

        return f"could not follow {what} ({describe(result)})"
    if result["ok"] != expected["ok"] or (not expected["ok"] and result.get("detail") != expected.get("detail")):
        return result.get("message") or f"{what} does not match"
    return None


# diagnose(result, expected, inputs, tol) -> None when they agree, else a sentence.
Diagnose = Callable[[object, object, Inputs, Tolerance], "str | None"]


def diagnose_array(result, expected, inputs: Inputs, tol: Tolerance) -> str | None:
    return compare_arrays(result, expected, tol)


@dataclass(frozen=True)
class Check:
    name: str  # unique within its part: "batched_inputs"
    what: str  # for the student: "batched inputs (2, 3, 5, 4)"
    points: float
    make_inputs: Callable[[np.random.Generator], Inputs]
    tol: Tolerance = Tolerance()
    # "value": compare with the reference. "unchanged": the inputs must not be modified (judged
    # by `judge_unchanged`, or by the check's probe where it has one); such a check only counts
    # when a value check of its part passes (`apply_requirements`).
    kind: str = "value"
    # An independent source of the expected result (say PyTorch's own module), used
    # instead of the reference: oracle(inputs) -> expected.
    oracle: Callable[[Inputs], object] | None = None
    # Checks of the same part that must pass too for this one to count: a yes/no answer
    # such as a leak detector's would otherwise earn half its points by never changing.
    requires: tuple[str, ...] = ()
    # Why, in the student's words, a passed check counts only with `requires` (the message of a
    # check voided by apply_requirements); the default says it of an answer that never changes.
    requires_why: str = ""
    # For checks that take more than one call (build a module, load weights, run forward,
    # read gradients): probe(api, inputs) -> the value to compare. It is written once and
    # run three ways: against the student's worker, the reference, and each catalogued
    # variant (see `StudentApi` and `TrustedApi`).
    probe: Callable[[object, Inputs], object] | None = None


@dataclass(frozen=True)
class Part:
    name: str  # the contract's function name
    checks: tuple[Check, ...]
    diagnose: Diagnose = diagnose_array
    # Contract functions this part may call: while it is graded they are swapped for the
    # reference, so a bug in `softmax` costs points once, not again in every caller.
    uses: tuple[str, ...] = ()
    # Library shortcuts that raise while the student's function runs ("module.attr"), for
    # exercises that must be written from scratch.
    forbid: tuple[str, ...] = ()
    # Library functions that stand in for contract functions inside this part, where a
    # call back to the reference would cut the autograd graph: {"gelu": "torch.nn.functional.gelu"}.
    library_stubs: tuple[tuple[str, str], ...] = ()
    # "function", or "class": then a catalogued variant of this part is variant(ref) -> a
    # wrong class, used in place of the reference's in the probes.
    kind: str = "function"
    # Seconds one call of the student's function may take, where the default (CHECK_SECONDS)
    # is too short: a few training steps, say.
    seconds: float | None = None
    # Classes the course gives out in later units ("coursekit.gpt.GPT"): a student's class
    # copied from one earns nothing here. The unit's `hidden` keeps the file out of the
    # sandbox, so the class cannot be imported, read or rebuilt there under any name; and
    # the submission's own text is compared with its source (`copies_course_class`).
    not_from: tuple[str, ...] = ()
    # Course modules the sandbox must still show (unit 04's grader runs its stand-ins from
    # coursekit.blocks), whose classes are complete answers: a submission whose text imports one
    # earns nothing here. (A pasted copy is not refused: these classes are a few canonical lines,
    # which a correct answer written independently matches almost token for token.)
    not_imported: tuple[str, ...] = ()

    @property
    def points(self) -> float:
        return float(sum(c.points for c in self.checks))


@dataclass(frozen=True)
class Unit:
    name: str  # "01_attention"
    parts: tuple[Part, ...]
    misconceptions: tuple[Misconception, ...]
    sample_bug: SampleBug | None = None
    # Seconds one cell of the student's notebook may run in nbgrader's kernel, where the
    # course-wide backstop (nbgrader_course.CELL_TIMEOUT) is longer than the unit needs. The
    # kernel's run only makes the outputs of the feedback page (the grades come from the
    # hidden tests), so a looping cell is stopped sooner and costs the class less time.
    cell_seconds: float | None = None
    # Modules the checks import only when they run (unit 03's torch oracle): a class-grading
    # worker imports them once, before it forks a grading run (cli.prepare_forked_runs).
    grader_imports: tuple[str, ...] = ()
    # Modules the student's worker imports before any timed call (torch._dynamo, which an
    # optimizer's first step imports): an import cut short by a time limit would leave a
    # half-made module for every later check.
    worker_imports: tuple[str, ...] = ()
    # Course files the student's sandbox shows empty (paths from the course root): what this
    # unit asks students to write, where the course ships a finished one for later units.
    hidden: tuple[str, ...] = ()
    # CPU seconds one grading of the reference costs in the student's sandbox (its cells, every
    # check, and the grader's answers to its callbacks), as the "budget" entry of
    # `python3 course.py check UNIT solutions/UNIT/NAME.ipynb --json` reports it on the machine the
    # course is built on. The run's budget is sized from it (budget.budget_for), and
    # tests/test_budget.py holds every reference to half its budget at most.
    reference_cpu_seconds: float = 10.0
    # CPU seconds the reference notebook's run in nbgrader's kernel costs (every cell, its demos
    # and figures included), as `nbgrader autograde` logs it ("The notebook's cells spent ...");
    # the budget of that run, which only makes the feedback page, is sized from it.
    notebook_cpu_seconds: float = 30.0

    @property
    def budget(self) -> Budget:
        """What one grading of a submission may spend (budget.py)."""
        return budget_for(self.reference_cpu_seconds)

    @property
    def page_budget(self) -> Budget:
        """What one run of a submitted notebook in nbgrader's kernel may spend (budget.py)."""
        return budget_for(self.notebook_cpu_seconds)

    def part(self, name: str) -> Part:
        for part in self.parts:
            if part.name == name:
                return part
        raise KeyError(f"unit {self.name} has no graded part {name!r}")

    @property
    def points(self) -> float:
        return float(sum(p.points for p in self.parts))


@dataclass(frozen=True)
class SampleBug:
    """A typical bug for the sample class: replace `old` by `new` in the reference cell
    that defines `part`; the grader should then name `expect`."""

    part: str
    old: str
    new: str
    expect: str


@dataclass
class CheckResult:
    name: str  # "<part>/<check>"
    points: float
    max_points: float
    passed: bool
    message: str
    misconception: str | None = None

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "points": self.points,
            "max_points": self.max_points,
            "passed": self.passed,
            "message": self.message,
            "misconception": self.misconception,
        }


def seeded_rng(*names: str) -> np.random.Generator:
    """A generator seeded by the check's full name: fixed, and different for every check."""
    return np.random.default_rng(zlib.crc32("/".join(names).encode()))


def exception_text(err: BaseException) -> str:
    text = str(err).strip().splitlines()[0] if str(err).strip() else ""
    text = text if len(text) <= 160 else text[:157] + "..."
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def _call_trusted(fn, inputs: Inputs) -> _Trusted:
    """The reference or a catalogued variant: quiet, a generous limit, errors kept."""
    try:
        with quiet(), time_limit(60.0):
            return _Trusted(value=fn(*inputs.args, **inputs.kwargs))
    except BaseException as err:  # noqa: BLE001 - a variant may fail on purpose
        return _Trusted(error=err)


@dataclass
class _Trusted:
    value: object = None
    error: BaseException | None = None


def _same_arrays(a, b) -> bool:
    """Every array (or tensor) among `a` equals the one in the same place among `b`."""

    def leaves(x):
        return list(x) if isinstance(x, tuple | list) else [x]

    def array(x):
        if hasattr(x, "detach"):  # a torch tensor
            return x.detach().cpu().numpy()
        return x if isinstance(x, np.ndarray) else None

    la, lb = leaves(a), leaves(b)
    if len(la) != len(lb):
        return False
    for x, y in zip(la, lb, strict=True):
        x, y = array(x), array(y)
        if x is not None and y is not None:
            if x.shape != y.shape or not np.array_equal(x, y, equal_nan=True):
                return False
        elif (x is None) != (y is None):
            return False
    return True


class ProbeFailed(Exception):
    """A step of a probe that the student's code did not get through."""

    def __init__(self, step: str, outcome: Outcome):
        super().__init__(step)
        self.step, self.outcome = step, outcome


def _describe_args(args, kwargs) -> str:
    def short(v):
        if hasattr(v, "shape"):
            return f"<{type(v).__name__} {tuple(v.shape)}>"
        text = repr(v)
        return text if len(text) <= 20 else f"<{type(v).__name__}>"

    return ", ".join([short(a) for a in args] + [f"{k}={short(v)}" for k, v in kwargs.items()])


class StudentApi:
    """A probe's view of the student's code: every step runs in the worker."""

    trusted = False  # what runs here is the student's: measure from outside, believe nothing

    def __init__(self, student, stubs: dict, forbid: tuple, seconds: float):
        self.student, self.options = student, {"stubs": stubs, "forbid": forbid, "seconds": seconds}

    def _ok(self, step: str, outcome: Outcome, backward=None):
        if not outcome.ok:
            raise ProbeFailed(step, outcome)
        return outcome.value if backward is None else (outcome.value, outcome.arg_grads)

    def call(self, name, *args, backward=None, **kwargs):
        """The function's result; with `backward`, (result, each argument's gradient)."""
        return self._ok(f"`{name}({_describe_args(args, kwargs)})`",
                        self.student.call(name, *args, backward=backward, **self.options, **kwargs), backward)

    def call_on_virtual_clock(self, name, *args, **kwargs):
        """The function's result, timed on a clock the grader moves (worker/virtual_clock.py): the
        clocks it reads stand still but for what the grader's functions among the arguments say
        their calls took (they return a `Took`), and time.sleep moves them instead of sleeping."""
        return self._ok(f"`{name}({_describe_args(args, kwargs)})`",
                        self.student.call_on_virtual_clock(name, *args, **self.options, **kwargs))

    def new(self, name, *args, **kwargs):
        return self._ok(f"`{name}({_describe_args(args, kwargs)})`",
                        self.student.new(name, *args, **self.options, **kwargs))

    def record(self, **fields):
        return self._ok("making a configuration", self.student.record(**fields))

    def forward(self, obj, *args, keep: bool = False, backward=None):
        return self._ok(f"calling the module on {_describe_args(args, {})}",
                        obj.call(*args, keep=keep, backward=backward, **self.options), backward)

    def method(self, obj, name, *args, keep: bool = False, **kwargs):
        return self._ok(f"`.{name}({_describe_args(args, kwargs)})`",
                        obj.method(name, *args, keep=keep, **self.options, **kwargs))

    def attr(self, obj, name):
        return self._ok(f"reading `.{name}`", obj.attr(name))

    def grads(self, obj):
        return self._ok("reading the parameters' gradients", obj.grads())

    def memory_call(self, name, *args, **kwargs):
        """(the function's result, its footprint: the peak memory the call added, measured by the
        grader from outside the worker; see `Student.call(measure_memory=True)`)."""
        outcome = self.student.call(name, *args, measure_memory=True, **self.options, **kwargs)
        return self._ok(f"`{name}({_describe_args(args, kwargs)})`", outcome), outcome.footprint

    def given(self, dotted, *args, **kwargs):
        """One of the course's own objects (a coursekit model, a torch.Generator), built where
        the student's code runs, to hand to the student's function."""
        return self._ok(f"building the course's `{dotted.rsplit('.', 1)[-1]}`",
                        self.student.make(dotted, *args, **kwargs))

    def remote_model(self, fields: dict, state: dict, spec: dict, autograd: bool = False):
        """The course's GPT with these weights, for the student's function to drive: its layers
        run here, in the grader, which records the calls named in `spec` (see `call_record`).
        With `autograd`, the layers' outputs are linked into the worker's autograd graph as a
        real model's are, so that a graph kept shows in the worker's memory."""
        return self._ok("building the course's GPT",
                        self.student.remote_model(fields, state, spec, autograd=autograd))

    def scratch_folder(self) -> str:
        """The folder (with its trailing slash) where the worker writes a file that `fresh_worker`
        may carry over: its private scratch folder."""
        return self.student.scratch_folder()

    def fresh_worker(self, *names: str, limit: int | None = None) -> dict:
        """Go on in a new worker for the submission, which runs its cells again as a resumed job
        would, holding the files `names` of the old worker's scratch folder (read here, never run
        or unpickled) and nothing else of it: what the student's code kept in its process is
        gone. Every handle from before is void. {name: why that file stayed behind}."""
        options = {} if limit is None else {"limit": limit}
        return self.student.fresh_worker(tuple(names), **options)

    def watched(self, obj) -> list:
        """The records of a remote model's calls, made here."""
        return self.student.remote_records(obj)

    def model_state(self, obj) -> tuple[dict, dict]:
        """(the weights, their gradients) of a remote model, as the grader holds them."""
        return self.student.remote_state(obj)


class TrustedApi:
    """The same steps on trusted code in this process: the reference, or a namespace in
    which one catalogued variant stands in for the part being graded."""

    trusted = True  # the course's own code: it may show what it does from inside

    def __init__(self, namespace: dict):
        self.namespace = namespace
        self.watches: dict = {}
        self.hooks: dict = {}

    def call(self, name, *args, backward=None, **kwargs):
        return self._backward(self.namespace[name], args, kwargs, backward)

    def call_on_virtual_clock(self, name, *args, **kwargs):
        """On a virtual clock of this process, the same the worker's is: trusted answers are exact too."""
        from .worker.virtual_clock import VirtualClock

        return VirtualClock().run(self.namespace[name], args, kwargs, namespaces=(self.namespace,))

    def new(self, name, *args, **kwargs):
        return self.namespace[name](*args, **kwargs)

    def record(self, **fields):
        import types

        return types.SimpleNamespace(**fields)

    def forward(self, obj, *args, keep: bool = False, backward=None):
        return self._backward(obj, args, {}, backward)

    @staticmethod
    def _backward(fn, args, kwargs, backward):
        value = fn(*args, **kwargs)
        if backward is None:
            return value
        value.backward(backward)
        return value, [getattr(a, "grad", None) for a in args]

    def method(self, obj, name, *args, keep: bool = False, **kwargs):
        return getattr(obj, name)(*args, **kwargs)

    def attr(self, obj, name):
        for part in name.split("."):
            obj = getattr(obj, part)
        return obj

    def grads(self, obj):
        return {name: p.grad for name, p in obj.named_parameters()}

    def memory_call(self, name, *args, **kwargs):
        """(the result, {"census": the shapes of the tensors it created}): trusted code only."""
        counter = TensorCensus()
        with counter.mode():
            value = self.namespace[name](*args, **kwargs)
        return value, {"census": counter.largest()}

    def given(self, dotted, *args, **kwargs):
        from .worker.main import trusted_factory

        return trusted_factory(dotted)(*args, **kwargs)

    def remote_model(self, fields: dict, state: dict, spec: dict, autograd: bool = False):
        model = trusted_gpt(fields, state)  # a real model: autograd-linked as it is
        self.watches[id(model)] = records = []
        self.hooks[id(model)] = install_watch(model, spec, records)
        return model

    def watched(self, obj):
        for hook in self.hooks.pop(id(obj), []):
            hook.remove()
        return self.watches.pop(id(obj), [])

    def model_state(self, obj) -> tuple[dict, dict]:
        return obj.state_dict(), {name: p.grad for name, p in obj.named_parameters()}

    def fresh_worker(self, *names: str, limit: int | None = None) -> dict:
        """Nothing: trusted code runs here, keeps nothing a new process would lose, and writes its
        files to a real folder, where they stay."""
        return {}


MAX_WATCH_RECORDS = 5000


def trusted_gpt(fields: dict, state: dict):
    """The course's GPT (`coursekit.gpt.GPT`) with these weights, in this process."""
    import types

    from coursekit.gpt import GPT

    model = GPT(types.SimpleNamespace(**fields))
    model.load_state_dict(state)
    return model


def call_record(name: str, keep: str, first, output) -> dict:
    """What a watched call of a model's module leaves: its name, its input's shape, and by `keep`
    "input" (a small integer input, such as positions) or "last" (the output at the last
    position: `output[:, -1]` of a `(B, T, V)` output; a `(B, V)` output is kept whole)."""
    import torch

    record = {"module": name, "shape": list(getattr(first, "shape", ()))}
    if keep == "input" and isinstance(first, torch.Tensor) and first.numel() <= 65536:
        record["input"] = first.detach().clone()
    if keep == "last" and isinstance(output, torch.Tensor) and output.ndim >= 2:
        record["last"] = (output[..., -1, :] if output.ndim >= 3 else output).detach().clone()
    return record


def install_watch(module, spec: dict, records: list) -> list:
    """Forward hooks on `module`'s submodules (by name, what to keep: see `call_record`) that
    append one record per call to `records`. Trusted code only (the reference, a catalogued
    variant): a student's model is watched by the grader computing its layers itself
    (`Student.remote_model`), never by hooks in the student's process."""
    hooks = []
    for name, keep in spec.items():
        def hook(mod, inputs, output, _name=name, _keep=keep):
            if len(records) < MAX_WATCH_RECORDS:
                records.append(call_record(_name, _keep, inputs[0] if inputs else None, output))

        hooks.append(module.get_submodule(name).register_forward_hook(hook))
    return hooks


class TensorCensus:
    """The shapes of every tensor a call creates, by operator output (views included), via a
    TorchDispatchMode: how trusted code (the reference, a catalogued variant) shows its memory.
    Never used on a student's code, whose process could fool it: that is measured from outside
    (`Student.call(measure_memory=True)`)."""

    def __init__(self):
        self.shapes: dict[tuple, int] = {}

    def mode(self):
        from torch.utils._python_dispatch import TorchDispatchMode

        census = self

        class Census(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                for value in out if isinstance(out, tuple | list) else (out,):
                    shape = tuple(getattr(value, "shape", ()) or ())
                    if hasattr(value, "shape") and len(census.shapes) < 10_000:
                        census.shapes[shape] = census.shapes.get(shape, 0) + 1
                return out

        return Census()

    def largest(self, count: int = 20) -> list:
        """[[shape, times seen], ...], the largest shapes first."""
        import math

        ranked = sorted(self.shapes.items(), key=lambda item: -math.prod(item[0]))
        return [[list(shape), n] for shape, n in ranked[:count]]



def _probe_student(probe, api: StudentApi, inputs: Inputs) -> Outcome:
    try:
        return Outcome(value=probe(api, inputs))
    except ProbeFailed as failed:
        outcome = failed.outcome
        if outcome.timed_out:
            return outcome
        return Outcome(error=f"{failed.step} raised {outcome.error}", error_type=outcome.error_type,
                       where=outcome.where, value=outcome.value, retry=outcome.retry)


def _probe_trusted(probe, namespace: dict, inputs: Inputs) -> _Trusted:
    from .student import round_trip

    def run(*args, **kwargs):
        return round_trip(probe(TrustedApi(namespace), Inputs(args, kwargs)))

    return _call_trusted(run, inputs)


def variant_namespace(part: Part, ref, variant) -> dict:
    """The reference's namespace with one catalogued variant in place of `part`."""
    namespace = dict(vars(ref))
    if part.kind == "class":
        namespace[part.name] = variant(ref)
    else:
        namespace[part.name] = lambda *a, **k: variant(ref, *a, **k)
    return namespace


# What trusted code gave on a check's inputs, kept for the life of the process: the inputs of
# a check come from a fixed seed, so the reference's (or a catalogued variant's) result on them
# is always the same. Naming a mistake runs every variant of the part on the failed checks;
# kept, each runs once per check however many submissions (or catalogue tests) ask.
_TRUSTED_OUTCOMES: dict[tuple, _Trusted] = {}


def _kept(key: tuple | None, compute: Callable[[], _Trusted]) -> _Trusted:
    if key is None:
        return compute()
    if key in _TRUSTED_OUTCOMES:
        return _TRUSTED_OUTCOMES[key]
    outcome = compute()
    if not isinstance(outcome.error, TimeLimitExceeded | MemoryError):  # the machine's doing, maybe: not kept
        _TRUSTED_OUTCOMES[key] = outcome
    return outcome


def _run_variant(part: Part, ref, variant, inputs: Inputs, probe=None, key: str | None = None) -> _Trusted:
    """The variant's outcome on a check's inputs; `key`, the check's name, keeps it (see _kept)."""
    def run():
        if probe is not None:
            return _probe_trusted(probe, variant_namespace(part, ref, variant), inputs.copy())
        return _call_trusted(lambda *a, v=variant, **k: v(ref, *a, **k), inputs.copy())

    return _kept(None if key is None else ("variant", id(ref), id(variant), part.name, key), run)


def matching_misconceptions(unit: Unit, part: Part, ref, inputs: Inputs, student_outcome: Outcome,
                            expected, tol: Tolerance, probe=None, among=None,
                            check: str | None = None) -> list[Misconception]:
    """The catalogued mistakes (of `among`, default all) whose variant reproduces the student's
    (wrong) result here. `check` names the check whose seeded inputs these are (its variants'
    results are then kept, see _TRUSTED_OUTCOMES)."""
    found = []
    for mistake in unit.misconceptions if among is None else among:
        variant = mistake.variants.get(part.name)
        if variant is None:
            continue
        outcome = _run_variant(part, ref, variant, inputs, probe, key=check)
        if outcome.error is not None:
            # A variant that fails on these inputs matches a student who fails the same way.
            if student_outcome.error is not None and student_outcome.error_type == type(outcome.error).__name__:
                found.append(mistake)
            continue
        if student_outcome.error is not None or student_outcome.timed_out:
            continue
        with quiet():
            variant_problem = part.diagnose(outcome.value, expected, inputs, tol)
            # Same answer: the variant's result taken as the expected one, or (for a probe that
            # checks a property, such as "block sizes do not matter", and judges a result on its
            # own) the very same complaint about both.
            same = variant_problem is not None and (
                part.diagnose(student_outcome.value, outcome.value, inputs, tol) is None
                or (probe is not None
                    and part.diagnose(student_outcome.value, expected, inputs, tol) == variant_problem))
        if same:
            found.append(mistake)
    return found


def variant_passes(mistake: Misconception, part: Part, ref, inputs: Inputs, expected, tol: Tolerance,
                   probe=None, check: str | None = None) -> bool:
    """Whether a catalogued mistake would pass this check too (as the student did)."""
    outcome = _run_variant(part, ref, mistake.variants[part.name], inputs, probe, key=check)
    if outcome.error is not None:
        return False
    with quiet():
        return part.diagnose(outcome.value, expected, inputs, tol) is None


@dataclass
class _Seen:
    """What one value check of a part saw, kept until the whole part is graded."""

    check: Check
    inputs: Inputs
    expected: object
    outcome: Outcome | None  # the student's, for a failed check (None: passed)

    @property
    def passed(self) -> bool:
        return self.outcome is None


def explain(unit: Unit, part: Part, ref, seen: list[_Seen]) -> Misconception | None:
    """The one catalogued mistake that explains the whole part, or None.

    A mistake explains the part when its variant reproduces the student's result on every
    failed check and passes every check the student passed. A one-bit answer (a verdict) or an
    exception can be reproduced by several variants: the mistake is named only when exactly one
    explains everything; otherwise the messages say what failed, without a guess. Each failed
    check only tries the mistakes that explained the ones before it (some variants train a
    model: they are run no more than needed).
    """
    failed = [s for s in seen if not s.passed]
    if not failed or any(s.outcome.timed_out for s in failed):
        return None
    candidates = None
    for s in failed:
        candidates = matching_misconceptions(unit, part, ref, s.inputs, s.outcome, s.expected, s.check.tol,
                                             s.check.probe, among=candidates, check=s.check.name)
        if not candidates:
            return None
    # A mistake that would also fail a check the student passed is not what the student did,
    # even when nothing else explains the failures: naming it would be a guess.
    candidates = [m for m in candidates
                  if all(variant_passes(m, part, ref, s.inputs, s.expected, s.check.tol, s.check.probe,
                                        check=s.check.name)
                         for s in seen if s.passed)]
    return candidates[0] if len(candidates) == 1 else None


def grade_part(unit: Unit, part_name: str, student, seconds: float = CHECK_SECONDS,
               name_mistakes: bool = True) -> list[CheckResult]:
    """Run every check of one part against the student's function `part_name`.

    `student` is a `Student` (a submission in a sandboxed worker), or, in the course's own
    tests of the graders, an `InProcessStudent` holding trusted code. Once every check has
    run, a failed part is compared with the catalogue of mistakes (`explain`); with
    `name_mistakes=False` it is not (a faster grade, for the course's own measurements).
    """
    part = unit.part(part_name)
    seconds = max(seconds, part.seconds or 0.0)
    ref = load_reference(unit.name)
    reference_fn = getattr(ref, part.name)
    kind = student.kind(part.name)
    # While this part is graded, the contract functions it may call are the reference's,
    # so that a bug in `softmax` costs points once, not again in every caller.
    stubs = {name: getattr(ref, name) for name in part.uses if hasattr(ref, name)}
    stubs.update(dict(part.library_stubs))
    # Say so when a failure is reported: the helpers' behaviour in it is the reference's, not the student's.
    helpers = [f"`{n}`" for n in sorted(stubs)]
    listed = ", ".join(helpers[:-1]) + " and " + helpers[-1] if len(helpers) > 1 else "".join(helpers)
    swapped_note = (f" (While `{part.name}` was checked, the {listed} it calls "
                    f"{'was' if len(helpers) == 1 else 'were'} the reference's, not yours: this is about "
                    f"`{part.name}` itself.)") if helpers else ""

    def result(check, passed, message, mistake=None):
        return CheckResult(
            name=f"{part.name}/{check.name}",
            points=float(check.points) if passed else 0.0,
            max_points=float(check.points),
            passed=passed,
            message=message,
            misconception=mistake.name if mistake else None,
        )

    source = student.source() if hasattr(student, "source") else ""
    given = [name for name in part.not_from if copies_course_class(source, name)]
    if given:
        return [result(check, False, f"`{part.name}` is copied from the course's ready-made `{given[0]}` (given to "
                       "later units), not your own: write the class here") for check in part.checks]
    modules = (*part.not_imported, *(name.rsplit(".", 1)[0] for name in part.not_from))
    imported = [module for module in modules if imports_course_module(source, module)]
    if imported:
        return [result(check, False, f"the submission imports the course's `{imported[0]}`, whose ready-made "
                       f"classes are given to later units: write `{part.name}` yourself, without that import")
                for check in part.checks]
    if student_exhausted(student):
        return [result(check, False, f"not run: {student_exhausted(student)}") for check in part.checks]
    if kind not in ("function", "class"):
        if kind != "missing":
            why = f"`{part.name}` is {kind}, not a function"
        elif any(note.startswith(f"{part.name} raised NotImplementedError") for note in getattr(student, "notes", [])):
            why = (f"`{part.name}` is not defined: its cell still raises NotImplementedError (replace that line "
                   "with your code)")
        else:
            why = f"`{part.name}` is not defined: did the cell that defines it run without errors?"
        return [result(check, False, why) for check in part.checks]

    results = []
    seen: dict[int, _Seen] = {}  # index in `results` -> what that value check saw
    unfinished = False  # NotImplementedError somewhere: an unfinished part, not a mistake to name
    gave_up = None  # once the function times out, its other checks are not run
    for check in part.checks:
        if not gave_up and student_exhausted(student):  # used up by an earlier check of this part
            gave_up = f"not run: {student_exhausted(student)}"
        if gave_up:
            results.append(result(check, False, gave_up))
            continue
        inputs = check.make_inputs(seeded_rng(unit.name, part.name, check.name))

        def run_check(check=check, inputs=inputs):
            given = inputs.copy()
            if check.probe is not None:
                return _probe_student(check.probe, StudentApi(student, stubs, part.forbid, seconds), given)
            return student.call(part.name, *given.args, seconds=seconds, stubs=stubs, forbid=part.forbid,
                                return_args=check.kind == "unchanged", **given.kwargs)

        outcome = run_check()
        if outcome.retry:
            # Once more, in the fresh worker that replaced the one that failed: what went wrong
            # (no CPU at all for a while, a killed worker) may have been the machine's doing. A
            # call that used up its CPU time is not run again: it would use it up again.
            outcome = run_check()
        if outcome.over_budget:
            gave_up = f"not run: {outcome.error}"
            results.append(result(check, False, f"{check.what}: stopped: {outcome.error}"))
            continue
        if outcome.timed_out:
            gave_up = f"not run: `{part.name}` did not finish on an earlier check (an infinite loop?)"
            results.append(result(
                check, False,
                f"{check.what}: `{part.name}` {_timeout_text(outcome, seconds)} (an infinite loop, or a loop "
                "that never ends for these shapes?)",
            ))
            continue
        if outcome.error_type == "NotImplementedError":
            unfinished = True
        if check.kind == "unchanged" and check.probe is None:
            results.append(result(check, *judge_unchanged(check, inputs, outcome)))
            continue
        if check.oracle is not None:
            expected = _call_trusted(lambda *a, o=check.oracle, **k: o(Inputs(a, k)), inputs.copy())
        elif check.probe is not None:
            expected = _probe_trusted(check.probe, dict(vars(ref)), inputs.copy())
        else:
            expected = _call_trusted(reference_fn, inputs.copy())
        if expected.error is not None:
            raise RuntimeError(f"the reference {part.name} failed on check {check.name}: "
                               f"{exception_text(expected.error)}")
        if outcome.error_type == "NotImplementedError":
            problem = (f"`{part.name}` still raises NotImplementedError: replace that line "
                       "with your code")
        elif outcome.error is not None:
            problem = f"raised {outcome.error}"
        else:
            with quiet():
                problem = part.diagnose(outcome.value, expected.value, inputs, check.tol)
        seen[len(results)] = _Seen(check, inputs, expected.value, None if problem is None else outcome)
        if problem is None:
            results.append(result(check, True, f"{check.what}: correct"))
            continue
        results.append(result(check, False, f"{check.what}: {problem}."))

    failed = [i for i, s in seen.items() if not s.passed]
    mistake = explain(unit, part, ref, list(seen.values())) if name_mistakes and failed and not unfinished else None
    for i in failed:
        if mistake:
            results[i].message += f" This looks like {mistake.description}. {mistake.hint}"
            results[i].misconception = mistake.name
        if swapped_note and not unfinished:
            results[i].message += swapped_note
    return apply_requirements(part, results)


# difflib's ratio of two token streams at which one is a copy of the other: a pasted copy with its
# names changed scores 0.99, the reference solution's GPT 0.78 (they share the contract's names)
COPY_SIMILARITY = 0.92


def _class_tokens(source: str, name: str | None = None) -> list[list[str]]:
    """The token streams (no comments, docstrings or layout) of the classes defined in `source`
    (those named `name`, or all of them); none where it does not parse."""
    import ast
    import io
    import tokenize

    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    streams = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ClassDef) or (name is not None and node.name != name):
            continue
        for inner in ast.walk(node):  # drop docstrings: words, not code
            body = getattr(inner, "body", None)
            if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and \
                    isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
                inner.body = body[1:] or [ast.Pass()]
        text = ast.unparse(node)
        try:
            tokens = [t.string for t in tokenize.generate_tokens(io.StringIO(text).readline)
                      if t.type not in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT,
                                        tokenize.DEDENT, tokenize.ENDMARKER)]
        except (tokenize.TokenError, SyntaxError):
            continue
        streams.append(tokens[2:])  # without `class Name`: a renamed copy is still a copy
    return streams


def copies_course_class(source: str, dotted: str) -> bool:
    """Whether any class in the submission's code is (nearly token for token) the course's class
    `dotted` ("coursekit.gpt.GPT"): judged on the text the grader read, not on anything the
    submission's process reports about its classes."""
    import difflib
    import importlib.util

    module_name, class_name = dotted.rsplit(".", 1)
    spec = importlib.util.find_spec(module_name)
    if not source or spec is None or not spec.origin:
        return False
    course = _class_tokens(Path(spec.origin).read_text(), class_name)
    if not course:
        return False
    for candidate in _class_tokens(source):
        matcher = difflib.SequenceMatcher(None, candidate, course[0], autojunk=False)
        if matcher.real_quick_ratio() >= COPY_SIMILARITY and matcher.ratio() >= COPY_SIMILARITY:
            return True
    return False


def imports_course_module(source: str, dotted: str) -> bool:
    """Whether the submission's text imports the course module `dotted` ("coursekit.blocks"):
    `import coursekit.blocks`, `from coursekit.blocks import ...` or `from coursekit import blocks`."""
    import re

    package, _, module = dotted.rpartition(".")
    pattern = (rf"^\s*(import|from)\s+{re.escape(package)}\s*\.\s*{re.escape(module)}\b"
               rf"|^\s*from\s+{re.escape(package)}\s+import\s+[^\n]*\b{re.escape(module)}\b")
    return bool(source) and re.search(pattern, source, flags=re.M) is not None


def student_exhausted(student) -> str | None:
    """Why none of the submission's code runs any more (its grading's budget is used up), or None.
    Trusted code under the student interface (InProcessStudent) has no budget."""
    return getattr(student, "exhausted", None)


def _timeout_text(outcome: Outcome, seconds: float) -> str:
    if outcome.error and "without computing" in outcome.error:
        return "waited without computing, twice, the second time in a fresh process (a sleep? a read that never ends?)"
    return f"did not finish within {seconds:g} s of computing time"


def judge_unchanged(check: Check, inputs: Inputs, outcome: Outcome) -> tuple[bool, str]:
    """(passed, message) for a check that the inputs are left as they were.

    A call that raised is judged on the inputs as it left them, when the worker could send
    them back: the exception costs the value checks, not this one as well.
    """
    after_kwargs = outcome.kwargs_after if isinstance(outcome.kwargs_after, dict) else {}
    unchanged = _same_arrays(outcome.args_after, inputs.args) and _same_arrays(
        [after_kwargs.get(k) for k in inputs.kwargs], list(inputs.kwargs.values()))
    if outcome.error is not None and not (isinstance(outcome.args_after, tuple | list) and outcome.args_after):
        return False, f"{check.what}: raised {outcome.error}"
    if not unchanged:
        return False, (f"{check.what}: your function changed its input arrays in place "
                       "(use `x = x - ...` rather than `x -= ...` on an argument)")
    if outcome.error is not None:
        return True, (f"{check.what}: inputs left untouched (it raised {outcome.error}: that costs "
                      "the value checks, not this one)")
    return True, f"{check.what}: inputs left untouched"


def apply_requirements(part: Part, results: list[CheckResult]) -> list[CheckResult]:
    """Void the points of a passed check whose required checks failed."""
    passed = {check.name: r.passed for check, r in zip(part.checks, results, strict=True)}
    what = {check.name: check.what for check in part.checks}
    for check, r in zip(part.checks, results, strict=True):
        unmet = [name for name in check.requires if not passed[name]]
        if r.passed and unmet:
            r.passed, r.points = False, 0.0
            r.message += (
                f", but not counted yet: {check.requires_why or 'an answer that never changes would pass it too'}, "
                f"so this point counts once this check passes as well: {what[unmet[0]]}"
            )
    # Leaving the inputs alone is only worth a point in a function that does something:
    # one that raises, or returns nonsense, everywhere would otherwise earn it for free. (After
    # the requirements: a value check voided above does not count as doing something.)
    any_value_passed = any(r.passed for check, r in zip(part.checks, results, strict=True) if check.kind == "value")
    for check, r in zip(part.checks, results, strict=True):
        if check.kind == "unchanged" and r.passed and not any_value_passed:
            r.passed, r.points = False, 0.0
            r.message += (", but not counted: this point counts once at least one of the other checks passes "
                          "(a function that fails them all leaves its inputs untouched too)")
    return results


def grade_student(unit: Unit, student, seconds: float = CHECK_SECONDS) -> list[CheckResult]:
    results = []
    for part in unit.parts:
        results += grade_part(unit, part.name, student, seconds)
    return results
