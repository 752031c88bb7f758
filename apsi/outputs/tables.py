"""Scenario results as text: an aligned table, CSV, JSON or Markdown, and a terminal progress bar.

Formatting only: every number comes from a Plan built by apsi.api.plan; nothing here computes.
The columns are one tuple, COLUMNS, shared by the table, CSV and Markdown; a new Plan field
becomes a column by adding one Column there. JSON is the full Plan (as `apsi plan --json` gives
it) with the run's name in front. GiB is 2^30 bytes.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import IO, Any

from apsi.errors import unknown
from apsi.fmt import count as _count
from apsi.model.schema import Plan
from apsi.serving.replica import layout_words
from apsi.model.serve_schema import ServePlan
from apsi.api.scenarios import Result

FORMATS: tuple[str, ...] = ("table", "csv", "json", "markdown")
PROGRESS_MIN_RUNS = 8
"""A progress bar is drawn only for more runs than this; a handful finish before it would help."""


@dataclass(frozen=True)
class Column:
    """One column: its CSV key, its heading for people, the Plan value, and how people read it."""

    key: str
    title: str
    value: Callable[[Plan], Any]
    """The raw value, written as is to CSV (full precision)."""
    text: Callable[[Any], str] = str
    """The value for the table and Markdown."""
    numeric: bool = False
    """Right-aligned in the table and Markdown."""


def _two(x: float) -> str:
    return f"{x:,.2f}"


def _whole(x: float | None) -> str:
    return "-" if x is None else f"{x:,.0f}"


def _energy(x: float | None) -> str:
    """MWh: whole from 100 up, else to three significant figures (a small run's 0.0042 MWh is
    not "0")."""
    if x is None:
        return "-"
    rounded = float(f"{x:.3g}")
    if rounded >= 100 or rounded == 0:
        return f"{x:,.0f}"
    decimals = max(0, 2 - math.floor(math.log10(rounded)))
    return f"{x:,.{decimals}f}"


def _degrees(p) -> str:
    """tp x pp x dp, then the framework degrees that are not 1 (CP 2 VPP 8 EP 64)."""
    lay = p.layout
    extra = [f"{name} {value}" for name, value in (("CP", lay.cp), ("VPP", lay.vpp), ("EP", lay.ep)) if value != 1]
    return " ".join([f"{lay.tp}x{lay.pp}x{lay.dp}"] + extra)


def _degrees_text(v: str) -> str:
    base, _, extra = v.partition(" ")
    text = " x ".join(f"{int(n):,}" for n in base.split("x"))
    return f"{text}, {extra}" if extra else text


COLUMNS: tuple[Column, ...] = (
    Column("gpu", "GPU", lambda p: p.gpu),
    Column("gpus", "GPUs", lambda p: p.gpus, _count, True),
    Column("nodes", "nodes", lambda p: p.nodes, _count, True),
    Column("tp_pp_dp", "TP x PP x DP", lambda p: _degrees(p), _degrees_text, True),
    Column("recompute", "recompute", lambda p: p.layout.recompute),
    Column("memory_per_gpu_gib", "GiB/GPU", lambda p: p.memory_per_gpu_gib, _two, True),
    Column("days", "days", lambda p: p.days, _two, True),
    Column("target_met", "target met", lambda p: p.target_met, lambda v: "yes" if v else "NO"),
    Column("binding", "binding", lambda p: p.binding),
    Column("gpu_hours", "GPU-hours", lambda p: p.gpu_hours, _whole, True),
    Column("cost_usd", "cost $", lambda p: p.cost_usd, _whole, True),
    Column("energy_mwh", "MWh", lambda p: p.energy_mwh, _energy, True),
)
"""Every column after the run's name, in order."""

CSV_ONLY: tuple[Column, ...] = (
    Column("params", "params", lambda p: p.model.params),
    Column("active_params", "active params", lambda p: p.model.active_params),
    Column("framework", "framework", lambda p: p.framework),
    Column("mfu", "MFU", lambda p: p.mfu),
    Column("step_seconds", "step s", lambda p: "" if p.step_seconds is None else p.step_seconds),
)
"""The CSV's further columns after COLUMNS (the tables keep to COLUMNS): the parameters counted
(total and active, as the plan planned them), whose rules judged it, its MFU (given, or achieved
under the step-time model) and its step seconds (empty at a flat MFU without a step model)."""


