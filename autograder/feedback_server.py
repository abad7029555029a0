"""The feedback service for a class: `python3 course.py feedback-server [UNIT...]`, and the
instructor's table of it, `python3 course.py feedback-report UNIT`.

    python3 course.py feedback-server --add-students ada,ben [--csv tokens.csv]   # hand these out
    python3 course.py feedback-server 01_attention 02_masking --host 0.0.0.0 --port 8765
    python3 course.py feedback-report 01_attention

A student's check line (`coursekit.feedback`) sends the saved notebook with the student's
token and gets back what the grade cells would show after `nbgrader autograde`: each part's
points, messages and the catalogued mistakes named, never test code or reference values.

    POST /api/check   Authorization: Bearer <token>
                      {"unit": "01_attention", "part": "softmax" | "all", "notebook": {...}}
        200 the report of `feedback.feedback_for`
        400 not JSON / not a notebook / another unit's notebook / no such part
        401 no token, or not one of this class's      404 a unit this service does not grade
        413 too large       429 over the limit ("retry_after": seconds)
        503 busy, or the grader itself failed (not counted against the student)
        every error is {"error": "<one sentence>"}
    GET /api/health   {"ok": true, "units": [...]}

Built on tornado: Jupyter Server is built on it, so it is in every course environment
already, and it is asynchronous, so a check waiting for its grading holds no thread; a
thousand students waiting cost the service nothing but their sockets.

- The token decides who the student is; nothing in a request can name a student. Tokens are
  made by `--add-students`; the database keeps only their hashes. (Where the course runs on
  JupyterHub, the hub's own authentication would do the same; it is not built here.)
- Each student may check each part `--limit` times per `--window` seconds (default 10 an
  hour; "all" counts against every part and needs room in each), counted from the database,
  so a restart resets nothing. The count and the record that takes the slot are written in
  one synchronous step on the event loop: two requests at once cannot both take the last slot.
  Checks the grader failed on do not count.
- Every request that got past authentication is recorded (`feedback_db`): who, when, which unit
  and part, what became of it, the score and the mistakes named per part, the notebook's sha256.
- Grading runs on the class-grading pool (`classgrading.LocalEngine`, or `DaskEngine` with
  `--scheduler`), with `feedback.check_task`: the same trusted run, and the same sandboxed
  worker for the student's code, as `nbgrader autograde`.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import signal
import sys
import threading
import time
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import tornado.httpserver
import tornado.netutil
import tornado.web

from . import feedback
from . import feedback_db as records
from .feedback_db import DEFAULT_DB, Database, class_report, write_tokens_csv

DEFAULT_PORT = 8765
DEFAULT_LIMIT = 10
DEFAULT_WINDOW = 3600.0
DEFAULT_QUEUE = 200
# The body carries the notebook and a few short fields around it.
MAX_BODY_BYTES = feedback.MAX_NOTEBOOK_BYTES + 64 * 1024
# Bodies up to this are read (and dropped) before a 413; tornado itself refuses anything larger
# (its max_body_size), unread.
DRAIN_BYTES = 8 * MAX_BODY_BYTES


def shown(text: str) -> str:
    """A field a student sent, as it may appear in the instructor's log: escaped, short."""
    return ascii(text)[1:-1][:60] or "-"


