"""Plans as HTML for notebooks (what IPython shows for a Plan, ServePlan, DisaggPlan, FrontierOutput
or ServeFrontierOutput: their _repr_html_, apsi.model.notebook; a FleetResult's is
apsi.fleets.render.html, with these helpers): compact tables with the same figures and words as
the text, built from the text renderers' own rows, every value escaped; a frontier also as its
chart, inline SVG, where the matplotlib extra is installed (apsi.plot). Rendering only; no math.
"""

from __future__ import annotations

import html
from typing import Any

LABEL = 11
"""Width of the label column in the text blocks (`  {label:<11} {value}`: apsi.outputs.text,
apsi.serving.render)."""

STYLE = "border-collapse:collapse;font-family:monospace;font-size:90%"
_CELL = "text-align:left;vertical-align:top;padding:2px 8px"


def row(cells: list[str], head: bool = False) -> str:
    """One table row of escaped cells (header cells with `head`)."""
    tag = "th" if head else "td"
    return "<tr>" + "".join(f'<{tag} style="{_CELL}">{html.escape(c)}</{tag}>' for c in cells) + "</tr>"


def block(text: str) -> str:
    """A text block (a headline, a blank line, then `  Label      value` rows) as an HTML table:
    the headline its caption, each row a label and its value."""
    lines = text.rstrip("\n").splitlines()
    head, rows = lines[0], [line for line in lines[1:] if line.startswith("  ")]
    cells = [[line[2:2 + LABEL].strip(), line[3 + LABEL:]] for line in rows]
    return (f'<table style="{STYLE}"><caption style="text-align:left;font-weight:bold">{html.escape(head)}</caption>'
            + "".join(row(c) for c in cells) + "</table>")


def plan_html(p: Any) -> str:
    """A training plan (apsi.outputs.text.plan_text's rows)."""
    from apsi.outputs.text import plan_text

    return block(plan_text(p))


def serve_html(p: Any) -> str:
    """A serving plan (apsi.serving.render.serve_text's rows)."""
    from apsi.serving.render import serve_text

    return block(serve_text(p))


def disagg_html(p: Any) -> str:
    """A disaggregated serving plan (apsi.serving.render.disagg_text's rows)."""
    from apsi.serving.render import disagg_text

    return block(disagg_text(p))


def _table(head: list[str], rows: list[list[str]]) -> str:
    return f'<table style="{STYLE}">' + row(head, head=True) + "".join(row(r) for r in rows) + "</table>"


def frontier_html(out: Any) -> str:
    """A training frontier (FrontierOutput: `apsi frontier`'s points): its chart, then every point
    with the columns of `apsi frontier --format csv` (apsi.outputs.tables.FRONTIER_COLUMNS)."""
    from apsi.outputs.tables import FRONTIER_COLUMNS
    from apsi.plot import frontier_plot, svg_text

    points = list(out.root)
    rows = [[f"{p.gpus:,}", f"{p.nodes:,}", f"{p.days:,.2f}", str(p.layout.tp), str(p.layout.pp), str(p.layout.cp),
             f"{p.layout.dp:,}", str(p.layout.vpp), str(p.layout.ep), p.layout.recompute, f"{p.memory_per_gpu_gib:,.1f}",
             "yes" if p.target_met else "no"] for p in points]
    chart = svg_text(lambda path: frontier_plot(points, None, path)) if points else None
    return (chart or "") + _table(list(FRONTIER_COLUMNS), rows)


def serve_frontier_html(out: Any) -> str:
    """A serving frontier (ServeFrontierOutput: `apsi serve --frontier`'s points): its chart, then
    each point's layout, batch, tokens/s per GPU and per user, TTFT and TPOT."""
    from apsi.plot import svg_text
    from apsi.serving.plot import frontier_plot

    points = list(out.root)
    rows = [[p.gpu, str(p.tp), str(p.pp), str(p.ep), str(p.attention_dp), f"{p.batch:,}",
             f"{p.output_tokens_per_s_per_gpu:,.1f}", f"{p.output_tokens_per_s_per_user:,.1f}", f"{p.ttft_ms:,.1f}",
             f"{p.tpot_ms:,.2f}"] for p in points]
    chart = svg_text(lambda path: frontier_plot(points, path)) if points else None
    return (chart or "") + _table(["gpu", "tp", "pp", "ep", "attention_dp", "batch", "output tokens/s per GPU",
                                   "output tokens/s per user", "TTFT ms", "TPOT ms"], rows)
