"""The feedback service's database (SQLAlchemy; SQLite by default, any SQLAlchemy URL allowed):
the students and the hash of each one's token; a record of every check that was admitted
(graded, found bad while grading, failed by the grader, or still in flight), with what each
graded part scored and which catalogued mistakes it named; and the requests refused before
grading (over the limit, busy, too many at once, bad input, gone), counted in one row per
student, minute and outcome, so that a flood of refusals costs a counter, not a row each.

Everything here is synchronous and is called from the service's event loop only, so a rate
check and the record that takes the slot are one step no other request can come between.
(The refusal counter is also read from other threads by the tests: it has a lock.)
"""

from __future__ import annotations

import csv
import hashlib
import json
import re
import secrets
import threading
import time
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import (
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Integer,
    String,
    Text,
    create_engine,
    event,
    func,
    inspect,
    select,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, relationship
from sqlalchemy.schema import UniqueConstraint

from ..paths import ROOT

DEFAULT_DB = f"sqlite:///{ROOT / '.course_feedback' / 'feedback.db'}"
STUDENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}")  # a JupyterHub user name, an e-mail's local part

# What became of a check. Only GRADED and IN_FLIGHT (and BAD_INPUT found while grading) count
# against the limit: see Check.counts. OVER_LIMIT, BUSY, TOO_MANY, GONE (the connection closed
# before the check was graded) and BAD_INPUT found before grading are refusals: counted in
# `refusals`, never a row of `checks`.
GRADED, OVER_LIMIT, BAD_INPUT, GRADER_FAILED, BUSY, IN_FLIGHT, TOO_MANY, GONE = (
    "graded", "over the limit", "bad input", "grader failed", "busy", "in flight", "too many at once", "gone")
REFUSAL_FLUSH_SECONDS = 2.0  # refusals are counted in memory and written at most this often (and on every read)


class Base(DeclarativeBase):
    pass


class Student(Base):
    __tablename__ = "students"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    # sha256 of the token: the tokens are 32 random bytes, so a fast hash is enough (nothing to
    # guess from it), and a copy of the database gives nobody a student's token.
    token_hash: Mapped[str] = mapped_column(String(64), unique=True, index=True)
    created: Mapped[datetime] = mapped_column(DateTime)


class Check(Base):
    __tablename__ = "checks"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    student_id: Mapped[int] = mapped_column(ForeignKey("students.id"), index=True)
    unit: Mapped[str] = mapped_column(String(100))  # as sent (cut to 100 characters): it may be junk
    part: Mapped[str] = mapped_column(String(100))
    received: Mapped[datetime] = mapped_column(DateTime, index=True)
    finished: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    outcome: Mapped[str] = mapped_column(String(20))
    # Whether it takes one of the student's checks of this part (of every part, for "all").
    counts: Mapped[bool] = mapped_column(Boolean, default=False)
    score: Mapped[float | None] = mapped_column(Float, nullable=True)
    max_score: Mapped[float | None] = mapped_column(Float, nullable=True)
    notebook_sha256: Mapped[str | None] = mapped_column(String(64), nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)  # the sentence the student was sent
    student: Mapped[Student] = relationship()
    parts: Mapped[list[CheckPart]] = relationship(back_populates="check", cascade="all, delete-orphan")


class Refusal(Base):
    """How many of a student's requests ended one way (`outcome`) in one minute, before grading;
    `error` is the last sentence they were sent. At most one row per student, minute and outcome."""

    __tablename__ = "refusals"
    __table_args__ = (UniqueConstraint("student_id", "minute", "outcome"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    student_id: Mapped[int] = mapped_column(ForeignKey("students.id"), index=True)
    minute: Mapped[datetime] = mapped_column(DateTime, index=True)
    outcome: Mapped[str] = mapped_column(String(20))
    count: Mapped[int] = mapped_column(Integer, default=0)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    student: Mapped[Student] = relationship()


class CheckPart(Base):
    """One graded part of one check: its points and the mistakes it was named with."""

    __tablename__ = "check_parts"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    check_id: Mapped[int] = mapped_column(ForeignKey("checks.id"), index=True)
    part: Mapped[str] = mapped_column(String(100))
    points: Mapped[float] = mapped_column(Float)
    max_points: Mapped[float] = mapped_column(Float)
    mistakes: Mapped[str] = mapped_column(Text, default="[]")  # a JSON list of catalogue ids
    # A JSON list of the part's failed checks that no catalogued mistake explained (their names):
    # its failure signature, which the instructor's report groups (class_report).
    unexplained: Mapped[str] = mapped_column(Text, default="[]")
    check: Mapped[Check] = relationship(back_populates="parts")


def now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)  # naive UTC: SQLite keeps no time zone


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "replace")).hexdigest()


