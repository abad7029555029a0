"""The feedback service's database (SQLAlchemy; SQLite by default, any SQLAlchemy URL allowed):
the students and the hash of each one's token, and a record of every check that got past
authentication, with what each graded part scored and which catalogued mistakes it named.

Everything here is synchronous and is called from the service's event loop only, so a rate
check and the record that takes the slot are one step no other request can come between.
"""

from __future__ import annotations

import csv
import hashlib
import json
import re
import secrets
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import Boolean, DateTime, Float, ForeignKey, Integer, String, Text, create_engine, func, select
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, relationship

from .paths import ROOT

DEFAULT_DB = f"sqlite:///{ROOT / '.course_feedback' / 'feedback.db'}"
STUDENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}")  # a JupyterHub user name, an e-mail's local part

# What became of a check. Only GRADED and IN_FLIGHT (and BAD_INPUT found while grading) count
# against the limit: see Check.counts.
GRADED, OVER_LIMIT, BAD_INPUT, GRADER_FAILED, BUSY, IN_FLIGHT = (
    "graded", "over the limit", "bad input", "grader failed", "busy", "in flight")


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


class CheckPart(Base):
    """One graded part of one check: its points and the mistakes it was named with."""

    __tablename__ = "check_parts"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    check_id: Mapped[int] = mapped_column(ForeignKey("checks.id"), index=True)
    part: Mapped[str] = mapped_column(String(100))
    points: Mapped[float] = mapped_column(Float)
    max_points: Mapped[float] = mapped_column(Float)
    mistakes: Mapped[str] = mapped_column(Text, default="[]")  # a JSON list of catalogue ids
    check: Mapped[Check] = relationship(back_populates="parts")


def now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)  # naive UTC: SQLite keeps no time zone


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "replace")).hexdigest()


class Database:
    def __init__(self, url: str = DEFAULT_DB):
        if url.startswith("sqlite:///") and url != "sqlite:///:memory:":
            Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        self.url = url
        self.engine = create_engine(url)
        Base.metadata.create_all(self.engine)

    def close(self) -> None:
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

    def room(self, student_id: int, parts: list[str], limit: int, window: float) -> float:
        """0 when the student may check `parts` now; else the seconds until every one has room."""
        since = now() - timedelta(seconds=window)
        wait = 0.0
        with Session(self.engine) as session:
            for part in parts:
                times = session.scalars(
                    select(Check.received).where(Check.student_id == student_id, Check.counts,
                                                 Check.received >= since, Check.part.in_([part, "all"]))
                    .order_by(Check.received.desc())).all()
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
                    error: str | None = None) -> None:
        with Session(self.engine) as session:
            check = session.get(Check, check_id)
            check.finished, check.outcome, check.counts, check.error = now(), outcome, counts, error
            if report is not None:
                check.score, check.max_score = report["score"], report["max_score"]
                check.parts = [CheckPart(part=p["name"], points=p["points"], max_points=p["max_points"],
                                         mistakes=json.dumps(p["mistakes"])) for p in report["parts"]]
            session.commit()

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
        """Every check, oldest first (for the tests and the report)."""
        with Session(self.engine) as session:
            rows = session.scalars(select(Check).order_by(Check.id)).all()
            return [{"id": c.id, "student": c.student.name, "unit": c.unit, "part": c.part,
                     "received": c.received, "finished": c.finished, "outcome": c.outcome, "counts": c.counts,
                     "score": c.score, "max_score": c.max_score, "sha256": c.notebook_sha256, "error": c.error,
                     "parts": {p.part: {"points": p.points, "max_points": p.max_points,
                                        "mistakes": json.loads(p.mistakes)} for p in c.parts}}
                    for c in rows]

    def count(self) -> int:
        with Session(self.engine) as session:
            return session.scalar(select(func.count(Check.id)))


def write_tokens_csv(path: Path, tokens: dict[str, str]) -> None:
    with open(path, "w", newline="") as stream:
        writer = csv.writer(stream)
        writer.writerow(["student", "token"])
        writer.writerows(sorted(tokens.items()))


# ---------------------------------------------------------------- the instructor's report


def class_report(db: Database, unit: str) -> list[dict]:
    """Per graded part of `unit`: how many students checked it, how many reached full marks,
    and the mistakes named, each with the students who made it and the checks that named it,
    most students first."""
    from .units import get_unit

    spec = get_unit(unit)
    described = {m.name: m.description for m in spec.misconceptions}
    checked, full = defaultdict(set), defaultdict(set)
    students, checks = defaultdict(lambda: defaultdict(set)), defaultdict(lambda: defaultdict(int))
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
    table = []
    for part in (p.name for p in spec.parts):
        mistakes = sorted(students[part], key=lambda m: (-len(students[part][m]), -checks[part][m], m))
        table.append({"part": part, "students": len(checked[part]), "full_marks": len(full[part]),
                      "mistakes": [{"id": m, "description": described.get(m, m), "students": len(students[part][m]),
                                    "checks": checks[part][m]} for m in mistakes]})
    return table
