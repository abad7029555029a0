"""nbgrader preprocessors that take every grade from the trusted run, never from the kernel.

`nbgrader autograde` executes the student's notebook in a kernel (sandboxed: see
`kernel.py`) for the feedback page. Nothing that kernel prints decides a grade:

- `StartTrustedGrading` (before Execute) writes the sanitized notebook, whose grade and
  locked cells nbgrader has just restored from the gradebook, to a private folder and
  starts the unit's hidden pytest graders on it (`run.GradingRun`), in parallel with the
  kernel;
- `FillGradeCells` (after Execute) waits for that run and replaces every grade cell's
  outputs with the run's message and points, clamped to the cell's maximum as the
  gradebook records it (the submission's own metadata is never believed). When the run
  itself failed (no sandbox could start, the graders crashed), that is the grader's
  failure: it raises, so nbgrader records nothing for this notebook, and the next run of
  `nbgrader autograde` (or `course.py autograde`, which lists the student with the
  reason) grades it again;
- `InertOutputs` keeps only inert kinds of output (plain text, PNG and JPEG images) in
  the student's cells, so no output can run script when a feedback page is opened.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

import nbformat
from nbconvert.preprocessors import Preprocessor
from traitlets import Float

from ..engine.report import GRADER_FAILED, fmt, grade_cell_text
from ..grading.run import GradingFailed, GradingRun, results_of
from ..trust.sandbox import CELL_SECONDS
from ..trust.submission import nbgrader_meta

RUNS: dict[str, GradingRun] = {}  # notebook being graded -> its trusted run
INERT_OUTPUT_TYPES = {"text/plain", "image/png", "image/jpeg"}


def part_of(grade_id: str) -> str:
    return grade_id.removeprefix("grade_")


def _key(resources) -> str:
    info = resources.get("nbgrader", {})
    return f"{info.get('student')}/{info.get('assignment')}/{info.get('notebook')}"


class StartTrustedGrading(Preprocessor):
    enabled = True

    def preprocess(self, nb, resources):
        abandon_runs()  # a notebook nbgrader gave up on before FillGradeCells: its run is still going
        unit = resources["nbgrader"]["assignment"]
        folder = Path(tempfile.mkdtemp(prefix="nbgrader-submission-"))
        path = folder / f"{resources['nbgrader']['notebook']}.ipynb"
        nbformat.write(nb, path)
        try:
            RUNS[_key(resources)] = GradingRun(unit, path)
        except KeyError as err:  # a unit without hidden tests: its grade cells score 0, said so
            self.log.error("No hidden tests for %s: %s", unit, err)
            shutil.rmtree(folder, ignore_errors=True)
        return nb, resources


def abandon_runs() -> None:
    """Stop every trusted run whose notebook nbgrader will not finish. nbgrader grades one
    notebook at a time, so any run still listed when the next starts (or when nbgrader exits)
    belongs to a notebook whose grading stopped before FillGradeCells."""
    while RUNS:
        run = RUNS.pop(next(iter(RUNS)))
        run.abandon()
        shutil.rmtree(run.submission.parent, ignore_errors=True)


atexit.register(abandon_runs)


class GraderFailure(RuntimeError):
    """The hidden tests could not grade this notebook for a reason of the grader's own."""


class FillGradeCells(Preprocessor):
    enabled = True
    timeout = Float(1800.0, help="seconds to wait for the hidden tests of one notebook").tag(config=True)

    def preprocess(self, nb, resources):
        run = RUNS.pop(_key(resources), None)
        report, problem = None, None
        if run is None:
            problem = GRADER_FAILED.format("its hidden tests could not be started")
        else:
            try:
                report, _ = run.result(self.timeout)
                if "error" in report:
                    problem, report = f"your notebook could not be graded: {report['error']}", None
            except GradingFailed as err:
                self.log.error("Grading %s failed: %s", _key(resources), err)
                raise GraderFailure(f"not graded, the grader failed: {str(err).splitlines()[0]}") from None
            finally:
                shutil.rmtree(run.submission.parent, ignore_errors=True)
        max_scores = self._max_scores(resources)
        results = results_of(report) if report else []
        notes = report.get("load_notes", []) if report else []
        for cell in nb.cells:
            meta = nbgrader_meta(cell)
            if cell.cell_type != "code" or not meta.get("grade") or meta.get("solution"):
                continue
            grade_id = str(meta.get("grade_id"))
            max_score = max_scores.get(grade_id, 0.0)
            meta["points"] = max_score  # what SaveAutoGrades reads: the gradebook's, never the submission's
            part = part_of(grade_id)
            mine = [r for r in results if r.name.split("/", 1)[0] == part]
            if problem is not None:
                text, score = f"`{part}`: 0 / {fmt(max_score)} points. {problem}", 0.0
            else:  # worded as the check line's report words it (feedback/reports.py), from the same function
                text, score = grade_cell_text(part, mine, max_score, notes)
            cell.outputs = [
                nbformat.v4.new_output("stream", name="stdout", text=text + "\n"),
                nbformat.v4.new_output("execute_result", data={"text/plain": repr(float(score))},
                                       execution_count=cell.get("execution_count") or 1),
            ]
        return nb, resources

    def _max_scores(self, resources) -> dict[str, float]:
        from nbgrader.api import Gradebook

        info = resources["nbgrader"]
        with Gradebook(info["db_url"]) as gb:
            notebook = gb.find_notebook(info["notebook"], info["assignment"])
            return {cell.name: float(cell.max_score) for cell in notebook.grade_cells}


GRADE_CELL_VALIDATE_SECONDS = 900  # a grade cell under validate: it waits for the hidden graders' verdict


def validate_timeout(cell) -> int:
    """Per-cell timeouts under `nbgrader validate` (nbclient's `timeout_func`).

    Under validate a grade cell asks the hidden graders (coursekit.feedback.validate_part),
    which takes from a few seconds to a minute and more on a busy machine; every other cell
    keeps the course's usual per-cell limit. (`SandboxedExecute`, autograde's, keeps that
    limit for every cell.)"""
    return GRADE_CELL_VALIDATE_SECONDS if nbgrader_meta(cell).get("grade") else CELL_SECONDS


class InertOutputs(Preprocessor):
    """Only plain text and raster images survive in the student's outputs."""

    enabled = True

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type != "code":
            return cell, resources
        kept = []
        for output in cell.get("outputs", []):
            kind = output.get("output_type")
            if kind in ("display_data", "execute_result"):
                data = {k: v for k, v in output.get("data", {}).items() if k in INERT_OUTPUT_TYPES}
                if not data:
                    continue
                output["data"] = data
                output["metadata"] = {}
            elif kind == "error":
                output["traceback"] = [f"{output.get('ename', 'Error')}: {output.get('evalue', '')}"[:2000]]
            elif kind != "stream":
                continue
            kept.append(output)
        cell.outputs = kept
        cell.metadata.pop("attachments", None)
        cell.pop("attachments", None)
        return cell, resources
