"""Elastic runs: a run that may change its GPUs at checkpoint boundaries, as up to SEGMENTS
consecutive segments, each on one of its options (a whole-node layout of its frontier with its own
days), each doing a share of the run's work, a restart charged at every change.

Owns `add_segments`, the CP-SAT rules of one elastic run (apsi.fleets.program.Model calls it in
place of the fixed run's single interval), and `held`, what each segment holds once solved. No
I/O, no frontier.

For run r, segment k and option o (o's days d_o, GPUs g_o):

  choice     seg[k] present => exactly one u[k, o]; segment 0 present iff the run is;
             seg[k + 1] present => seg[k] present (the segments used are the first ones)
  order      start[k + 1] >= end[k] (a pause between segments is allowed); an absent segment
             sits at the previous one's end with no days, so the run ends where its last one does;
             two segments end to end are on different options (the same one again is a resume
             after a pause: end to end it would be one segment and a restart lost)
  work       the share of the work in millionths, share[k, o] <= 10^6 u[k, o], summing to 10^6:
             a segment on o for days[k, o] whole days does at most 1440 days[k, o] / m_o of the
             work, m_o the run's own minutes on o (Option.minutes: 8 days on an option of 8.05 do
             99.4% of it, where its whole 9 days counted 8/9), less the restart for k > 0:
               1440 x 10^6 x days[k, o] >= m_o x share[k, o] + 10^6 x RESTART_MINUTES_WHOLE x u[k, o]
             (linear in the integers; a single segment on o is the fixed run's d_o = ceil(m_o / 1440) days)
  capacity   one optional interval per (segment, GPU type), its demand the segment's GPUs, in the
             type's cumulative with the fixed runs' intervals
  fixed      a run already running, re-planned from a saved answer (ProgramRun.fixed): each segment
             begun before the re-plan's day (ProgramRun.resumed) on its saved option, day and days,
             the one running on that day for at least the days it has run (the plan decides when it
             ends); the work rule over them all, the work they leave in further segments from that
             day (up to SEGMENTS in all)
"""

from __future__ import annotations

import math
from typing import Any

from apsi.model.goodput import CHECKPOINT_MINUTES, RESTART_MINUTES

SEGMENTS = 3
"""The most segments of an elastic run: two changes of GPUs (shrink for an outage and grow back, or
pause and resume), which keeps the program small (3 x options Booleans per run)."""
RESTART_MINUTES_WHOLE = math.ceil(RESTART_MINUTES + CHECKPOINT_MINUTES / 2)
"""Minutes of work a change of GPUs costs: one interruption's cost in apsi.model.goodput (restart and
reload, 3.6 min, plus half a 30-minute checkpoint interval of work redone: 18.6 min from Llama 3's
90% effective training time through 419 interruptions), rounded up: 19."""
MILLION = 1_000_000
"""The unit of a segment's share of the run's work."""
DAY_MINUTES = 24 * 60


