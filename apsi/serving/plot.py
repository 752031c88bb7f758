"""The serving frontier as a chart (PNG or SVG): output tokens/s per GPU against tokens/s per user,
one series per GPU type and layout. Drawing only, with apsi.plot's figure, save and ticks (the
matplotlib extra, imported inside)."""

from __future__ import annotations

from pathlib import Path

from apsi.serving.replica import layout_words
from apsi.model.serve_schema import ServeFrontierPoint


def frontier_plot(points: list[ServeFrontierPoint], path: str | Path, what: str = "") -> None:
    """The chart of `points`; `what` names the model, engine and precision in the title."""
    from apsi.plot import _figure, _plain_ticks, _save, check_file

    fmt = check_file(path)
    fig = _figure(10, 6)
    ax = fig.add_subplot()
    ax.plot([p.output_tokens_per_s_per_user for p in points], [p.output_tokens_per_s_per_gpu for p in points],
            color="tab:gray", linewidth=1, zorder=1, label="frontier")
    kinds: dict[tuple[str, int, int, int, int], list[ServeFrontierPoint]] = {}
    for p in points:
        kinds.setdefault((p.gpu, p.tp, p.pp, p.ep, p.attention_dp), []).append(p)
    for (gpu, tp, pp, ep, dp), mine in kinds.items():
        ax.scatter([p.output_tokens_per_s_per_user for p in mine], [p.output_tokens_per_s_per_gpu for p in mine],
                   s=18, zorder=2, label=f"{layout_words(tp, pp, ep, dp)} on {gpu}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    for axis in (ax.xaxis, ax.yaxis):
        _plain_ticks(axis)
    ax.set_xlabel("output tokens/s per user (1 / TPOT)")
    ax.set_ylabel("output tokens/s per GPU")
    ax.set_title(f"Serving frontier{' of ' + what if what else ''}:\nno layout and batch beats a point on both axes",
                 fontsize=11)
    ax.grid(True, which="major", alpha=0.35)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)
    _save(fig, path, fmt)
