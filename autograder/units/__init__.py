"""The graded units, found by name: every module here that defines `UNIT` is one.

Adding a unit means adding `units/<name>.py`; nothing else in the engine changes.
"""

import importlib
import pkgutil


def _discover() -> dict:
    units = {}
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        unit = getattr(module, "UNIT", None)
        if unit is not None:
            units[unit.name] = unit
    return dict(sorted(units.items()))


UNITS = _discover()


def get_unit(name: str):
    try:
        return UNITS[name]
    except KeyError:
        known = ", ".join(UNITS)
        raise KeyError(f"no graded unit {name!r}; known units: {known}") from None