def _sqlite_pragmas(connection, record) -> None:
    """Write-ahead logging without an fsync per commit: a commit costs a fraction of a
    millisecond instead of 8-25 ms on a disk, and the service commits on its event loop (what
    every request waits beside). A process that dies loses nothing; a machine that loses power
    may lose the last commits (never the file)."""
    cursor = connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


class Database:
    def __init__(self, url: str = DEFAULT_DB):
        if url.startswith("sqlite:///") and url != "sqlite:///:memory:":
            Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        self.url = url
        self.engine = create_engine(url)
        if url.startswith("sqlite"):
            event.listen(self.engine, "connect", _sqlite_pragmas)
        Base.metadata.create_all(self.engine)  # an older database gains the refusals table
        if "unexplained" not in {c["name"] for c in inspect(self.engine).get_columns("check_parts")}:
            with self.engine.begin() as connection:  # and the failure signatures' column
                connection.execute(text("ALTER TABLE check_parts ADD COLUMN unexplained TEXT DEFAULT '[]'"))
        # (student_id, minute, outcome) -> [count, last sentence], not yet written
        self.tally: dict[tuple[int, datetime, str], list] = {}
        self.tally_lock, self.flush_lock = threading.Lock(), threading.Lock()
        self.flushed = time.monotonic()

    def close(self) -> None:
        self.flush()
        self.engine.dispose()

    # ------------------------------------------------------------ students

    def add_students(self, names: list[str]) -> dict[str, str]:
        """A new token for each name (a student who had one gets a new one; the old stops working)."""
        bad = [name for name in names if not STUDENT_NAME.fullmatch(name)]
        if bad:
            raise ValueError(f"not a student name (letters, digits, . _ @ -; at most 64): {', '.join(map(repr, bad))}")
        tokens = {}
        with Session(self.engine) as session:
            for name in names:
                token = secrets.token_urlsafe(32)
                student = session.scalar(select(Student).where(Student.name == name))
                if student is None:
                    session.add(Student(name=name, token_hash=token_hash(token), created=now()))
                else:
                    student.token_hash = token_hash(token)
                tokens[name] = token
            session.commit()
        return tokens

    def student_for(self, token: str) -> tuple[int, str] | None:
        with Session(self.engine) as session:
            student = session.scalar(select(Student).where(Student.token_hash == token_hash(token)))
            return (student.id, student.name) if student else None

    # ------------------------------------------------------------ checks

    def room(self, student_id: int, unit: str, parts: list[str], limit: int, window: float) -> float:
        """0 when the student may check `parts` of `unit` now; else the seconds until every one
        has room. A check of a part counts against that part of that unit only; a check of
        "all" against every part of its unit."""
        since = now() - timedelta(seconds=window)
        with Session(self.engine) as session:
            rows = session.execute(
                select(Check.part, Check.received).where(Check.student_id == student_id, Check.counts,
                                                         Check.unit == unit, Check.received >= since,
                                                         Check.part.in_([*parts, "all"]))
                .order_by(Check.received.desc())).all()
        wait = 0.0
        for part in parts:
            times = [received for asked, received in rows if asked in (part, "all")]
            if len(times) >= limit:  # room again when the limit-th most recent leaves the window
                frees = times[limit - 1] + timedelta(seconds=window)
                wait = max(wait, (frees - now()).total_seconds())
        return max(wait, 1.0) if wait else 0.0

    def open_check(self, student_id: int, unit: str, part: str, outcome: str, counts: bool = False,
                   sha256: str | None = None, error: str | None = None) -> int:
        with Session(self.engine) as session:
            check = Check(student_id=student_id, unit=str(unit)[:100], part=str(part)[:100], received=now(),
                          outcome=outcome, counts=counts, notebook_sha256=sha256, error=error)
            if outcome != IN_FLIGHT:
                check.finished = check.received
            session.add(check)
            session.commit()
            return check.id

    def close_check(self, check_id: int, outcome: str, counts: bool, report: dict | None = None,
                    error: str | None = None, sha256: str | None = None,
                    unexplained: dict[str, dict] | None = None) -> None:
        with Session(self.engine) as session:
            check = session.get(Check, check_id)
            check.finished, check.outcome, check.counts, check.error = now(), outcome, counts, error
            if sha256 is not None:
                check.notebook_sha256 = sha256
            if report is not None:
                check.score, check.max_score = report["score"], report["max_score"]
                check.parts = [CheckPart(part=p["name"], points=p["points"], max_points=p["max_points"],
                                         mistakes=json.dumps(p["mistakes"]),
                                         unexplained=json.dumps((unexplained or {}).get(p["name"], {})))
                               for p in report["parts"]]
            session.commit()

    def drop_check(self, check_id: int, student_id: int, outcome: str, error: str | None = None) -> None:
        """An admitted check that ended before grading (its notebook was bad, its connection
        closed): its row goes, so it takes no slot, and it is counted as a refusal."""
        with Session(self.engine) as session:
            check = session.get(Check, check_id)
            if check is not None:
                session.delete(check)
                session.commit()
        self.refused(student_id, outcome, error)

    # ------------------------------------------------------------ refusals

    def refused(self, student_id: int, outcome: str, error: str | None = None) -> None:
        """Count one refused request of this student, this minute (written by `flush`)."""
        key = (student_id, now().replace(second=0, microsecond=0), outcome)
        with self.tally_lock:
            counted = self.tally.setdefault(key, [0, None])
            counted[0] += 1
            counted[1] = error
            due = time.monotonic() - self.flushed >= REFUSAL_FLUSH_SECONDS
        if due:
            self.flush()

    def flush(self) -> None:
        """Write the refusals counted since the last flush: one row per student, minute and outcome."""
        with self.flush_lock:  # two at once (the service, a test reading) would both insert a new row
            self._flush()

    def _flush(self) -> None:
        with self.tally_lock:
            tally, self.tally, self.flushed = self.tally, {}, time.monotonic()
        if not tally:
            return
        try:
            with Session(self.engine) as session:
                for (student_id, minute, outcome), (count, error) in tally.items():
                    row = session.scalar(select(Refusal).where(Refusal.student_id == student_id,
                                                               Refusal.minute == minute, Refusal.outcome == outcome))
                    if row is None:
                        session.add(Refusal(student_id=student_id, minute=minute, outcome=outcome, count=count,
                                            error=error))
                    else:
                        row.count += count
                        row.error = error
                session.commit()
        except Exception:
            with self.tally_lock:  # not written: counted again, for the next flush
                for key, (count, error) in tally.items():
                    counted = self.tally.setdefault(key, [0, error])
                    counted[0] += count
            raise

    def refusals(self) -> list[dict]:
        """Every refusal row, oldest first: student, minute, outcome, count and the last sentence."""
        self.flush()
        with Session(self.engine) as session:
            rows = session.scalars(select(Refusal).order_by(Refusal.minute, Refusal.id)).all()
            return [{"student": r.student.name, "minute": r.minute, "outcome": r.outcome, "count": r.count,
                     "error": r.error} for r in rows]

    # ------------------------------------------------------------ startup, reading

    def abandon_in_flight(self) -> int:
        """Checks left in flight by a service that stopped: they did not finish, so they do not count."""
        with Session(self.engine) as session:
            left = session.scalars(select(Check).where(Check.outcome == IN_FLIGHT)).all()
            for check in left:
                check.outcome, check.counts, check.finished = GRADER_FAILED, False, now()
                check.error = "the service stopped before this check finished"
            session.commit()
            return len(left)

    def records(self) -> list[dict]:
        """Every admitted check, oldest first (for the tests and the report); refusals are in
        `refusals()`."""
        with Session(self.engine) as session:
            rows = session.scalars(select(Check).order_by(Check.id)).all()
            return [{"id": c.id, "student": c.student.name, "unit": c.unit, "part": c.part,
                     "received": c.received, "finished": c.finished, "outcome": c.outcome, "counts": c.counts,
                     "score": c.score, "max_score": c.max_score, "sha256": c.notebook_sha256, "error": c.error,
                     "parts": {p.part: {"points": p.points, "max_points": p.max_points,
                                        "mistakes": json.loads(p.mistakes),
                                        "unexplained": signature(p.unexplained)} for p in c.parts}}
                    for c in rows]

    def count(self) -> int:
        """The requests recorded: every admitted check, and every refusal counted."""
        self.flush()
        with Session(self.engine) as session:
            return session.scalar(select(func.count(Check.id))) + \
                (session.scalar(select(func.coalesce(func.sum(Refusal.count), 0))) or 0)


