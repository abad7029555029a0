"""The reference implementation of a unit is its solution notebook's code, nothing else.

`load_reference("01_attention")` runs the solution cells (and the `setup` cell) of
`solutions/01_attention/attention.ipynb` in the grader's own process (it is the course's
code, not a student's) and hands back what they define. There is no second copy to keep
in step.
"""

from __future__ import annotations

import functools
from types import SimpleNamespace

from ..paths import solution_notebook
from ..trust.sandbox import TimeLimitExceeded, quiet, time_limit
from ..trust.submission import code_cells

REFERENCE_CELL_SECONDS = 60.0  # one cell of a solution notebook, run here to load the reference (trusted code)


class ReferenceBroken(RuntimeError):
    pass


@functools.cache
def load_reference(unit: str) -> SimpleNamespace:
    path = solution_notebook(unit)
    namespace: dict = {"__name__": "__reference__"}
    for label, source in code_cells(path, reference_only=True):
        try:
            code = compile(source, f"<{path.name}: {label}>", "exec", dont_inherit=True)
            with quiet(), time_limit(REFERENCE_CELL_SECONDS):
                exec(code, namespace)
        except (Exception, TimeLimitExceeded) as err:
            raise ReferenceBroken(f"the reference solution {path} failed in {label}: "
                                  f"{type(err).__name__}: {err}") from None
    public = {k: v for k, v in namespace.items() if not k.startswith("__")}
    return SimpleNamespace(**public)
