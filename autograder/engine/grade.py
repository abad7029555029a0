"""The grading engine every unit shares.

A unit (`autograder/units/<name>.py`) declares, for each function of the contract (a
`Part`): its checks (inputs with a fixed seed, points, tolerance), how to compare a result
with the expected one (`diagnose`), and a catalogue of `Misconception`s: wrong variants
built from the reference. Grading a part calls the student's function and the reference on
the same inputs; when they disagree, the engine runs every catalogued variant on those
inputs, and if the student's answer matches one it names the mistake and how to fix it.

The student's function never runs here: `student` is a `Student` (`student.py`), whose
code runs in a sandboxed worker and whose results come back as data. The reference and
the variants are the course's own code and run in this process."""

from __future__ import annotations

import ast
import copy
import sys

from ..trust.sandbox import one_torch_thread, quiet
from ..trust.student import InProcessStudent, Outcome
from .catalogue import Seen, explain, variant_namespace
from .originality import copies_course_class, imports_course_module
from .probes import (
    ProbeFailed,
    StudentApi,
    Trusted,
    call_trusted,
    probe_student,
    probe_trusted,
    same_arrays,
)
from .reference import load_reference
from .spec import (
    CHECK_SECONDS,
    Check,
    CheckResult,
    Inputs,
    Part,
    StepFailed,
    Unit,
    exception_text,
    seeded_rng,
)


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
    seen: dict[int, Seen] = {}  # index in `results` -> what that value check saw
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
                return probe_student(check.probe, StudentApi(student, stubs, part.forbid, seconds), given)
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
        expected = expected_value(unit, part, check, inputs)
        if expected.error is not None:
            raise RuntimeError(f"the reference {part.name} failed on check {check.name}: "
                               f"{exception_text(expected.error)}")
        if outcome.error_type == "NotImplementedError":
            problem = (f"`{part.name}` still raises NotImplementedError: replace that line "
                       "with your code")
        elif outcome.error is not None:
            problem = (f"raised {outcome.error}{raised_at(outcome)}{exception_hint(outcome.error)}"
                       f"{_quietly(names_set_earlier, student, outcome)}")
        else:
            with quiet():
                problem = part.diagnose(outcome.value, expected.value, inputs, check.tol)
        seen[len(results)] = Seen(check, inputs, expected.value, None if problem is None else outcome)
        if problem is None:
            results.append(result(check, True, f"{check.what}: correct"))
            continue
        results.append(result(check, False, f"{check.what}: {problem}."))

    order = list(seen)  # indices in `results`, in the order `explain` sees them
    failed = [i for i, s in seen.items() if not s.passed]
    named = explain(unit, part, ref, list(seen.values())) if name_mistakes and failed and not unfinished else {}
    where = None
    if part.locates and len({m.name for m in named.values()}) == 1:
        # One name rests on the checks the answer failed, which other slips may fail alike (the same
        # exception's type, the same NaN, the same verdict): it is kept only where its variant also
        # goes wrong at the step the answer does, on the locator's own inputs. (Two names in one part
        # are each shown by checks the other passes: explain_two.)
        where = locate_step(part, student, stubs, seconds)
        for mistake in {m.name: m for m in named.values()}.values():
            theirs = locate_step(part, InProcessStudent(variant_namespace(part, ref, mistake.variants[part.name])),
                                 stubs, seconds)
            if step_of(theirs) != step_of(where):
                named = {k: m for k, m in named.items() if m is not mistake}
    mistakes = {order[k]: mistake for k, mistake in named.items()}
    two = len({m.name for m in mistakes.values()}) > 1
    if failed and not named and part.locates and not unfinished and not gave_up:
        where = where or locate_step(part, student, stubs, seconds)
        if where:
            results[failed[0]].message += f" {LOCATED} {where}"
    for i in failed:
        mistake = mistakes.get(i)
        if mistake:
            also = (f" (One of two mistakes in `{part.name}`: the other shows in other checks.)" if two else "")
            results[i].message += f" This looks like {mistake.description}. {mistake.hint}{also}"
            results[i].misconception = mistake.name
        if swapped_note and not unfinished:
            results[i].message += swapped_note
    return apply_requirements(part, results)


# What the reference gives on each check, by (unit, part, check): a check's inputs come from its
# own seed, so this is the same in every grading. Kept for the life of the process, and computed
# ahead, before any grading run is forked from it, by `rehearse`.
_EXPECTED: dict[tuple[str, str, str], Trusted] = {}


