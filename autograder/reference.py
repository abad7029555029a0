"""The reference implementation of a unit is its solution notebook's code, nothing else.

`load_reference("01_attention")` runs the solution cells (and the `setup` cell) of
`solutions/01_attention/attention.ipynb` and hands back what they define. There is no
second copy to keep in step.
"""

from __future__ import annotations

import functools
from types import SimpleNamespace

from .paths import solution_notebook
from .submission import load_file


class ReferenceBroken(RuntimeError):
    pass


@functools.cache
def load_reference(unit: str) -> SimpleNamespace:
    path = solution_notebook(unit)
    loaded = load_file(path, reference_only=True)
    if loaded.notes:
        raise ReferenceBroken(f"the reference solution {path} failed: " + "; ".join(loaded.notes))
    public = {k: v for k, v in loaded.namespace.items() if not k.startswith("__")}
    return SimpleNamespace(**public)
