"""A fleet run already running (its `started:` key): the day it started, on how many GPUs of which
type. read_started() reads it for apsi.fleets.spec, pinned_options() keeps the one option that holds
those GPUs (for apsi.fleets.api), and the program (apsi.fleets.program) fixes the run there."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from apsi.model.documented import Documented

if TYPE_CHECKING:
    from apsi.fleets.buy import Purchasable
    from apsi.fleets.options import Choice
    from apsi.fleets.spec import Fleet


class Started(Documented):
    """A run already running: the day it started, on how many GPUs of which type."""

    day: int
    """Days from the horizon's start (the run holds its GPUs from that day for its option's days)."""
    gpu: str
    gpus: int
    """GPUs held: one of its options' counts on that type (whole nodes)."""
    segments: list[tuple[str, int, int, int]] | None = None
    """An elastic run's segments in a saved answer it is re-planned from (apsi.fleets.replan): (GPU
    type, GPUs, first day, days) each, the first on `gpu` and `gpus` from `day`: those begun before
    the re-plan's day (`since`), kept, the one running then cut at it."""
    since: int | None = None
    """With `segments`: the re-plan's day. The segment running up to it may run on (the plan decides
    its end), and the rest of the run's work is planned from it (apsi.fleets.elastic)."""


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
    if not isinstance(value, Mapping):
        raise FleetError(f"{at}: started must be the day it started, its GPU type and GPUs, such as {example}, "
                         f"got {brief(value)}")
    if set(value) != set(STARTED_KEYS):
        # The keys by name (a YAML date read as a date object printed as Python's repr).
        missing = [k for k in STARTED_KEYS if k not in value]
        extra = [str(k) for k in value if k not in STARTED_KEYS]
        what = (f"has no {' or '.join(missing)}" if missing else "") + (" and " if missing and extra else "") + \
            (f"has {', '.join(repr(k) for k in extra)}, not one of its keys" if extra else "")
        raise FleetError(f"{at}: started {what}: give the day it started, its GPU type and GPUs, such as {example}")
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


def pinned_options(spec: Fleet, table: list[list[Choice]],
                   buyable: dict[str, Purchasable] | None = None) -> list[list[Choice]]:
    """Each run already running (FleetRun.started) down to the one option it runs on: its GPU type
    and GPUs held. The options keep the count it holds (apsi.fleets.options.choices: on n nodes,
    the fastest layout on at most n nodes' GPUs, whatever the thinning and the whole days say);
    where none does (its fastest layout there past the horizon) it runs the fastest option within
    them, the GPU-hours those held; an elastic run with its saved segments (Started.segments) down
    to the options of its segments, and, re-planned from a day (Started.since), its other options
    for the work they leave. A FleetError names the run when the GPUs are not whole nodes, or
    fewer than its fewest option holds, or more than the inventory (with what `buyable` offers from
    its lead day, under --buy: a re-plan of a plan that bought them) holds on a day it runs."""
    out = []
    capacity = None  # the inventory day by day, worked out for the first run started
    holding_on: dict[tuple[str, int], list[tuple[str, int]]] = {}  # (type, day): (run, GPUs) held
    for run, options in zip(spec.runs, table):
        if run.started is not None:
            on = run.started
            # Each piece it holds: (type, GPUs, first day, days or None: its option's); an elastic
            # run re-planned from a saved answer holds its saved segments begun before that day.
            pieces: list[tuple[str, int, int, int | None]] = (list(on.segments) if on.segments
                                                              else [(on.gpu, on.gpus, on.day, None)])
            kept: list[Choice] = []
            for gpu_type, gpus, first, days in pieces:
                c = _held(spec, run.name, options, gpu_type, gpus)
                # It holds these GPUs whatever is bought (Option.bought_nodes).
                c = c.model_copy(update={"option": c.option.model_copy(update={"bought_nodes": None})})
                if all((k.option.gpu_type, k.option.gpus) != (gpu_type, gpus) for k in kept):
                    kept.append(c)
                capacity = capacity or spec.inventory.capacity(spec.horizon_days)
                # An elastic run not yet re-planned holds them on the day it started; after it, it
                # may pause and resume (apsi.fleets.elastic), so an outage later is the program's.
                held_days = (1 if run.elastic else c.option.days) if days is None else days
                _check_room(spec, run.name, capacity, buyable, gpu_type, gpus, first, held_days)
                for d in range(first, min(first + held_days, spec.horizon_days)):
                    holding_on.setdefault((gpu_type, d), []).append((run.name, gpus))
            # A re-planned elastic run does the work its kept segments leave on any of its options.
            rest = [c for c in options if all((k.option.gpu_type, k.option.gpus) != (c.option.gpu_type, c.option.gpus)
                                              for k in kept)] if on.since is not None else []
            options = kept + rest
        out.append(options)
    if capacity is not None:
        _check_together(spec, capacity, buyable, holding_on)
    _check_order(spec)
    return out


