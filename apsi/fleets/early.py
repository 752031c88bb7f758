"""Finish early: after the program's stages, each run moves to the option and day that end soonest
on GPUs free at the time, the other runs where they are.

Owns `finish`, what apsi.fleets.program does after its stages: `sooner(program, choice, start)`,
one pass of that rule, and `compact`, every run moved as early as it can go on its option, in
turn until neither moves a run. Owned GPUs cost nothing
(docs/method.md 4.12: their cost is sunk, idle is waste), so once the stages are solved a run that
can end sooner on GPUs nobody holds should: that is what puts the idle owned months to work. The
rule is local, not an optimum: a finish-early stage solved by CP-SAT (the last end, or the sum of
the runs' ends) was not proved within 10 s on the 50-run fleet of benchmarks/fleet_speed.py (a gap
of 64 days against a bound of 63, and of 912 against 123: docs/method.md 4.12), where this pass
and the compaction after it take a fraction of a second. Named in the objective, `makespan` is
still a CP-SAT stage, proved or given with its gap.

No stage gets worse: a run that moves ends no later (no deadline missed, no day more of tardiness,
no later last end, no run after it held up), keeps being scheduled (the optional stage), and uses
GPUs already there (owned, or bought in the purchase stage: what is paid does not change). A
stage can get better, where the time limit stopped its search short: `revalued` gives each stage
its value at the finished schedule (`stage_value`, worked out from the schedule itself), so the
values the plan prints are those of the schedule it shows. No solving, no I/O.
"""

from __future__ import annotations

import math
from typing import Any

from apsi.fleets.tables import Program, Stage


def sooner(p: Program, choice: list[int], start: list[int],
           segments: dict[int, list[tuple[int, int, int]]] | None = None) -> tuple[list[int], list[int], bool]:
    """One pass over the runs in order of start (then index): each takes, among its options, the one
    and the earliest day that end soonest (then hold the fewest GPU-days, then the fewer GPUs, then
    the first option) on the GPUs (and, under a cap, the power) the others leave free, within its
    start_after and after the runs it comes after, where that ends before its end now or as soon on
    fewer GPU-days. A run already running, or left out, stays; an elastic one (its `segments`, as
    the program placed them) stays unless one segment on one option ends no later on no more
    GPU-days, which then replaces them in `segments`. Returns the new choice and start, and
    whether any run moved. Each move lowers (end, GPU-days) of one run and raises none, so repeated
    passes stop."""
    choice, start = list(choice), list(start)
    horizon = p.horizon_days
    use = {t: [0] * horizon for t in p.capacity}
    watts = [0] * horizon
    cap = p.power_cap_w if p.power_cap_w is not None else 0  # without a cap both sides stay 0

    def hold(r: int, sign: int) -> None:
        for gpu_type, gpus, first, days in spans(p, r, choice[r], start[r], segments):
            for d in range(first, first + days):
                use[gpu_type][d] += sign * gpus
                watts[d] += sign * draw(p, gpu_type, gpus)

    for r in range(len(p.runs)):
        if choice[r] >= 0:
            hold(r, 1)
    moved = False
    for r in sorted(range(len(p.runs)), key=lambda r: (start[r], r)):
        run = p.runs[r]
        if choice[r] >= 0 and run.fixed and run.resumed is not None and segments is not None and r in segments:
            # An elastic run already running: its kept segments and the work they leave done at once
            # (elastic.finished), where that ends no later on no more GPU-days than as placed.
            moved |= _resume(p, r, segments, hold, use, watts, cap)
            continue
        if choice[r] < 0 or run.started is not None:
            continue
        elastic = segments is not None and r in segments
        if elastic:
            # An elastic run becomes one segment on one option where that ends no later on no more
            # GPU-days (no restart): the program's segments otherwise stay as it placed them.
            held = spans(p, r, choice[r], start[r], segments)
            best = (end(p, r, choice[r], start[r], segments), sum(g * d for _, g, _, d in held), math.inf, -1, -1)
        else:
            now = run.options[choice[r]]
            best = (start[r] + now.days, now.gpus * now.days, now.gpus, choice[r], start[r])
        hold(r, -1)
        earliest = max([run.start_after] + [end(p, q, choice[q], start[q], segments) for q in run.after])
        for o, opt in enumerate(run.options):
            if opt.gpu_type not in use or not opt.offered(0):
                continue  # (an option no purchase made keeps: Option.bought_nodes, apsi.fleets.buy.with_purchase)
            room, w = 0, draw(p, opt.gpu_type, opt.gpus)
            # Only a day that ends no later than the best so far can win: the scan stops there.
            for d in range(earliest, min(horizon, best[0])):
                fits = use[opt.gpu_type][d] + opt.gpus <= p.capacity[opt.gpu_type][d] and watts[d] + w <= cap
                room = room + 1 if fits else 0
                if room == opt.days:
                    key = (d + 1, opt.gpus * opt.days, opt.gpus, o, d + 1 - opt.days)
                    best = min(best, key)
                    break
        if elastic and best[3] >= 0:
            assert segments is not None
            one = [(best[3], best[4], run.options[best[3]].days)]
            if segments[r] != one:
                segments[r] = one
                choice[r], start[r] = best[3], best[4]
                moved = True
        elif not elastic and best[3:] != (choice[r], start[r]):
            choice[r], start[r] = best[3], best[4]
            moved = True
        hold(r, 1)
    return choice, start, moved