def in_words(seconds: float) -> str:
    minutes = int((seconds + 59) // 60)
    return f"{minutes} minute{'s' if minutes != 1 else ''}"


class Refused(Exception):
    """A request answered with an error: its status, its sentence, and what to record."""

    def __init__(self, status: int, message: str, outcome: str = records.BAD_INPUT, **extra):
        super().__init__(message)
        self.status, self.message, self.outcome, self.extra = status, message, outcome, extra


class Grading:
    """The pool the checks run on, with `feedback.check_task`: a LocalEngine that is made anew
    if a worker dies (so one lost worker cannot take the service down), or a DaskEngine."""

    def __init__(self, workers: int | None = None, scheduler: str | None = None, engine=None):
        self.scheduler, self.workers = scheduler, workers or os.cpu_count() or 1
        self.engine = engine or self._make()
        self.lock = threading.Lock()

    def _make(self):
        from .classgrading import DaskEngine, LocalEngine

        return DaskEngine(self.scheduler) if self.scheduler else LocalEngine(self.workers)

    def warm_up(self, units: list[str]) -> None:
        """Start every local worker and import each unit's graders there, before the first
        student (workers = tasks submitted at once, so the pool starts all of them)."""
        from .classgrading import LocalEngine

        if isinstance(self.engine, LocalEngine):
            futures = [self.engine.submit({"units": units}, warm_up_worker) for _ in range(self.workers)]
            for future in futures:
                future.result()

    def submit(self, task: dict):
        """The future of `task` (a DaskEngine passes it `fork: False`)."""
        try:
            return self.engine.submit(task, feedback.check_task)
        except BrokenProcessPool:  # a local worker died: the checks in flight were answered 503
            with self.lock:
                self.engine.close(cancel=True)
                self.engine = self._make()
            return self.engine.submit(task, feedback.check_task)

    def close(self) -> None:
        self.engine.close(cancel=True)


def warm_up_worker(task: dict) -> None:
    from .classgrading import warm_up_checks

    time.sleep(0.2)  # so each of the tasks submitted together lands on a worker of its own
    for unit in task["units"]:
        warm_up_checks(unit)


class Service:
    """The application: its units, database, pool and limits. `start()` serves it from a thread
    of its own (the tests, the benchmark); `main` serves it from the main thread."""

    def __init__(self, units: list[str], db: Database, grading: Grading, limit: int = DEFAULT_LIMIT,
                 window: float = DEFAULT_WINDOW, queue: int = DEFAULT_QUEUE, log=print):
        self.units, self.db, self.grading = list(units), db, grading
        self.limit, self.window, self.queue, self.log = limit, window, queue, log
        self.in_flight = 0
        self.app = tornado.web.Application([(r"/api/check", CheckHandler, {"service": self}),
                                            (r"/api/health", HealthHandler, {"service": self})],
                                           default_handler_class=NotFoundHandler,
                                           log_function=lambda handler: None)  # one line per check: Service.log
        self.loop: asyncio.AbstractEventLoop | None = None
        self.server: tornado.httpserver.HTTPServer | None = None
        self.thread: threading.Thread | None = None

    def listen(self, host: str, port: int) -> int:
        """Bind (in the running event loop); the port bound (`port` 0: a free one)."""
        self.loop = asyncio.get_running_loop()
        self.server = tornado.httpserver.HTTPServer(self.app, max_body_size=DRAIN_BYTES, idle_connection_timeout=60,
                                                    body_timeout=120)
        sockets = tornado.netutil.bind_sockets(port, host)
        self.server.add_sockets(sockets)
        return sockets[0].getsockname()[1]

    def start(self, host: str = "127.0.0.1", port: int = 0) -> int:
        """Serve from a thread with an event loop of its own; the port bound."""
        bound, ready = [], threading.Event()
        self.stopped = None

        async def serve():
            self.stopped = asyncio.Event()
            bound.append(self.listen(host, port))
            ready.set()
            await self.stopped.wait()
            self.server.stop()
            await self.server.close_all_connections()

        self.thread = threading.Thread(target=asyncio.run, args=(serve(),), daemon=True, name="feedback-service")
        self.thread.start()
        ready.wait(30)
        return bound[0]

    def stop(self) -> None:
        """Stop serving, and shut the pool and the database down."""
        try:
            if self.thread is not None and self.loop is not None:
                self.loop.call_soon_threadsafe(self.stopped.set)
                self.thread.join(30)
        finally:
            self.grading.close()
            self.db.close()

    # ------------------------------------------------------------ one check

    def admit(self, student_id: int, unit: str, part: str, data: bytes) -> int:
        """Take a slot for this check (or refuse it), and record it: one synchronous step."""
        sha = hashlib.sha256(data).hexdigest()
        parts = feedback.parts_asked(unit, part)
        wait = self.db.room(student_id, parts, self.limit, self.window)
        if wait:
            asked = "every part" if part == feedback.ALL else f"`{part}`"
            message = (f"you have used your {self.limit} check{'s' if self.limit != 1 else ''} of {asked} "
                       f"per {'hour' if self.window == 3600 else in_words(self.window)}: "
                       f"you can check it again in {in_words(wait)}")
            raise Refused(429, message, records.OVER_LIMIT, retry_after=int(wait + 0.999), sha256=sha)
        if self.in_flight >= self.queue:
            raise Refused(503, "the feedback service is busy with the whole class's checks: "
                               "try again in a minute (this one did not count)", records.BUSY, sha256=sha)
        self.in_flight += 1
        return self.db.open_check(student_id, unit, part, records.IN_FLIGHT, counts=True, sha256=sha)

    async def grade(self, task: dict) -> dict:
        """Run `task` on the pool without holding a thread: the pool's own thread hands the
        result back to this event loop."""
        loop = asyncio.get_running_loop()
        waiting = loop.create_future()

        def settle(future) -> None:  # on the pool's thread (concurrent.futures) or Dask's
            try:
                outcome = {"value": self.grading.engine.outcome(future)}
            except Exception as err:  # noqa: BLE001 - a worker lost, a Dask error: handed back as an answer
                outcome = {"error": err}
            except BaseException as err:  # noqa: BLE001 - cancelled at shutdown
                outcome = {"error": RuntimeError(f"cancelled ({type(err).__name__})")}
            loop.call_soon_threadsafe(_settle, waiting, outcome)

        try:
            self.grading.submit(task).add_done_callback(settle)
        except Exception as err:  # noqa: BLE001 - a pool that cannot take work
            return {"ok": False, "kind": "grader", "error": f"the grading pool failed: {type(err).__name__}"}
        try:
            return await waiting
        except Exception as err:  # noqa: BLE001
            return {"ok": False, "kind": "grader",
                    "error": f"the grading worker failed: {type(err).__name__}: {str(err)[:200]}"}


def _settle(waiting: asyncio.Future, outcome: dict) -> None:
    if waiting.done():
        return
    if "error" in outcome:
        waiting.set_exception(outcome["error"])
    else:
        waiting.set_result(outcome["value"])


class JSONHandler(tornado.web.RequestHandler):
    def initialize(self, service: Service):
        self.service = service

    def send(self, status: int, payload: dict) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.set_header("Cache-Control", "no-store")
        self.finish(json.dumps(payload))

    def write_error(self, status_code: int, **kwargs) -> None:  # tornado's own errors, and anything unforeseen
        message = {405: "use POST /api/check", 404: "there is nothing here: the service answers POST /api/check"}
        self.send(status_code, {"error": message.get(status_code, "the service could not answer that request")})

    def log_exception(self, typ, value, tb) -> None:
        if isinstance(value, tornado.web.HTTPError):
            return
        super().log_exception(typ, value, tb)  # a bug of ours: logged with its traceback, never sent


class NotFoundHandler(JSONHandler):
    def initialize(self, service: Service | None = None):
        self.service = service

    def prepare(self):
        raise tornado.web.HTTPError(404)


class HealthHandler(JSONHandler):
    def get(self):
        self.send(200, {"ok": True, "units": self.service.units})


@tornado.web.stream_request_body
class CheckHandler(JSONHandler):
    """POST /api/check. The body is streamed in and never kept past the limit. A body a little
    over it is read and dropped, so that the client, which sends its whole body before it
    reads an answer, gets the sentence rather than a reset connection; a body far over it (or
    any body over it without a valid token) is refused at once, unread."""

    def prepare(self):
        self.student, self.refusal = None, None
        self.chunks, self.size = [], 0
        self.unit = self.part = ""
        if self.request.method != "POST":
            return
        length = self.request.headers.get("Content-Length", "")
        length = int(length) if length.isdigit() else None
        header = self.request.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        self.student = self.service.db.student_for(token.strip()) if scheme.lower() == "bearer" and token.strip() \
            else None
        if self.student is None:
            self.refusal = Refused(401, "this check needs your own feedback token (ask your instructor for it)"
                                   if not header else "that feedback token is not one of this class's: "
                                   "check that you copied the whole token your instructor gave you")
            if length is not None and length > MAX_BODY_BYTES:
                self.answer_refusal()
        elif length is not None and length > MAX_BODY_BYTES:
            self.refusal = Refused(413, feedback.too_large_message(length))
            if length > DRAIN_BYTES:
                self.answer_refusal()

    def data_received(self, chunk: bytes) -> None:
        if self.refusal is not None:
            return  # dropped
        self.size += len(chunk)
        if self.size > MAX_BODY_BYTES:  # a chunked body, which did not say its size
            self.chunks = []
            self.refusal = Refused(413, feedback.too_large_message(self.size))
            return
        self.chunks.append(chunk)

    def answer_refusal(self) -> None:
        """Answer self.refusal, and record it when the student is known (a 401 has no student)."""
        refused = self.refusal
        if self.student is not None:
            student_id, name = self.student
            self.service.db.open_check(student_id, self.unit, self.part, refused.outcome,
                                       sha256=refused.extra.get("sha256"), error=refused.message)
            self.service.log(f"{time.strftime('%H:%M:%S')} {name} {shown(self.unit)} {shown(self.part)}: "
                             f"{refused.outcome} ({refused.status})")
        extra = {key: value for key, value in refused.extra.items() if key != "sha256"}
        if refused.status == 429:
            self.set_header("Retry-After", str(extra["retry_after"]))
        self.send(refused.status, {"error": refused.message, **extra})

    async def post(self):
        if self._finished:
            return
        if self.refusal is not None:
            return self.answer_refusal()
        started = time.perf_counter()
        try:
            data = self.read_request()
            check_id = self.service.admit(self.student[0], self.unit, self.part, data)
        except Refused as refused:
            self.refusal = refused
            return self.answer_refusal()
        except feedback.NotGradable as err:  # an unknown part
            self.refusal = Refused(400, str(err))
            return self.answer_refusal()
        try:
            result = await self.service.grade({"unit": self.unit, "part": self.part, "notebook": data})
        finally:
            self.service.in_flight -= 1
        self.finish_check(check_id, result, time.perf_counter() - started)

    def read_request(self) -> bytes:
        """The notebook's bytes (and self.unit, self.part), or Refused with the sentence that says why not."""
        try:
            body = json.loads(b"".join(self.chunks))
        except (ValueError, RecursionError):
            raise Refused(400, "the request is not JSON: send {\"unit\", \"part\", \"notebook\"}") from None
        if not isinstance(body, dict):
            raise Refused(400, "the request must be a JSON object: {\"unit\", \"part\", \"notebook\"}")
        unit, part = body.get("unit"), body.get("part")
        # What is recorded, whatever they are.
        self.unit, self.part = ("" if unit is None else str(unit)[:100]), ("" if part is None else str(part)[:100])
        # The unit is only ever compared with the names served, never used to find a file.
        if not isinstance(unit, str) or unit not in self.service.units:
            served = ", ".join(self.service.units)
            raise Refused(404, f"this feedback service does not grade that unit; it grades {served}")
        if part is None or part == "":
            part = self.part = feedback.ALL
        if not isinstance(part, str):
            raise Refused(400, "the part must be the name of a graded part, or \"all\"")
        if len(part) > 100:
            raise Refused(400, f"{unit} has no graded part by that name")
        notebook = body.get("notebook")
        if not isinstance(notebook, dict):
            raise Refused(400, "that is not a Jupyter notebook: send the saved .ipynb's JSON as \"notebook\"")
        try:
            data = json.dumps(notebook, ensure_ascii=False).encode("utf-8", "surrogatepass")
        except (ValueError, RecursionError):
            raise Refused(400, "that is not a Jupyter notebook (it cannot be read as one)") from None
        if len(data) > feedback.MAX_NOTEBOOK_BYTES:
            raise Refused(413, feedback.too_large_message(len(data)))
        problem = feedback.notebook_problem(unit, data)
        if problem:
            raise Refused(400, problem)
        return data

    def finish_check(self, check_id: int, result: dict, seconds: float) -> None:
        name, unit, part = self.student[1], self.unit, self.part
        stamp = time.strftime("%H:%M:%S")
        if result.get("ok"):
            report = result["report"]
            self.service.db.close_check(check_id, records.GRADED, True, report)
            named = sorted({m for p in report["parts"] for m in p["mistakes"]})
            self.service.log(f"{stamp} {name} {unit} {part}: graded {report['score']:g}/{report['max_score']:g}"
                             f"{' named ' + ','.join(named) if named else ''} in {seconds:.1f} s")
            return self.send(200, report)
        if result.get("kind") == "student":  # found while grading: it took the slot, like a graded check
            message = result["error"]
            self.service.db.close_check(check_id, records.BAD_INPUT, True, error=message)
            self.service.log(f"{stamp} {name} {unit} {part}: bad input, found while grading ({ascii(message)[1:80]})")
            return self.send(400, {"error": message})
        message = ("the grader failed on this check; that is not your notebook's fault, and it did not count "
                   "against your checks: try again in a few minutes, and tell your instructor if it happens again")
        self.service.db.close_check(check_id, records.GRADER_FAILED, False, error=result.get("error"))
        self.service.log(f"{stamp} {name} {unit} {part}: GRADER FAILED: {ascii(str(result.get('error')))[1:200]}")
        self.send(503, {"error": message})


# ---------------------------------------------------------------- command lines


def served_units(names: list[str]) -> list[str]:
    from .units import UNITS

    unknown = [name for name in names if name not in UNITS]
    if unknown:
        raise SystemExit(f"no graded unit {', '.join(unknown)}; the units are {', '.join(UNITS)}")
    return list(names) or list(UNITS)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python3 course.py feedback-server",
                                     description="the feedback service for a class (see README.md)")
    parser.add_argument("units", nargs="*", help="the units it grades (default: every unit)")
    parser.add_argument("--host", default="127.0.0.1", help="0.0.0.0 to be reached from other machines")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument("--db", default=DEFAULT_DB, help=f"any SQLAlchemy URL (default {DEFAULT_DB})")
    parser.add_argument("--workers", type=int, default=None, help="local grading workers (default: the cores)")
    parser.add_argument("--scheduler", default=None, help="a Dask scheduler's address: grade on that cluster")
    parser.add_argument("--limit", type=int, default=DEFAULT_LIMIT, help="checks per student, per part, per window")
    parser.add_argument("--window", type=float, default=DEFAULT_WINDOW, help="the limit's window, in seconds")
    parser.add_argument("--queue", type=int, default=DEFAULT_QUEUE, help="checks in flight before it answers busy")
    parser.add_argument("--add-students", default=None, metavar="A,B,...",
                        help="make a token for each student, print `student token` lines, and exit")
    parser.add_argument("--csv", default=None, help="with --add-students: also write the tokens to this CSV file")
    args = parser.parse_args(argv)
    db = Database(args.db)
    if args.add_students is not None:
        names = [name.strip() for name in args.add_students.split(",") if name.strip()]
        try:
            tokens = db.add_students(names)
        except ValueError as err:
            print(err, file=sys.stderr)
            return 2
        for name, token in tokens.items():
            print(name, token)
        if args.csv:
            write_tokens_csv(Path(args.csv), tokens)
            print(f"(also written to {args.csv}; it holds the tokens themselves: keep it private)", file=sys.stderr)
        return 0
    units = served_units(args.units)
    if args.limit < 1 or args.window <= 0 or args.queue < 1:
        print("--limit and --queue must be at least 1, and --window positive", file=sys.stderr)
        return 2
    left = db.abandon_in_flight()
    grading = Grading(args.workers, args.scheduler)
    service = Service(units, db, grading, args.limit, args.window, args.queue,
                      log=lambda line: print(line, flush=True))

    async def serve() -> None:
        port = service.listen(args.host, args.port)
        print(f"feedback service on http://{args.host}:{port}/api/check for {', '.join(units)}; "
              f"{args.limit} checks per part per {in_words(args.window)}; "
              f"grading on {'Dask at ' + args.scheduler if args.scheduler else plural(grading.workers, 'worker')}; "
              f"records in {args.db}" + (f" ({left} left in flight by the last run marked failed)" if left else ""),
              flush=True)
        await asyncio.Event().wait()

    def stop(signum, frame):  # `kill` (systemd's stop) shuts down as Ctrl-C does
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    try:
        if not args.scheduler:
            grading.warm_up(units)
        asyncio.run(serve())
    except KeyboardInterrupt:
        print("stopped", flush=True)
    except OSError as err:  # the port is taken, the host is not this machine's
        print(f"could not listen on {args.host}:{args.port}: {err.strerror or err}", file=sys.stderr)
        return 2
    finally:
        grading.close()
        db.close()
    return 0


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'s' if count != 1 else ''}"


