"""The feedback service (`course.py feedback-server`) against hostile input: no token or a
wrong one, malformed and oversized uploads, a body that is not a notebook, another unit's
notebook, path names in the unit field, a body naming another student, a flood from one
token. Every one gets a status and one sentence, the service stays up, and another student
is still served. Also: the limit survives a restart, the grader's own failures and a busy
service do not count against a student, tokens are stored as hashes, and the report.

One real service (one grading worker, unit 01, one check per part an hour) serves the tests
that need real grading; the others run a service on a stand-in pool, which grades nothing.
"""

from __future__ import annotations

import json
import socket
import threading
import urllib.error
import urllib.request
from concurrent.futures import Future
from concurrent.futures import ThreadPoolExecutor as Threads

import pytest

from autograder import feedback, feedback_server
from autograder.feedback_db import BAD_INPUT, BUSY, GRADED, GRADER_FAILED, OVER_LIMIT, Database
from autograder.feedback_server import Grading, Service, notebook_of
from autograder.paths import ROOT

UNIT = "01_attention"
SUBMISSIONS = ROOT / "tests" / "submissions" / UNIT


def post(port: int, token: str | None, body=None, raw: bytes | None = None, timeout=60) -> tuple[int, dict]:
    data = raw if raw is not None else json.dumps(body).encode()
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    request = urllib.request.Request(f"http://127.0.0.1:{port}/api/check", data=data, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def announce(port: int, token: str | None, length: int = 100_000_000) -> tuple[int, dict]:
    """Announce a body of `length` bytes, send 1 KB of it, and read the answer."""
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.sendall(f"POST /api/check HTTP/1.1\r\nHost: x\r\n{auth}Content-Length: {length}\r\n\r\n".encode()
                     + b"{" * 1000)
        received = b""
        while chunk := sock.recv(65536):  # the service closes the connection after its answer
            received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


def check_body(name: str, part: str = "all", **extra) -> dict:
    return {"unit": UNIT, "part": part, "notebook": notebook_of((SUBMISSIONS / f"{name}.py").read_text()), **extra}


def one_sentence(answer: dict) -> str:
    message = answer["error"]
    assert isinstance(message, str) and 10 < len(message) < 300 and "\n" not in message
    assert "Traceback" not in message and "/work" not in message and str(ROOT) not in message
    return message


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    db = Database(f"sqlite:///{tmp_path_factory.mktemp('feedback') / 'feedback.db'}")
    tokens = db.add_students(["ada", "ben", "cy"])
    grading = Grading(workers=1)
    service = Service([UNIT], db, grading, limit=1, log=lambda line: None)
    try:
        port = service.start()
        yield service, port, tokens
    finally:
        service.stop()


def records_of(service: Service, student: str) -> list[dict]:
    return [r for r in service.db.records() if r["student"] == student]


def test_no_token_or_a_wrong_one_is_refused_and_not_recorded(served):
    service, port, tokens = served
    before = service.db.count()
    for token in (None, "", "not-a-token", tokens["ada"][:-1], tokens["ada"] + "x", "Basic " + tokens["ada"]):
        status, answer = post(port, token, check_body("correct_einsum"))
        assert status == 401, token
        one_sentence(answer)
    status, answer = announce(port, None)  # and a huge body without a token is refused unread
    assert status == 401
    assert service.db.count() == before


def test_malformed_and_not_notebooks_get_a_sentence_each(served):
    service, port, tokens = served
    sent = {
        b"{not json": "not JSON",
        b"[" * 100_000 + b"]" * 100_000: "not JSON",  # nested past the parser's recursion limit
        b"\xff\xfe\x00garbage": "not JSON",
        b'["a list"]': "JSON object",
        json.dumps({"unit": UNIT, "notebook": "a string"}).encode(): "not a Jupyter notebook",
        json.dumps({"unit": UNIT, "notebook": {"cells": "x"}}).encode(): "not a Jupyter notebook",
        json.dumps({"unit": UNIT, "notebook": {"nbformat": 3, "worksheets": []}}).encode(): "not a Jupyter notebook",
        json.dumps({"unit": UNIT, "part": ["softmax"], "notebook": notebook_of("")}).encode(): "name of a graded part",
        json.dumps({"unit": UNIT, "part": "../softmax", "notebook": notebook_of("")}).encode(): "no graded part",
    }
    before = len(records_of(service, "ada"))
    for raw, says in sent.items():
        status, answer = post(port, tokens["ada"], raw=raw)
        assert status == 400, raw[:40]
        assert says in one_sentence(answer), (raw[:40], answer)
    mine = records_of(service, "ada")[before:]
    assert [r["outcome"] for r in mine] == [BAD_INPUT] * len(sent) and not any(r["counts"] for r in mine)


def test_another_units_notebook_is_named(served):
    service, port, tokens = served
    masking = json.loads((ROOT / "exercises" / "02_masking" / "masking.ipynb").read_text())
    status, answer = post(port, tokens["cy"], {"unit": UNIT, "part": "all", "notebook": masking})
    assert status == 400
    assert one_sentence(answer) == "this is the notebook of 02_masking, not of 01_attention"


def test_path_names_in_the_unit_field_are_only_compared(served):
    service, port, tokens = served
    for unit in ("../../etc/passwd", "01_attention/../x", "/etc/passwd", "01_attention\x00", "01_ATTENTION", 1, None,
                 ["01_attention"], "x" * 10_000):
        status, answer = post(port, tokens["cy"], {"unit": unit, "part": "all", "notebook": notebook_of("")})
        assert status == 404, unit
        assert one_sentence(answer) == "this feedback service does not grade that unit; it grades 01_attention"
    assert {r["unit"] for r in records_of(service, "cy")} >= {"../../etc/passwd", "01_attention/../x", "x" * 100}
    status, answer = post(port, tokens["cy"], raw=b"{}")  # no unit at all
    assert status == 404


def test_oversized_uploads_are_refused_and_a_huge_one_unread(served):
    service, port, tokens = served
    for extra, size in ((10, "4.2"), (1_000_000, "5.2")):  # a notebook over the limit; a body over it too
        big = check_body("correct_einsum")
        big["notebook"]["cells"].append({"cell_type": "raw", "metadata": {}, "id": "x",
                                         "source": "x" * (feedback.MAX_NOTEBOOK_BYTES + extra)})
        status, answer = post(port, tokens["cy"], big)  # sent whole: the client reads the sentence
        assert status == 413
        assert one_sentence(answer).startswith(f"the notebook is {size} MB, over the 4 MB limit")
    # 100 MB announced, 1 KB sent: the answer comes before the body, so none of it was buffered.
    status, answer = announce(port, tokens["cy"])
    assert status == 413
    assert one_sentence(answer).startswith("the notebook is 100.0 MB, over the 4 MB limit")
    assert [r["error"][:20] for r in records_of(service, "cy")[-3:]] == [
        "the notebook is 4.2 ", "the notebook is 5.2 ", "the notebook is 100."]
    assert post(port, None, raw=b"")[0] == 401  # and the service is still up


def test_a_flood_from_one_token_takes_one_slot_and_another_student_is_still_served(served):
    service, port, tokens = served
    # 20 checks of one part at once, with the limit at one: exactly one is graded. Each body names
    # another student, which is ignored: the token decides whose check it is.
    flood = check_body("correct_einsum", "softmax", student="ben", token=tokens["ben"], user="ben")
    with Threads(20) as pool:
        answers = list(pool.map(lambda _: post(port, tokens["ada"], flood), range(20)))
    statuses = sorted(status for status, _ in answers)
    assert statuses == [200] + [429] * 19
    refused = [answer for status, answer in answers if status == 429]
    assert all(answer["retry_after"] > 3500 for answer in refused)
    assert "you can check it again in 60 minutes" in one_sentence(refused[0])
    graded = next(answer for status, answer in answers if status == 200)
    assert graded["score"] == graded["max_score"] == 4 and [p["name"] for p in graded["parts"]] == ["softmax"]
    # "all" needs room in every part: softmax has none left.
    assert post(port, tokens["ada"], check_body("correct_einsum"))[0] == 429
    # Another student is served, with the mistake named, and the flood is all on ada's record.
    status, answer = post(port, tokens["ben"], check_body("wrong_no_scaling", "self_attention"))
    assert status == 200
    assert answer["parts"][0]["mistakes"] == ["no_scaling"]
    ada, ben = records_of(service, "ada"), records_of(service, "ben")
    assert sum(r["outcome"] == GRADED for r in ada) == 1 and sum(r["outcome"] == OVER_LIMIT for r in ada) == 20
    assert [(r["part"], r["outcome"], r["score"]) for r in ben] == [("self_attention", GRADED, 0.0)]
    assert ben[0]["parts"]["self_attention"]["mistakes"] == ["no_scaling"]
    health = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/api/health", timeout=30).read())
    assert health == {"ok": True, "units": [UNIT]}


# ---------------------------------------------------------------- on a stand-in pool


class StandIn:
    """A pool that grades nothing: each check is answered with the next of `outcomes` (a
    result, or an exception the future raises), or left in flight in `pending` while `hold`
    is set. A check nobody planned for fails as a lost worker would (a 503), at once."""

    def __init__(self):
        self.outcomes: list = []
        self.pending: list[Future] = []
        self.hold = False

    def submit(self, task, function=None):
        future = Future()
        if self.hold:
            self.pending.append(future)
            return future
        outcome = self.outcomes.pop(0) if self.outcomes else RuntimeError("a check the test did not plan for")
        (future.set_exception if isinstance(outcome, BaseException) else future.set_result)(outcome)
        return future

    @staticmethod
    def outcome(future):
        return future.result()

    def close(self, cancel=False):
        pass


def report(score: float, mistakes: dict[str, list[str]]) -> dict:
    parts = [{"name": name, "points": score if not named else 0.0, "max_points": 4.0, "text": "", "mistakes": named}
             for name, named in mistakes.items()]
    return {"unit": UNIT, "parts": parts, "score": sum(p["points"] for p in parts),
            "max_score": 4.0 * len(parts)}


def stand_in_service(url: str, **options) -> tuple[Service, StandIn, int, dict]:
    db = Database(url)
    tokens = db.add_students(["ada", "ben"])
    pool = StandIn()
    service = Service([UNIT], db, Grading(engine=pool), log=lambda line: None, **options)
    return service, pool, service.start(), tokens


def test_grader_failures_and_busy_do_not_count_and_the_limit_survives_a_restart(tmp_path):
    url = f"sqlite:///{tmp_path / 'feedback.db'}"
    service, pool, port, tokens = stand_in_service(url, limit=1, queue=1)
    body = {"unit": UNIT, "part": "softmax", "notebook": notebook_of("")}
    graded = {"ok": True, "report": report(4.0, {"softmax": []})}
    try:
        pool.outcomes += [{"ok": False, "kind": "grader", "error": "the hidden tests gave no report"},
                          RuntimeError("a worker died")]  # the future itself fails: the same answer
        for _ in range(2):
            status, answer = post(port, tokens["ada"], body)
            assert status == 503 and "not your notebook's fault" in one_sentence(answer)
        # Busy: one check in flight fills a queue of one; the next is refused, and not counted.
        pool.hold = True
        with Threads(1) as thread:
            waiting = thread.submit(post, port, tokens["ben"], body)
            while not pool.pending:
                threading.Event().wait(0.01)
            status, answer = post(port, tokens["ada"], body)
            assert status == 503 and "busy" in one_sentence(answer)
            pool.pending[0].set_result(graded)
            assert waiting.result()[0] == 200
        pool.hold = False
        pool.outcomes.append(graded)
        assert post(port, tokens["ada"], body)[0] == 200  # ada's failures and busy took no slot
        assert post(port, tokens["ada"], body)[0] == 429
    finally:
        service.stop()
    assert [r["outcome"] for r in Database(url).records() if r["student"] == "ada"] == [
        GRADER_FAILED, GRADER_FAILED, BUSY, GRADED, OVER_LIMIT]
    service, pool, port, tokens = stand_in_service(url, limit=1)  # a restart (new tokens), the same records
    try:
        status, answer = post(port, tokens["ada"], body)
        assert status == 429 and 0 < answer["retry_after"] <= 3600
        pool.outcomes.append({"ok": True, "report": report(4.0, {"self_attention": []})})
        assert post(port, tokens["ada"], {**body, "part": "self_attention"})[0] == 200  # another part has room
        # A check of every part takes a slot of each.
        cy = service.db.add_students(["cy"])["cy"]
        pool.outcomes.append({"ok": True, "report": report(4.0, {"softmax": [], "self_attention": []})})
        assert post(port, cy, {**body, "part": "all"})[0] == 200
        assert post(port, cy, {**body, "part": "self_attention"})[0] == 429
    finally:
        service.stop()


def test_add_students_prints_tokens_and_stores_only_their_hashes(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'feedback.db'}"
    csv_path = tmp_path / "tokens.csv"
    assert feedback_server.main(["--add-students", "ada, ben", "--db", url, "--csv", str(csv_path)]) == 0
    lines = capsys.readouterr().out.split("\n")
    tokens = dict(line.split(" ") for line in lines if line)
    assert sorted(tokens) == ["ada", "ben"] and len(set(tokens.values())) == 2
    assert csv_path.read_text().splitlines() == ["student,token"] + [f"{n},{t}" for n, t in sorted(tokens.items())]
    db = Database(url)
    assert db.student_for(tokens["ben"])[1] == "ben" and db.student_for(tokens["ada"] + "x") is None
    stored = (tmp_path / "feedback.db").read_bytes()
    assert not any(token.encode() in stored for token in tokens.values())
    assert feedback_server.main(["--add-students", "ada", "--db", url]) == 0  # a new token: the old one stops
    assert db.student_for(tokens["ada"]) is None
    assert feedback_server.main(["--add-students", "../x,ok", "--db", url]) == 2
    assert "not a student name" in capsys.readouterr().err


def test_the_report_counts_students_and_checks_most_common_first(tmp_path, capsys):
    db = Database(f"sqlite:///{tmp_path / 'feedback.db'}")
    ids = {name: db.student_for(token)[0] for name, token in db.add_students(["ada", "ben", "cy"]).items()}

    def graded(student: str, part_mistakes: dict[str, list[str]]) -> None:
        check = db.open_check(ids[student], UNIT, "all", "in flight", counts=True)
        db.close_check(check, GRADED, True, report(4.0, part_mistakes))

    graded("ada", {"softmax": ["unstable_softmax"], "self_attention": ["no_scaling"]})
    graded("ada", {"softmax": ["unstable_softmax"], "self_attention": []})
    graded("ben", {"softmax": ["softmax_axis_zero"], "self_attention": ["no_scaling"]})
    graded("ben", {"softmax": ["softmax_axis_zero"], "self_attention": ["no_scaling"]})
    graded("ben", {"softmax": ["softmax_axis_zero"], "self_attention": ["no_scaling"]})
    graded("cy", {"softmax": ["unstable_softmax"], "self_attention": []})
    db.open_check(ids["cy"], UNIT, "softmax", OVER_LIMIT)  # not graded: not in the report
    db.close()
    assert feedback_server.report_main([UNIT, "--db", db.url]) == 0
    out = capsys.readouterr().out
    softmax = out.split("softmax:", 1)[1].split("\n\n")[0].splitlines()
    assert softmax[0].strip() == "3 students checked it, 0 reached full marks"
    # unstable_softmax: 2 students (3 checks) before softmax_axis_zero: 1 student (3 checks).
    assert "2 students" in softmax[1] and "3 checks" in softmax[1] and "a softmax that exponentiates" in softmax[1]
    assert "1 student " in softmax[2] and "3 checks" in softmax[2] and "(softmax_axis_zero)" in softmax[2]
    attention = out.split("self_attention:", 1)[1].splitlines()
    assert attention[0].strip() == "3 students checked it, 2 reached full marks"
    assert "2 students" in attention[1] and "4 checks" in attention[1] and "sqrt(d_k)" in attention[1]
    assert "scaled_dot_product_attention: 0 students checked it" in out
