"""The fleet's answer assembled from its schedule: FleetResult with each run's row (its option,
dates, segments, cost, slack and Why), the months' use per GPU type, utilisation, peak power and,
where the runs cannot all be placed or meet their deadlines, the conflict with its remedies in
words. No solving (apsi.fleets.program, apsi.fleets.conflicts decide) and no printing
(apsi.fleets.render).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from apsi.fleets.early import end as end_of
from apsi.fleets.early import spans
from apsi.fleets.options import Choice
from apsi.fleets.result import Conflict, FleetResult, FleetRow, MonthUse, Remedy, Segment, StageReport
from apsi.fleets.spec import Fleet
from apsi.fleets.tables import Program, Schedule
from apsi.fmt import usd as usd_text


def conflict(spec: Fleet, found: Any, p: Program) -> Conflict:
    """The conflict `found` (apsi.fleets.conflicts) in words: the runs or deadlines it holds and each
    remedy with its price where it has one."""
    names = [spec.runs[r].name for r in found.members]
    if not names:  # only the runs already running, fixed where they are, are left to blame
        names = [run.name for run in spec.runs if run.started is not None] or [run.name for run in spec.runs]
    if found.kind == "runs":
        text = (f"{_list(names)} cannot {'all ' if len(names) > 1 else ''}be scheduled within the "
                f"{spec.horizon_days:,}-day horizon"
                + (" (with the runs they come after)" if any(spec.runs[r].after for r in found.members) else ""))
        if p.power_cap_w is not None:
            # A run none of whose options fits under the power cap on any day: the cap is the cause.
            for r in found.members:
                draws = [o.gpus * p.power_w.get(o.gpu_type, 0) for o in p.runs[r].options]
                if draws and min(draws) > p.power_cap_w:
                    least = min(p.runs[r].options, key=lambda o: o.gpus * p.power_w.get(o.gpu_type, 0))
                    text = (f"{spec.runs[r].name} cannot be scheduled under the {spec.power_cap_mw:,.3g} MW power cap: "
                            f"its least option, {least.gpus:,} x {least.gpu_type}, draws {min(draws) / 1e6:,.3g} MW "
                            "(board power x PUE)")
                    break
    else:
        ends = [f"{spec.runs[r].name} by {_last(spec, spec.runs[r].deadline)}" for r in found.members]
        text = f"these deadlines cannot all be met: {_list(ends)}"
    remedies = []
    for remedy in found.remedies:
        if remedy.kind == "gpus":
            first = "the start" if remedy.from_day == 0 else _date(spec, remedy.from_day).isoformat()  # type: ignore[union-attr]
            # The exact price of the nodes (Offer.cost is each node's in whole dollars, for the program).
            from apsi.fleets.buy import purchasable

            each = purchasable(spec, True)[remedy.gpu_type] if remedy.cost else None
            node = None if each is None else each.node_usd(spec.horizon_days)
            usd = None if each is None or node is None else remedy.gpus // each.node_gpus * node
            words = (f"{remedy.gpus:,} more {remedy.gpu_type} from {first}" + ("" if usd is None else f" ({usd_text(usd)})")
                     + " would let every run be scheduled" + (" by its deadline" if found.kind == "deadlines" else "")
                     + ("" if remedy.proved else " (the fewest found in the time, not proved the fewest)"))
            remedies.append(Remedy(kind="gpus", gpu_type=remedy.gpu_type, gpus=remedy.gpus,
                                   first=_date(spec, remedy.from_day), cost_usd=usd, proved=remedy.proved, text=words))
        elif remedy.kind == "deadline":
            run = spec.runs[remedy.run]
            assert run.deadline is not None
            others = "it be met" if len(names) == 1 else "every deadline of the set be met"
            words = (f"{run.name}'s deadline {remedy.days:,} day{'s' if remedy.days != 1 else ''} later "
                     f"({_last(spec, run.deadline + remedy.days)}) would let {others}")
            remedies.append(Remedy(kind="deadline", run=run.name, days=remedy.days, text=words))
        else:
            words = (f"a horizon {remedy.days:,} day{'s' if remedy.days != 1 else ''} longer would let every required "
                     "run be scheduled")
            remedies.append(Remedy(kind="horizon", days=remedy.days, text=words))
    return Conflict(kind=found.kind, runs=names, minimal=found.minimal, text=text, remedies=remedies)


def _list(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _date(spec: Fleet, day: int | None) -> dt.date | None:
    return None if day is None else spec.start + dt.timedelta(days=day)


def _last(spec: Fleet, day: int | None) -> dt.date | None:
    """The date of the day before `day`: a deadline's (or an end's) last day."""
    return None if day is None else spec.start + dt.timedelta(days=day - 1)


def result(spec: Fleet, p: Program, table: list[list[Choice]], s: Schedule, conflict: Conflict | None,
           notes: list[str]) -> FleetResult:
    """The FleetResult of schedule `s` of program `p` (each run's options `table`), with `conflict`
    and the `notes` so far; its cost_usd is the caller's (purchases)."""
    from apsi.fleets.why import reasons

    capacity = p.capacity
    ok = s.status in ("OPTIMAL", "FEASIBLE")
    why = reasons(p, s, lambda day: (spec.start + dt.timedelta(days=day)).isoformat()) if ok else ["" for _ in p.runs]
    rows = []
    for r, run in enumerate(spec.runs):
        c = s.choice[r] if ok else -1
        if c < 0:
            rows.append(FleetRow(name=run.name, scheduled=False, optional=run.optional, deadline=_last(spec, run.deadline),
                                 after=run.after, why=why[r]))
            continue
        pick = table[r][c]
        start = s.start[r]
        days = end_of(p, r, c, start, s.segments) - start
        late = 0 if run.deadline is None else max(0, start + days - run.deadline)
        parts = [Segment(gpu_type=table[r][o].option.gpu_type, gpus=table[r][o].option.gpus,
                         layout_text=layout_text(table[r][o].layout), start=spec.start + dt.timedelta(days=first),
                         end=spec.start + dt.timedelta(days=first + held - 1), start_day=first, days=held)
                 for o, first, held in s.segments.get(r, [])]
        if parts:  # elastic: the GPU-hours of the whole days each segment holds, each at its type's price
            held = [(x.gpus * x.days * 24, table[r][o]) for x, (o, _, _) in zip(parts, s.segments[r])]
            prices = [each.price for _, each in held]
            cost = None if None in prices else sum(h * price for (h, _), price in zip(held, prices) if price is not None)
            pick = pick.model_copy(update={"gpu_hours": sum(h for h, _ in held), "cost_usd": cost,
                                           "run_days": float(sum(x.days for x in parts))})
        rows.append(FleetRow(name=run.name, scheduled=True, optional=run.optional, gpu_type=pick.option.gpu_type,
                             gpus=pick.option.gpus, nodes=pick.nodes, layout=pick.layout,
                             layout_text=layout_text(pick.layout), start=_date(spec, start),
                             end=_date(spec, start + days - 1), start_day=start, days=days, run_days=pick.run_days,
                             gpu_hours=pick.gpu_hours, cost_usd=pick.cost_usd, deadline=_last(spec, run.deadline),
                             late_days=late, slack_days=None if run.deadline is None else run.deadline - start - days,
                             after=run.after, why=why[r], segments=parts))
    used = [row for row in rows if row.scheduled]
    costs = [row.cost_usd for row in used]
    stages = [StageReport(name=st.name, status=st.status, value=st.value, bound=st.bound,
                          gap=None if st.value is None or st.bound is None else abs(st.value - st.bound) / max(1, abs(st.value)))
              for st in s.stages]
    return FleetResult(
        status=s.status, start=spec.start, horizon_days=spec.horizon_days, objective=list(spec.objective),
        confidence=spec.confidence,
        stages=stages, runs=rows, months=_months(spec, p, s, capacity) if ok else [],
        inventory={t: [(d, n) for d, n in enumerate(days) if d == 0 or days[d - 1] != n] for t, days in capacity.items()},
        cost_usd=0.0,  # owned GPUs are not charged: fleet() sets what a purchase costs
        gpu_hours_usd=None if any(c is None for c in costs) else sum(c for c in costs if c is not None),
        gpu_hours=sum(row.gpu_hours or 0.0 for row in used), **(_idle(p, s) if ok else {}),
        makespan_days=max((row.start_day + row.days for row in used if row.start_day is not None and row.days), default=0),
        late_runs=sum(row.late_days > 0 for row in used), options=sum(len(o) for o in table),
        power_cap_mw=spec.power_cap_mw, peak_power_mw=_peak_mw(p, s) if ok else None,
        solver_work_s=round(s.work_s, 6),
        conflict=conflict, unplaced=[spec.runs[r].name for r in s.unplaced], notes=notes + _unplaced(spec, p, s))


def _unplaced(spec: Fleet, p: Program, s: Schedule) -> list[str]:
    """No schedule in the time: what the greedy first schedule could not place, against the GPU-days
    the required runs need at the least (each on its option of fewest GPU-days) and those there."""
    if not s.unplaced:
        return []
    need = sum(min((o.gpus * o.days for o in run.options), default=0) for run in p.runs if not run.optional)
    there = sum(sum(days) for days in p.capacity.values())
    names = [spec.runs[r].name for r in s.unplaced]
    shown = _list(names if len(names) <= 6 else names[:5] + [f"{len(names) - 5:,} more"])
    required = sum(not run.optional for run in p.runs)
    return [f"no schedule was found in the time limit; apsi's greedy first schedule left {len(names):,} of the "
            f"{required:,} required runs without room before the horizon's end ({shown}). The required runs need at "
            f"least {need:,} GPU-days (each on its option of fewest GPU-days) of the {there:,} the inventory offers "
            f"({100 * need / max(1, there):.0f}%): a longer time limit, more GPUs (--buy) or a longer horizon may "
            "find one"]


def _idle(p: Program, s: Schedule) -> dict[str, Any]:
    """FleetResult's utilisation per type and the share of the idle GPU-days after the last run ends."""
    held = {t: 0 for t in p.capacity}
    last = 0
    for r, (c, start) in enumerate(zip(s.choice, s.start)):
        if c >= 0:
            for gpu_type, gpus, first, days in spans(p, r, c, start, s.segments):
                held[gpu_type] += gpus * days
                last = max(last, first + days)
    there = {t: sum(days) for t, days in p.capacity.items()}
    idle = sum(there.values()) - sum(held.values())
    after = sum(sum(days[last:]) for days in p.capacity.values())
    return {"utilisation": {t: held[t] / there[t] if there[t] else 0.0 for t in p.capacity},
            "idle_after_share": after / idle if idle > 0 else None}


def _peak_mw(p: Program, s: Schedule) -> float | None:
    """The most facility power the runs draw on one day, MW; None without a power cap."""
    if p.power_cap_w is None:
        return None
    watts = [0] * p.horizon_days
    for r, (c, start) in enumerate(zip(s.choice, s.start)):
        if c >= 0:
            for gpu_type, gpus, first, days in spans(p, r, c, start, s.segments):
                for d in range(first, first + days):
                    watts[d] += gpus * p.power_w[gpu_type]
    return max(watts, default=0) / 1e6


def _months(spec: Fleet, p: Program, s: Schedule, capacity: dict[str, tuple[int, ...]]) -> list[MonthUse]:
    """GPU-days held and available per type in each calendar month of the horizon."""
    horizon = p.horizon_days
    use = {t: [0] * horizon for t in capacity}
    for r, (c, start) in enumerate(zip(s.choice, s.start)):
        if c >= 0:
            for gpu_type, gpus, first, days in spans(p, r, c, start, s.segments):
                for d in range(first, first + days):
                    use[gpu_type][d] += gpus
    out = []
    first = 0
    while first < horizon:
        day = spec.start + dt.timedelta(days=first)
        following = (day.replace(day=1) + dt.timedelta(days=32)).replace(day=1)
        last = min(horizon, first + (following - day).days)
        n = last - first
        for t in capacity:
            out.append(MonthUse(month=day.strftime("%Y-%m"), gpu_type=t, days=n,
                                mean_gpus_used=sum(use[t][first:last]) / n,
                                mean_gpus_available=sum(capacity[t][first:last]) / n))
        first = last
    return out


def layout_text(layout: Any) -> str:
    """TP x PP x DP (CP and EP past 1), then the recomputation level: a layout in a table cell."""
    parts = [f"TP{layout.tp}", f"PP{layout.pp}"] + ([f"CP{layout.cp}"] if layout.cp > 1 else []) + [f"DP{layout.dp}"]
    experts = f" EP{layout.ep}" if layout.ep > 1 else ""
    return " x ".join(parts) + experts + ("" if layout.recompute == "none" else f", {layout.recompute}")