def _check_order(spec: Fleet) -> None:
    """A FleetError when a run already running comes after a run that had not started before it:
    it cannot have (the program could only call the fleet infeasible)."""
    from apsi.fleets.reading import FleetError

    began = {r.name: r.started.day for r in spec.runs if r.started is not None}
    for run in spec.runs:
        if run.started is None:
            continue
        for name in run.after:
            if began.get(name, run.started.day) >= run.started.day:
                when = spec.start + dt.timedelta(days=run.started.day)
                what = ("has not started" if name not in began
                        else f"started on {spec.start + dt.timedelta(days=began[name])}")
                raise FleetError(f"run {run.name!r} started on {when} and comes after {name!r}, which {what}: a run "
                                 f"that has started ran after the runs it follows; drop {name!r} from its after, or "
                                 f"give {name!r} the day it started")


def _check_together(spec: Fleet, capacity: dict[str, tuple[int, ...]], buyable: Any,
                    holding_on: dict[tuple[str, int], list[tuple[str, int]]]) -> None:
    """A FleetError when the runs already running hold more of a type together on a day they run
    than the inventory (with what `buyable` offers from its lead day) has: each fits alone
    (_check_room), and the program could only call the fleet infeasible."""
    from apsi.fleets.reading import FleetError

    for (gpu_type, d), held in sorted(holding_on.items(), key=lambda x: (x[0][1], x[0][0])):
        offer = (buyable or {}).get(gpu_type)
        room = capacity[gpu_type][d] + (offer.max_gpus if offer is not None and d >= offer.lead_days else 0)
        total = sum(g for _, g in held)
        if len(held) > 1 and total > room:
            names = ", ".join(repr(n) for n, _ in held[:-1]) + f" and {held[-1][0]!r}"
            each = ", ".join(f"{g:,}" for _, g in held[:-1]) + f" and {held[-1][1]:,}"
            raise FleetError(f"runs {names} started on {each} {gpu_type}, {total:,} in all, more than the fleet's "
                             f"{room:,} {gpu_type} on {spec.start + dt.timedelta(days=d)}, a day they all run: give "
                             "the GPUs each holds, and the inventory that holds them")


def _held(spec: Fleet, name: str, options: list[Choice], gpu_type: str, gpus: int) -> Choice:
    """The option a run already running holds on `gpus` GPUs of `gpu_type` (pinned_options)."""
    from apsi.catalog import find_gpu
    from apsi.fleets.reading import FleetError

    held = [c for c in options if c.option.gpu_type == gpu_type]
    if not held:
        types = sorted({c.option.gpu_type for c in options})
        raise FleetError(f"run {name!r} started on {gpus:,} {gpu_type}, and none of its options is on "
                         f"{gpu_type} (they are on {', '.join(types) or 'no GPU type'}): give the GPU type it runs on")
    per_node = find_gpu(gpu_type, spec.catalog).gpus_per_node
    within = [c for c in held if c.option.gpus <= gpus]
    if gpus % per_node or not within:
        why = (f"not whole nodes of {per_node:,}" if gpus % per_node
               else f"fewer than its fewest option holds ({held[0].option.gpus:,}: on fewer no layout fits, or none "
                    "ends within the horizon)")
        raise FleetError(f"run {name!r} started on {gpus:,} {gpu_type}, {why}: give the GPUs it holds, whole nodes "
                         f"(its {gpu_type} options hold {', '.join(f'{c.option.gpus:,}' for c in held)} GPUs)")
    return holding(within[-1], gpus, per_node)


def _check_room(spec: Fleet, name: str, capacity: dict[str, tuple[int, ...]], buyable: Any, gpu_type: str,
                gpus: int, first: int, days: int) -> None:
    """A FleetError when the inventory (with what `buyable` offers from its lead day) holds fewer
    than `gpus` of `gpu_type` on a day of the `days` from `first` a started run holds them."""
    from apsi.fleets.reading import FleetError

    owned = capacity[gpu_type]
    offer = (buyable or {}).get(gpu_type)
    more = [offer.max_gpus if offer is not None and d >= offer.lead_days else 0 for d in range(len(owned))]
    short = next((d for d in range(first, min(len(owned), first + days)) if owned[d] + more[d] < gpus), None)
    if short is not None:
        day = spec.start + dt.timedelta(days=short)
        also = f" and the {more[short]:,} it may buy" if more[short] else ""
        raise FleetError(f"run {name!r} started on {gpus:,} {gpu_type}, more than the fleet's {owned[short]:,} "
                         f"{gpu_type}{also} on {day}, a day it runs: give the GPUs it holds, and the inventory that "
                         "holds them" + ("" if buyable else " (or --buy, where it bought them)"))


def holding(c: Choice, gpus: int, per_node: int) -> Choice:
    """Option `c` (its layout and days) held on `gpus` GPUs: its GPU-hours and cost over those."""
    if c.option.gpus == gpus:
        return c
    from apsi.fleets.options import HOURS_PER_DAY

    hours = gpus * c.run_days * HOURS_PER_DAY
    cost = None if c.price is None else hours * c.price
    return c.model_copy(update={"option": c.option.model_copy(update={"gpus": gpus, "cost": round(cost or 0)}),
                                "nodes": gpus // per_node, "gpu_hours": hours, "cost_usd": cost})
