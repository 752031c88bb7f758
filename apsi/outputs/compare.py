"""`apsi compare`: saved plans side by side, one column each, a row a figure.

A row is marked (*) where the plans' values differ, not their printed words: 1.449T and 1.45T
tokens both print "1.45T", and were shown unmarked as if the same. Where values that differ print
alike, the row is printed with more figures, as many as tell them apart (the whole token count;
days, GiB, MFU with more significant digits), and a value with no finer form (a model's
architecture under the same name) is numbered (#1, #2) with a line below the table saying so.
Formatting only: every figure is the plan's."""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Callable, Hashable, NamedTuple

from apsi.fit import columns, wrap
from apsi.fmt import count as _n, duration, gib as _gib, model_title, mwh, usd
from apsi.outputs.text import _degrees
from apsi.units import human

if TYPE_CHECKING:
    from apsi.model.schema import Plan


def _sig(x: float, digits: int) -> str:
    """x with `digits` significant figures, in plain digits with thousands commas (no exponent)."""
    if x == 0 or not math.isfinite(x):
        return f"{x:,.{max(digits - 1, 0)}f}" if x == 0 else str(x)
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(x))))
    return f"{x:,.{decimals}f}"


def _finer_duration(days: float, digits: int) -> str:
    """fmt.duration's unit (days, hours, minutes, seconds) with `digits` significant figures."""
    for unit, scale, least in (("days", 1, 1), ("hours", 24, 1), ("minutes", 1440, 1), ("seconds", 86400, 0)):
        if days * scale >= least or unit == "seconds":
            return f"{_sig(days * scale, digits)} {unit}"
    raise AssertionError  # the loop ends in seconds


def _or_dash(x: float | None, text: Callable[[float], str]) -> str:
    return "-" if x is None else text(x)


def _model(p: Plan) -> Hashable:
    """What makes the model: its counts and every dimension (not its notes or how it was typed)."""
    m = p.model
    arch = None if m.architecture is None else json.dumps(m.architecture.model_dump(mode="json"), sort_keys=True)
    return (m.params, m.active_params, m.mtp_params, m.flops_convention, arch)


def _recompute(p: Plan) -> str:
    lay = p.layout
    return lay.recompute + (f" ({', '.join(lay.recompute_modules)})" if lay.recompute_modules else "")


def _sharding_words(p: Plan) -> str:
    """What the plan shards, as its framework words it (Layout.sharding: ZeRO stage, FSDP2, the
    distributed optimizer), without the framework's name, which the framework row gives."""
    if p.framework == "reference":
        return "ZeRO-3/FSDP (the reference arithmetic)"
    words = p.layout.sharding or "-"
    return words.split(": ", 1)[1] if ": " in words else words


def _layout(p: Plan) -> Hashable:
    """What makes the layout beyond its degrees' words: ETP, sequence parallelism, the split."""
    lay = p.layout
    return (_degrees(lay), lay.etp, lay.sequence_parallel, tuple(lay.stage_layers), tuple(lay.virtual_stage_layers))


def _layout_in_full(p: Plan) -> str:
    """The layout's words with what _layout compares besides (layers per stage as the plan's Layout
    line gives them)."""
    from apsi.outputs.text import _stages

    lay = p.layout
    split = f", stages {_stages(lay.stage_layers)}" if lay.stage_layers else ""
    return (f"{_degrees(lay)}, ETP {lay.etp}, sequence parallel {'on' if lay.sequence_parallel else 'off'}{split}"
            + (f", virtual stages {_stages(lay.virtual_stage_layers)}" if lay.virtual_stage_layers else ""))


class Row(NamedTuple):
    """One compared row."""

    label: str
    cell: Callable[[Plan], str]
    """The figure as the table prints it."""
    value: Callable[[Plan], Hashable] | None = None
    """What the row compares: the plan's own values behind the cell (every one the cell shows);
    None where the words are the value (a name, a whole count)."""
    finer: Callable[[Plan, int], str] | None = None
    """The cell with that many significant figures (a count in full), for values that print alike."""


