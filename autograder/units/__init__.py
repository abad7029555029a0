"""The graded units, by name. Adding a unit: write `units/<name>.py` with a `UNIT` and
list it here."""

from . import attention

UNITS = {unit.name: unit for unit in (attention.UNIT,)}


def get_unit(name: str):
    try:
        return UNITS[name]
    except KeyError:
        raise KeyError(f"no graded unit {name!r}; known units: {', '.join(sorted(UNITS))}") from None