def format_report(unit: str, table: list[dict]) -> str:
    lines = [f"{unit}: the class's checks, per part"]
    for row in table:
        lines.append("")
        lines.append(f"{row['part']}: {plural(row['students'], 'student')} checked it, "
                     f"{row['full_marks']} reached full marks")
        if row["students"] and not row["mistakes"]:
            lines.append("  no catalogued mistake named")
        for mistake in row["mistakes"]:
            lines.append(f"  {plural(mistake['students'], 'student'):>12} {plural(mistake['checks'], 'check'):>10}  "
                         f"{mistake['description']} ({mistake['id']})")
    return "\n".join(lines)


def report_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python3 course.py feedback-report",
                                     description="the mistakes the class makes most, per part")
    parser.add_argument("unit")
    parser.add_argument("--db", default=DEFAULT_DB, help=f"the service's database (default {DEFAULT_DB})")
    args = parser.parse_args(argv)
    served_units([args.unit])
    db = Database(args.db)
    try:
        print(format_report(args.unit, class_report(db, args.unit)))
    finally:
        db.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))


# ---------------------------------------------------------------- the load test (tests, and `bench feedback`)

LOAD_UNIT = "01_attention"
LOAD_FILES = ("correct_einsum", "wrong_no_scaling", "wrong_softmax_axis_zero")  # each costs a CLI run
# What each student sends at once, in turn: one part twice; every part and one part; one part and
# every part. With one check per part allowed, exactly one of each pair is over the limit.
LOAD_PATTERNS = (("softmax", "softmax"), ("all", "scaled_dot_product_attention"), ("self_attention", "all"))


