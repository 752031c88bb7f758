"""Re-planning a fleet from a day on (`apsi fleet FILE --since DATE --from answer.json`): the runs a
saved answer started before that day stay where they are, the rest are planned again.

Owns `pinned()` (the fleet with each such run given its `started:`, apsi.fleets.started),
`bought()` (the saved answer's purchases there before that day, owned from then on) and `moved()`
(what the new plan changed of the saved one, in words, for its notes). A run the file already
marks `started:` keeps its own. No solving: apsi.fleets.api.fleet() plans the result.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Mapping
from typing import Any

from apsi.fleets.result import FleetResult, FleetRow
from apsi.fleets.spec import Fleet, FleetError
from apsi.fleets.started import Started

MAX_ANSWER_BYTES = 64 * 2**20
"""The largest saved answer read (a 500-run FleetResult is about 1 MiB)."""


def answer_of(value: Any) -> FleetResult:
    """A saved fleet answer: a FleetResult, its JSON data, or the path of its JSON (`apsi fleet
    --json` output); one line (a FleetError) when it is none of them."""
    from pydantic import ValidationError

    if isinstance(value, FleetResult):
        return _consistent(value)
    try:
        if isinstance(value, Mapping):
            return _consistent(FleetResult.model_validate(value))
        if isinstance(value, (str, os.PathLike)):
            from apsi.textfiles import load_json, read_text_file

            text = read_text_file(value, "the saved fleet answer", MAX_ANSWER_BYTES, "JSON", FleetError)
            return _consistent(FleetResult.model_validate(load_json(text, "the saved fleet answer", FleetError)))
    except (ValidationError, ValueError, RecursionError) as err:
        if isinstance(err, FleetError):
            raise
        if isinstance(err, ValidationError) and err.errors():
            # The field, as a path into the JSON (runs[0].gpus), and what it must be.
            first_error = err.errors()[0]
            where = "".join(f"[{x}]" if isinstance(x, int) else f".{x}" for x in first_error["loc"]).lstrip(".")
            first = f"{where or 'the answer'}: {first_error['msg']}"[:200]
        else:
            first = str(err).splitlines()[0][:200]
        named = f" {str(value)[:200]}" if isinstance(value, (str, os.PathLike)) else ""
        if isinstance(err, ValidationError) and isinstance(value, (str, os.PathLike)):
            from apsi.textfiles import json_kind

            kind, words = json_kind(text)
            first = f"it is {words}" if kind and kind != "fleet" else first
        raise FleetError(f"the saved fleet answer{named} is not a fleet plan's JSON (apsi fleet FILE --json): "
                         f"{first}") from None
    raise FleetError(f"the saved fleet answer must be a path to apsi fleet's --json output, got {type(value).__name__}")


def _consistent(answer: FleetResult) -> FleetResult:
    """The answer, where each scheduled run has its start (date and day, the one the other's), GPU
    type and GPUs as apsi fleet --json writes them; else one line naming the run and the field (a
    hand-edited answer with a start of null was pinned at its start_day and reported as moved
    "from None")."""
    for row in answer.runs:
        if not row.scheduled:
            continue
        for field in ("start", "start_day", "gpu_type", "gpus"):
            if getattr(row, field) is None:
                raise FleetError(f"the saved fleet answer's run {row.name!r} is scheduled but has no {field}: give "
                                 "apsi fleet FILE --json's output as it was written")
        assert row.start is not None and row.start_day is not None
        if (row.start - answer.start).days != row.start_day:
            raise FleetError(f"the saved fleet answer's run {row.name!r} starts on {row.start} but at day "
                             f"{row.start_day:,} of a fleet from {answer.start}: give apsi fleet FILE --json's "
                             "output as it was written")
    return answer


def day_of(value: Any, spec: Fleet) -> int:
    """`since` as a day of the fleet's horizon (a date, or its ISO text), one line when outside it."""
    try:
        day = value if isinstance(value, dt.date) else dt.date.fromisoformat(str(value))
    except ValueError:
        raise FleetError(f"since must be a date such as 2026-09-01, got {str(value)[:80]!r}") from None
    last = spec.start + dt.timedelta(days=spec.horizon_days - 1)
    if not spec.start <= day <= last:
        raise FleetError(f"since {day} is outside the fleet's horizon, {spec.start} to {last}")
    return (day - spec.start).days


def pinned(spec: Fleet, answer: FleetResult, since: int) -> Fleet:
    """`spec` with every run the answer scheduled to start before day `since` started there, on its
    GPU type and GPUs, and every other run not started (the file's `started:` aside) starting on
    day `since` at the earliest; the answer must be a plan of a fleet from the same start."""
    if answer.start != spec.start:
        raise FleetError(f"the saved fleet answer starts on {answer.start}, the fleet on {spec.start}: re-plan from "
                         "an answer of this fleet")
    saved = {r.name: r for r in answer.runs}
    if saved and not any(run.name in saved for run in spec.runs):
        raise FleetError(f"the saved fleet answer plans none of this fleet's runs (it plans {_names(list(saved))}): "
                         "re-plan from an answer of this fleet")
    runs = []
    for run in spec.runs:
        row = saved.get(run.name)
        if (run.started is None and row is not None and row.scheduled and row.start_day is not None
                and row.start_day < since and row.gpu_type is not None and row.gpus is not None):
            # An elastic run keeps its saved segments begun before the re-plan's day (each its GPUs
            # and days; the one running then cut at it), not its first segment's GPUs for the whole
            # run (which the inventory of an outage could not hold); the rest of its work is
            # planned again from that day (apsi.fleets.elastic).
            segments = ([(x.gpu_type, x.gpus, x.start_day, min(x.days, since - x.start_day))
                         for x in row.segments if x.start_day < since] if run.elastic and row.segments else None)
            run = run.model_copy(update={"started": Started(day=row.start_day, gpu=row.gpu_type, gpus=row.gpus,
                                                            segments=segments, since=since if segments else None)})
        elif run.started is None and run.start_after < since:
            # Not started before the re-plan's day (new, or planned to start later): it starts from
            # that day at the earliest, as the purchases arriving from then on are decided anew.
            run = run.model_copy(update={"start_after": since})
        runs.append(run)
    return spec.model_copy(update={"runs": runs})


def bought(spec: Fleet, answer: FleetResult, since: int) -> tuple[Fleet, list[str]]:
    """`spec` with the saved answer's purchases that were there before day `since` (their first
    day earlier) added to its inventory from that day, as GPUs now owned: what was bought or rented
    stays (a run it started may hold them), and only what arrives from `since` on is decided anew;
    with the Note that says so."""
    from apsi.fleets.spec import Supply

    kept = [b for b in answer.purchase if (b.first - spec.start).days < since]
    if not kept:
        return spec, []
    gpus = {t: list(s) for t, s in spec.inventory.gpus.items()}
    for b in kept:
        gpus.setdefault(b.gpu_type, []).append(Supply(count=b.gpus, from_day=max(0, (b.first - spec.start).days)))
    inventory = spec.inventory.model_copy(update={"gpus": gpus})
    words = ", ".join(f"{b.gpus:,} {b.gpu_type} {b.how} from {b.first}" for b in kept)
    return spec.model_copy(update={"inventory": inventory}), [
        f"the saved answer's purchase there before the re-plan's day ({words}) is kept, as GPUs owned from then on; "
        "only what arrives from that day is decided again (--buy)"]


def _names(names: list[str]) -> str:
    """Up to five names, quoted, and how many more."""
    shown = ", ".join(repr(n) for n in names[:5])
    return shown + (f" and {len(names) - 5:,} more" if len(names) > 5 else "")


def gone(answer: FleetResult, spec: Fleet, since: dt.date) -> list[str]:
    """A note naming the runs the saved answer started before `since` that this fleet no longer
    has: their GPUs are planned as free."""
    names = {run.name for run in spec.runs}
    left = [r.name for r in answer.runs if r.scheduled and r.start is not None and r.start < since
            and r.name not in names]
    if not left:
        return []
    return [f"the saved answer started {_names(left)} before {since}, and this fleet has no such run: "
            f"{'its' if len(left) == 1 else 'their'} GPUs are planned as free"]


def moved(answer: FleetResult, result: FleetResult, since: dt.date) -> list[str]:
    """The notes of a re-plan: how many runs stayed where they started, and each run the new plan
    puts elsewhere than the saved one (day, GPU type or GPUs), or newly in or out."""
    saved = {r.name: r for r in answer.runs}
    kept = sum(1 for r in result.runs if r.scheduled and r.start is not None and r.start < since
               and r.name in saved and saved[r.name].start == r.start)
    notes = [f"re-planned from {since}: {kept:,} run{'s' if kept != 1 else ''} that started before it "
             + ("stays where it is" if kept == 1 else "stay where they are")]
    changes = []
    for r in result.runs:
        old = saved.get(r.name)
        if old is None:
            changes.append(f"{r.name} (new)")
        elif _placed(old) != _placed(r):
            changes.append(f"{r.name} from {_where(old)} to {_where(r)}")
    notes.append("moved: " + "; ".join(changes) if changes else "no run moved")
    return notes


def moved_from_saved(model: Any) -> Any:
    """The `moved` stage of a re-plan (apsi.fleets.program.Model.objective): the runs the saved answer
    places on an option o (Program.saved, o >= 0) that are not on o from their saved day s. Always
    last, so that among equal plans the saved one stands: an unchanged fleet re-planned had moved
    runs where its stages tied (two runs that each fit alone swapped, tests/test_fleet_elastic.py)."""
    p, m = model.p, model.m
    assert p.saved is not None
    moved = []
    for r, (o, s) in enumerate(zip(*p.saved)):
        if o >= 0:
            kept = m.new_bool_var(f"kept[{p.runs[r].name}]")
            m.add(model.start[r] == s).only_enforce_if(kept)
            m.add_implication(kept, model.use[r][o])
            segments = p.saved_segments.get(r)
            if segments is not None and r in model.segments:
                # An elastic run: every saved segment (its option, first day and days), and no more
                # (a running one's first is pinned already: its later ones had moved, unweighed).
                segs = model.segments[r]
                if len(segments) > len(segs):
                    m.add(kept == 0)
                for (o_k, first, days), (start, held, uses, on) in zip(segments, segs):
                    m.add(on == 1).only_enforce_if(kept)
                    m.add_implication(kept, uses[o_k])
                    m.add(start == first).only_enforce_if(kept)
                    m.add(held == days).only_enforce_if(kept)
                if len(segs) > len(segments):
                    m.add(segs[len(segments)][3] == 0).only_enforce_if(kept)
            moved.append(1 - kept)
    return sum(moved)


def _placed(r: FleetRow) -> tuple:
    """Where a run is: its day, GPUs and end, and an elastic run's every segment where it has more
    than one (one segment is the run's own place: a run saved elastic and now plain, or the reverse,
    on the same GPUs and days has not moved)."""
    return (r.scheduled, r.start, r.end, r.gpu_type, r.gpus,
            tuple((s.gpu_type, s.gpus, s.start, s.end) for s in r.segments) if len(r.segments) > 1 else ())


def _where(r: FleetRow) -> str:
    """A run's place in words for moved(): its start, its GPUs (an elastic run's in turn) and its end."""
    if not (r.scheduled and r.gpus):
        return "not scheduled"
    held = (" then ".join(f"{s.gpus:,} {s.gpu_type}" for s in r.segments) if len(r.segments) > 1
            else f"{r.gpus:,} {r.gpu_type}")
    return f"{r.start} on {held}, ending {r.end}"
