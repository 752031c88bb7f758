"""A fleet as read from a scenario file's `fleet:` block: the inventory over time and the runs' rules.

Owns the Fleet, Inventory, Supply and FleetRun models and `read_fleet()`, which checks a scenario
whose top level has `fleet:` and turns its dates into whole days from the horizon's start. The
runs' plan keywords are checked and expanded by apsi.api.scenarios (defaults, lists into one run per
combination), as for any scenario; this module adds the fleet's own keys and refuses, in one line
naming the place, what cannot be planned: a run `after` a name that is not a run, a cycle of
`after`, a deadline before a run's start_after, a GPU count that is not a whole number. It solves
nothing (apsi.fleets.api does). A file:

    defaults: {framework: reference}
    fleet:
      start: 2026-07-01            # day 0 of the horizon
      horizon_days: 365            # or end: 2027-06-30
      gpus:
        H100: 4096                                     # from the start, for good
        B200: {count: 2048, from: 2027-04-01}          # arriving
        A100: {count: 512, until: 2026-12-31}          # a reservation that ends (until: its last day)
      prices: {H100: 2.0}          # $/GPU-hour; default the catalog's
      objective: [deadlines, cost] # or one name: deadlines, tardiness, cost, makespan, optional
      power_cap_mw: 30             # optional: the site's power for the GPUs (board power x pue)
      buy: {B200: {usd_per_gpu: 38000, lead_days: 60}}  # what --buy may add (apsi.fleets.buy)
    runs:
      - {name: pretrain, params: 70B, tokens: 15T, deadline: 2027-03-01, weight: 3}
      - {name: long-context, params: 70B, tokens: 100B, seq: 131072, after: [pretrain]}
      - {name: sft, params: 8B, tokens: [10B, 20B], optional: true, gpu_types: [H100]}
      - {name: ablation, params: 3B, tokens: 300B, elastic: true}  # may resize at checkpoints
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Mapping
from typing import Any, Literal

from apsi.errors import ApsiError, brief, did_you_mean, unknown
from apsi.inputs.question import DEFAULT_PUE
from apsi.fleets.buy import Purchasable, read_buy
from apsi.fleets.reading import MAX_DAY, FleetError, date_of, horizon_day, positive, whole_count
from apsi.fleets.started import Started, read_started
from apsi.model.documented import Documented

FLEET_KEYS = ("start", "horizon_days", "end", "gpus", "prices", "objective", "time_limit_s", "gap", "max_options",
              "power_cap_mw", "pue", "confidence", "buy")
"""The keys of the `fleet:` block."""
RUN_FLEET_KEYS = ("start_after", "deadline", "after", "weight", "optional", "gpu_types", "started", "elastic")
"""The keys a run gains in a fleet (not expanded: `after` and `gpu_types` are lists as such)."""
NOT_IN_FLEET = {
    "kind": "a fleet schedules training runs (a serving run has no end to schedule): plan serving with apsi serve",
    "gpu": "the fleet program chooses each run's GPU type: give gpu_types, a list of the fleet's types it may use",
    "days": "a fleet run's days are its option's (the frontier's): give a deadline instead",
    "objective": "the fleet block's objective chooses among the runs' options",
    "price": "prices are the fleet's: give them under fleet: prices:",
    "levers": "a fleet run is not explained by levers",
    "include_consumer": "a fleet run's GPU types are the fleet's",
}
"""plan() keys that a run in a fleet may not set, and why."""
OBJECTIVES = ("deadlines", "tardiness", "cost", "makespan", "optional")
"""The objective stages a fleet may name (apsi.fleets.program)."""
DEFAULT_OBJECTIVE = ("deadlines", "tardiness", "optional", "cost")
"""Every deadline met (as far as they can be), then the fewest weighted days late, then the most
weight of optional runs, then the least paid beyond the GPUs owned (owned GPUs are not charged:
docs/method.md 4.12); after the stages each run ends as soon as it can alone (apsi.fleets.early)."""
DEFAULT_HORIZON_DAYS = 365
DEFAULT_TIME_LIMIT_S = 30.0
DEFAULT_MAX_OPTIONS = 12
"""Options kept per run and GPU type (apsi.fleets.options): the Pareto set thinned evenly in log
GPUs, the fewest and the most GPUs always kept; 0 keeps every point of the set."""
MAX_HORIZON_DAYS = 3660
"""Ten years of days: the program holds one capacity per day."""


class Supply(Documented):
    """GPUs of one type there from `from_day` until `until_day`."""

    count: int
    """GPUs."""
    from_day: int = 0
    """The first day they are there (days from the horizon's start)."""
    until_day: int | None = None
    """The first day they are no longer there; None: to the end of the horizon."""


class Inventory(Documented):
    """The GPUs of each type over time: a type's count on a day is the sum of its supplies there."""

    gpus: dict[str, list[Supply]]

    def capacity(self, horizon_days: int) -> dict[str, tuple[int, ...]]:
        """Each type's count on each day of the horizon."""
        return {t: tuple(sum(s.count for s in supplies if s.from_day <= d and (s.until_day is None or d < s.until_day))
                         for d in range(horizon_days)) for t, supplies in self.gpus.items()}


class FleetRun(Documented):
    """One run of the fleet: its plan keywords and its rules."""

    name: str
    line: int | None = None
    """Its line in the scenario file."""
    inputs: dict[str, Any]
    """plan() keywords, as apsi.api.scenarios expands them."""
    gpu_types: list[str]
    """The fleet's GPU types it may use."""
    start_after: int = 0
    """The first day it may start (days from the horizon's start)."""
    deadline: int | None = None
    """The first day it should no longer hold its GPUs (a date given: the day after it), or None."""
    weight: int = 1
    optional: bool = False
    after: list[str] = []
    """The runs it starts after (names, expanded)."""
    started: Started | None = None
    """Where a run already running is: it stays there when the fleet is planned again."""
    elastic: bool = False
    """True: it may change its GPUs at checkpoint boundaries (apsi.fleets.elastic), a restart each time."""


class Fleet(Documented):
    """A fleet ready for apsi.fleets.api: the horizon, the inventory, the prices, the objective, the runs."""

    start: dt.date
    """Day 0 of the horizon."""
    horizon_days: int
    inventory: Inventory
    prices: dict[str, float] = {}
    """$/GPU-hour given per type; a type not listed takes the catalog's price."""
    objective: list[str]
    """The objective stages in order (apsi.fleets.program)."""
    time_limit_s: float = DEFAULT_TIME_LIMIT_S
    gap: float = 0.0
    """A stage stops once its schedule is within this share of its bound (0.01: 1%), reported with
    that gap; 0: each stage runs to its proof or the time limit. A gap stop repeats byte for byte
    (it counts no clock), where a time-limit stop may not."""
    max_options: int = DEFAULT_MAX_OPTIONS
    confidence: Literal["expected", "high"] = "expected"
    """high: each run planned at the slow end of its calibrated days (apsi.fleets.options.STRETCH)."""
    power_cap_mw: float | None = None
    """The most facility power the runs' GPUs may draw together on any day, MW; None: no cap."""
    pue: float = DEFAULT_PUE
    """Facility power over IT power for the cap (apsi.inputs.question.DEFAULT_PUE, its source there)."""
    catalog: str | None = None
    buy: dict[str, Purchasable] = {}
    """What may be bought or rented (the `buy:` block, apsi.fleets.buy); the inventory is owned."""
    runs: list[FleetRun]


def has_fleet(source: Any) -> bool:
    """Whether a scenario (a file's path or data) has a `fleet:` block, read cheaply: the CLI's
    `apsi run` asks it to send such a file to the fleet."""
    from apsi.api.scenario_file import read_source

    if isinstance(source, Mapping):
        return "fleet" in source
    data, _, _ = read_source(source)
    return isinstance(data, Mapping) and "fleet" in data


def _at(line: int | None) -> str:
    """" (line N)" where the YAML line is known (a file), "" for data given in Python."""
    return f" (line {line})" if line else ""


def read_fleet(source: str | os.PathLike | Mapping) -> Fleet:
    """The fleet of a scenario file (or its data); FleetError, one line, when it cannot be planned."""
    from apsi.catalog import find_gpu
    from apsi.lineyaml import item_lines, line_of
    from apsi.api.scenario_file import FILE_KEYS, beside, catalog_path, defaults_of, read_source

    data, base, origin = read_source(source)
    if not isinstance(data, Mapping) or not isinstance(data.get("fleet"), Mapping):
        raise FleetError(f"{origin} has no 'fleet:' mapping: give the inventory as 'fleet: {{start: 2026-07-01, "
                         "gpus: {H100: 1024}}'")
    for key in data:
        if key not in FILE_KEYS:
            raise FleetError(f"{origin}: {unknown('top-level key', key, FILE_KEYS)}")
    block = data["fleet"]
    where = f"{origin}, fleet"
    for key in block:
        if key not in FLEET_KEYS:
            raise FleetError(f"{where}{_at(line_of(block, key))}: {unknown('key', key, FLEET_KEYS)}")
    catalog = catalog_path(data.get("catalog"), base, origin)
    start = date_of(block.get("start"), f"{where}: start")
    if start is None:
        raise FleetError(f"{where}: start is missing: give the horizon's first day, such as 'start: 2026-07-01'")
    horizon = _horizon(block, start, where)
    gpus = block.get("gpus")
    if not isinstance(gpus, Mapping) or not gpus:
        raise FleetError(f"{where}: gpus must map GPU types to counts, such as 'gpus: {{H100: 4096}}'")
    inventory: dict[str, list[Supply]] = {}
    for name, value in gpus.items():
        try:
            gpu = find_gpu(str(name), catalog)
        except ApsiError as err:
            raise FleetError(f"{where}, gpus: {err}") from None
        if gpu.name in inventory:
            # H100 and h100 are one type: the second had replaced the first's GPUs without a word.
            raise FleetError(f"{where}, gpus: {str(name)!r} is {gpu.name} again: give each GPU type once (a list of "
                             "supplies, such as [{count: 256}, {count: 64, from: 2026-09-01}], adds GPUs of one type)")
        inventory[gpu.name] = _supplies(value, start, horizon, f"{where}, gpus, {gpu.name}")
    prices = _prices(block.get("prices"), inventory, where)
    buy = read_buy(block.get("buy"), inventory, prices, horizon, where, catalog)
    inventory.update({t: [Supply(count=0)] for t in buy if t not in inventory})  # runs may name them
    objective = _objective(block.get("objective"), where)
    time_limit = positive(block.get("time_limit_s", DEFAULT_TIME_LIMIT_S), f"{where}: time_limit_s")
    gap = block.get("gap", 0.0)
    if isinstance(gap, bool) or not isinstance(gap, (int, float)) or not 0 <= gap < 1:
        raise FleetError(f"{where}: gap must be a share from 0 to below 1 (0.01: stop each stage within 1% of its "
                         f"bound), got {brief(gap)}")
    power_cap = block.get("power_cap_mw")
    power_cap = None if power_cap is None else positive(power_cap, f"{where}: power_cap_mw")
    pue = block.get("pue", DEFAULT_PUE)
    if isinstance(pue, bool) or not isinstance(pue, (int, float)) or not 1 <= pue <= 10:
        raise FleetError(f"{where}: pue must be a number from 1 to 10 (facility power over IT power), got {brief(pue)}")
    max_options = block.get("max_options", DEFAULT_MAX_OPTIONS)
    if isinstance(max_options, bool) or not isinstance(max_options, int) or max_options < 0:
        raise FleetError(f"{where}: max_options must be a whole number, 0 for every option, got {brief(max_options)}")
    confidence = block.get("confidence", "expected")
    if confidence not in ("expected", "high"):
        raise FleetError(f"{where}: confidence must be expected (each run's days) or high (the slow end of its "
                         f"calibrated range), got {brief(confidence)}")
    runs = data.get("runs")
    if not isinstance(runs, list) or not runs:
        raise FleetError(f"{origin}: 'runs' must be a list of runs, such as 'runs: [{{name: a, params: 70B}}]'")
    defaults = defaults_of({"defaults": data.get("defaults")}, origin)
    fleet_runs: list[FleetRun] = []
    groups: dict[str, list[str]] = {}
    for index, (run, line) in enumerate(zip(runs, item_lines(runs)), start=1):
        fleet_runs += _runs(index, run, line, defaults, inventory, start, horizon, origin, groups, base, beside)
    seen: set[str] = set()
    for r in fleet_runs:
        if r.name in seen:
            raise FleetError(f"{origin}: run {r.name!r}{_at(r.line)}: the name is already used: give each run its "
                             "own name")
        seen.add(r.name)
    fleet_runs = _resolve_after(fleet_runs, groups, origin)
    return Fleet(start=start, horizon_days=horizon, inventory=Inventory(gpus=inventory), prices=prices,
                 objective=list(objective), time_limit_s=time_limit, gap=float(gap), max_options=max_options,
                 power_cap_mw=power_cap, pue=float(pue), catalog=catalog, runs=fleet_runs, confidence=confidence, buy=buy)


def _horizon(block: Mapping, start: dt.date, where: str) -> int:
    end = date_of(block.get("end"), f"{where}: end")
    days = block.get("horizon_days")
    if end is not None and days is not None:
        raise FleetError(f"{where}: give horizon_days or end, not both")
    if end is not None:
        days = (end - start).days + 1  # end is the horizon's last day
        if days < 1:
            raise FleetError(f"{where}: end {end} is before start {start}: give the horizon's last day, on or after "
                             "its first")
    elif days is None:
        days = DEFAULT_HORIZON_DAYS
    if isinstance(days, bool) or not isinstance(days, int) or not 1 <= days <= MAX_HORIZON_DAYS:
        raise FleetError(f"{where}: the horizon must be 1 to {MAX_HORIZON_DAYS:,} whole days, got {brief(days)}")
    return days


def _supplies(value: Any, start: dt.date, horizon: int, where: str) -> list[Supply]:
    """A type's supplies: a count, a {count, from, until} mapping, or a list of them."""
    items = value if isinstance(value, list) else [value]
    if not items:
        raise FleetError(f"{where}: give a count, such as 4096, or {{count: 2048, from: 2027-04-01}}")
    out = []
    for item in items:
        if isinstance(item, Mapping):
            for key in item:
                if key not in ("count", "from", "until"):
                    raise FleetError(f"{where}: {unknown('key', key, ('count', 'from', 'until'))}")
            if "count" not in item:
                raise FleetError(f"{where}: count is missing, such as {{count: 2048, from: 2027-04-01}}")
            count = whole_count(item["count"], f"{where}: count")
            first = horizon_day(item.get("from"), start, f"{where}: from") or 0
            until = horizon_day(item.get("until"), start, f"{where}: until", last=True)  # until: the last day they are there
            if until is not None and until <= first:
                raise FleetError(f"{where}: until is before from: the GPUs would never be there")
            if first >= horizon:
                raise FleetError(f"{where}: from {item.get('from')} is past the horizon's last day: the GPUs would "
                                 "never be there within it; give a day within the horizon, or a longer horizon_days")
            out.append(Supply(count=count, from_day=first, until_day=until))
        else:
            out.append(Supply(count=whole_count(item, where)))
    return out


def _prices(value: Any, inventory: dict[str, list[Supply]], where: str) -> dict[str, float]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise FleetError(f"{where}: prices must map GPU types to $/GPU-hour, such as 'prices: {{H100: 2.0}}'")
    lowered = {t.lower(): t for t in inventory}
    out = {}
    for name, price in value.items():
        t = lowered.get(str(name).strip().lower())
        if t is None:
            raise FleetError(f"{where}, prices: {unknown('GPU type of the fleet', name, inventory)}")
        if t in out:
            raise FleetError(f"{where}, prices: {str(name)!r} is {t} again: give each GPU type's price once")
        out[t] = positive(price, f"{where}, prices, {t}")
    return out


def _objective(value: Any, where: str) -> tuple[str, ...]:
    """The stages in order; `deadlines` first when neither it nor tardiness is named, so that a
    deadline always counts."""
    if value is None:
        return DEFAULT_OBJECTIVE
    names = value if isinstance(value, list) else [value]
    out = []
    for name in names:
        if not isinstance(name, str) or name.strip().lower() not in OBJECTIVES:
            raise FleetError(f"{where}: {unknown('objective', name, OBJECTIVES)}")
        out.append(name.strip().lower())
    if len(set(out)) != len(out) or not out:
        raise FleetError(f"{where}: objective lists {brief(value)}: name each stage once")
    if "deadlines" not in out and "tardiness" not in out:
        out.insert(0, "deadlines")
    return tuple(out)


def _runs(index: int, run: Any, line: int | None, defaults: dict, inventory: dict[str, list[Supply]],
          start: dt.date, horizon: int, origin: str, groups: dict[str, list[str]], base: Any,
          beside: Any) -> list[FleetRun]:
    """The runs one entry of `runs:` expands to, with its fleet keys checked."""
    from apsi.api.scenario_file import expand

    at = f"{origin}, run {index}" + (f" (line {line})" if line else "")
    if not isinstance(run, Mapping):
        raise FleetError(f"{at} must be a mapping of plan() keywords and fleet keys ({', '.join(RUN_FLEET_KEYS)})")
    if isinstance(run.get("name"), str):
        at = f"{origin}, run {run['name']!r}" + (f" (line {line})" if line else "")
    for key, why in NOT_IN_FLEET.items():
        if key in run:
            raise FleetError(f"{at}: {key} is not a fleet run's key: {why}")
    from apsi.api.scenario_file import RUN_KEYS

    valid = ("name", *RUN_FLEET_KEYS, *(k for k in RUN_KEYS if k not in NOT_IN_FLEET))
    for key in run:
        if key not in valid:
            raise FleetError(f"{at}: {unknown('key', key, valid)}")
    rules = {k: run[k] for k in RUN_FLEET_KEYS if k in run}
    expanded = expand(index, {k: v for k, v in run.items() if k not in RUN_FLEET_KEYS}, line, defaults)
    for _, _, _, error in expanded:
        if error is not None:
            raise FleetError(f"{origin}: {error}")
    start_after = horizon_day(rules.get("start_after"), start, f"{at}: start_after") or 0
    if start_after >= horizon:
        # No day of the horizon is left to it: a run that may not start is not a plan to solve.
        first = start + dt.timedelta(days=start_after)
        end = start + dt.timedelta(days=horizon - 1)
        raise FleetError(f"{at}: start_after {first} is past the horizon's last day {end}: give a start_after "
                         "within the horizon, or a later end (end: or horizon_days:)")
    deadline = horizon_day(rules.get("deadline"), start, f"{at}: deadline", last=True)
    if deadline is not None and deadline <= start_after:
        # The program's deadline is the first day the run may no longer hold GPUs (horizon_day): its last
        # day is the one before, and start_after its first.
        last = start + dt.timedelta(days=deadline - 1)
        first = start + dt.timedelta(days=start_after)
        raise FleetError(f"{at}: the deadline {last} (the last day the run may hold GPUs) is before start_after "
                         f"{first} (the first it may start): give a deadline on or after {first}")
    weight = rules.get("weight", 1)
    if isinstance(weight, bool) or not isinstance(weight, int) or not 1 <= weight <= 1_000_000:
        raise FleetError(f"{at}: weight must be a whole number from 1 to 1,000,000, got {brief(weight)}")
    optional = rules.get("optional", False)
    if not isinstance(optional, bool):
        raise FleetError(f"{at}: optional must be true or false, got {brief(optional)}")
    elastic = rules.get("elastic", False)
    if not isinstance(elastic, bool):
        raise FleetError(f"{at}: elastic must be true or false, got {brief(elastic)}")
    after = rules.get("after", [])
    after = [after] if isinstance(after, str) else after
    if not isinstance(after, list) or not all(isinstance(a, str) and a.strip() for a in after):
        raise FleetError(f"{at}: after must be a list of run names, such as 'after: [pretrain]', got {brief(after)}")
    types = rules.get("gpu_types", list(inventory))
    types = [types] if isinstance(types, str) else types
    if not isinstance(types, list) or not types:
        raise FleetError(f"{at}: gpu_types must be a list of the fleet's GPU types ({', '.join(inventory)})")
    lowered = {t.lower(): t for t in inventory}
    allowed = []
    for t in types:
        if not isinstance(t, str) or t.strip().lower() not in lowered:
            raise FleetError(f"{at}: gpu_types: {unknown('GPU type of the fleet', t, inventory)}")
        allowed.append(lowered[t.strip().lower()])
    started = read_started(rules.get("started"), start, horizon, allowed, at)
    out = []
    for name, at_line, inputs, _ in expanded:
        if "params" in inputs:
            inputs = {**inputs, "params": beside(inputs["params"], base)}
        out.append(FleetRun(name=name, line=at_line, inputs=inputs, gpu_types=list(dict.fromkeys(allowed)),
                            start_after=start_after, deadline=deadline, weight=weight, optional=optional,
                            after=[a.strip() for a in after], started=started, elastic=elastic))
    if len(expanded) > 1:
        groups[str(run.get("name", f"run {index}"))] = [r.name for r in out]
    return out


def _resolve_after(runs: list[FleetRun], groups: dict[str, list[str]], origin: str) -> list[FleetRun]:
    """Each `after` name as the runs it names (a run, or every run a list expanded to), checked,
    and no cycle."""
    names = {r.name for r in runs}
    out = []
    for r in runs:
        resolved: list[str] = []
        for a in r.after:
            if a in names:
                resolved.append(a)
            elif a in groups:
                resolved += groups[a]
            else:
                choices = sorted(names | set(groups))
                raise FleetError(f"{origin}: run {r.name!r}{_at(r.line)} comes after {a!r}, which is not a run: "
                                 f"{did_you_mean(a, choices)}valid: {', '.join(choices[:20])}")
        if r.name in resolved:
            raise FleetError(f"{origin}: run {r.name!r}{_at(r.line)} comes after itself: remove it from its after")
        out.append(r.model_copy(update={"after": list(dict.fromkeys(resolved))}))
    cycle = _cycle({r.name: r.after for r in out})
    if cycle:
        raise FleetError(f"{origin}: the runs' after lists form a cycle ({' -> '.join(cycle)}): no run of it could "
                         "start first; remove one of these after entries")
    return out


def _cycle(after: dict[str, list[str]]) -> list[str]:
    """A cycle of `after` (names, the first repeated at the end), or [] when there is none."""
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(name: str) -> list[str]:
        state[name] = 1
        path.append(name)
        for q in after[name]:
            if state.get(q) == 1:
                return path[path.index(q):] + [q]
            if q not in state and (found := visit(q)):
                return found
        path.pop()
        state[name] = 2
        return []

    for name in after:
        if name not in state and (found := visit(name)):
            return found
    return []