def notebook_of(source: str) -> dict:
    """A notebook whose one code cell is `source` (the grader grades a notebook on its code)."""
    return {"nbformat": 4, "nbformat_minor": 5, "metadata": {},
            "cells": [{"cell_type": "code", "id": "answer", "metadata": {}, "execution_count": None,
                       "outputs": [], "source": source}]}


def cut_report(report: dict, part: str) -> dict:
    """`report` (every part) cut down to the part asked, as `feedback_for` answers for that part."""
    parts = [p for p in report["parts"] if part == feedback.ALL or p["name"] == part]
    return {"unit": report["unit"], "parts": parts, "score": sum(p["points"] for p in parts),
            "max_score": sum(p["max_points"] for p in parts)}


def expected_outcomes(parts_in_order: list[str], unit: str, limit: int) -> list[str]:
    """What the limit should make of one student's checks, in the order the service took them."""
    from .units import get_unit

    names = [p.name for p in get_unit(unit).parts]
    used = dict.fromkeys(names, 0)
    outcomes = []
    for part in parts_in_order:
        asked = names if part == feedback.ALL else [part]
        if all(used[name] < limit for name in asked):
            for name in asked:
                used[name] += 1
            outcomes.append(records.GRADED)
        else:
            outcomes.append(records.OVER_LIMIT)
    return outcomes


