"""Notebook display (apsi._notebook_display registering apsi.outputs.html and apsi.fleets.render.html
with IPython's HTML formatter): each result is an HTML table with the same figures and words as its
text, every value escaped."""

from __future__ import annotations

import html
import re
from html.parser import HTMLParser

import apsi
from apsi import fleet, plan, serve, serve_disagg


class _Formatter:
    """IPython's HTML formatter, as far as apsi uses it: for_type_by_name, and the lookup it serves."""

    def __init__(self) -> None:
        self.by_name: dict[tuple[str, str], object] = {}

    def for_type_by_name(self, module: str, name: str, func: object) -> None:
        self.by_name[(module, name)] = func

    def __call__(self, obj: object) -> str:
        func = self.by_name[(type(obj).__module__, type(obj).__name__)]
        return func(obj)  # type: ignore[operator]


class _Shell:
    """A stand-in for IPython's shell: its display_formatter.formatters["text/html"]."""

    def __init__(self) -> None:
        self.html = _Formatter()
        self.display_formatter = type("D", (), {"formatters": {"text/html": self.html}})()


def shown(obj: object) -> str:
    """What a notebook shows for obj: the HTML apsi registers with a shell."""
    shell = _Shell()
    assert apsi._notebook_display(shell) is True
    return shell.html(obj)


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


def test_outside_a_notebook_nothing_is_registered() -> None:
    # No IPython shell running (this test process): nothing to register, and apsi says so.
    import sys

    if "IPython" in sys.modules:
        import pytest

        pytest.skip("IPython is loaded in this process")
    assert apsi._notebook_display() is False
