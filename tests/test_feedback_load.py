"""The feedback service under a class's load (issue 19's "Must show"): 50 checks sent at once by
25 students to a service on localhost get 50 answers; every graded answer is what
`python -m autograder feedback` (`course.py check`'s run) says of the same file; the limit,
set to one check per part, refuses exactly the checks over it, in the order the service took
them; and the database holds one record per request, each as answered.

`feedback_server.load_test` does the work, the same function `course.py bench feedback`
runs for its figures.
"""

from __future__ import annotations

from autograder import feedback_server
from autograder.feedback_db import GRADED, OVER_LIMIT


def test_fifty_checks_at_once_from_twenty_five_students():
    result = feedback_server.load_test(students=25, limit=1, workers=2, log=lambda line: None)
    assert result["problems"] == []
    assert result["sent"] == result["answered"] == 50
    assert result["records"] == 50
    # Each student sends one part twice, or "all" and one part (feedback_server.LOAD_PATTERNS):
    # whichever the service takes first uses that part's one check, so the other is refused.
    assert result["graded"] == result["refused"] == result["refused_expected"] == 25
    assert {status for status, _, _ in result["answers"]} == {200, 429}
    named = {m for status, body, _ in result["answers"] if status == 200 for p in body["parts"] for m in p["mistakes"]}
    assert {"no_scaling", "softmax_axis_zero"} <= named  # the catalogue's names reach the students


def test_the_limit_follows_the_order_the_checks_were_taken():
    # The rule the load test holds the service to, on its own: "all" needs room in every part.
    order = ["all", "softmax", "self_attention", "all"]
    assert feedback_server.expected_outcomes(order, "01_attention", 1) == [GRADED, OVER_LIMIT, OVER_LIMIT,
                                                                             OVER_LIMIT]
    assert feedback_server.expected_outcomes(order, "01_attention", 2) == [GRADED, GRADED, GRADED, OVER_LIMIT]
