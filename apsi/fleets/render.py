"""A fleet plan as text: the runs' table, GPU use per type by month, totals; or CSV, JSON, Markdown.

Formatting only: every number comes from an apsi.fleets.result.FleetResult. The runs' columns are
one tuple, COLUMNS, shared by the table, CSV and Markdown. JSON is the whole FleetResult (proof
status and each stage's value, bound and gap included).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from typing import Any

from apsi.fleets.result import FleetResult, FleetRow
from apsi.fmt import usd
from apsi.outputs.tables import check_format


COLUMNS: tuple[tuple[str, str, Callable[[FleetRow], Any], bool], ...] = (
    ("name", "run", lambda r: r.name, False),
    ("start", "start", lambda r: r.start.isoformat() if r.start else "-", False),
    ("end", "end", lambda r: r.end.isoformat() if r.end else "-", False),
    ("gpu_type", "GPU", lambda r: _segments(r, lambda x: x.gpu_type) or r.gpu_type or "-", False),
    ("gpus", "GPUs", lambda r: _segments(r, lambda x: f"{x.gpus:,}") or (f"{r.gpus:,}" if r.gpus else "-"), True),
    ("layout", "layout", lambda r: _segments(r, lambda x: x.layout_text) or r.layout_text or "-", False),
    ("days", "days", lambda r: f"{r.days:,}" if r.days else "-", True),
    # The GPU-hours' worth at the type's price: owned GPUs are not charged (FleetResult.cost_usd).
    ("cost_usd", "value", lambda r: usd(r.cost_usd) if r.scheduled else "-", True),
    ("deadline", "deadline", lambda r: r.deadline.isoformat() if r.deadline else "", False),
    ("slack_days", "slack", lambda r: "" if r.slack_days is None or not r.scheduled else f"{r.slack_days:+,} d", True),
)
"""(CSV key, heading, cell, right-aligned) per column of the runs' table."""
_CSV_VALUES: dict[str, Callable[[FleetRow], Any]] = {
    "start": lambda r: r.start.isoformat() if r.start else "",
    "end": lambda r: r.end.isoformat() if r.end else "",
    "gpu_type": lambda r: r.gpu_type or "",
    "gpus": lambda r: r.gpus if r.gpus is not None else "",
    "layout": lambda r: r.layout_text,
    "days": lambda r: r.days if r.days is not None else "",
    "cost_usd": lambda r: "" if r.cost_usd is None else repr(r.cost_usd),
    "deadline": lambda r: r.deadline.isoformat() if r.deadline else "",
    "slack_days": lambda r: "" if r.slack_days is None or not r.scheduled else r.slack_days,
}
"""CSV cells where they differ from the table's: full precision, empty for none."""


def _segments(r: FleetRow, cell: Callable[[Any], str]) -> str | None:
    """An elastic run's cell over its segments, "512 -> 128" (a value repeated from the segment
    before shown once), or None for a run on one option (its row's own cell)."""
    if len(r.segments) < 2:
        return None
    values = [cell(x) for x in r.segments]
    return " -> ".join(v for i, v in enumerate(values) if i == 0 or v != values[i - 1])


def render(result: FleetResult, fmt: str, width: int | None = None) -> str:
    fmt = check_format(fmt)
    if fmt == "json":
        return result.model_dump_json(indent=2) + "\n"
    if fmt == "csv":
        return to_csv(result)
    if fmt == "markdown":
        return markdown(result)
    return text(result, width)


def _rows(result: FleetResult) -> list[list[str]]:
    return [[cell(r) for _, _, cell, _ in COLUMNS] for r in result.runs]


def text(result: FleetResult, width: int | None = None) -> str:
    """The runs' table, the month table, the totals, the stages and any conflict."""
    from apsi.fit import columns, wrap

    out = [wrap(_headline(result), width), ""]
    if any(r.scheduled for r in result.runs):
        out += columns([h for _, h, _, _ in COLUMNS], _rows(result), [ri for *_, ri in COLUMNS], width)
    if result.runs and any(r.why for r in result.runs):
        out += ([""] if out[-1] != "" else []) + ["Why each run is where it is:"] + [
            wrap(f"  {r.name}: {r.why}", width) for r in result.runs]
    if any(r.scheduled for r in result.runs):
        out += ["", "GPUs in use per type by month (mean used / available):"]
        head, rows = _month_table(result)
        out += columns(head, rows, [False] + [True] * (len(head) - 1), width, indent="  ")
    out += [""] + [wrap(line, width) for line in _totals(result)]
    return "\n".join(out) + "\n"


