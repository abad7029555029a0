"""The feedback service under a class's load (issue 19's "Must show"), alone and beside an
attacker (issue 26): 50 checks sent at once by 25 students to a service on localhost get 50
answers; every graded answer is what `python -m autograder feedback` (`course.py check`'s run)
says of the same file; the limit, set to one check per part, refuses exactly the checks over
it, in the order the service took them; and the database holds every request, each as
answered. Then 25 more students send the same checks while one student attacks with a slow
notebook, 200 connections of one token and four streams of 4 MB parse-heavy bodies: every
honest check is still answered, and answered right (never "busy"), and the attacker's requests
are refused past the caps.

`load_test.load_test` does the work, the same function `course.py bench feedback` runs for
its figures (the latencies are printed there, not asserted here).
"""

from __future__ import annotations

from autograder.feedback import service
from autograder.feedback.db import GRADED, OVER_LIMIT
from autograder.tools import load_test


def test_fifty_checks_at_once_from_twenty_five_students_alone_and_beside_an_attacker():
    result = load_test.load_test(students=25, limit=1, workers=2, attacker=True, log=lambda line: None)
    assert result["problems"] == []
    for figures in (result, result["attacked"]):
        assert figures["sent"] == figures["answered"] == 50
        # Each student sends one part twice, or "all" and one part (load_test.LOAD_PATTERNS):
        # whichever the service takes first uses that part's one check, so the other is refused.
        assert figures["graded"] == figures["refused"] == figures["refused_expected"] == 25
        assert {status for status, _, _ in figures["answers"]} == {200, 429}
        named = {m for status, body, _ in figures["answers"] if status == 200 for p in body["parts"]
                 for m in p["mistakes"]}
        assert {"no_scaling", "softmax_axis_zero"} <= named  # the catalogue's names reach the students
    assert result["records"] == 50
    # The attacker's 200 held connections: its line of checks held, the rest refused (429, or
    # closed with the body unread); no stream of parse-heavy bodies was ever graded.
    attack = result["attack"]
    held = {key.removeprefix("held "): value for key, value in attack.items() if key.startswith("held ")}
    assert held["open unanswered"] <= service.PER_STUDENT, attack
    assert held.get("429", 0) + held.get("closed unanswered", 0) >= 200 - service.PER_STUDENT, attack
    assert not any(key.startswith("stream 200") for key in attack), attack


def test_the_limit_follows_the_order_the_checks_were_taken():
    # The rule the load test holds the service to, on its own: "all" needs room in every part.
    order = ["all", "softmax", "self_attention", "all"]
    assert load_test.expected_outcomes(order, "01_attention", 1) == [GRADED, OVER_LIMIT, OVER_LIMIT, OVER_LIMIT]
    assert load_test.expected_outcomes(order, "01_attention", 2) == [GRADED, GRADED, GRADED, OVER_LIMIT]


def test_slow_notebooks_cost_their_sender_only():
    """Issue 26's scenario, with two grading workers and one check per part: a student's two
    checks of a notebook whose cells wait end within the unit's budget, say so, and count (the
    next check of either part is refused); a classmate's honest check sent 20 s later is answered
    within 2 minutes (it gets the other worker: the student's second check waits behind the first)."""
    result = load_test.slow_notebook_scenario(workers=2, delay=20, classmate_within=120, log=lambda line: None)
    assert result["problems"] == []
    assert result["classmate_status"] == 200
