"""A fleet plan as a chart: a Gantt chart of the runs, and the GPUs in use per type against the inventory.

Drawing only: every number comes from a FleetResult. Matplotlib is the optional plot extra,
imported inside the function, on the Agg canvas through apsi.plot's helpers (deterministic SVG,
no date written).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from apsi.fleets.result import FleetResult

_COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown")


def fleet_plot(result: FleetResult, path: str | Path) -> None:
    """Top: one bar per scheduled run from its start to its end, coloured by GPU type, labelled with
    its GPUs, a deadline as a tick, a late run outlined in red with its days late, and an arrow from
    each run it comes after. Bottom: GPUs in use per type, day by day, and the inventory as a dashed
    line. Ticks on each month's first day (every few months past a year)."""
    from matplotlib.dates import ConciseDateFormatter, MonthLocator, date2num
    from matplotlib.patches import Patch

    from apsi.plot import _figure, _save, check_file

    fmt = check_file(path)
    rows = [r for r in result.runs if r.scheduled and r.start is not None and r.days]
    types = list(dict.fromkeys(m.gpu_type for m in result.months))
    color = {t: _COLORS[i % len(_COLORS)] for i, t in enumerate(types)}
    fig = _figure(10, 2.0 + 0.32 * len(rows) + 2.6)
    top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=[max(2.0, 0.32 * len(rows)), 2.6])
    for y, r in enumerate(rows):
        assert r.start is not None and r.days is not None and r.gpu_type is not None
        # An elastic run: one bar per segment (its GPUs and type), a pause between them blank.
        for first, span, gpus, gpu_type in _bars(r):
            top.barh(y, span, left=date2num(first), color=color[gpu_type], height=0.7)
            if span >= result.horizon_days / 25:  # a label only where the bar has room for it
                top.text(date2num(first) + span / 2, y, f"{gpus:,}", ha="center", va="center", fontsize=7,
                         color="white")
        if r.deadline is not None:
            top.plot([date2num(r.deadline + dt.timedelta(days=1))] * 2, [y - 0.4, y + 0.4], color="black", lw=1.5)
        if r.late_days:
            # Late: the bar outlined in red, its days late past its end.
            top.barh(y, r.days, left=date2num(r.start), fill=False, edgecolor="red", lw=1.5, height=0.7,
                     gid=f"late-{y}")
            top.text(date2num(r.start) + r.days + 1, y, f"late {r.late_days:,} d", va="center", fontsize=7,
                     color="red")
    row_of = {r.name: y for y, r in enumerate(rows)}
    for y, r in enumerate(rows):
        for name in r.after:
            q = rows[row_of[name]] if name in row_of else None
            if q is None or q.start is None or q.days is None or r.start is None:
                continue
            # From the end of the run it comes after to its own start.
            arrow = top.annotate("", xy=(date2num(r.start), y), xytext=(date2num(q.start) + q.days, row_of[name]),
                                 arrowprops={"arrowstyle": "->", "color": "dimgray", "lw": 0.8})
            if arrow.arrow_patch is not None:
                arrow.arrow_patch.set_gid(f"after-{row_of[name]}-{y}")
    top.set_yticks(range(len(rows)), [r.name for r in rows], fontsize=8)
    top.invert_yaxis()
    top.set_title(f"Fleet plan from {result.start.isoformat()}: runs by GPU type (bar label: GPUs; tick: deadline; "
                  "red: late; arrow: after)", fontsize=9)
    top.legend(handles=[Patch(color=color[t], label=t) for t in types], loc="lower right", fontsize=8)
    days = [result.start + dt.timedelta(days=d) for d in range(result.horizon_days + 1)]
    for t in types:
        used = [0] * result.horizon_days
        for r in rows:
            for first, span, gpus, gpu_type in _bars(r):
                if gpu_type == t:
                    for d in range((first - result.start).days, (first - result.start).days + span):
                        used[d] += gpus
        available = _available(result, t)
        bottom.step(date2num(days), used + used[-1:], where="post", color=color[t], label=f"{t} in use")
        bottom.step(date2num(days), available + available[-1:], where="post", color=color[t], ls="--", lw=1,
                    label=f"{t} inventory")
    bottom.set_ylabel("GPUs")
    if types:  # (a plan that scheduled nothing draws no lines: matplotlib warns of an empty legend)
        bottom.legend(fontsize=7, ncols=2)
    # Each month's first day, or every few months over a long horizon (at most about 14 ticks).
    locator = MonthLocator(interval=max(1, -(-result.horizon_days // 31 // 14)))
    bottom.xaxis.set_major_locator(locator)
    bottom.xaxis.set_major_formatter(ConciseDateFormatter(locator))
    _save(fig, path, fmt)


def _bars(r: Any) -> list[tuple[dt.date, int, int, str]]:
    """(first day, days, GPUs, type) of each bar of a run: its segments when elastic, else the run."""
    if r.segments:
        return [(x.start, x.days, x.gpus, x.gpu_type) for x in r.segments]
    return [(r.start, r.days, r.gpus, r.gpu_type)]


def _available(result: FleetResult, gpu_type: str) -> list[int]:
    """The type's inventory on each day, from the result's change points."""
    out = [0] * result.horizon_days
    for first, count in result.inventory.get(gpu_type, []):
        out[first:] = [count] * (result.horizon_days - first)
    return out