def _headline(result: FleetResult) -> str:
    import datetime as dt

    kept = sum(r.scheduled for r in result.runs)
    end = result.start.toordinal() + result.horizon_days - 1
    total = len(result.runs) + len(result.left_out)
    left = f" ({len(result.left_out):,} left out: see the Notes)" if result.left_out else ""
    return (f"Fleet plan: {kept:,} of {total:,} runs scheduled{left} from {result.start.isoformat()} to "
            f"{dt.date.fromordinal(end).isoformat()} ({result.horizon_days:,} days), objective "
            f"{' then '.join(_stage_words(s) for s in result.objective)}, then each run ending as soon as it can"
            + ("; each run at the slow end of its calibrated days (confidence: high)" if result.confidence == "high"
               else "") + f"; {result.status.lower()}")


def _stage_words(stage: str) -> str:
    """A stage's name, with what cost and purchase charge (owned GPUs are not)."""
    return f"{stage} (paid beyond the GPUs owned)" if stage in ("cost", "purchase") else stage


def _month_table(result: FleetResult) -> tuple[list[str], list[list[str]]]:
    types = list(dict.fromkeys(m.gpu_type for m in result.months))
    months = list(dict.fromkeys(m.month for m in result.months))
    cell = {(m.month, m.gpu_type): m for m in result.months}
    rows = [[month] + [f"{cell[month, t].mean_gpus_used:,.0f} / {cell[month, t].mean_gpus_available:,.0f}"
                       for t in types] for month in months]
    return ["month", *types], rows


def _totals(result: FleetResult) -> list[str]:
    import datetime as dt

    last = result.start + dt.timedelta(days=result.makespan_days - 1)
    ends = f"the last run ends on {last.isoformat()}" if result.makespan_days else "no run scheduled"
    lines = [f"Total: {usd(result.cost_usd)} paid beyond the GPUs owned (owned GPUs are not charged; the runs' "
             f"{result.gpu_hours:,.0f} GPU-hours are worth {usd(result.gpu_hours_usd)} at the fleet's prices); {ends}; "
             f"{result.late_runs:,} run{'s' if result.late_runs != 1 else ''} late; the runs' options to choose "
             f"from: {result.options:,}."]
    if result.utilisation:
        idle = ("" if result.idle_after_share is None else
                f"; {100 * result.idle_after_share:.0f}% of the idle GPU-days are after the last run ends, with no run "
                "left to use them (before it, each run ends as soon as it can with the others where they are)")
        lines.append("GPU use over the horizon (GPU-days held / there): "
                     + ", ".join(f"{t} {100 * u:.0f}%" for t, u in result.utilisation.items()) + idle + ".")
    if result.power_cap_mw is not None and result.peak_power_mw is not None:
        lines.append(f"Power: at most {result.peak_power_mw:,.2f} MW drawn on a day, under the cap of "
                     f"{result.power_cap_mw:,.2f} MW.")
    stages = []
    for s in result.stages:
        if s.value is None:
            stages.append(f"{s.name}: {s.status.lower()}")
            continue
        value = -s.value if s.name == "optional" else s.value
        proof = ("proved" if s.status == "OPTIMAL" else "its search did not improve on it in the time"
                 if s.bound is None else f"gap {100 * (s.gap or 0):.2f}%")
        # What is paid, as the Total and Purchase lines give it: the program counts each node's
        # cost in whole dollars (apsi.fleets.buy.offers), the plan its GPU-hours x price.
        shown = usd(result.cost_usd) if s.name in ("cost", "purchase") else f"{value:,}"
        stages.append(f"{s.name} {shown} ({proof})")
    lines.append("Objective stages: " + "; ".join(stages) + "; then each run moved to end as soon as it can alone "
                 "(a rule, not a proved stage: docs/method.md 4.12).")
    lines += _purchase_lines(result)
    if result.conflict is not None:
        c = result.conflict
        lines.append(f"Conflict{'' if c.minimal else ' (not proved minimal: a check ran out of time)'}: {c.text}.")
        lines += [f"  - {r.text}" for r in c.remedies] or ["  - no single change found resolves it"]
    lines += [f"Note: {n}" for n in result.notes]
    return lines


