"""What one grading run may spend on a submission's code, and what it has spent.

Per-cell and per-call limits stop one cell or one call; nothing in them bounds how many of
them a notebook has. A `Budget` bounds the whole run: a grading of one submission (every
cell the grader runs and every check, in every worker the run starts) may use

- `cpu_seconds` of computing: the CPU time of everything in the submission's sandboxes, read
  by the grader from /proc, plus the grader's own CPU time spent answering the submission's
  calls back to it (a layer of the course's model, a reference helper): work the submission
  asked for;
- `waiting_seconds` of waiting: the time the submission's main thread was blocked (sleeping,
  or reading something that never comes) while the grader waited for it. It is measured from
  the scheduler's own statistics, as wall-clock time minus the time on a CPU minus the time
  spent waiting *for* a CPU, so a busy machine, which only adds to the last, changes nothing.

Both are measured outside the submission's process, so nothing it does there can hide them,
and both are independent of load: a correct answer never comes near the budget on any
machine. A run that goes over ends at once; the checks not yet graded score 0 with a sentence
that says why, and the run is the submission's, not the grader's failure (it counts against a
feedback service's limit like any graded check).

A unit's budget is sized from what its reference costs (`Unit.reference_cost`, measured with
`python3 course.py check UNIT solutions/... --json`, whose report has a "budget" entry), by
`budget_for`: several times that, plus a fixed allowance for a slower machine and a
slower correct answer.
"""

from __future__ import annotations

from dataclasses import dataclass

# A correct answer may be several times slower than the reference (loops instead of one einsum,
# a BPE that recounts every pair) and the machine slower than the one the costs were measured on.
CPU_FACTOR = 4.0
CPU_ALLOWANCE = 60.0  # seconds
# Nothing the course asks for waits: the allowance covers reading files from a cold disk.
WAITING_SECONDS = 30.0


@dataclass(frozen=True)
class Budget:
    cpu_seconds: float
    waiting_seconds: float = WAITING_SECONDS

    def to_json(self) -> dict:
        return {"cpu_seconds": self.cpu_seconds, "waiting_seconds": self.waiting_seconds}


def budget_for(reference_cpu_seconds: float) -> Budget:
    """The budget of a run whose reference needs `reference_cpu_seconds` of CPU."""
    return Budget(cpu_seconds=round(CPU_FACTOR * reference_cpu_seconds + CPU_ALLOWANCE))


# The start of a message that says a run went over its budget (student.py's and kernel.py's).
OVER_BUDGET = "your code used up this grading's budget"


class Meter:
    """A submission's spending against a `Budget`: closed accounts (processes that have ended)
    plus whatever the live one reports. Plain arithmetic; the measuring is the caller's."""

    # What a budget covers, as its sentence says it: the hidden tests' run (every check, and the
    # cells the grader runs), or the run of the whole notebook that makes its feedback page.
    CHECKS = ("for all the checks and the notebook's cells together",
              "The cells the grader runs count too (the setup cells, your answers, and any cell you added)")
    PAGE = ("for all the notebook's cells together", "Every cell counts")

    def __init__(self, budget: Budget | None, covers: tuple[str, str] = CHECKS):
        self.budget, self.covers = budget, covers
        self.cpu = 0.0  # of processes that have ended, and of the grader's answers to callbacks
        self.waiting = 0.0  # of requests (or cells) that have ended
        self.exceeded: str | None = None  # the sentence, once over

    def over(self, cpu_now: float, waiting_now: float, doing: str) -> str | None:
        """The sentence that says the budget is used up, with `cpu_now` and `waiting_now` spent
        beyond the closed accounts while `doing` ("cell 3 ran"); None while there is room. Once
        over, it stays over."""
        if self.exceeded or self.budget is None:
            return self.exceeded
        covers, counts = self.covers
        if self.cpu + cpu_now > self.budget.cpu_seconds:
            self.exceeded = (f"{OVER_BUDGET} of {self.budget.cpu_seconds:g} s of computing (CPU time, {covers}) while "
                             f"{doing}. {counts}: take long computations out of them")
        elif self.waiting + waiting_now > self.budget.waiting_seconds:
            self.exceeded = (f"{OVER_BUDGET} of {self.budget.waiting_seconds:g} s of waiting (time your code spent "
                             f"blocked, sleeping or reading something that never came, {covers}) while {doing}. "
                             f"{counts}: take time.sleep, input() and other waits out of them")
        return self.exceeded

    def report(self, cpu_now: float = 0.0, waiting_now: float = 0.0) -> dict:
        return {"cpu_seconds": round(self.cpu + cpu_now, 2), "waiting_seconds": round(self.waiting + waiting_now, 2),
                "allowed": self.budget.to_json() if self.budget else None, "exceeded": self.exceeded}
