"""The fleet file's readers of single values: a date, a day of the horizon, a whole count, a
positive number, each refused in one line naming its place (FleetError). apsi.fleets.spec, .buy and
.started read their keys with them; they know nothing of a fleet's other keys."""

from __future__ import annotations

import datetime as dt
from typing import Any

from apsi.api.scenario_file import ScenarioError
from apsi.errors import brief

MAX_DAY = 100_000
"""The largest day number a start_after or deadline may give (some 270 years): past the longest
horizon either way, and within what a date and the CP-SAT program hold (10^30 overflowed both)."""


class FleetError(ScenarioError):
    """The fleet cannot be planned as written; the message names the place and what would be valid."""


def date_of(value: Any, what: str) -> dt.date | None:
    """A date given as a YAML date or an ISO string (2026-07-01); None when not given."""
    if value is None:
        return None
    if isinstance(value, dt.datetime):
        return value.date()
    if isinstance(value, dt.date):
        return value
    if isinstance(value, str):
        try:
            return dt.date.fromisoformat(value.strip())
        except ValueError:
            pass
    raise FleetError(f"{what} must be a date such as 2026-07-01, got {brief(value)}")


def horizon_day(value: Any, start: dt.date, what: str, last: bool = False) -> int | None:
    """A day of the horizon: a whole number of days from `start`, or a date (days since `start`;
    with `last`, the day after it: a deadline date is the last day a run may hold its GPUs, and the
    program's deadline is the first day it must no longer); None when not given."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        if not 0 <= value <= MAX_DAY:
            raise FleetError(f"{what} must be a date or a whole number of days from the start, 0 to {MAX_DAY:,}, "
                             f"got {brief(value)}")
        return value
    day = date_of(value, what)
    assert day is not None
    if day < start:
        raise FleetError(f"{what} {day} is before the fleet's start {start}")
    return (day - start).days + (1 if last else 0)


def _text_number(value: Any) -> str:
    """", which YAML reads as text: ..." for a string that reads as a number (YAML 1.1 takes 1e-9 and
    1e12 as text, 1.0e-9 as a number), else ""."""
    if not isinstance(value, str):
        return ""
    try:
        float(value)
    except ValueError:
        return ""
    return ", which YAML reads as text: write the number with a decimal point, such as 1.0e-9, or in full"


def whole_count(value: Any, what: str) -> int:
    """A whole, non-negative count (4096 or 4096.0), else one line saying what is valid."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise FleetError(f"{what} must be a whole number of GPUs, at least 0, got {brief(value)}{_text_number(value)}")
    return value


def positive(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
        raise FleetError(f"{what} must be a positive number, got {brief(value)}{_text_number(value)}")
    return float(value)
