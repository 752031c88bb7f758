"""fleet(): read a fleet, take each run's options from its own frontier, schedule them together, explain.

Composes apsi.fleets.spec (the file), apsi.fleets.options (the frontiers, in a process pool when
`jobs` > 1: the points do not depend on it), apsi.fleets.program (the CP-SAT program) and
apsi.fleets.conflicts (what cannot be done), and returns an apsi.fleets.result.FleetResult
(assembled by apsi.fleets.assemble). No printing, no formatting (apsi.fleets.render).
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
from collections.abc import Mapping
from typing import Any

from apsi.errors import ApsiError
from apsi.fleets import assemble
from apsi.fleets.options import Choice, Levels, choices, frontier_points
from apsi.fleets.early import end as end_of
from apsi.fleets.result import FleetResult, Purchase
from apsi.fleets.spec import Fleet, FleetError, read_fleet
from apsi.fleets.started import pinned_options
from apsi.fleets.tables import Program, ProgramRun, Schedule


def fleet(source: str | os.PathLike | Mapping | Fleet, *, time_limit_s: Any = None, jobs: Any = None,
          since: Any = None, answer: Any = None, buy: bool = False) -> FleetResult:
    """The fleet plan of a scenario file with a `fleet:` block (or its data, or a Fleet).

    `time_limit_s` (default the file's time_limit_s, else 30) bounds the program's stages
    together, wall clock (a plan whose stages are all proved repeats byte for byte); `jobs`
    processes compute the runs' frontiers (default: every core this process may use; the plan does
    not depend on it). Raises FleetError (an ApsiError) in one line when the file cannot be
    planned; a fleet whose required runs cannot all be scheduled is returned with status
    INFEASIBLE and its `conflict`. With `since` (a date) and `answer` (a saved FleetResult, its
    JSON data or the path of apsi fleet's --json output), the runs the answer started before that
    day stay where they are and the rest are planned again; the notes say what moved
    (apsi.fleets.replan). With `buy` (apsi fleet --buy), the program may buy what the file's `buy:`
    block offers (without one: more of each type it owns, from day 0, rented at its price), the
    runs' options widen to what the most bought would hold, and the plan is the least-cost purchase
    that meets every deadline (the stages deadlines, tardiness, then purchase, then the file's
    others), with the least of each type alone beside it (FleetResult.purchase, .purchase_alternatives).

    >>> r = fleet({"fleet": {"start": "2026-07-01", "horizon_days": 90, "gpus": {"H100": 1024}},
    ...            "defaults": {"framework": "reference"},
    ...            "runs": [{"name": "a", "params": "7B", "tokens": "1T"}]}, jobs=1)
    >>> (r.status, r.runs[0].gpu_type, r.runs[0].start.isoformat())
    ('OPTIMAL', 'H100', '2026-07-01')
    """
    from apsi.api.scenarios import jobs_of
    from apsi.fleets.buy import offers, purchasable
    from apsi.fleets.buy import with_purchase
    from apsi.fleets.program import schedule
    from apsi.units import parse_flag

    buy = parse_flag(buy, "buy", "whether the fleet may buy or rent GPUs")  # 'yes' was taken as true
    spec = source if isinstance(source, Fleet) else read_fleet(source)
    # Each deadline's whole days from the run's own start_after, as the file gives it (a re-plan
    # moves start_after to its day): the option kept to meet it is the first plan's (options.thin).
    due = {r.name: r.deadline - r.start_after for r in spec.runs if r.deadline is not None}
    saved = None
    if (since is None) != (answer is None):
        raise FleetError("since and answer go together: the day to re-plan from and the saved plan whose runs "
                         "started before it stay (apsi fleet FILE --since DATE --from answer.json)")
    if since is not None:
        from apsi.fleets import replan

        saved, day = replan.answer_of(answer), replan.day_of(since, spec)
        spec, kept = replan.bought(replan.pinned(spec, saved, day), saved, day)
    limit = spec.time_limit_s if time_limit_s is None else check_time_limit(time_limit_s)
    workers = jobs_of(jobs)
    terms = _from(purchasable(spec, buy), day if since is not None else 0)
    table, notes, refused = _options(spec, workers, terms if buy else None, due)
    if refused:
        # A run whose question is refused costs only itself, as in a scenario file of runs: the
        # others are planned without it, and a Note says why it is not there. A run after it
        # cannot keep its order: it is left out too, saying so.
        gone = {spec.runs[i].name for i in refused}
        while behind := {i: f"run {r.name!r}" + (f" (line {r.line})" if r.line else "") + " runs after "
                          + ", ".join(repr(a) for a in r.after if a in gone) + ", which is left out"
                       for i, r in enumerate(spec.runs) if i not in refused and gone.intersection(r.after)}:
            refused.update(behind)
            gone |= {spec.runs[i].name for i in behind}
        refused = dict(sorted(refused.items()))
        if len(refused) == len(spec.runs):
            raise FleetError(next(iter(refused.values())))
        spec = spec.model_copy(update={"runs": [r for i, r in enumerate(spec.runs) if i not in refused]})
        table = [row for i, row in enumerate(table) if i not in refused]
        notes = [f"{why}: left out, the other runs planned without it" for why in refused.values()] + notes
    if since is not None:
        notes = kept + notes
    table = pinned_options(spec, table, terms if buy else None)
    notes += [f"run {r.name!r} started on {spec.start + dt.timedelta(days=r.started.day)}, before its start_after "
              f"({spec.start + dt.timedelta(days=r.start_after)}): it stays where it started"
              for r in spec.runs if r.started is not None and r.start_after > r.started.day]
    program = _program(spec, table, offers(terms, spec.horizon_days) if buy else None)
    if saved is not None:
        program = program.model_copy(update={"saved": _saved_hint(program, saved),
                                             "saved_segments": _saved_segments(program, saved)})
    stages = tuple(spec.objective)
    if buy:
        _check_buy_prices(terms)
        # The least purchase that meets every deadline (or the most that can be met): after the
        # lateness stages, before the file's others; the inventory is owned and not charged in it.
        # (the cost stage is the same sum, what is paid beyond what is owned: not solved twice)
        stages = ("deadlines", "tardiness", "purchase") + tuple(s for s in stages
                                                                if s not in ("deadlines", "tardiness", "cost"))
    # Under --buy a third of the limit is kept for the least purchase of each type alone.
    sched = schedule(program, stages, limit * (2 / 3 if buy else 1), spec.gap)
    ok = sched.status in ("OPTIMAL", "FEASIBLE")
    owned = with_purchase(program, sched.bought) if ok else program
    extra: dict[str, Any] = {}
    if buy and ok:
        extra = purchases(spec, terms, program, sched, limit / 3)
        extra["cost_usd"] = extra["purchase_cost_usd"]  # what is paid beyond what is owned
    conflict = None
    missed = not ok or _late(program, sched) > 0
    if missed:
        from apsi.fleets.conflicts import analyse

        if not buy:  # the remedies' purchase program: what may be bought, and the options it widens
            more = _from(purchasable(spec, True), day if since is not None else 0)
            wide = pinned_options(spec, _options(spec, workers, more, due)[0], more)
            wider = _program(spec, wide, offers(more, spec.horizon_days))
        else:  # what the buy: terms still offer beyond what the plan bought (none: no GPU remedy)
            # (the options each further purchase keeps: Option.bought_nodes counted from what was bought)
            wider = with_purchase(program, sched.bought, more=True) if ok else program
        found = analyse(owned, max(1.0, limit / 3), wider, scheduled=ok)
        conflict = None if found is None else assemble.conflict(spec, found, owned)
        if found is None:  # said, not left silent: a missed deadline always names its conflict when it can
            notes = [*notes, f"no conflict is named: its analysis settled none within its share of the time limit "
                             f"({max(1.0, limit / 3):,.0f} s of {limit:,.0f}); a longer --time-limit (time_limit_s) "
                             "names the runs or deadlines in conflict"]
    result = assemble.result(spec, owned, table, sched, conflict, notes).model_copy(
        update={**extra, "objective": list(stages), "left_out": list(refused.values())})
    if saved is not None:
        from apsi.fleets import replan

        since_date = spec.start + dt.timedelta(days=replan.day_of(since, spec))
        # A run the saved plan started that has ended by the re-plan's day ran there: said so.
        rows = [r.model_copy(update={"why": f"already ran: it ended on {r.end}, before the re-plan's {since_date}"})
                if r.end is not None and r.end < since_date and r.why.startswith("already started") else r
                for r in result.runs]
        result = result.model_copy(update={"runs": rows, "notes": result.notes + replan.gone(saved, spec, since_date)
                                           + replan.moved(saved, result, since_date)})
    return result


def _from(terms: dict, day: int) -> dict:
    """The purchase terms with none arriving before `day` (a re-plan's: nothing is bought in the past)."""
    return {t: b if b.lead_days >= day else b.model_copy(update={"lead_days": day}) for t, b in terms.items()}


def check_time_limit(value: Any, name: str = "time_limit_s") -> float:
    """The program's time limit in seconds; `name` is how the refusal calls it (the CLI's --time-limit)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 3600:
        raise FleetError(f"{name} must be a number of seconds above 0 and at most 3,600, got {value!r}")
    return float(value)


def _task(task: tuple[dict, str, int, str | None]) -> tuple[list | None, str | None]:
    """One frontier in a worker: its points, or the one-line message of the ApsiError it raised
    (the run's own question refused: not a size, a pin its rules refuse, no layout that fits)."""
    inputs, gpu_type, cap, catalog = task
    try:
        return frontier_points(inputs, gpu_type, cap, catalog), None
    except ApsiError as err:
        return None, str(err)


def _options(spec: Fleet, workers: int, terms: Mapping | None = None, due: Mapping[str, int] | None = None
             ) -> tuple[list[list[Choice]], list[str], dict[int, str]]:
    """Each run's choices on every type it may use, in the run's order then its gpu_types' order,
    up to the most GPUs of each type owned and (`terms`, apsi.fleets.buy.Purchasable) that may be
    bought, and the Notes. A run with none has no choices: an optional one is not scheduled (a
    Note), and a required one (its fastest layouts past the horizon, or its question refused on
    every type: its inputs, its pins, no layout that fits) is left out (its index and why, the
    third: fleet() plans the others without it). `due`: each deadline's whole days from the run's
    start_after in the file (default: the spec's), whose fewest-GPU option is kept (options.thin)."""
    from apsi.catalog import find_gpu

    capacity = spec.inventory.capacity(spec.horizon_days)
    most = {t: max(days) + (terms[t].max_gpus if terms and t in terms else 0) for t, days in capacity.items()}
    keys: dict[str, tuple[dict, str, int, str | None]] = {}
    for run in spec.runs:
        for t in run.gpu_types:
            if most[t] > 0:
                keys.setdefault(_key(run.inputs, t), (run.inputs, t, most[t], spec.catalog))
    tasks = list(keys.values())
    found = dict(zip(keys, _map(_task, tasks, workers)))
    table: list[list[Choice]] = []
    notes: list[str] = []
    left: dict[int, str] = {}
    thinned = [0, 0]  # options thinned away (max_options), of every run's whole set
    for index, run in enumerate(spec.runs):
        options: list[Choice] = []
        why = []
        refusals = 0
        for t in run.gpu_types:
            if most[t] == 0:
                continue
            points, error = found[_key(run.inputs, t)]
            gpu = find_gpu(t, spec.catalog)
            price = spec.prices.get(t, gpu.price_usd_per_hour)
            if points is None:
                why.append(f"{t}: {error}")
                refusals += 1
                continue
            on = run.started
            meets = (due or {}).get(run.name, None if run.deadline is None else run.deadline - run.start_after)
            rules: dict[str, Any] = dict(held=on.gpus if on is not None and on.gpu == t else None, meets=meets,
                                         elastic=run.elastic,
                                         purchase=_levels(capacity[t], terms[t]) if terms and t in terms else None)
            these = choices(points, t, gpu.gpus_per_node, price, spec.horizon_days, most[t], spec.max_options,
                            stretch(spec, run), **rules)
            if spec.max_options:
                every = choices(points, t, gpu.gpus_per_node, price, spec.horizon_days, most[t], 0, stretch(spec, run),
                                **rules)
                thinned[0] += max(0, len(every) - len(these))
                thinned[1] += len(every)
            if not these:
                why.append(f"{t}: its fastest layout within {most[t]:,} GPUs takes {points[-1].days:,.1f} days, past the "
                           f"{spec.horizon_days:,}-day horizon")
            options += these
        if not options and refusals and refusals == len(why):  # refused on every type, none past the horizon
            left[index] = f"run {run.name!r}" + (f" (line {run.line})" if run.line else "") + f": {why[0].split(': ', 1)[1]}"
            table.append([])
            continue
        if not options:
            named = f"run {run.name!r}" + (f" (line {run.line})" if run.line else "")
            reason = '; '.join(why) or 'no GPU type it may use has any GPUs within the horizon'
            if run.optional:  # an optional run the fleet cannot hold is not scheduled, and says why
                notes.append(f"{named} is optional and has no option in the fleet: {reason}")
                table.append([])
                continue
            # A required run no GPU type can finish within the horizon costs only itself, as a run
            # whose question is refused does (it had stopped the whole fleet): left out, with why.
            left[index] = f"{named} has no option in the fleet: {reason}"
            table.append([])
            continue
        notes += [f"run {run.name!r} cannot use {w}" for w in why]
        if spec.confidence == "high" and stretch(spec, run) == 1.0:
            notes.append(f"run {run.name!r} is planned under the reference arithmetic, whose flat MFU has no "
                         "calibrated range: its days are not widened by confidence: high")
        table.append(options)
    if thinned[0]:
        # What "proved" covers: the program weighs the options kept (apsi.fleets.options.thin).
        notes.append(f"{thinned[0]:,} of the runs' {thinned[1]:,} options were thinned away (max_options "
                     f"{spec.max_options:,} per run and GPU type): each stage is proved over the options kept; "
                     "max_options: 0 weighs every one")
    return table, notes, left


def _levels(days: tuple[int, ...], terms: Any) -> Levels:
    """What the purchase terms (apsi.fleets.buy.Purchasable) may add to a type owned `days`, as the
    thinning reads it (apsi.fleets.options.Levels): nothing where they arrive past the horizon."""
    lead = min(terms.lead_days, len(days))
    return Levels(before=max(days[:lead], default=0), after=max(days[lead:], default=0), node_gpus=terms.node_gpus,
                  max_nodes=terms.max_gpus // terms.node_gpus if lead < len(days) else 0)


def stretch(spec: Fleet, run: Any) -> float:
    """What a run's days are multiplied by: options.STRETCH under `confidence: high` for a run
    under a framework (the reference arithmetic's flat MFU has no calibrated range), else 1."""
    from apsi.fleets.options import STRETCH

    framework = str(run.inputs.get("framework") or "").strip().lower()
    return STRETCH if spec.confidence == "high" and framework != "reference" else 1.0


def _key(inputs: dict, gpu_type: str) -> str:
    return json.dumps([inputs, gpu_type], sort_keys=True, default=str)


def _map(fn: Any, tasks: list, workers: int) -> list:
    """fn over tasks, in order: in this process, or in a pool of `workers` forked processes."""
    workers = min(workers, len(tasks))
    if workers <= 1:
        return [fn(t) for t in tasks]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from apsi.api.scenarios import worker_start

    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("fork" if "fork" in methods else None)
    with ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=worker_start) as pool:
        return list(pool.map(fn, tasks))


def _program(spec: Fleet, table: list[list[Choice]], buy: dict | None = None) -> Program:
    from apsi.catalog import find_gpu

    index = {r.name: i for i, r in enumerate(spec.runs)}
    runs = [ProgramRun(name=r.name, options=[c.option for c in options],
                       start_after=r.start_after if r.started is None else min(r.start_after, r.started.day),
                       deadline=r.deadline, weight=r.weight, optional=r.optional, after=[index[a] for a in r.after],
                       started=None if r.started is None else r.started.day, elastic=r.elastic,
                       fixed=_fixed(r, options), resumed=None if r.started is None else r.started.since)
            for r, options in zip(spec.runs, table)]
    gpus = {t: find_gpu(t, spec.catalog) for t in spec.inventory.gpus}
    power: dict[str, Any] = {}
    if spec.power_cap_mw is not None:
        unknown_power = [t for t, g in gpus.items() if g.tdp_w is None]
        if unknown_power:
            raise FleetError(f"a power cap needs each GPU's board power, and the catalog has none for "
                             f"{', '.join(unknown_power)}: give its tdp_w in a catalog: file")
        # Facility watts per GPU: board power x PUE (apsi.training.reference.planning's energy rule), rounded up so the
        # cap is never passed; the cap in watts, rounded down.
        power = {"power_w": {t: math.ceil(g.tdp_w * spec.pue) for t, g in gpus.items() if g.tdp_w is not None},
                 "power_cap_w": math.floor(spec.power_cap_mw * 1e6)}
    return Program(runs=runs, capacity=spec.inventory.capacity(spec.horizon_days),
                   node_gpus={t: g.gpus_per_node for t, g in gpus.items()}, buy=buy or {}, **power)


def _saved_hint(p: Program, saved: Any) -> tuple[list[int], list[int]]:
    """A saved answer (FleetResult) as the program's runs' options and first days: each run on the
    option of its saved GPU type and GPUs (an elastic run's first segment's), from its saved day;
    -1 where it was not placed or has no such option now."""
    rows = {r.name: r for r in saved.runs}
    choice, start = [], []
    for run in p.runs:
        row = rows.get(run.name)
        first = row.segments[0] if row is not None and row.segments else row
        o = -1
        if row is not None and row.scheduled and first is not None and first.gpus and row.start_day is not None:
            o = next((i for i, opt in enumerate(run.options)
                      if (opt.gpu_type, opt.gpus) == (first.gpu_type, first.gpus)), -1)
        choice.append(o)
        start.append(row.start_day if o >= 0 and row is not None and row.start_day is not None else run.start_after)
    return choice, start


def _saved_segments(p: Program, saved: Any) -> dict[int, list[tuple[int, int, int]]]:
    """A saved answer's elastic runs' segments as (option, first day, days), by run index, where the
    run is elastic now and every segment's GPU type and GPUs are still one of its options."""
    rows = {r.name: r for r in saved.runs}
    out = {}
    for r, run in enumerate(p.runs):
        row = rows.get(run.name)
        if not run.elastic or row is None or not row.scheduled or not row.segments:
            continue
        index = {(opt.gpu_type, opt.gpus): o for o, opt in enumerate(run.options)}
        if all((x.gpu_type, x.gpus) in index for x in row.segments):
            out[r] = [(index[x.gpu_type, x.gpus], x.start_day, x.days) for x in row.segments]
    return out


def _fixed(run: Any, options: list[Choice]) -> list[tuple[int, int, int]] | None:
    """An elastic run's saved segments begun before the re-plan's day (Started.segments) as
    (option, first day, days), each on its pinned option (apsi.fleets.started.pinned_options); None
    for any other run."""
    if run.started is None or not run.started.segments:
        return None
    index = {(c.option.gpu_type, c.option.gpus): o for o, c in enumerate(options)}
    return [(index[gpu_type, gpus], first, days) for gpu_type, gpus, first, days in run.started.segments]


def _check_buy_prices(terms: Mapping) -> None:
    unpriced = sorted(t for t, b in terms.items() if b.node_usd(1) is None)
    if unpriced:
        raise FleetError(f"--buy needs a price for what it buys, and the catalog has none for {', '.join(unpriced)}: "
                         f"give fleet: buy: {{{unpriced[0]}: {{usd_per_gpu_hour: 2.5}}}} (or usd_per_gpu)")


def purchases(spec: Fleet, terms: Mapping, p: Program, s: Schedule, seconds: float) -> dict[str, Any]:
    """FleetResult's purchase fields: what the plan buys, and the least of each type alone that
    meets every deadline (apsi.fleets.purchase.least_nodes, `seconds` shared among the types)."""
    from apsi.fleets.purchase import least_nodes

    def words(t: str, nodes: int, proved: bool) -> Purchase:
        b = terms[t]
        usd = b.node_usd(spec.horizon_days)
        return Purchase(gpu_type=t, nodes=nodes, gpus=nodes * b.node_gpus,
                        first=spec.start + dt.timedelta(days=b.lead_days),
                        how="bought" if b.usd_per_gpu is not None else "rented",
                        cost_usd=None if usd is None else nodes * usd, proved=proved)

    usable = [t for t in p.buy if any(o.gpu_type == t for run in p.runs for o in run.options)]
    alone = [least_nodes(p, t, seconds / max(1, len(usable))) for t in usable]
    proved = all(st.status == "OPTIMAL" for st in s.stages if st.name in ("deadlines", "tardiness", "purchase"))
    chosen = [words(t, n, proved) for t, n in s.bought.items() if n > 0]
    return {"purchase": chosen, "purchase_cost_usd": sum(c.cost_usd or 0.0 for c in chosen),
            "purchase_alternatives": [words(a.gpu_type, a.nodes, a.proved) for a in alone if a is not None and a.nodes]}


def _late(p: Program, s: Schedule) -> int:
    """Runs scheduled past their deadline."""
    count = 0
    for r, (run, c, start) in enumerate(zip(p.runs, s.choice, s.start)):
        if c >= 0 and run.deadline is not None and end_of(p, r, c, start, s.segments) > run.deadline:
            count += 1
    return count