def add_segments(m: Any, run: Any, s: Any, e: Any, present: Any, types: set[str], horizon: int,
                 by_type: dict[str, list[tuple[Any, Any]]], offered: Any
                 ) -> tuple[list[Any], list[tuple[Any, Any, list[Any], Any]]]:
    """The rules of one elastic run (module docstring) on model `m`, its start `s`, end `e` and
    presence `present`: returns segment 0's option Booleans (the run's `use` in Model) and, per
    segment, (start, days, option Booleans, present). Appends each (segment, type) interval and its
    GPUs to `by_type`; `offered(option, Boolean)` (Model.offered) ties each option to the purchases
    that keep it."""
    from ortools.sat.python.cp_model import Domain

    segments: list[tuple[Any, Any, list[Any], Any]] = []
    done = []
    previous_end = None
    # A re-planned run keeps room for one segment after those it keeps, whatever they number.
    for k in range(max(SEGMENTS, len(run.fixed) + 1) if run.fixed and run.resumed is not None else SEGMENTS):
        name = f"{run.name},{k}"
        on = present if k == 0 else m.new_bool_var(f"segment[{name}]")
        if k > 0:
            m.add_implication(on, segments[-1][3])
        start = s if k == 0 else m.new_int_var(run.start_after, horizon, f"seg_start[{name}]")
        days = m.new_int_var(0, horizon, f"seg_days[{name}]")
        end = m.new_int_var(run.start_after, horizon, f"seg_end[{name}]")
        m.add(end == start + days)
        if previous_end is not None:
            # Segments follow one another (a pause between them allowed); an absent one sits at
            # the previous end with no days.
            m.add(start >= previous_end)
            m.add(start == previous_end).only_enforce_if(on.Not())
        m.add(days >= 1).only_enforce_if(on)
        m.add(days == 0).only_enforce_if(on.Not())
        uses, parts = [], []
        for o, opt in enumerate(run.options):
            u = m.new_bool_var(f"use[{name},{o}]")
            if opt.gpu_type not in types or (run.fixed is None and run.start_after + opt.days > horizon):
                m.add(u == 0)
            offered(opt, u)
            held = m.new_int_var(0, horizon, f"seg_days[{name},{o}]")
            share = m.new_int_var(0, MILLION, f"share[{name},{o}]")
            m.add(held <= horizon * u)
            m.add(share <= MILLION * u)
            # Days on o do at most days / d_o of the work, less a restart after a change (k > 0).
            restart = MILLION * RESTART_MINUTES_WHOLE if k > 0 else 0
            m.add(DAY_MINUTES * MILLION * held >= opt.work_minutes * share + restart * u)
            uses.append(u)
            parts.append((held, share))
        m.add(sum(uses) == on)
        m.add(days == sum(h for h, _ in parts))
        if previous_end is not None and (run.fixed is None or k >= len(run.fixed)):
            # Two segments end to end on one option are that option held on and a restart lost:
            # the same option again only after a pause (a resume). No schedule is lost: the two
            # joined are one segment, which frees one.
            joined = m.new_bool_var(f"joined[{name}]")
            m.add(start == previous_end).only_enforce_if(joined)
            m.add(start >= previous_end + 1).only_enforce_if(joined.Not())
            for before, u in zip(segments[-1][2], uses):
                m.add_bool_or([before.Not(), u.Not(), joined.Not()])
        done += [sh for _, sh in parts]
        for t in dict.fromkeys(opt.gpu_type for opt in run.options if opt.gpu_type in types):
            mine = [(opt, u) for opt, u in zip(run.options, uses) if opt.gpu_type == t]
            on_t = m.new_bool_var(f"on[{name},{t}]")
            m.add(sum(u for _, u in mine) == on_t)
            gpus = m.new_int_var_from_domain(Domain.from_values([0] + [o.gpus for o, _ in mine]), f"gpus[{name},{t}]")
            m.add(gpus == sum(opt.gpus * u for opt, u in mine))
            by_type[t].append((m.new_optional_interval_var(start, days, end, on_t, f"run[{name},{t}]"), gpus))
        segments.append((start, days, uses, on))
        previous_end = end
    if run.fixed is not None:
        # An elastic run already running (a re-plan of a saved answer): its segments begun before
        # the re-plan's day as they were, the one running then (it ends on that day) for at least
        # the days it has run; the work they leave in segments from that day.
        for k, (start, days, uses, on) in enumerate(segments):
            if k < len(run.fixed):
                o, first, held_days = run.fixed[k]
                m.add(on == 1)
                m.add(start == first)
                m.add(uses[o] == 1)
                if k == len(run.fixed) - 1 and first + held_days == run.resumed:
                    m.add(days >= held_days)  # running on the re-plan's day: the plan decides its end
                else:
                    m.add(days == held_days)
            elif run.resumed is not None:
                m.add(start >= run.resumed).only_enforce_if(on)
            else:
                m.add(on == 0)  # (no re-plan's day: the fixed segments are the whole run)
    # The shares make the whole run (an absent run: none).
    m.add(sum(done) == MILLION * present)
    m.add(e == previous_end)
    return segments[0][2], segments


def held(solver: Any, segments: list[tuple[Any, Any, list[Any], Any]]) -> list[tuple[int, int, int]]:
    """(option, start, days) of each segment present in a solution."""
    out = []
    for start, days, uses, on in segments:
        if solver.value(on):
            out.append((next(o for o, u in enumerate(uses) if solver.value(u)), solver.value(start), solver.value(days)))
    return out


def finished(run: Any) -> list[tuple[int, int, int]]:
    """An already-running elastic run's fixed segments (ProgramRun.fixed) with the work they leave
    done on the last one's option: the one running on the re-plan's day run on, else one more
    segment from that day, its restart charged: what list scheduling places
    (apsi.fleets.program.greedy), by add_segments' work rule in whole millionths."""
    pieces = list(run.fixed)
    share = [(DAY_MINUTES * MILLION * days - (RESTART_MINUTES_WHOLE * MILLION if k else 0))
             // run.options[o].work_minutes for k, (o, _, days) in enumerate(pieces)]
    o, first, days = pieces[-1]
    running = run.resumed is not None and first + days == run.resumed
    left = MILLION - sum(share[:-1] if running else share)
    if left <= (share[-1] if running else 0) or run.resumed is None:
        return pieces
    restart = RESTART_MINUTES_WHOLE * MILLION if running and len(pieces) > 1 or not running else 0
    held = -(-(run.options[o].work_minutes * left + restart) // (DAY_MINUTES * MILLION))
    return pieces[:-1] + [(o, first, held)] if running else pieces + [(o, run.resumed, held)]