def expected_value(unit: Unit, part: Part, check: Check, inputs: Inputs) -> Trusted:
    """The reference's answer to `check` (an oracle's, a trusted probe's, or its function's), as
    computed here once; each caller gets a copy of its own."""
    key = (unit.name, part.name, check.name)
    if key not in _EXPECTED:
        if check.oracle is not None:
            expected = call_trusted(lambda *a, o=check.oracle, **k: o(Inputs(a, k)), inputs.copy())
        elif check.probe is not None:
            expected = probe_trusted(check.probe, dict(vars(load_reference(unit.name))), inputs.copy())
        else:
            expected = call_trusted(getattr(load_reference(unit.name), part.name), inputs.copy())
        if expected.error is not None:
            return expected  # the reference broke: said at once, never kept
        _EXPECTED[key] = expected
    return Trusted(value=copy.deepcopy(_EXPECTED[key].value))


def rehearse(unit: Unit) -> None:
    """Grade the reference here, in this process (it is the course's code), so that what every
    grading computes on the trusted side alone (each check's expected value, and what the units
    keep of the reference's runs: a training run, a checkpoint's round trip, the grader's own
    measurements) is computed once and inherited by every grading run forked from this process
    (`run.prepare_forked_runs`). On one PyTorch thread, as trusted code always runs (no thread
    pool is left to be forked), and with the random generators put back as they were."""
    import random

    import numpy as np

    torch = sys.modules.get("torch")
    states = (random.getstate(), np.random.get_state(), torch.get_rng_state() if torch is not None else None)
    student = InProcessStudent(dict(vars(load_reference(unit.name))))
    try:
        with one_torch_thread():
            for part in unit.parts:
                grade_part(unit, part.name, student, name_mistakes=False)
    finally:
        random.setstate(states[0])
        np.random.set_state(states[1])
        if states[2] is not None:
            sys.modules["torch"].set_rng_state(states[2])


LOCATED = "Where it goes wrong:"  # what begins a located step in a check's message


def step_of(located: str | None) -> str | None:
    """The step a located sentence names: its words up to the first full stop or colon."""
    return None if located is None else located.split(".")[0].split(":")[0].strip()


def locate_step(part: Part, student, stubs: dict, seconds: float) -> str | None:
    """The part's locator (`Part.locate`, or `Part.locate_probe`) run on the student's code: the
    step that first departs from the contract, in a sentence, or None (nothing located, or the
    code failed on the locator's own inputs, which the checks' messages report)."""

    def call(*args, **kwargs):
        outcome = student.call(part.name, *args, seconds=seconds, stubs=stubs, forbid=part.forbid, **kwargs)
        if outcome.error is not None or outcome.timed_out or outcome.over_budget:
            raise StepFailed(outcome.error or "did not finish")
        return outcome.value

    try:
        with quiet():
            if part.locate_probe is not None:
                return part.locate_probe(StudentApi(student, stubs, part.forbid, seconds))
            return part.locate(call)
    except (StepFailed, ProbeFailed):
        return None
    except Exception:  # noqa: BLE001 - a locator only words the feedback: its own failure costs no grade
        return None


def raised_at(outcome: Outcome) -> str:
    """Where the student's own code raised, as the worker saw it ("softmax, line 4: `e = ...`"),
    to follow an exception's text: the line names the step. The worker's words, so they word this
    student's feedback only, capped, and never decide a result."""
    where = getattr(outcome, "where", None)
    if not isinstance(where, str) or not where:
        return ""
    return f" (in your code: {where[:200]})"


def _quietly(words, *args) -> str:
    """Words for the feedback whose own failure costs nothing: no words."""
    try:
        return words(*args)
    except Exception:  # noqa: BLE001 - feedback words only, never a grade
        return ""


