"""Plans as HTML for notebooks (the `_repr_html_` of Plan, ServePlan and DisaggPlan; a FleetResult's
is apsi.fleets.render.html, with these helpers): compact tables with the same figures and words as
the text, built from the text renderers' own rows, every value escaped. Rendering only; no math, no
dependency beyond the standard library.
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
