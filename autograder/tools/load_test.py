"""The feedback service under a class's load, alone and beside an attacker (`course.py bench
feedback`, and tests/test_feedback_load.py).

`load_test`: 25 students each send two checks of unit 01 (or 07: LOAD_CLASSES) at once to a service on localhost;
every answer is compared with `python -m autograder feedback` on the same file, the refusals
with what the limit allows in the order the service took the checks, and the database with
the requests sent. With `attacker=True` the same class (25 more students, the same checks)
then sends again while one more student attacks: a notebook whose scratch cell waits (it holds
a grading worker until the run's budget ends it), 200 connections of that student's token each
announcing a 4 MB notebook and never finishing it, and four streams of 4 MB bodies of a million
empty cells. The honest students' median and 95th-percentile latency are printed for both,
side by side, with the event loop's longest stall.

`slow_notebook_scenario`: the slow notebook on its own, against the behaviour intended once
grading has a budget per run: the attacker's check ends with a normal report and counts (the
next check of that part is refused), and a classmate's check sent 20 s later is answered within
2 minutes with two grading workers (`course.py bench feedback --slow`).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import selectors
import socket
import statistics
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from pathlib import Path

from ..feedback import db as records
from ..feedback import reports
from ..feedback.db import Database
from ..feedback.service import Grading, Service
from ..paths import ROOT

LOAD_UNIT = "01_attention"  # the class's unit by default, and the attacker's
LOAD_FILES = ("correct_einsum", "wrong_no_scaling", "wrong_softmax_axis_zero")  # each costs a CLI run
# What each student sends at once, in turn: one part twice; every part and one part; one part and
# every part. With one check per part allowed, exactly one of each pair is over the limit.
LOAD_PATTERNS = (("softmax", "softmax"), ("all", "scaled_dot_product_attention"), ("self_attention", "all"))
# The classes a load test can send (`load_test(unit=...)`): their files and patterns, as above.
LOAD_CLASSES = {
    LOAD_UNIT: (LOAD_FILES, LOAD_PATTERNS),
    "07_flash_training": (("correct_einsum_tiles", "wrong_flash_no_rescale", "wrong_train_no_zero_grad"),
                          (("flash_attention", "flash_attention"), ("all", "time_fn"), ("train", "all"))),
}
ATTACK_CONNECTIONS, ATTACK_STREAMS = 200, 4
# A scratch cell that waits about 30 minutes, computing some 40 ms every 8 s: inside every per-cell
# limit (CPU time, the 20 s no-progress rule, the wall-clock backstop); the run's budget of waiting
# (autograder/trust/budget.py) is what ends it. (Each burst must outlast the kernel's 10 ms tick of CPU
# accounting, or the no-progress rule may see nothing and stop the cell first.)
SLOW_CELL = "import time\nfor _ in range(225):\n    sum(range(2_000_000))\n    time.sleep(8)\n"


def notebook_of(*sources: str) -> dict:
    """A notebook whose code cells are `sources` (the grader grades a notebook on its code)."""
    return {"nbformat": 4, "nbformat_minor": 5, "metadata": {},
            "cells": [{"cell_type": "code", "id": f"cell{i}", "metadata": {}, "execution_count": None,
                       "outputs": [], "source": source} for i, source in enumerate(sources)]}


def notebook_bytes(*sources: str) -> bytes:
    return json.dumps(notebook_of(*sources)).encode()


def parse_heavy_body(size: int = reports.MAX_NOTEBOOK_BYTES) -> bytes:
    """A notebook of `size` bytes at most that is nothing but empty cells (about a million in
    4 MB): the costliest JSON to parse for its size."""
    head, tail = b'{"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [', b"]}"
    count = (size - len(head) - len(tail) + 1) // 3
    return head + b",".join([b"{}"] * count) + tail


def check_url(port: int, unit: str, part: str) -> str:
    return f"http://127.0.0.1:{port}/api/check?{urllib.parse.urlencode({'unit': unit, 'part': part})}"


def request_head(port: int, token: str, unit: str, part: str, length: int) -> bytes:
    query = urllib.parse.urlencode({"unit": unit, "part": part})
    return (f"POST /api/check?{query} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {token}\r\n"
            f"Content-Type: application/x-ipynb+json\r\nContent-Length: {length}\r\n\r\n").encode()


def post(port: int, token: str, unit: str, part: str, body: bytes, timeout: float = 1800) -> tuple[int, dict]:
    """One check, as the check line sends it: (status, answer)."""
    request = urllib.request.Request(check_url(port, unit, part), data=body, method="POST", headers={
        "Authorization": f"Bearer {token}", "Content-Type": "application/x-ipynb+json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")


def cut_report(report: dict, part: str) -> dict:
    """`report` (every part) cut down to the part asked, as `feedback_for` answers for that part."""
    parts = [p for p in report["parts"] if part == reports.ALL or p["name"] == part]
    return {"unit": report["unit"], "parts": parts, "score": sum(p["points"] for p in parts),
            "max_score": sum(p["max_points"] for p in parts)}


def expected_outcomes(parts_in_order: list[str], unit: str, limit: int) -> list[str]:
    """What the limit should make of one student's checks, in the order the service took them."""
    from ..units import get_unit

    names = [p.name for p in get_unit(unit).parts]
    used = dict.fromkeys(names, 0)
    outcomes = []
    for part in parts_in_order:
        asked = names if part == reports.ALL else [part]
        if all(used[name] < limit for name in asked):
            for name in asked:
                used[name] += 1
            outcomes.append(records.GRADED)
        else:
            outcomes.append(records.OVER_LIMIT)
    return outcomes


