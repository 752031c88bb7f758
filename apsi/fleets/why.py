"""For each run of a fleet plan, what decided its slot: one sentence, read off the schedule.

Owns `reasons(program, schedule)`. It looks at the day before the run's start: the run starts on
its earliest day (the horizon's start or its start_after), or the day a run it comes after ends,
or the first day its GPUs are free (GPUs arriving, or another run ending), or the first day
its power fits under the cap, or it is already running (started): the program moves
every run as early as it can go (apsi.fleets.early.compact), so one of these holds.
No solving: the schedule is the program's.
"""

from __future__ import annotations

from typing import Callable

from apsi.fleets.early import end, spans
from apsi.fleets.tables import Program, Schedule


def reasons(p: Program, s: Schedule, date: Callable[[int], str] = lambda day: f"day {day:,}") -> list[str]:
    """One sentence per run, in the program's order; `date` names a day of the horizon (the fleet's
    calendar date, apsi.fleets.assemble)."""
    horizon = p.horizon_days
    use = {t: [0] * horizon for t in p.capacity}
    watts = [0] * horizon
    ends: dict[str, dict[int, list[str]]] = {t: {} for t in p.capacity}
    for r, (run, c, start) in enumerate(zip(p.runs, s.choice, s.start)):
        if c >= 0:
            for gpu_type, gpus, first, days in spans(p, r, c, start, s.segments):
                for d in range(first, first + days):
                    use[gpu_type][d] += gpus
                    watts[d] += gpus * p.power_w.get(gpu_type, 0)
            ends[gpu_type].setdefault(first + days, []).append(run.name)
    out = []
    for r, (run, c, start) in enumerate(zip(p.runs, s.choice, s.start)):
        if c < 0:
            soonest = min((run.start_after + o.days for o in run.options if o.offered(0)), default=None)
            if not run.options:
                out.append("left out: an optional run with no option that ends within the horizon (the Notes say why)")
            elif run.deadline is not None and soonest is not None and soonest > run.deadline:
                out.append("left out: an optional run that could not meet its deadline (its fastest option ends "
                           f"{soonest - run.deadline:,} day{'s' if soonest - run.deadline != 1 else ''} past it), "
                           "and the objective ranks met deadlines before optional runs kept")
            else:
                out.append("left out: an optional run the objective did not keep")
            continue
        opt = run.options[c]
        if r in s.segments and len(s.segments[r]) > 1:
            # Each segment's first and last day: a pause between two shows.
            steps = " then ".join(f"{run.options[o].gpus:,} {run.options[o].gpu_type} from {date(first)} to "
                                  f"{date(first + days - 1)}" for o, first, days in s.segments[r])
            out.append(f"elastic: {steps}, a restart at each change "
                       + ("(already started: its segments before the re-plan's day kept)" if run.fixed
                          else "(the program's segments)"))
            continue
        # A run already started keeps its one option: "fewest" would say nothing of its choice.
        fewest = min(o.gpus for o in run.options if o.gpu_type == opt.gpu_type and o.offered(0))
        size = (("its fewest GPUs on " + opt.gpu_type) if opt.gpus == fewest and run.started is None
                else f"{opt.gpus:,} {opt.gpu_type}")
        before = [p.runs[q].name for q in run.after if s.choice[q] >= 0
                  and end(p, q, s.choice[q], s.start[q], s.segments) == start]
        if run.started is not None:
            slot = "already started: it stays where it started"  # (a re-plan's may have ended since)
        elif start == run.start_after:
            slot = "starts on the horizon's first day" if start == 0 else "starts on its start_after"
        elif before:
            slot = f"starts when {', '.join(before)} ends (it comes after)"
        elif use[opt.gpu_type][start - 1] + opt.gpus > p.capacity[opt.gpu_type][start - 1]:
            arriving = p.capacity[opt.gpu_type][start] > p.capacity[opt.gpu_type][start - 1]
            freed = ends[opt.gpu_type].get(start, [])
            slot = ("starts when more " + opt.gpu_type + " arrive") if arriving and not freed else \
                f"starts when {', '.join(freed)} free{'s' if len(freed) == 1 else ''} its {opt.gpu_type}" if freed \
                else f"waits for {opt.gpu_type} to be free"
        elif p.power_cap_w is not None and watts[start - 1] + opt.gpus * p.power_w[opt.gpu_type] > p.power_cap_w:
            slot = "waits for power: the day before, it would pass the power cap"
        elif r in s.segments:
            slot = "starts where the program put it (an elastic run is not moved after it)"
        else:
            raise AssertionError(f"run {run.name} could start a day sooner: compact() moves every run")
        if r in s.segments:
            slot = "elastic, on one segment: " + slot[0].lower() + slot[1:]
        late = "" if run.deadline is None else (
            "; meets its deadline" if start + opt.days <= run.deadline
            else f"; ends {start + opt.days - run.deadline:,} day{'s' if start + opt.days - run.deadline != 1 else ''} "
                 "past its deadline")
        out.append(f"{slot}, on {size}{late}")
    return out