def check_format(fmt: str) -> str:
    """`fmt`'s name in FORMATS (any case, as every other choice: --precision FP8, --export Megatron),
    else an error naming the valid ones."""
    name = fmt.strip().lower() if isinstance(fmt, str) else fmt
    if name not in FORMATS:
        raise unknown("format", fmt, FORMATS)
    return name


def render(results: Sequence[Result], fmt: str, width: int | None = None) -> str:
    """All results in `fmt` (one of FORMATS), ending in a newline; the same input gives the same bytes.
    In table and markdown, serving runs (`kind: serve`) follow the training runs in their own table."""
    fmt = check_format(fmt)
    if fmt in ("csv", "json"):
        return {"csv": to_csv, "json": to_json}[fmt](results)
    train = [r for r in results if r.kind == "train"]
    serving = [r for r in results if r.kind == "serve"]
    write = table if fmt == "table" else (lambda rs, _w=None: markdown(rs))
    parts = ([write(train, width)] if train or not serving else []) + ([serve_table(serving, fmt, width)] if serving else [])
    return "\n".join(parts)


SERVE_COLUMNS: tuple[tuple[str, str, bool], ...] = (
    ("engine", "engine", False), ("gpu", "GPU", False), ("layout", "layout", False), ("batch", "batch", True),
    ("ttft_ms", "TTFT ms", True), ("ttft_p99_ms", "p99 ms", True), ("tpot_ms", "TPOT ms", True),
    ("output_tokens_per_s_per_gpu", "tokens/s/GPU", True), ("replicas", "replicas", True), ("gpus", "GPUs", True),
    ("cost_usd_per_hour", "$/h", True))
"""A serving run's columns: (key, title, numeric)."""


def serve_values(p: ServePlan) -> dict[str, Any]:
    """A serving plan's SERVE_COLUMNS values: each replica kind's GPU, layout and batch, joined
    with "; " where the plan mixes kinds; the slowest kind's TTFT (mean and p99: a target may be on
    either) and TPOT (the latencies every request is held to); the throughput, replicas, GPUs and
    cost of them all."""
    many = len(p.groups) > 1
    return {"engine": p.engine, "gpu": "; ".join(x.gpu for x in p.groups),
            "layout": "; ".join(layout_words(x.tp, x.pp, x.ep, x.attention_dp) for x in p.groups),
            "batch": "; ".join(f"{x.batch:,}" for x in p.groups) if many else p.groups[0].batch,
            "ttft_ms": max(x.ttft_ms for x in p.groups), "ttft_p99_ms": max(x.ttft_p99_ms for x in p.groups),
            "tpot_ms": max(x.tpot_ms for x in p.groups),
            "output_tokens_per_s_per_gpu": p.output_tokens_per_s / p.gpus, "replicas": p.replicas, "gpus": p.gpus,
            "cost_usd_per_hour": p.cost_usd_per_hour}


def _serve_text(key: str, value: Any) -> str:
    if value is None:
        return "-"
    if key in ("ttft_ms", "ttft_p99_ms", "tpot_ms"):
        return f"{value:,.1f}"
    if key in ("output_tokens_per_s_per_gpu",):
        return f"{value:,.0f}"
    if key == "cost_usd_per_hour":
        return f"{value:,.2f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def serve_table(results: Sequence[Result], fmt: str = "table", width: int | None = None) -> str:
    """The serving runs: one row each, or `error: ...` after the name."""
    from apsi.fit import columns, pad, shown, wrap

    head = ["serving run"] + [t for _, t, _ in SERVE_COLUMNS]
    right = [False] + [n for _, _, n in SERVE_COLUMNS]
    rows = []
    for r in results:
        if r.serve is not None:
            values = serve_values(r.serve)
            rows.append([r.name] + [_serve_text(k, values[k]) for k, _, _ in SERVE_COLUMNS])
    if fmt == "markdown":
        def row(cells: list[str]) -> str:
            return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

        out = [row(head), "|---|" + "|".join("---:" if n else "---" for _, _, n in SERVE_COLUMNS) + "|"]
        it = iter(rows)
        for r in results:
            out.append(row(next(it)) if r.serve is not None
                       else row([r.name, f"error: {r.error}"] + [""] * (len(SERVE_COLUMNS) - 1)))
        return "\n".join(out) + "\n"
    widths = [max(shown(x[i]) for x in [head, *rows]) for i in range(len(head))]
    widths[0] = max([widths[0]] + [shown(r.name) for r in results])

    def line(cells: list[str]) -> str:
        return "  ".join(pad(c, w, ri) for c, w, ri in zip(cells, widths, right)).rstrip()

    out = [line(head)]
    it = iter(rows)
    for r in results:
        out.append(line(next(it)) if r.serve is not None else f"{pad(r.name, widths[0])}  error: {r.error}")
    if width is not None and max(shown(x) for x in out) > width:
        out = (columns(head, rows, right, width) if rows else []) + \
            [wrap(f"{r.name}  error: {r.error}", width) for r in results if not r.ok]
    return "\n".join(out) + "\n"