COMPARED: tuple[Row, ...] = (
    Row("model", lambda p: model_title(p.model), _model, lambda p, k: f"{model_title(p.model)}: {p.model.params:,} parameters"),
    Row("tokens", lambda p: human(p.tokens), lambda p: p.tokens, lambda p, k: f"{p.tokens:,}"),
    Row("framework", lambda p: p.framework),
    Row("GPU", lambda p: p.gpu),
    Row("GPUs", lambda p: _n(p.gpus)),
    Row("nodes", lambda p: _n(p.nodes)),
    Row("layout", lambda p: _degrees(p.layout), _layout, lambda p, k: _layout_in_full(p)),
    Row("sharding", _sharding_words),
    Row("recompute", lambda p: p.layout.recompute, _recompute, lambda p, k: _recompute(p)),
    # Under the reference arithmetic a replica's micro-batches may be a fraction (the exact ratio):
    # shown as the Layout line shows them, never rounded to a count the batch does not make.
    Row("micro-batch", lambda p: f"{p.layout.micro_batch_sequences} x {p.layout.micro_batches_per_replica:,.4g}",
        lambda p: (p.layout.micro_batch_sequences, p.layout.micro_batches_per_replica),
        lambda p, k: f"{p.layout.micro_batch_sequences} x {_sig(p.layout.micro_batches_per_replica, k)}"),
    Row("batch", lambda p: f"{_n(p.batch_sequences)} x {_n(p.seq)}"),
    Row("precision", lambda p: p.precision),
    Row("GiB/GPU", lambda p: _gib(p.memory_per_gpu_gib), lambda p: p.memory_per_gpu_gib,
        lambda p, k: _sig(p.memory_per_gpu_gib, k)),
    Row("days", lambda p: duration(p.days), lambda p: p.days, lambda p, k: _finer_duration(p.days, k)),
    Row("target met", lambda p: "yes" if p.target_met else "NO"),
    Row("MFU", lambda p: f"{p.mfu:.1%}" + ("" if p.time is not None else " (given)"),
        lambda p: (p.mfu, p.time is None),
        lambda p, k: f"{_sig(p.mfu * 100, k)}%" + ("" if p.time is not None else " (given)")),
    Row("step", lambda p: _or_dash(p.step_seconds, lambda s: f"{s:,.3g} s"), lambda p: p.step_seconds,
        lambda p, k: _or_dash(p.step_seconds, lambda s: f"{_sig(s, k)} s")),
    Row("tokens/s/GPU", lambda p: _or_dash(p.tokens_per_gpu_second, lambda t: f"{t:,.0f}"),
        lambda p: p.tokens_per_gpu_second, lambda p, k: _or_dash(p.tokens_per_gpu_second, lambda t: _sig(t, k))),
    Row("GPU-hours", lambda p: _n(p.gpu_hours), lambda p: p.gpu_hours, lambda p, k: _sig(p.gpu_hours, k)),
    Row("cost", lambda p: usd(p.cost_usd), lambda p: p.cost_usd,
        lambda p, k: _or_dash(p.cost_usd, lambda c: "$" + _sig(c, k))),
    Row("energy", lambda p: mwh(p.energy_mwh), lambda p: p.energy_mwh,
        lambda p, k: _or_dash(p.energy_mwh, lambda e: _sig(e, k) + " MWh")),
)
"""What `apsi compare` puts side by side, a row each."""

MOST_DIGITS = 17
"""Significant figures that tell any two distinct floats apart (IEEE double: 17)."""

RESTS_ON: dict[str, str] = {
    "GiB/GPU": "memory", "days": "timing", "target met": "timing", "MFU": "timing", "step": "timing",
    "tokens/s/GPU": "timing", "GPU-hours": "timing", "cost": "timing", "energy": "timing"}
"""The compared rows whose figure rests on the memory model or the step-time model: a plan whose
framework has no validation row for it (Plan.caveats) gets UNVALIDATED after the figure."""
UNVALIDATED = " !"
"""The mark after a compared figure no validation row covers for its plan's framework."""


def unvalidated(p: Plan) -> set[str]:
    """The kinds of figure ("timing", "memory") p.caveats says no validation row covers."""
    from apsi.training.frameworks.timing import MEMORY_CAVEAT, TIMING_CAVEAT

    kinds = {"timing": TIMING_CAVEAT, "memory": MEMORY_CAVEAT}
    return {kind for kind, words in kinds.items() if any(words in c for c in p.caveats)}


def _apart(values: list[Hashable], cells: list[str]) -> bool:
    """Whether `cells` tell `values` apart: no one cell stands for two values."""
    return len(set(zip(values, cells))) == len(set(values)) == len(set(cells))


def cells(row: Row, plans: list[Plan]) -> tuple[list[str], bool]:
    """The row's cells, and whether they had to be numbered (values that differ, printed alike
    even at the finest): with as few figures as tell the plans' values apart."""
    shown = [row.cell(p) for p in plans]
    values: list[Hashable] = list(shown) if row.value is None else [row.value(p) for p in plans]
    if _apart(values, shown):
        return shown, False
    if row.finer is not None:
        for digits in range(4, MOST_DIGITS + 1):
            shown = [row.finer(p, digits) for p in plans]
            if _apart(values, shown):
                return shown, False
    order = list(dict.fromkeys(values))  # each distinct value's number, in the columns' order
    return [f"{c} (#{order.index(v) + 1})" for c, v in zip(shown, values)], True


def compare_text(plans: list[Plan], names: list[str], width: int | None = None) -> str:
    """Saved plans side by side, one column each; rows where their values differ are marked with *
    (their cells as fine as tells the values apart), and figures no validation row covers for
    their plan's framework with UNVALIDATED, its caveats listed below the table."""
    rows, numbered = [], []
    marks = [unvalidated(p) for p in plans]
    for row in COMPARED:
        shown, tagged = cells(row, plans)
        if tagged:
            numbered.append(row.label)
        kind = RESTS_ON.get(row.label)
        marked = [c + (UNVALIDATED if kind in m else "") for c, m in zip(shown, marks)]
        differ = len(set(shown)) > 1 or (row.value is not None and len({row.value(p) for p in plans}) > 1)
        rows.append([("* " if differ else "  ") + row.label, *marked])
    lines = columns(["", *names], rows, [False] * (len(names) + 1), width)
    differ_count = sum(1 for r in rows if r[0].startswith("*"))
    out = "\n".join(lines) + f"\n\n{differ_count} of {len(rows)} rows differ (marked *).\n"
    if numbered:
        out += wrap(f"Numbered (#1, #2, ...): {', '.join(numbered)} differ in what the words do not show (the plans' "
                    "JSON has it).", width) + "\n"
    caveats = sorted({c for p in plans for c in p.caveats})
    if caveats:
        out += wrap(f"Marked{UNVALIDATED}: a figure no validation row covers for its framework (docs/validation.md):\n"
                    + "\n".join(f"- {c}" for c in caveats), width) + "\n"
    return out
