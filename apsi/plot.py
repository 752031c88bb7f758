"""Charts for people, as PNG or SVG files: the GPU/day frontier and one plan's memory per GPU.

Drawing only: every number comes from FrontierPoints or a Plan built elsewhere. Matplotlib is an
optional extra (pip install 'apsi-planner[plot]'), imported inside the functions so that apsi runs
without it; figures are drawn on the Agg canvas (no display, no pyplot state). Without
matplotlib, or for a file that is not .png or .svg, `check_file` raises an ApsiError in one line.
Output is deterministic: SVG ids are hashed with a fixed salt and no date is written.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from apsi.errors import InputError
from apsi.units import human

if TYPE_CHECKING:
    from apsi.model.schema import FrontierPoint
    from apsi.model.schema import Plan

FORMATS = ("png", "svg")
_LEVELS = {"none": ("tab:green", "no recomputation"), "selective": ("tab:olive", "selective recomputation"),
           "full": ("tab:purple", "full recomputation")}
_PART_COLORS = ("tab:blue", "tab:cyan", "tab:orange", "tab:red", "tab:purple", "tab:gray")


def check_file(path: str | Path) -> str:
    """The plot format, from `path`'s extension; raises InputError for another extension or when
    matplotlib is not installed, so a command can refuse before it computes anything."""
    fmt = Path(path).suffix.lower().lstrip(".")
    if fmt not in FORMATS:
        raise InputError(f"plot file {str(path)!r} must end in .png or .svg")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise InputError("plotting needs matplotlib: pip install 'apsi-planner[plot]'") from None
    return fmt


def _figure(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=120, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _save(fig, path: str | Path, fmt: str) -> None:
    import matplotlib

    metadata = {"Date": None} if fmt == "svg" else None
    with matplotlib.rc_context({"svg.hashsalt": "apsi", "svg.fonttype": "path"}):
        try:
            fig.savefig(path, format=fmt, metadata=metadata)
        except OSError as err:
            raise InputError(f"cannot write {str(path)!r}: {err.strerror or err}") from None


def _plain_ticks(axis) -> None:
    """Log-axis labels as 100, 1,000, 0.1 rather than powers of ten."""
    from matplotlib.ticker import FuncFormatter

    def plain(v: float, _) -> str:
        return f"{v:,.0f}" if v >= 1 else f"{v:g}"

    def two_five(v: float, _) -> str:  # the 2s and 5s between powers of ten
        return plain(v, _) if round(v / 10 ** math.floor(math.log10(v))) in (2, 5) else ""

    low, high = axis.get_view_interval()
    axis.set_major_formatter(FuncFormatter(plain))
    axis.set_minor_formatter(FuncFormatter(two_five) if high < 100 * low else "")


def _model_words(p: Plan) -> str:
    from apsi.fmt import model_title

    return f"{model_title(p.model)}, {human(p.tokens)} tokens"


def frontier_plot(points: list[FrontierPoint], p: Plan | None, path: str | Path) -> None:
    """Days against GPUs on log-log axes: the frontier as a step (the fastest layout on at most N
    GPUs), its points coloured by recompute level, the target line and the plan `p` marked (the
    points alone where `p` is None: a frontier shown in a notebook)."""
    fmt = check_file(path)
    fig = _figure(11, 6)
    ax = fig.add_subplot()
    gpus, days = [x.gpus for x in points], [x.days for x in points]
    ax.step(gpus, days, where="post", color="tab:blue", linewidth=1.2, zorder=2,
            label="fastest layout on at most N GPUs")
    size = 12 if len(points) <= 200 else 3
    for level, (color, words) in _LEVELS.items():
        mine = [x for x in points if x.layout.recompute == level]
        if mine:
            ax.scatter([x.gpus for x in mine], [x.days for x in mine], s=size, color=color, zorder=3,
                       label=f"{words} ({len(mine):,} point{'s' if len(mine) > 1 else ''})")
    first, last = points[0], points[-1]
    ax.scatter([first.gpus], [first.days], s=60, marker="o", facecolors="none", edgecolors="black", zorder=4,
               label=f"fits in memory from {first.gpus:,} GPUs ({first.days:,.0f} days)")
    ax.scatter([last.gpus], [last.days], s=60, marker="D", facecolors="none", edgecolors="black", zorder=4,
               label=f"fastest within the cap: {last.gpus:,} GPUs ({last.days:,.3g} days)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(first.gpus / 1.3, last.gpus * 1.3)
    if p is None:
        ax.set_ylim(last.days / 4, first.days * 1.5)
        for axis in (ax.xaxis, ax.yaxis):
            _plain_ticks(axis)
        ax.set_xlabel("GPUs (count)")
        ax.set_ylabel("training time (days)")
        ax.set_title("GPU/day frontier")
        ax.grid(True, which="major", alpha=0.35)
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)
        _save(fig, path, fmt)
        return
    ax.axhline(p.target_days, color="tab:red", linestyle="--", linewidth=1,
               label=f"target: {p.target_days:,g} days")
    ax.scatter([p.gpus], [p.days], s=140, marker="*", color="black", zorder=5,
               label=f"plan: {p.gpus:,} x {p.gpu}, {p.days:,.1f} days")
    ax.set_ylim(min(last.days, p.target_days) / 4, max(first.days, p.target_days) * 1.5)
    # The frontier falls to the right, so the space above-right and below-left of any point on it
    # is empty: the plan's label goes above-right, or below-left near the right edge.
    right = math.log(p.gpus / first.gpus) > 0.7 * math.log(last.gpus * 1.3 / (first.gpus / 1.3))
    ax.annotate(f"plan: {p.gpus:,} x {p.gpu}\nTP {p.layout.tp} x PP {p.layout.pp} x DP {p.layout.dp:,}\n"
                f"{p.days:,.1f} days", xy=(p.gpus, p.days), xytext=(-16, -16) if right else (16, 16),
                textcoords="offset points", ha="right" if right else "left", va="top" if right else "bottom",
                fontsize=9, arrowprops={"arrowstyle": "-", "color": "black", "linewidth": 0.8})
    for axis in (ax.xaxis, ax.yaxis):
        _plain_ticks(axis)
    ax.set_xlabel(f"GPUs ({p.gpu}, count)")
    ax.set_ylabel("training time (days)")
    ax.set_title(f"GPU/day frontier: {_model_words(p)} on {p.gpu} ({p.precision}, {p.mfu * 100:.1f}% MFU)")
    ax.grid(True, which="major", alpha=0.35)
    ax.grid(True, which="minor", alpha=0.12)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)
    _save(fig, path, fmt)


def memory_plot(p: Plan, path: str | Path) -> None:
    """The plan's memory per GPU as one stacked bar (weights, gradients, optimizer states,
    activations) against the usable memory and the GPU's whole memory, in GiB."""
    fmt = check_file(path)
    m = p.memory
    fig = _figure(8, 6)
    ax = fig.add_subplot()
    parts: tuple[tuple[str, float], ...] = (("weights", m.weights_gib), ("gradients", m.gradients_gib),
                                            ("optimizer states", m.optimizer_gib),
                                            ("activations", m.activations_gib))
    if p.framework != "reference":
        # A framework's peak stage also holds the logits (last stage) and the reserve.
        parts += (("logits", m.logits_gib), ("reserve", m.reserve_gib))
    bottom = 0.0
    for (name, gib), color in zip(parts, _PART_COLORS):
        ax.bar([0], [gib], bottom=bottom, width=0.5, color=color, label=f"{name}: {gib:,.1f} GiB")
        if gib >= 0.07 * max(m.gpu_memory_gib, m.total_gib):  # room for two lines of text
            ax.text(0, bottom + gib / 2, f"{name}\n{gib:,.1f}", ha="center", va="center", fontsize=9)
        bottom += gib
    usable = "90%" if p.framework == "reference" else "as the driver reports it"
    ax.axhline(m.usable_gib, color="black", linestyle="--", linewidth=1.2,
               label=f"usable: {m.usable_gib:,.1f} GiB ({usable})")
    ax.axhline(m.gpu_memory_gib, color="gray", linestyle=":", linewidth=1,
               label=f"{p.gpu} memory: {m.gpu_memory_gib:,.0f} GiB")
    ax.set_xlim(-0.9, 0.9)
    ax.set_ylim(0, 1.12 * max(m.gpu_memory_gib, m.total_gib))
    lay = p.layout
    ax.set_xticks([0], [f"TP {lay.tp} x PP {lay.pp} x DP {lay.dp:,}\n{_LEVELS[lay.recompute][1]}, "
                        f"{p.optimizer}\n{m.total_gib:,.1f} GiB in all"])
    ax.set_ylabel("memory per GPU (GiB, 2^30 bytes)")
    ax.set_title(f"Memory per GPU: {_model_words(p)}\non {p.gpus:,} x {p.gpu}", fontsize=11)
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1), fontsize=8)
    _save(fig, path, fmt)


def svg_text(draw: Callable[[str], None]) -> str | None:
    """The SVG that `draw(path)` writes, as text (a chart inline in a notebook's HTML); None where
    matplotlib is not installed (the table shows alone)."""
    import importlib.util
    import os
    import tempfile

    if importlib.util.find_spec("matplotlib") is None:
        return None
    with tempfile.TemporaryDirectory(prefix="apsi-chart-") as folder:
        path = os.path.join(folder, "chart.svg")
        draw(path)
        with open(path, encoding="utf-8") as f:
            return f.read()