def _resume(p: Program, r: int, segments: dict[int, list[tuple[int, int, int]]], hold: Any,
            use: dict[str, list[int]], watts: list[int], cap: int) -> bool:
    """sooner()'s move for an elastic run already running (ProgramRun.resumed): its segments
    become elastic.finished's where those fit the GPUs (and power) the others leave and end sooner,
    or as soon on fewer GPU-days; whether they did."""
    from apsi.fleets.elastic import finished

    run, now = p.runs[r], segments[r]
    assert run.fixed is not None
    mine = finished(run)
    if mine == now:
        return False

    def key(segs: list[tuple[int, int, int]]) -> tuple[int, int]:
        return max(f + d for _, f, d in segs), sum(run.options[o].gpus * d for o, _, d in segs)

    hold(r, -1)
    fits = all(f + d <= p.horizon_days and all(
        use[run.options[o].gpu_type][x] + run.options[o].gpus <= p.capacity[run.options[o].gpu_type][x]
        and watts[x] + draw(p, run.options[o].gpu_type, run.options[o].gpus) <= cap for x in range(f, f + d))
        for o, f, d in mine[len(run.fixed) - 1:])
    if fits and key(mine) < key(now):
        segments[r] = mine
    hold(r, 1)
    return segments[r] is mine


def finish(p: Program, choice: list[int], start: list[int],
           segments: dict[int, list[tuple[int, int, int]]] | None = None) -> dict[str, list[int]]:
    """The choice and start after the stages: each run ending as soon as it can alone
    (apsi.fleets.early.sooner) and then compacted, until neither moves a run; an elastic run made
    one segment is so in `segments`, updated in place (the Schedule carries it)."""
    start = compact(p, choice, start, segments)
    moved = True
    while moved:
        choice, start, moved = sooner(p, choice, start, segments)
        start = compact(p, choice, start, segments)
    return {"choice": choice, "start": start}


def compact(p: Program, choice: list[int], start: list[int],
            segments: dict[int, list[tuple[int, int, int]]] | None = None) -> list[int]:
    """The starts with every run moved as early as it can go, the others where they are, until
    none can move: one day earlier must be no earlier than its start_after or than the end of a
    run it comes after, and leave room for its GPUs (and, under a cap, its power) on that day. Runs are tried in order of start
    (then index), so the answer depends on the schedule only. An elastic run (its `segments`) stays."""
    start = list(start)
    horizon = p.horizon_days
    use = {t: [0] * horizon for t in p.capacity}
    watts = [0] * horizon
    cap = p.power_cap_w if p.power_cap_w is not None else 0
    for r, (c, s) in enumerate(zip(choice, start)):
        if c >= 0:
            for gpu_type, gpus, first, days in spans(p, r, c, s, segments):
                for d in range(first, first + days):
                    use[gpu_type][d] += gpus
                    watts[d] += draw(p, gpu_type, gpus)
    moved = True
    while moved:
        moved = False
        for r in sorted(range(len(p.runs)), key=lambda r: (start[r], r)):
            c = choice[r]
            if c < 0 or p.runs[r].started is not None or r in (segments or {}):
                continue  # not scheduled, already running where it is, or elastic where the program put it
            run, opt = p.runs[r], p.runs[r].options[c]
            earliest = max([run.start_after] + [end(p, q, choice[q], start[q], segments) for q in run.after])
            day, drawn = start[r], draw(p, opt.gpu_type, opt.gpus)
            while day - 1 >= earliest and use[opt.gpu_type][day - 1] + opt.gpus <= p.capacity[opt.gpu_type][day - 1] \
                    and watts[day - 1] + drawn <= cap:  # without a cap both sides are 0
                day -= 1
                # The run now holds day `day` and no longer its last day.
                use[opt.gpu_type][day] += opt.gpus
                use[opt.gpu_type][day + opt.days] -= opt.gpus
                watts[day] += drawn
                watts[day + opt.days] -= drawn
            if day < start[r]:
                start[r] = day
                moved = True
    return start


def draw(p: Program, gpu_type: str, gpus: int) -> int:
    """The watts `gpus` GPUs of a type draw under the power cap (0 without one)."""
    return gpus * p.power_w.get(gpu_type, 0) if p.power_cap_w is not None else 0