def names_set_earlier(student, outcome: Outcome) -> str:
    """Where the names on the student's line that raised were last set, earlier in the same function,
    since an exception's cause often lies there (a mask squeezed the line before, a size divided
    with /): read from the submission's own source, parsed here (never run), for its feedback only."""
    where = getattr(outcome, "where", None)
    cells = dict(getattr(student, "cells", None) or [])
    if not isinstance(where, str) or ", line " not in where or not cells:
        return ""
    label, _, rest = where.partition(", line ")
    number = rest.split(":")[0]
    source = cells.get(label)
    if not number.isdigit() or not isinstance(source, str) or len(source) > 200_000:
        return ""
    line = int(number)
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return ""
    functions = [node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
                 and node.lineno <= line <= (node.end_lineno or node.lineno)]
    if not functions:
        return ""
    function = max(functions, key=lambda node: node.lineno)  # the innermost
    lines = source.splitlines()

    def names_on(number: int) -> list[str]:
        return list(dict.fromkeys(node.id for node in ast.walk(function) if isinstance(node, ast.Name)
                                  and isinstance(node.ctx, ast.Load) and node.lineno == number))

    def set_before(name: str, number: int) -> int | None:
        set_on = [node.lineno for node in ast.walk(function) if isinstance(node, ast.Name)
                  and isinstance(node.ctx, ast.Store) and node.id == name and node.lineno < number]
        return max(set_on) if set_on else None

    # The names on the line that raised, then the names on the lines that set those (one step further:
    # a size set two lines up, used to build the mask that broadcast wrongly), three lines at most.
    told, seen = [], set()
    for name in names_on(line):
        where = set_before(name, line)
        if where and (name, where) not in seen and len(told) < 2:  # two, to leave room for one further back
            seen.add((name, where))
            told.append((name, where))
    for _name, where in sorted(told, key=lambda entry: -entry[1]):  # the nearest line's names first
        for inner in names_on(where):
            further = set_before(inner, where)
            if further and (inner, further) not in seen:
                seen.add((inner, further))
                told.append((inner, further))
    said = []
    for name, where in told[:3]:
        text = lines[where - 1].strip()
        said.append(f"`{name}` on line {where}: `{text if len(text) <= 80 else text[:77] + '...'}`")
    return f" (that line's names were last set earlier: {'; '.join(said)})" if said else ""


# Exceptions whose cause lies on an earlier line than the one that raised, and what it usually is.
EXCEPTION_HINTS = (
    (("'float' object cannot be interpreted as an integer", "found element of type float",
      "slice indices must be integers", "only integers, slices"),
     ": a size or an index is a float here (is it computed with / where // gives a whole number?)"),
)


def exception_hint(error: str | None) -> str:
    """What an exception's text usually means, where its cause is elsewhere than the line quoted."""
    for texts, hint in EXCEPTION_HINTS:
        if error and any(text in error for text in texts):
            return hint
    return ""


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
    unchanged = same_arrays(outcome.args_after, inputs.args) and same_arrays(
        [after_kwargs.get(k) for k in inputs.kwargs], list(inputs.kwargs.values()))
    if outcome.error is not None and not (isinstance(outcome.args_after, tuple | list) and outcome.args_after):
        return False, f"{check.what}: raised {outcome.error}"
    if not unchanged:
        reshaped = any(getattr(after, "shape", None) != getattr(given, "shape", None)
                       for after, given in zip(outcome.args_after or (), inputs.args, strict=False))
        if reshaped:
            return False, (f"{check.what}: your function changed the shape of an input array in place "
                           "(`x.shape = ...` or `x.resize(...)` on an argument): reshape a view instead, "
                           "`x = x.reshape(...)`")
        return False, (f"{check.what}: your function changed its input arrays in place "
                       "(use `x = x - ...` rather than `x -= ...` on an argument)")
    if outcome.error is not None:
        return True, (f"{check.what}: inputs left untouched (it raised {outcome.error}: that costs "
                      "the value checks, not this one)")
    return True, f"{check.what}: inputs left untouched"


NOT_COUNTED = ", but not counted"  # how a passed check voided here says so (read by feedback.reports)


def apply_requirements(part: Part, results: list[CheckResult]) -> list[CheckResult]:
    """Void the points of a passed check whose required checks failed."""
    passed = {check.name: r.passed for check, r in zip(part.checks, results, strict=True)}
    what = {check.name: check.what for check in part.checks}
    for check, r in zip(part.checks, results, strict=True):
        unmet = [name for name in check.requires if not passed[name]]
        if r.passed and unmet:
            r.passed, r.points = False, 0.0
            r.message += (
                f"{NOT_COUNTED} yet: {check.requires_why or 'an answer that never changes would pass it too'}, "
                f"so this point counts once this check passes as well: {what[unmet[0]]}"
            )
    # Leaving the inputs alone is only worth a point in a function that does something:
    # one that raises, or returns nonsense, everywhere would otherwise earn it for free. (After
    # the requirements: a value check voided above does not count as doing something.)
    any_value_passed = any(r.passed for check, r in zip(part.checks, results, strict=True) if check.kind == "value")
    for check, r in zip(part.checks, results, strict=True):
        if check.kind == "unchanged" and r.passed and not any_value_passed:
            r.passed, r.points = False, 0.0
            r.message += (f"{NOT_COUNTED}: this point counts once at least one of the other checks passes "
                          "(a function that fails them all leaves its inputs untouched too)")
    return results


def grade_student(unit: Unit, student, seconds: float = CHECK_SECONDS) -> list[CheckResult]:
    results = []
    for part in unit.parts:
        results += grade_part(unit, part.name, student, seconds)
    return results
