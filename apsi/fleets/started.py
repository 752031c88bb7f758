"""A fleet run already running (its `started:` key): the day it started, on how many GPUs of which
type. read_started() reads it for apsi.fleets.spec, apsi.fleets.api keeps the one option that holds
those GPUs, and the program (apsi.fleets.program) fixes the run there."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from apsi.model.documented import Documented


class Started(Documented):
    """A run already running: the day it started, on how many GPUs of which type."""

    day: int
    """Days from the horizon's start (the run holds its GPUs from that day for its option's days)."""
    gpu: str
    gpus: int
    """GPUs held: one of its options' counts on that type (whole nodes)."""


STARTED_KEYS = ("date", "gpu", "gpus")
"""The keys of a run's `started:` mapping."""


def read_started(value: Any, start: dt.date, horizon: int, types: list[str], at: str) -> Started | None:
    """A run's `started: {date: 2026-08-01, gpu: H100, gpus: 1024}`, checked: a day of the horizon,
    one of the run's GPU types, a whole number of GPUs (matched to its options in apsi.fleets.api)."""
    from apsi.errors import brief, unknown
    from apsi.fleets.reading import FleetError, horizon_day, whole_count

    if value is None:
        return None
    example = "started: {date: 2026-08-01, gpu: H100, gpus: 1024}"
    if not isinstance(value, Mapping) or set(value) != set(STARTED_KEYS):
        raise FleetError(f"{at}: started must be the day it started, its GPU type and GPUs, such as {example}, "
                         f"got {brief(value)}")
    day = horizon_day(value["date"], start, f"{at}: started date")
    assert day is not None
    if day >= horizon:
        raise FleetError(f"{at}: started date {value['date']} is past the horizon's last day: give a date within it")
    lowered = {t.lower(): t for t in types}
    gpu = value["gpu"]
    if not isinstance(gpu, str) or gpu.strip().lower() not in lowered:
        raise FleetError(f"{at}: started gpu: {unknown('GPU type of the run', gpu, types)}")
    gpus = whole_count(value["gpus"], f"{at}: started gpus")
    if gpus < 1:
        raise FleetError(f"{at}: started gpus must be at least 1, got {gpus}")
    return Started(day=day, gpu=lowered[gpu.strip().lower()], gpus=gpus)