def _purchase_lines(result: FleetResult) -> list[str]:
    """apsi fleet --buy: what the plan buys, and the least of each type alone."""
    if result.purchase_cost_usd is None:
        return []

    def one(p: Any) -> str:
        return (f"{p.gpus:,} {p.gpu_type} ({p.nodes:,} node{'s' if p.nodes != 1 else ''}) {p.how} from "
                f"{p.first.isoformat()}, {usd(p.cost_usd)}")

    what = "the least that meets every deadline" if result.late_runs == 0 else "the least for the deadlines it can meet"
    proof = "proved" if all(p.proved for p in result.purchase) else "not proved: see the stages' gap"
    bought = "; ".join(one(p) for p in result.purchase) or (
        "nothing: the GPUs owned meet every deadline" if result.late_runs == 0
        else "nothing: no purchase the buy: terms allow meets a deadline more")
    lines = [f"Purchase ({what}, {proof}): {bought}; {usd(result.purchase_cost_usd)} paid beyond the GPUs owned "
             "(owned GPUs are not charged)."]
    if result.purchase_alternatives:
        lines.append("Each type alone, the least that meets every deadline: " + "; ".join(
            one(p) + ("" if p.proved else " (not proved the least)") for p in result.purchase_alternatives) + ".")
    return lines


def html(result: FleetResult) -> str:
    """The plan for a notebook (FleetResult._repr_html_, apsi.model.notebook): its headline, its Gantt chart as inline SVG
    (apsi.fleets.plot, where the matplotlib extra is installed), the runs' table, its totals and
    notes, the same cells as the text (apsi.outputs.html)."""
    import html as escape

    from apsi.outputs.html import STYLE, row

    from apsi.plot import svg_text

    table = row([h for _, h, _, _ in COLUMNS], head=True) + "".join(row(r) for r in _rows(result))
    tail = "".join(f"<p>{escape.escape(line)}</p>" for line in _totals(result))
    chart = None
    if any(r.scheduled for r in result.runs):
        from apsi.fleets.plot import fleet_plot

        chart = svg_text(lambda path: fleet_plot(result, path))
    return (f'<p><b>{escape.escape(_headline(result))}</b></p>{chart or ""}<table style="{STYLE}">{table}</table>'
            f"{tail}")


def markdown(result: FleetResult) -> str:
    def row(cells: list[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    out = [row([h for _, h, _, _ in COLUMNS]), "|" + "|".join("---:" if ri else "---" for *_, ri in COLUMNS) + "|"]
    out += [row(cells) for cells in _rows(result)]
    out += [""] + [f"- {r.name}: {r.why}" for r in result.runs]
    head, rows = _month_table(result)
    if rows:
        out += ["", row(head), "|---|" + "|".join("---:" for _ in head[1:]) + "|"] + [row(r) for r in rows]
    out += [""] + _totals(result)
    return "\n".join(out) + "\n"


def to_csv(result: FleetResult) -> str:
    """One row per run, full precision."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([key for key, *_ in COLUMNS] + ["scheduled", "nodes", "run_days", "gpu_hours", "late_days", "why",
                                                    "segments"])
    for r in result.runs:
        # An elastic run's gpu_type, gpus, layout and nodes are its first segment's, its gpu_hours
        # all of them: each segment in `segments` (empty for a run on one option).
        writer.writerow([_CSV_VALUES.get(key, cell)(r) for key, _, cell, _ in COLUMNS]
                        + [r.scheduled, r.nodes if r.nodes is not None else "",
                           "" if r.run_days is None else repr(r.run_days),
                           "" if r.gpu_hours is None else repr(r.gpu_hours), r.late_days, r.why,
                           "; ".join(f"{x.gpus} {x.gpu_type} from {x.start.isoformat()} for {x.days} "
                                     f"day{'s' if x.days != 1 else ''}" for x in r.segments)])
    return buffer.getvalue()