def _cells(name: str, plan: Plan) -> list[str]:
    return [name] + [c.text(c.value(plan)) for c in COLUMNS]


def table(results: Sequence[Result], width: int | None = None) -> str:
    """Aligned columns; a failed run shows `error: ...` after its name instead of numbers. Wider
    than `width`, one block per run (apsi.fit.columns)."""
    from apsi.fit import columns, pad, shown, wrap

    head = ["name"] + [c.title for c in COLUMNS]
    right = [False] + [c.numeric for c in COLUMNS]
    rows = [_cells(r.name, r.plan) for r in results if r.plan is not None]
    widths = [max(shown(row[i]) for row in [head, *rows]) for i in range(len(head))]
    widths[0] = max([widths[0]] + [shown(r.name) for r in results])

    def line(cells: list[str]) -> str:
        return "  ".join(pad(c, w, ri) for c, w, ri in zip(cells, widths, right)).rstrip()

    out = [line(head)]
    for r in results:
        out.append(line(_cells(r.name, r.plan)) if r.plan is not None
                   else f"{pad(r.name, widths[0])}  error: {r.error}")
    if width is not None and max(shown(x) for x in out) > width:
        blocks = columns(head, rows, right, width) if rows else []
        out = blocks + [wrap(f"{r.name}  error: {r.error}", width) for r in results if not r.ok]
    return "\n".join(out) + "\n"