def load_test(students: int = 25, limit: int = 1, workers: int | None = None, files=LOAD_FILES, log=print) -> dict:
    """`students` students each send two checks of unit 01, all at once, to a service on
    localhost with `limit` checks per part; then every answer is compared with
    `python -m autograder feedback` on the same file, the refusals with what the limit allows
    in the order the service took the checks, and the database with the requests sent.

    Returns the figures and `problems` (one line each; empty when all is as it should be)."""
    import shutil
    import subprocess
    import tempfile
    from concurrent.futures import ThreadPoolExecutor

    from tornado.httpclient import AsyncHTTPClient, HTTPRequest

    from .paths import ROOT

    folder = Path(tempfile.mkdtemp(prefix="feedback-load-"))
    try:
        sources = {name: (ROOT / "tests" / "submissions" / LOAD_UNIT / f"{name}.py").read_text() for name in files}
        for name, source in sources.items():
            (folder / f"{name}.ipynb").write_text(json.dumps(notebook_of(source)))

        def cli(name: str) -> dict:  # `course.py check`'s run, as JSON
            proc = subprocess.run([sys.executable, "-m", "autograder", "feedback", LOAD_UNIT,
                                   str(folder / f"{name}.ipynb"), "--part", "all"],
                                  cwd=ROOT, capture_output=True, text=True, timeout=600)
            return json.loads(proc.stdout)

        started = time.perf_counter()
        with ThreadPoolExecutor(workers or os.cpu_count() or 1) as pool:
            expected = dict(zip(sources, pool.map(cli, sources), strict=True))
        log(f"`python -m autograder feedback` on the {len(sources)} files: {time.perf_counter() - started:.1f} s")

        db = Database(f"sqlite:///{folder / 'feedback.db'}")
        names = [f"s{i:02d}" for i in range(students)]
        tokens = db.add_students(names)
        plan = []  # (student, part, file), in the order sent
        for i, name in enumerate(names):  # every file is sent in every pattern
            for part in LOAD_PATTERNS[i % len(LOAD_PATTERNS)]:
                plan.append((name, part, files[i // len(LOAD_PATTERNS) % len(files)]))
        grading = Grading(workers)
        service = Service([LOAD_UNIT], db, grading, limit=limit, log=lambda line: None)
        try:
            grading.warm_up([LOAD_UNIT])
            port = service.start()
            bodies = {name: json.dumps({"unit": LOAD_UNIT, "notebook": notebook_of(source)}) for name, source in
                      sources.items()}

            async def send_all() -> tuple[list, float]:
                client = AsyncHTTPClient(force_instance=True, max_clients=len(plan))
                started = time.perf_counter()

                async def one(student: str, part: str, name: str):
                    body = bodies[name][:-1] + f', "part": {json.dumps(part)}}}'
                    request = HTTPRequest(f"http://127.0.0.1:{port}/api/check", method="POST", body=body,
                                          headers={"Authorization": f"Bearer {tokens[student]}"},
                                          request_timeout=1200, connect_timeout=60)
                    response = await client.fetch(request, raise_error=False)
                    return response.code, json.loads(response.body or b"{}"), time.perf_counter() - started

                try:
                    return await asyncio.gather(*(one(*sent) for sent in plan)), started
                finally:
                    client.close()

            answers, _ = asyncio.run(send_all())
            held = db.records()
        finally:
            service.stop()
    finally:
        shutil.rmtree(folder, ignore_errors=True)

    problems = []
    graded = [(sent, a) for sent, a in zip(plan, answers, strict=True) if a[0] == 200]
    for (student, part, name), (status, body, _) in zip(plan, answers, strict=True):
        if status == 200 and body != cut_report(expected[name], part):
            problems.append(f"{student}'s check of {part} ({name}) differs from `python -m autograder feedback`")
        elif status not in (200, 429):
            problems.append(f"{student}'s check of {part} ({name}) was answered {status}: {body}")
    if len(held) != len(plan):
        problems.append(f"{len(plan)} requests but {len(held)} records")
    refused_expected = 0
    for name in names:
        mine = [r for r in held if r["student"] == name]
        sent = sorted(part for student, part, _ in plan if student == name)
        if sorted(r["part"] for r in mine) != sent:
            problems.append(f"{name} sent {sent}, the database holds {sorted(r['part'] for r in mine)}")
        should = expected_outcomes([r["part"] for r in mine], LOAD_UNIT, limit)
        refused_expected += should.count(records.OVER_LIMIT)
        if [r["outcome"] for r in mine] != should:
            problems.append(f"{name}: the limit should have made {should} of {[r['part'] for r in mine]}, "
                            f"the service made {[r['outcome'] for r in mine]}")
        statuses = sorted(a[0] for sent, a in zip(plan, answers, strict=True) if sent[0] == name)
        if statuses != sorted({records.GRADED: 200, records.OVER_LIMIT: 429}.get(r["outcome"], 0) for r in mine):
            problems.append(f"{name}: answered {statuses}, recorded {[r['outcome'] for r in mine]}")
    file_of = {hashlib.sha256(json.dumps(notebook_of(source), ensure_ascii=False).encode()).hexdigest(): name
               for name, source in sources.items()}
    for record in held:
        if record["outcome"] == records.GRADED:
            want = cut_report(expected[file_of[record["sha256"]]], record["part"])
            if record["score"] != want["score"] or record["parts"] != {
                    p["name"]: {"points": p["points"], "max_points": p["max_points"], "mistakes": p["mistakes"]}
                    for p in want["parts"]}:
                problems.append(f"{record['student']}'s record of {record['part']} differs from its answer")
    last = max(seconds for _, _, seconds in answers)
    graded_times = [a[2] for _, a in graded]
    result = {"sent": len(plan), "answered": sum(1 for a in answers if a[0]), "graded": len(graded),
              "refused": sum(1 for a in answers if a[0] == 429), "refused_expected": refused_expected,
              "records": len(held), "seconds": last, "checks_per_minute": len(graded) / last * 60 if graded else 0.0,
              "first_answer_s": min(a[2] for a in answers),
              "first_graded_s": min(graded_times) if graded_times else float("nan"),
              "workers": grading.workers, "answers": answers, "plan": plan, "problems": problems}
    log(f"{result['sent']} checks sent at once by {students} students ({limit} per part allowed), "
        f"{grading.workers} grading workers: {result['answered']} answered, {result['graded']} graded, "
        f"{result['refused']} refused over the limit ({refused_expected} expected), {len(held)} records")
    log(f"{result['checks_per_minute']:.0f} checks graded per minute; "
        f"first answer after {result['first_answer_s']:.2f} s, "
        f"first graded answer after {result['first_graded_s']:.2f} s, last after {last:.1f} s")
    log("every answer as `python -m autograder feedback` gives it, every record as answered" if not problems
        else "PROBLEMS:\n  " + "\n  ".join(problems))
    return result