def spans(p: Program, r: int, c: int, s: int, segments: dict[int, list[tuple[int, int, int]]] | None
          ) -> list[tuple[str, int, int, int]]:
    """(GPU type, GPUs, first day, days) of what run r holds: its segments when elastic, else its
    option `c` from day `s`."""
    if segments and r in segments:
        return [(p.runs[r].options[o].gpu_type, p.runs[r].options[o].gpus, first, days)
                for o, first, days in segments[r]]
    opt = p.runs[r].options[c]
    return [(opt.gpu_type, opt.gpus, s, opt.days)]


def end(p: Program, r: int, c: int, s: int, segments: dict[int, list[tuple[int, int, int]]] | None = None) -> int:
    """The first day run r no longer holds GPUs."""
    return max(first + days for _, _, first, days in spans(p, r, c, s, segments))


def revalued(p: Program, stages: list[Stage], choice: list[int], start: list[int], bought: dict[str, int],
             segments: dict[int, list[tuple[int, int, int]]] | None = None) -> list[Stage]:
    """The `stages` as solved, each valued at the finished schedule (`choice`, `start`, the nodes
    `bought` of Program `p`, elastic runs' `segments`): finishing moves no run to a later end, so a
    stage's value can only fall, and one that falls to its bound is proved (the bound holds under
    the stages before it, whose values did not rise). A stage the time stopped before it improved on
    the schedule (UNKNOWN, after the first) carries the schedule's value, with no bound (proved
    where it is the least the stage can be: 0, or for `optional` minus the weight of every optional run)."""
    out = []
    for st in stages:
        value = stage_value(p, st.name, choice, start, bought, segments)
        # Every stage but `optional` counts what is late or paid, restarts or the last end: never
        # below 0; `optional` never below minus the weight of every optional run.
        least = -sum(run.weight for run in p.runs if run.optional) if st.name == "optional" else 0
        bound = least if st.bound is None and value == least else st.bound
        proved = st.status == "OPTIMAL" or (bound is not None and value <= bound)
        out.append(st.model_copy(update={"value": value, "bound": bound, "status": "OPTIMAL" if proved else st.status}))
    return out


def stage_value(p: Program, name: str, choice: list[int], start: list[int], bought: dict[str, int] | None = None,
                segments: dict[int, list[tuple[int, int, int]]] | None = None) -> int:
    """The value stage `name` (apsi.fleets.program.Model.objective) gives a schedule (the nodes it
    bought, an elastic run's `segments`), worked out from it directly."""
    ends = {r: ends_at(p, r, c, start[r], segments) for r, c in enumerate(choice) if c >= 0}
    dated = [(p.runs[r], e) for r, e in ends.items() if p.runs[r].deadline is not None]
    if name == "deadlines":
        return sum(run.weight for run, e in dated if e > (run.deadline or 0))
    if name == "tardiness":
        # A run left out sits at its earliest day (Model), which the stage counts as its end.
        out = [(run, run.start_after) for run, c in zip(p.runs, choice) if c < 0 and run.deadline is not None]
        return sum(run.weight * max(0, e - (run.deadline or 0)) for run, e in dated + out)
    if name in ("purchase", "cost"):
        return sum(p.buy[t].cost * n for t, n in (bought or {}).items())
    if name == "makespan":
        return max(ends.values(), default=0)
    if name == "optional":
        return -sum(p.runs[r].weight for r in ends if p.runs[r].optional)
    if name == "moved":  # a re-plan's runs saved on an option and not on it from their saved day
        saved = p.saved or ([], [])  # (none without a saved answer)

        def moved(r: int, o: int, s: int) -> bool:
            if r in p.saved_segments and segments and r in segments:  # an elastic run: its every segment
                return [tuple(x) for x in segments[r]] != [tuple(x) for x in p.saved_segments[r]]
            return (choice[r], start[r]) != (o, s)

        return sum(1 for r, (o, s) in enumerate(zip(*saved)) if o >= 0 and moved(r, o, s))
    if name == "restarts":  # (an elastic run the program did not place holds one segment, or its kept ones)
        return sum(len(segments[r]) - 1 if segments and r in segments else
                   len(finished_of(p, r)) - 1 if p.runs[r].fixed else 0 for r in ends if p.runs[r].elastic)
    raise AssertionError(name)


def finished_of(p: Program, r: int) -> list[tuple[int, int, int]]:
    """An already-running elastic run's segments where the program has not placed them: its kept
    ones and the work they leave (apsi.fleets.elastic.finished)."""
    from apsi.fleets.elastic import finished

    return finished(p.runs[r])


def ends_at(p: Program, r: int, c: int, s: int, segments: dict[int, list[tuple[int, int, int]]] | None = None) -> int:
    """The first day run r no longer holds GPUs: after its segments (elastic, as placed or already
    running), else its option `c` from day `s`."""
    if segments and r in segments:
        return end(p, r, c, s, segments)
    if p.runs[r].fixed:  # already running: its kept segments and the work they leave (list scheduling's)
        last = finished_of(p, r)[-1]
        return last[1] + last[2]
    return s + p.runs[r].options[c].days
