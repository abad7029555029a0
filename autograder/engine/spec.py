"""What a unit declares: its parts (`Part`), each part's checks (`Check`: inputs from a fixed
seed, points, tolerance, how a result is compared), its catalogue of mistakes
(`Misconception`), and the result of one check (`CheckResult`). The page a unit's author reads."""

from __future__ import annotations

import copy
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..trust.budget import Budget, budget_for
from .compare import Tolerance, compare_arrays

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
    # Where a failed answer first goes wrong, when no catalogued mistake explains it:
    # locate(call) -> a sentence naming the step that departs from the contract and what it does
    # instead, or None. `call(*args, **kwargs)` runs the student's function (with the part's
    # stand-ins) on inputs the locator designs so that each step shows in the output, and returns
    # its value or raises `StepFailed`. Graded checks do not change: this only words the feedback.
    locate: Callable[[Callable], str | None] | None = None
    # The same for a part driven through the probe API (a class, a model): locate_probe(api) with
    # `api` a StudentApi (engine/probes.py) over the student's code, or a TrustedApi over a
    # catalogued variant's; a step it cannot get through (ProbeFailed) locates nothing.
    locate_probe: Callable[[object], str | None] | None = None

    @property
    def locates(self) -> bool:
        return self.locate is not None or self.locate_probe is not None

    @property
    def points(self) -> float:
        return float(sum(c.points for c in self.checks))


# What a process that trains with torch.optim imports before its first step: the first step of an
# optimizer imports torch._dynamo, a second of CPU, which a unit whose checks train has done ahead
# (its `worker_imports` for the student's worker, its `grader_imports` for the grader's own runs).
OPTIMIZER_IMPORTS = ("torch", "torch.optim", "torch._dynamo")


@dataclass(frozen=True)
class Unit:
    name: str  # "01_attention"
    parts: tuple[Part, ...]
    misconceptions: tuple[Misconception, ...]
    sample_bug: SampleBug | None = None
    # Seconds one cell of the student's notebook may run in nbgrader's kernel, where the
    # course-wide backstop (sandbox.CELL_SECONDS) is longer than the unit needs. The
    # kernel's run only makes the outputs of the feedback page (the grades come from the
    # hidden tests), so a looping cell is stopped sooner and costs the class less time.
    cell_seconds: float | None = None
    # Modules the checks import only when they run (unit 03's torch oracle): a class-grading
    # worker imports them once, before it forks a grading run (run.prepare_forked_runs).
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


class StepFailed(Exception):
    """The student's function raised, timed out or ran out of budget on a locator's input."""


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
