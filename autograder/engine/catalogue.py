"""Naming a mistake: each catalogued `Misconception` is a wrong variant built from the
reference; a failed check runs them on its inputs, and a name is given only when one variant
explains every check the part failed (`explain`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..trust.sandbox import TimeLimitExceeded, quiet
from ..trust.student import Outcome
from .compare import Tolerance
from .probes import Trusted, call_trusted, probe_trusted
from .spec import Check, Inputs, Misconception, Part, Unit


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
_TRUSTED_OUTCOMES: dict[tuple, Trusted] = {}


def _kept(key: tuple | None, compute: Callable[[], Trusted]) -> Trusted:
    if key is None:
        return compute()
    if key in _TRUSTED_OUTCOMES:
        return _TRUSTED_OUTCOMES[key]
    outcome = compute()
    if not isinstance(outcome.error, TimeLimitExceeded | MemoryError):  # the machine's doing, maybe: not kept
        _TRUSTED_OUTCOMES[key] = outcome
    return outcome


def _run_variant(part: Part, ref, variant, inputs: Inputs, probe=None, key: str | None = None) -> Trusted:
    """The variant's outcome on a check's inputs; `key`, the check's name, keeps it (see _kept)."""
    def run():
        if probe is not None:
            return probe_trusted(probe, variant_namespace(part, ref, variant), inputs.copy())
        return call_trusted(lambda *a, v=variant, **k: v(ref, *a, **k), inputs.copy())

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
class Seen:
    """What one value check of a part saw, kept until the whole part is graded."""

    check: Check
    inputs: Inputs
    expected: object
    outcome: Outcome | None  # the student's, for a failed check (None: passed)

    @property
    def passed(self) -> bool:
        return self.outcome is None


def explain(unit: Unit, part: Part, ref, seen: list[Seen]) -> dict[int, Misconception]:
    """The catalogued mistakes that explain the part: {index in `seen` of a failed check: the
    mistake that explains it}, or {} when none can be named.

    One mistake explains the part when its variant reproduces the student's result on every failed
    check and passes every check the student passed. A one-bit answer (a verdict) or an exception
    can be reproduced by several variants: a mistake is named only when exactly one explains
    everything. Failing that, two mistakes in one part are both named when each explains the
    failed checks it is given, together they explain every one, both pass every check the student
    passed, and no other pair does the same (`explain_two`). Otherwise the messages say what
    failed, without a guess.
    """
    failed = [i for i, s in enumerate(seen) if not s.passed]
    if not failed or any(seen[i].outcome.timed_out for i in failed):
        return {}
    one = explain_one(unit, part, ref, seen)
    if one is not None:
        return dict.fromkeys(failed, one)
    return explain_two(unit, part, ref, seen)


def explain_one(unit: Unit, part: Part, ref, seen: list[Seen]) -> Misconception | None:
    """The one mistake that explains every failed check, or None. Each failed check only tries the
    mistakes that explained the ones before it (some variants train a model: they are run no more
    than needed)."""
    candidates = None
    for s in (s for s in seen if not s.passed):
        candidates = matching_misconceptions(unit, part, ref, s.inputs, s.outcome, s.expected, s.check.tol,
                                             s.check.probe, among=candidates, check=s.check.name)
        if not candidates:
            return None
    # A mistake that would also fail a check the student passed is not what the student did,
    # even when nothing else explains the failures: naming it would be a guess.
    candidates = [m for m in candidates if passes_what_the_student_passed(m, part, ref, seen)]
    return candidates[0] if len(candidates) == 1 else None


def passes_what_the_student_passed(mistake: Misconception, part: Part, ref, seen: list[Seen]) -> bool:
    return all(variant_passes(mistake, part, ref, s.inputs, s.expected, s.check.tol, s.check.probe,
                              check=s.check.name) for s in seen if s.passed)


def explain_two(unit: Unit, part: Part, ref, seen: list[Seen]) -> dict[int, Misconception]:
    """Two mistakes made in one part, each shown by the checks it explains alone: {failed check's
    index: its mistake}, or {} unless exactly one pair explains them all. Every catalogued variant
    runs on every failed check here, so this is left to parts whose checks are quick to rerun
    (no `seconds` of their own: not a training run)."""
    failed = [i for i, s in enumerate(seen) if not s.passed]
    if part.seconds is not None or len(failed) < 2:
        return {}
    matches = {i: {m.name for m in matching_misconceptions(unit, part, ref, seen[i].inputs, seen[i].outcome,
                                                            seen[i].expected, seen[i].check.tol, seen[i].check.probe,
                                                            check=seen[i].check.name)}
               for i in failed}
    if any(not found for found in matches.values()):
        return {}
    named = [m for m in unit.misconceptions if any(m.name in found for found in matches.values())]
    pairs = [(a, b) for n, a in enumerate(named) for b in named[n + 1:]
             if all(a.name in matches[i] or b.name in matches[i] for i in failed)
             and any(a.name in matches[i] and b.name not in matches[i] for i in failed)
             and any(b.name in matches[i] and a.name not in matches[i] for i in failed)]
    pairs = [(a, b) for a, b in pairs if all(passes_what_the_student_passed(m, part, ref, seen) for m in (a, b))]
    if len(pairs) != 1:
        return {}
    a, b = pairs[0]
    # A check both explain (a verdict, say) is given to neither: it shows one of them, not which.
    return {i: (a if a.name in matches[i] else b) for i in failed if (a.name in matches[i]) != (b.name in matches[i])}