def latency(seconds: list[float]) -> tuple[float, float]:
    """(median, 95th percentile) of `seconds`, the nearest-rank percentile."""
    if not seconds:
        return float("nan"), float("nan")
    ordered = sorted(seconds)
    return statistics.median(ordered), ordered[max(0, -(-95 * len(ordered) // 100) - 1)]


# ---------------------------------------------------------------- the attacker (a process of its own)


def attack(port: int, token: str, stop, connections: int = ATTACK_CONNECTIONS, streams: int = ATTACK_STREAMS,
           slow: bool = True) -> dict:
    """One student's attack, with one token, until `stop` (an Event) is set: a slow notebook
    (sent first, so that it holds its grading worker throughout), `connections` connections
    each announcing a 4 MB notebook and never sending its last byte, and `streams` streams of
    4 MB parse-heavy bodies, each sent whole, its answer read, then the next. What the service
    answered, counted by status."""
    answered: Counter = Counter()
    lock = threading.Lock()

    def count(key) -> None:
        with lock:
            answered[key] += 1

    threads = []
    if slow:
        def send_slow() -> None:
            source = (ROOT / "tests" / "submissions" / LOAD_UNIT /
                      "correct_einsum.py").read_text()
            try:
                status, _ = post(port, token, LOAD_UNIT, reports.ALL, notebook_bytes(source, SLOW_CELL))
                count(f"slow {status}")
            except OSError as err:
                count(f"slow {type(err).__name__}")

        threads.append(threading.Thread(target=send_slow, daemon=True))
    heavy = parse_heavy_body()

    in_flight = Counter()

    def stream() -> None:
        while not stop.is_set():
            with lock:
                in_flight["stream"] += 1
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
                    sock.sendall(request_head(port, token, LOAD_UNIT, "softmax", len(heavy)) + heavy)
                    count(f"stream {read_status(sock)}")
            except OSError as err:
                count(f"stream {type(err).__name__}")
                time.sleep(0.05)
            finally:
                with lock:
                    in_flight["stream"] -= 1

    threads += [threading.Thread(target=stream, daemon=True) for _ in range(streams)]
    threads[0].start()
    time.sleep(2.0 if slow else 0.0)  # the slow check first: it is the one being graded
    for thread in threads[1:]:
        thread.start()
    held = hold_connections(port, token, connections, stop)
    for key, value in held.items():
        answered[f"held {key}"] += value
    with lock:  # a stream whose check waits in its student's line, its body unread
        answered["stream unanswered at the end"] = in_flight["stream"]
    if slow:
        answered["slow unanswered at the end"] = int(threads[0].is_alive())
    return dict(answered)


def read_status(sock: socket.socket) -> int | str:
    """The status of the answer on `sock` (read until the service closes it, or its headers
    and body are in)."""
    received = b""
    while b"\r\n\r\n" not in received:
        chunk = sock.recv(65536)
        if not chunk:
            return "closed"
        received += chunk
    return int(received.split(None, 2)[1])


def hold_connections(port: int, token: str, count: int, stop, answered: Counter | None = None) -> Counter:
    """`count` connections of one token, each announcing a 4 MB notebook and sending all of it
    but its last byte, held open until `stop`. How each ended, counted in `answered` as it
    happens: the status of the answer it got, "closed unanswered" (closed or reset by the
    service before an answer was read), and at the end "open unanswered"."""
    body = memoryview(notebook_bytes("x = '" + "x" * (reports.MAX_NOTEBOOK_BYTES - 300) + "'"))
    head = request_head(port, token, LOAD_UNIT, "softmax", len(body))
    answered = Counter() if answered is None else answered
    selector = selectors.DefaultSelector()
    states = {}
    try:
        for _ in range(count):
            sock = socket.create_connection(("127.0.0.1", port), timeout=30)
            sock.setblocking(False)
            states[sock] = {"out": [memoryview(head), body[:-1]], "in": b"", "status": None}
            selector.register(sock, selectors.EVENT_READ | selectors.EVENT_WRITE)
        while not stop.is_set() and states:
            for key, events in selector.select(0.2):
                sock, state = key.fileobj, states[key.fileobj]
                ended = False
                if events & selectors.EVENT_WRITE and state["out"]:
                    try:
                        while state["out"]:
                            sent = sock.send(state["out"][0])
                            state["out"][0] = state["out"][0][sent:]
                            if not len(state["out"][0]):
                                state["out"].pop(0)
                    except BlockingIOError:
                        pass
                    except OSError:
                        state["out"], ended = [], True
                    if not state["out"] and not ended:
                        selector.modify(sock, selectors.EVENT_READ)
                if events & selectors.EVENT_READ and not ended:
                    try:
                        chunk = sock.recv(65536)
                    except BlockingIOError:
                        continue
                    except OSError:
                        chunk = b""
                    state["in"] += chunk
                    if state["status"] is None and b"\r\n\r\n" in state["in"]:
                        state["status"] = int(state["in"].split(None, 2)[1])
                        answered[state["status"]] += 1
                    ended = not chunk
                if ended:
                    if state["status"] is None:
                        answered["closed unanswered"] += 1
                    selector.unregister(sock)
                    sock.close()
                    del states[sock]
    finally:
        answered["open unanswered"] = sum(1 for state in states.values() if state["status"] is None)
        for sock in states:
            sock.close()
    return answered


def _attack_process(port: int, token: str, stop, results, options: dict) -> None:
    results.put(attack(port, token, stop, **options))


class Attacker:
    """`attack` in a process of its own (spawned): its sockets, threads and GIL are not the
    service's, as a student's machine's would not be."""

    def __init__(self, port: int, token: str, **options):
        import multiprocessing

        context = multiprocessing.get_context("spawn")
        self.stop, self.results = context.Event(), context.Queue()
        self.process = context.Process(target=_attack_process, args=(port, token, self.stop, self.results, options),
                                       daemon=True)
        self.process.start()

    def finish(self, timeout: float = 120) -> dict:
        self.stop.set()
        try:
            return self.results.get(timeout=timeout)
        except Exception:  # noqa: BLE001 - no report: say so, the figures stand without it
            return {"no report from the attacker": 1}
        finally:
            self.process.join(10)
            if self.process.is_alive():
                self.process.kill()


# ---------------------------------------------------------------- the class


def cli_reports(folder: Path, sources: dict[str, str], workers: int | None, unit: str = LOAD_UNIT) -> dict:
    """`python -m autograder feedback` (`course.py check`'s run) on each file, as JSON."""
    import subprocess
    from concurrent.futures import ThreadPoolExecutor

    from ..paths import ROOT

    for name, source in sources.items():
        (folder / f"{name}.ipynb").write_bytes(notebook_bytes(source))

    def cli(name: str) -> dict:
        proc = subprocess.run([sys.executable, "-m", "autograder", "feedback", unit,
                               str(folder / f"{name}.ipynb"), "--part", "all"],
                              cwd=ROOT, capture_output=True, text=True, timeout=600)
        return json.loads(proc.stdout)

    with ThreadPoolExecutor(workers or os.cpu_count() or 1) as pool:
        return dict(zip(sources, pool.map(cli, sources), strict=True))


def send_at_once(port: int, tokens: dict[str, str], plan: list[tuple[str, str, str]],
                 bodies: dict[str, bytes], unit: str = LOAD_UNIT) -> list[tuple[int, dict, float]]:
    """Every check of `plan` (student, part, file) sent at once: (status, answer, seconds)."""
    from tornado.httpclient import AsyncHTTPClient, HTTPRequest

    async def send_all() -> list:
        client = AsyncHTTPClient(force_instance=True, max_clients=len(plan))
        started = time.perf_counter()

        async def one(student: str, part: str, name: str):
            request = HTTPRequest(check_url(port, unit, part), method="POST", body=bodies[name],
                                  headers={"Authorization": f"Bearer {tokens[student]}",
                                           "Content-Type": "application/x-ipynb+json"},
                                  request_timeout=1800, connect_timeout=60)
            response = await client.fetch(request, raise_error=False)
            return response.code, json.loads(response.body or b"{}"), time.perf_counter() - started

        try:
            return await asyncio.gather(*(one(*sent) for sent in plan))
        finally:
            client.close()

    return asyncio.run(send_all())


def check_class(names: list[str], plan: list, answers: list, db: Database, expected: dict, limit: int,
                file_of: dict, unit: str = LOAD_UNIT) -> tuple[list[str], int]:
    """What is wrong with the answers and records of these students (one line each), and how
    many of their checks the limit should have refused."""
    problems = []
    for (student, part, name), (status, body, _) in zip(plan, answers, strict=True):
        if status == 200 and body != cut_report(expected[name], part):
            problems.append(f"{student}'s check of {part} ({name}) differs from `python -m autograder feedback`")
        elif status not in (200, 429):
            problems.append(f"{student}'s check of {part} ({name}) was answered {status}: {body}")
    held = [r for r in db.records() if r["student"] in names]
    refusals = [r for r in db.refusals() if r["student"] in names]
    if len(held) + sum(r["count"] for r in refusals) != len(plan):
        problems.append(f"{len(plan)} requests but {len(held)} checks and "
                        f"{sum(r['count'] for r in refusals)} refusals recorded")
    refused_expected = 0
    for student in names:
        mine = [r for r in held if r["student"] == student]  # in the order the service took them
        sent = [(part, a[0]) for (who, part, _), a in zip(plan, answers, strict=True) if who == student]
        refused_parts = [part for part, status in sent if status == 429]
        graded_parts = sorted(part for part, status in sent if status == 200)
        if sorted(r["part"] for r in mine) != graded_parts or any(r["outcome"] != records.GRADED for r in mine):
            problems.append(f"{student} was answered 200 for {graded_parts}, the database holds "
                            f"{[(r['part'], r['outcome']) for r in mine]}")
        # The refused came after the graded (a check taken first would have had room), so the
        # limit applied to that order must refuse exactly them.
        order = [r["part"] for r in mine] + refused_parts
        should = expected_outcomes(order, unit, limit)
        refused_expected += should.count(records.OVER_LIMIT)
        if should != [records.GRADED] * len(mine) + [records.OVER_LIMIT] * len(refused_parts):
            problems.append(f"{student}: the limit should have made {should} of {order}")
        counted = sum(r["count"] for r in refusals if r["student"] == student and r["outcome"] == records.OVER_LIMIT)
        if counted != len(refused_parts):
            problems.append(f"{student}: {len(refused_parts)} answered 429, {counted} refusals recorded")
    for record in held:
        if record["outcome"] == records.GRADED:
            want = cut_report(expected[file_of[record["sha256"]]], record["part"])
            recorded = {name: {key: part[key] for key in ("points", "max_points", "mistakes")}
                        for name, part in record["parts"].items()}  # the failure signatures are the service's own
            if record["score"] != want["score"] or recorded != {
                    p["name"]: {"points": p["points"], "max_points": p["max_points"], "mistakes": p["mistakes"]}
                    for p in want["parts"]}:
                problems.append(f"{record['student']}'s record of {record['part']} differs from its answer")
    return problems, refused_expected


def figures(plan: list, answers: list, refused_expected: int, problems: list[str]) -> dict:
    graded = [a for a in answers if a[0] == 200]
    last = max(seconds for _, _, seconds in answers)
    median, p95 = latency([a[2] for a in graded])
    return {"sent": len(plan), "answered": sum(1 for a in answers if a[0]), "graded": len(graded),
            "refused": sum(1 for a in answers if a[0] == 429), "refused_expected": refused_expected,
            "seconds": last, "checks_per_minute": len(graded) / last * 60 if graded else 0.0,
            "first_answer_s": min(a[2] for a in answers),
            "first_graded_s": min(a[2] for a in graded) if graded else float("nan"),
            "median_s": median, "p95_s": p95, "answers": answers, "plan": plan, "problems": problems}


def load_test(students: int = 25, limit: int = 1, workers: int | None = None, files=None,
              attacker: bool = False, connections: int = ATTACK_CONNECTIONS, streams: int = ATTACK_STREAMS,
              slow: bool = True, unit: str = LOAD_UNIT, log=print) -> dict:
    """See the module's docstring. The class checks `unit` (one of LOAD_CLASSES: its files and
    patterns); the attacker attacks unit 01. Returns the figures of the class alone (and, with
    `attacker`, under "attacked" those of the class beside the attacker), and `problems` (one
    line each; empty when all is as it should be)."""
    import shutil
    import tempfile

    from ..paths import ROOT

    class_files, patterns = LOAD_CLASSES[unit]
    files = files or class_files
    units = list(dict.fromkeys([unit, LOAD_UNIT] if attacker else [unit]))
    folder = Path(tempfile.mkdtemp(prefix="feedback-load-"))
    try:
        sources = {name: (ROOT / "tests" / "submissions" / unit / f"{name}.py").read_text() for name in files}
        started = time.perf_counter()
        expected = cli_reports(folder, sources, workers, unit)
        log(f"`python -m autograder feedback` on the {len(sources)} files: {time.perf_counter() - started:.1f} s")
        bodies = {name: notebook_bytes(source) for name, source in sources.items()}
        file_of = {hashlib.sha256(body).hexdigest(): name for name, body in bodies.items()}

        db = Database(f"sqlite:///{folder / 'feedback.db'}")
        cohorts = {"alone": [f"s{i:02d}" for i in range(students)]}
        if attacker:
            cohorts["attacked"] = [f"t{i:02d}" for i in range(students)]
        tokens = db.add_students([name for names in cohorts.values() for name in names] + ["mallory"])
        grading = Grading(workers)
        service = Service(units, db, grading, limit=limit, log=lambda line: None)
        phases, attack_report = {}, None
        try:
            grading.warm_up(units)
            port = service.start()
            for phase, names in cohorts.items():
                plan = []  # (student, part, file), in the order sent; every file is sent in every pattern
                for i, name in enumerate(names):
                    for part in patterns[i % len(patterns)]:
                        plan.append((name, part, files[i // len(patterns) % len(files)]))
                mallory = None
                if phase == "attacked":
                    mallory = Attacker(port, tokens["mallory"], connections=connections, streams=streams, slow=slow)
                    time.sleep(8)  # the slow check is being graded, the connections are held, the streams flow
                service.stall = 0.0
                answers = send_at_once(port, tokens, plan, bodies, unit)
                stall = service.stall
                if mallory is not None:
                    attack_report = mallory.finish()
                problems, refused_expected = check_class(names, plan, answers, db, expected, limit, file_of, unit)
                phases[phase] = {**figures(plan, answers, refused_expected, problems), "stall_s": stall}
            held = db.records()
            refusals = db.refusals()
        finally:
            service.stop()
    finally:
        shutil.rmtree(folder, ignore_errors=True)

    result = {**phases["alone"], "workers": grading.workers,
              "records": sum(1 for r in held if r["student"] in cohorts["alone"]) + sum(
                  r["count"] for r in refusals if r["student"] in cohorts["alone"]),
              "problems": [f"{phase}: {line}" for phase, figured in phases.items() for line in figured["problems"]]}
    alone = phases["alone"]
    log(f"{alone['sent']} checks of {unit} sent at once by {students} students ({limit} per part allowed), "
        f"{grading.workers} grading workers: {alone['answered']} answered, {alone['graded']} graded, "
        f"{alone['refused']} refused over the limit ({alone['refused_expected']} expected), "
        f"{result['records']} requests recorded")
    log(f"{alone['checks_per_minute']:.0f} checks graded per minute; "
        f"first answer after {alone['first_answer_s']:.2f} s, "
        f"first graded answer after {alone['first_graded_s']:.2f} s, last after {alone['seconds']:.1f} s")
    if attacker:
        attacked = phases["attacked"]
        result["attacked"], result["attack"] = attacked, attack_report
        kinds = ", ".join(k for k, on in (("a slow notebook", slow), (f"{connections} connections", connections),
                                          (f"{streams} streams of 4 MB parse-heavy bodies", streams)) if on)
        log(f"the attacker (one token: {kinds}) was answered: "
            + ", ".join(f"{key}: {value}" for key, value in sorted(attack_report.items(), key=str)))
        log("| honest checks graded | median | p95 | last | event loop's longest stall |")
        log("| --- | --- | --- | --- | --- |")
        for phase, figured in phases.items():
            log(f"| {'alone' if phase == 'alone' else 'beside the attacker'} ({figured['graded']}) | "
                f"{figured['median_s']:.1f} s | {figured['p95_s']:.1f} s | {figured['seconds']:.1f} s | "
                f"{figured['stall_s'] * 1000:.0f} ms |")
        log(f"honest latency, median / p95: alone {alone['median_s']:.1f} / {alone['p95_s']:.1f} s, "
            f"beside the attacker {attacked['median_s']:.1f} / {attacked['p95_s']:.1f} s")
    log("every answer as `python -m autograder feedback` gives it, every record as answered" if not result["problems"]
        else "PROBLEMS:\n  " + "\n  ".join(result["problems"]))
    return result


# ---------------------------------------------------------------- the slow notebook, on its own


SLOW_PARTS = ("softmax", "self_attention")  # the slow notebook's two checks, sent at once


def slow_notebook_scenario(workers: int = 2, delay: float = 20.0, classmate_within: float = 120.0,
                           attacker_within: float = 1800.0, log=print) -> dict:
    """A student sends two checks (`SLOW_PARTS`, at once) of a notebook whose scratch cell waits
    (`SLOW_CELL`), with one check per part allowed; `delay` seconds later a classmate sends an
    honest check. As the run's budget (autograder/trust/budget.py) intends: the classmate is answered
    within `classmate_within` seconds; each slow check ends within the unit's budget of waiting
    (and `attacker_within`) with a normal report, 200, recorded as graded and counted; and the
    same student's next check of either part is refused 429. Returns the figures and `problems`
    (empty when all is so)."""
    import tempfile

    from ..paths import ROOT
    from ..units import get_unit

    correct = (ROOT / "tests" / "submissions" / LOAD_UNIT / "correct_einsum.py").read_text()
    budget = get_unit(LOAD_UNIT).budget
    problems = []
    with tempfile.TemporaryDirectory(prefix="feedback-slow-") as folder:
        db = Database(f"sqlite:///{Path(folder) / 'feedback.db'}")
        tokens = db.add_students(["mallory", "ada"])
        grading = Grading(workers)
        service = Service([LOAD_UNIT], db, grading, limit=1, log=log)
        try:
            grading.warm_up([LOAD_UNIT])
            port = service.start()
            answers = {}
            began = time.perf_counter()

            def slow(part: str) -> None:
                status, answer = post(port, tokens["mallory"], LOAD_UNIT, part, notebook_bytes(correct, SLOW_CELL),
                                      timeout=attacker_within)
                answers[part] = (status, answer, time.perf_counter() - began)

            senders = [threading.Thread(target=slow, args=(part,), daemon=True) for part in SLOW_PARTS]
            for sender in senders:
                sender.start()
            time.sleep(delay)
            started = time.perf_counter()
            status, answer = post(port, tokens["ada"], LOAD_UNIT, "softmax", notebook_bytes(correct),
                                  timeout=classmate_within)
            classmate_s = time.perf_counter() - started
            log(f"the classmate's check, sent {delay:g} s after the slow ones: {status} after {classmate_s:.1f} s")
            if status != 200 or classmate_s > classmate_within:
                problems.append(f"the classmate's check was answered {status} after {classmate_s:.1f} s "
                                f"(within {classmate_within:g} s wanted)")
            for sender in senders:
                sender.join(attacker_within)
            slow_s = {}
            for part in SLOW_PARTS:
                if part not in answers:
                    problems.append(f"the slow check of {part} had no answer within {attacker_within:g} s")
                    continue
                slow_status, slow_answer, slow_s[part] = answers[part]
                texts = " ".join(p.get("text", "") for p in slow_answer.get("parts", []))
                log(f"the slow check of {part}: {slow_status} after {slow_s[part]:.1f} s from the first")
                if slow_status != 200 or "budget" not in texts:
                    problems.append(f"the slow check of {part} should end graded (200), saying its budget ran out; "
                                    f"it was answered {slow_status}: {texts[:200]}")
            mine = [r for r in db.records() if r["student"] == "mallory"]
            if sorted((r["part"], r["outcome"], r["counts"]) for r in mine) != \
                    sorted((part, records.GRADED, True) for part in SLOW_PARTS):
                problems.append(f"both slow checks should be recorded graded and counted: "
                                f"{[(r['part'], r['outcome'], r['counts']) for r in mine]}")
            # one after the other (one check of a student's at a time), each within the unit's budget
            within = 2 * (budget.waiting_seconds + 30)
            if slow_s and max(slow_s.values()) > within:
                problems.append(f"the slow checks took {max(slow_s.values()):.0f} s in all, more than two of the "
                                f"unit's budgets of waiting ({budget.waiting_seconds:g} s) and their set-up allow")
            for part in SLOW_PARTS:
                again, _ = post(port, tokens["mallory"], LOAD_UNIT, part, notebook_bytes(correct))
                log(f"the same student's next check of {part}: {again}")
                if again != 429:
                    problems.append(f"the next check of {part} should be refused 429, it was answered {again}")
        finally:
            service.stop()
    log("the slow notebook cost its sender only" if not problems else "PROBLEMS:\n  " + "\n  ".join(problems))
    return {"classmate_s": classmate_s, "classmate_status": status, "slow_s": slow_s, "problems": problems}
