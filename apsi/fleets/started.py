"""A fleet run already running (its `started:` key): the day it started, on how many GPUs of which
type. apsi.fleets.spec reads it, apsi.fleets.api keeps the one option that holds those GPUs, and the
program (apsi.fleets.program) fixes the run there."""

from __future__ import annotations

from apsi.fleets.tables import _Frozen


class Started(_Frozen):
    """A run already running: the day it started, on how many GPUs of which type."""

    day: int
    """Days from the horizon's start (the run holds its GPUs from that day for its option's days)."""
    gpu: str
    gpus: int
    """GPUs held: one of its options' counts on that type (whole nodes)."""


STARTED_KEYS = ("date", "gpu", "gpus")
"""The keys of a run's `started:` mapping."""
