"""Notebook display (each result's _repr_html_, apsi.model.notebook.Shown, rendered by apsi.outputs.html
or apsi.fleets.render.html): each result is an HTML table with the same figures and words as its
text, every value escaped."""

from __future__ import annotations

import html
import re
from html.parser import HTMLParser

import apsi
from apsi import fleet, plan, serve, serve_disagg


def shown(obj: object) -> str:
    """What a notebook shows for obj: its _repr_html_ (apsi.model.notebook.Shown), which Jupyter calls."""
    html_text = obj._repr_html_()  # type: ignore[attr-defined]
    assert isinstance(html_text, str)
    return html_text


class _Cells(HTMLParser):
    """The text of every table cell and caption of an HTML fragment, unescaped, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.cells: list[str] = []
        self._open = False

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag in ("td", "th", "caption", "p"):
            self._open = True
            self.cells.append("")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th", "caption", "p"):
            self._open = False

    def handle_data(self, data: str) -> None:
        if self._open:
            self.cells[-1] += data


def cells(fragment: str) -> list[str]:
    parser = _Cells()
    parser.feed(fragment)
    return parser.cells


def test_a_plan_shows_its_gpus_and_why_line_as_its_text_does() -> None:
    p = plan("llama-3.1-70b", tokens="15T")
    out = shown(p)
    assert out.startswith("<table") and out.endswith("</table>")
    got = cells(out)
    assert got[0].startswith("Training plan: ") and f"{p.gpus:,} x {p.gpu}" in got[0]
    why = got.index("Why")
    assert got[why + 1] == (p.why or p.binding)
    # Every row of the text is a row of the table.
    from apsi.outputs.text import plan_text

    labels = [line[2:13].strip() for line in plan_text(p).splitlines()[2:] if line.startswith("  ")]
    assert [c for c in got[1::2]] == labels


def test_serve_and_disaggregated_plans_show_their_gpus_and_why() -> None:
    s = serve("llama-3.1-70b", precision="fp8", rate=10)
    got = cells(shown(s))
    assert got[0].startswith("Serving plan: ") and f"{s.gpus:,} GPUs" in got[0]
    assert got[got.index("Why") + 1] == s.why
    d = serve_disagg("llama-3.1-70b", precision="fp8", isl=8000, osl=1000, ttft=2000, tpot=12, rate=10)
    got = cells(shown(d))
    assert got[0].startswith("Disaggregated serving plan: ") and f"{d.gpus:,} GPUs" in got[0]
    assert got[got.index("Why") + 1] == d.why


def test_a_fleet_shows_its_runs_table_and_totals() -> None:
    data = {"fleet": {"start": "2026-07-01", "horizon_days": 60, "gpus": {"H100": 64}},
            "defaults": {"framework": "reference"},
            "runs": [{"name": "a <b>", "params": "llama-3.2-1b", "tokens": "20B", "deadline": "2026-08-01"}]}
    r = fleet(data, jobs=1)
    out = shown(r)
    assert "a &lt;b&gt;" in out and "<b>a" not in out  # the run's name escaped
    got = cells(out)
    assert got[0].startswith("Fleet plan: 1 of 1 runs scheduled")
    assert "run" in got and "GPUs" in got and "a <b>" in got
    assert any(c.startswith("Total: ") for c in got)
    assert re.search(r"<th[^>]*>slack</th>", out)
    assert html.unescape(out[out.index("<table"):]).count("a <b>") == 1
    # Its Gantt chart inline (the matplotlib extra is in the test extra), the run's name escaped in it too.
    assert out.count("<svg") == 1 and out.index("<svg") < out.index("<table")


def test_frontiers_show_their_chart_and_every_point() -> None:
    from apsi import FrontierOutput, ServeFrontierOutput, frontier, serve_frontier

    points = frontier("llama-3.1-8b", tokens="1T")
    out = shown(FrontierOutput(points))
    assert out.startswith("<svg") or out.startswith("<?xml")
    got = cells(out[out.index("<table"):])
    from apsi.outputs.tables import FRONTIER_COLUMNS

    assert got[:len(FRONTIER_COLUMNS)] == list(FRONTIER_COLUMNS)
    # One row per point, GPUs first, in the frontier's order.
    gpus = got[len(FRONTIER_COLUMNS)::len(FRONTIER_COLUMNS)]
    assert gpus == [f"{p.gpus:,}" for p in points]
    served = serve_frontier("llama-3.1-70b", precision="fp8")
    out = shown(ServeFrontierOutput(served))
    got = cells(out[out.index("<table"):])
    assert got[:2] == ["gpu", "tp"] and len(got) == 10 * (len(served) + 1)
    assert got[16] == f"{served[0].output_tokens_per_s_per_gpu:,.1f}"


def test_nothing_is_imported_until_a_result_is_shown() -> None:
    # A plan's class carries _repr_html_, but its renderer is imported only when it is called.
    import subprocess
    import sys

    code = ("import sys; from apsi import plan; p = plan('7B', gpu='H100', days=30); "
            "print('apsi.outputs.html' in sys.modules); p._repr_html_(); print('apsi.outputs.html' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["False", "True"], done.stdout + done.stderr