def markdown(results: Sequence[Result]) -> str:
    """A Markdown table; a failed run's error sits in the cell after its name."""

    def row(cells: list[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    out = [row(["name"] + [c.title for c in COLUMNS]),
           "|---|" + "|".join("---:" if c.numeric else "---" for c in COLUMNS) + "|"]
    for r in results:
        out.append(row(_cells(r.name, r.plan) if r.plan is not None
                       else [r.name, f"error: {r.error}"] + [""] * (len(COLUMNS) - 1)))
    return "\n".join(out) + "\n"


DEGREES: tuple[str, ...] = ("tp", "pp", "dp", "cp", "vpp", "ep", "etp", "dp_replicate", "micro_batch_sequences",
                            "zero")
"""Layout fields CSV gives a column each (as `layout_<field>`), for a spreadsheet to filter on."""


def _raw(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(_raw(v) for v in value)
    return repr(value) if isinstance(value, float) else str(value)


def to_csv(results: Sequence[Result]) -> str:
    """One header row of column keys, then one row per run: the COLUMNS and CSV_ONLY, each layout degree
    (`layout_tp`, ...), the run's inputs as written (`input_<key>`, every key any run gives, in
    apsi.api.scenario_file.RUN_KEYS order), and `error`, empty for a solved run. With serving runs
    (`kind: serve`), their SERVE_COLUMNS too (`serve_<key>`), before `error`; a training run leaves
    them empty, and a serving run the training columns."""
    from apsi.api.scenario_file import RUN_KEYS

    given = {key for r in results for key in r.inputs}
    inputs = [k for k in RUN_KEYS if k in given] + sorted(k for k in given if k not in RUN_KEYS)
    serving = any(r.kind == "serve" for r in results)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["name"] + [c.key for c in COLUMNS + CSV_ONLY] + [f"layout_{d}" for d in DEGREES]
                    + [f"input_{k}" for k in inputs]
                    + ([f"serve_{k}" for k, _, _ in SERVE_COLUMNS] if serving else []) + ["error"])
    for r in results:
        plan = r.plan
        columns = COLUMNS + CSV_ONLY
        values = [_raw(c.value(plan)) for c in columns] if plan is not None else [""] * len(columns)
        degrees = [_raw(getattr(plan.layout, d)) for d in DEGREES] if plan is not None else [""] * len(DEGREES)
        given_values = [_raw(r.inputs[k]) if k in r.inputs else "" for k in inputs]
        served: list[str] = []
        if serving:
            got = serve_values(r.serve) if r.serve is not None else None
            served = [_raw(got[k]) if got is not None and got[k] is not None else "" for k, _, _ in SERVE_COLUMNS]
        writer.writerow([r.name, *values, *degrees, *given_values, *served, r.error or ""])
    return buffer.getvalue()


def to_json(results: Sequence[Result]) -> str:
    """A list with one object per run (apsi.outputs.schema.RunOutput, `apsi schema run`): `name` and
    the Plan's fields (RunRow), or `name`, `error` and `inputs` (RunFailure)."""
    from apsi.outputs.schema import RunFailure, RunOutput, RunRow, ServeRow

    rows = RunOutput([RunRow(name=r.name, **dict(r.plan)) if r.plan is not None
                      else ServeRow(name=r.name, **dict(r.serve)) if r.serve is not None
                      else RunFailure(name=r.name, error=r.error or "", inputs=r.inputs) for r in results])
    return json.dumps(rows.model_dump(mode="json"), indent=2) + "\n"


class FrontierProgress:
    """`progress(points, gpus)` for apsi.frontier: one line on `stream`, rewritten in place, saying
    how many points the chain has found and up to how many GPUs ("frontier: 37 points so far, up
    to 4,096 GPUs"), drawn only when `stream` is a terminal and the frontier has taken more than
    `after` seconds (a short one prints nothing); done() erases it."""

    def __init__(self, stream: IO[str], after: float = 1.0):
        import time

        self.stream, self.after, self._start, self._drawn = stream, after, time.monotonic(), False

    def __call__(self, points: int, gpus: int) -> None:
        import time

        if not getattr(self.stream, "isatty", lambda: False)() or time.monotonic() - self._start < self.after:
            return
        self.stream.write(f"\rfrontier: {points:,} point{'s' if points != 1 else ''} so far, up to {gpus:,} GPUs\x1b[K")
        self.stream.flush()
        self._drawn = True

    def done(self) -> None:
        if self._drawn:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self._drawn = False


class ProgressBar:
    """`progress(done, total)` for apsi.api.scenarios.run_scenarios: rich's progress bar with the runs
    done and an estimate of the time left, drawn on `stream` only when it is a terminal and there
    are more than PROGRESS_MIN_RUNS runs; it erases itself when done. Plain (no colour) under
    NO_COLOR, as rich reads it."""

    def __init__(self, stream: IO[str], width: int = 30):
        self.stream = stream
        self.width = width
        self._bar: Any = None
        self._task: Any = None

    def __call__(self, done: int, total: int) -> None:
        if total <= PROGRESS_MIN_RUNS or not getattr(self.stream, "isatty", lambda: False)():
            return
        if self._bar is None:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            # The time left is at the pace so far (runs differ: a guide, not a promise).
            self._bar = Progress(BarColumn(bar_width=self.width), MofNCompleteColumn(), TextColumn("runs,"),
                                 TimeRemainingColumn(), TextColumn("left"),
                                 console=Console(file=self.stream, force_terminal=True), transient=True,
                                 auto_refresh=False)
            self._bar.start()
            self._task = self._bar.add_task("runs", total=total)
        self._bar.update(self._task, completed=done, total=total, refresh=True)
        if done >= total:
            self._bar.stop()
            self._bar = None


FRONTIER_COLUMNS = ("gpus", "nodes", "days", "tp", "pp", "cp", "dp", "vpp", "ep", "recompute", "memory_per_gpu_gib",
                    "target_met")
"""The frontier's columns in csv and markdown: one per layout degree."""


def frontier_rows(points, fmt: str) -> str:
    """The frontier's points as csv (raw numbers) or markdown (one row each, every point)."""
    rows = [[p.gpus, p.nodes, p.days, p.layout.tp, p.layout.pp, p.layout.cp, p.layout.dp, p.layout.vpp,
             p.layout.ep, p.layout.recompute, p.memory_per_gpu_gib, "true" if p.target_met else "false"]
            for p in points]
    if fmt == "csv":
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(FRONTIER_COLUMNS)
        writer.writerows([repr(x) if isinstance(x, float) else x for x in row] for row in rows)
        return buffer.getvalue()
    out = ["| " + " | ".join(FRONTIER_COLUMNS) + " |", "|" + "---:|" * 9 + "---|---:|---|"]
    out += ["| " + " | ".join(f"{x:,.2f}" if isinstance(x, float) else f"{x:,}" if isinstance(x, int) else str(x)
                              for x in row) + " |" for row in rows]
    return "\n".join(out) + "\n"