def signature(stored: str | None) -> dict:
    """A part's failure signature as recorded: {"step", "failed"}, or {} (nothing unexplained). A
    database written before steps were recorded holds the failed checks' names alone."""
    value = json.loads(stored or "{}")
    if isinstance(value, list):
        return {"step": None, "failed": value} if value else {}
    return value


def write_tokens_csv(path: Path, tokens: dict[str, str]) -> None:
    with open(path, "w", newline="") as stream:
        writer = csv.writer(stream)
        writer.writerow(["student", "token"])
        writer.writerows(sorted(tokens.items()))


# ---------------------------------------------------------------- the instructor's report


def class_report(db: Database, unit: str) -> list[dict]:
    """Per graded part of `unit`: how many students checked it, how many reached full marks,
    the mistakes named, each with the students who made it and the checks that named it, most
    students first; and the failures no catalogued mistake explained, grouped by their signature
    (the step its locator found to go wrong first, and which of the part's checks failed
    unexplained), each group with its students, its checks and the hash of its latest notebook, so
    that an instructor can find a new common mistake and catalogue it."""
    from ..units import get_unit

    spec = get_unit(unit)
    described = {m.name: m.description for m in spec.misconceptions}
    checked, full = defaultdict(set), defaultdict(set)
    students, checks = defaultdict(lambda: defaultdict(set)), defaultdict(lambda: defaultdict(int))
    unexplained = defaultdict(dict)  # part -> signature -> {"students", "checks", "example"}
    for record in db.records():
        if record["unit"] != unit or record["outcome"] != GRADED:
            continue
        for part, graded in record["parts"].items():
            checked[part].add(record["student"])
            if graded["points"] >= graded["max_points"]:
                full[part].add(record["student"])
            for mistake in graded["mistakes"]:
                students[part][mistake].add(record["student"])
                checks[part][mistake] += 1
            if graded.get("unexplained"):
                key = (graded["unexplained"]["step"] or "", tuple(graded["unexplained"]["failed"]))
                group = unexplained[part].setdefault(key, {"students": set(), "checks": 0, "example": None})
                group["students"].add(record["student"])
                group["checks"] += 1
                group["example"] = record["sha256"]  # records come oldest first: the latest is kept
    table = []
    for part in (p.name for p in spec.parts):
        mistakes = sorted(students[part], key=lambda m: (-len(students[part][m]), -checks[part][m], m))
        groups = sorted(unexplained[part].items(), key=lambda kv: (-len(kv[1]["students"]), -kv[1]["checks"], kv[0]))
        table.append({"part": part, "students": len(checked[part]), "full_marks": len(full[part]),
                      "mistakes": [{"id": m, "description": described.get(m, m), "students": len(students[part][m]),
                                    "checks": checks[part][m]} for m in mistakes],
                      "unexplained": [{"step": step or None, "failed": list(failed), "students": len(group["students"]),
                                       "checks": group["checks"], "example": group["example"]}
                                      for (step, failed), group in groups]})
    return table
