"""The fleet's Gantt chart (apsi.fleets.plot): a late run is marked with its days late, a run after
another gets an arrow from that run's end, and the time axis ticks each month."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from apsi import fleet


def test_the_gantt_marks_late_runs_and_draws_the_after_arrows(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from apsi.fleets.plot import fleet_plot

    # "first" needs the 8 GPUs for about 53 days (Llama 3.1 8B, 300B tokens, reference arithmetic)
    # and is due in 30: late. "second" comes after it.
    data = {"fleet": {"start": "2027-01-01", "horizon_days": 150, "gpus": {"H100": 8}},
            "defaults": {"framework": "reference"},
            "runs": [{"name": "first", "params": "llama-3.1-8b", "tokens": "300B", "deadline": "2027-01-30"},
                     {"name": "second", "params": "llama-3.2-1b", "tokens": "20B", "after": ["first"]}]}
    result = fleet(data, jobs=1)
    late = {r.name: r.late_days for r in result.runs}
    assert late["first"] > 0 and late["second"] == 0
    path = tmp_path / "gantt.svg"
    fleet_plot(result, path)
    svg = path.read_text(encoding="utf-8")
    assert 'id="late-0"' in svg and "late-1" not in svg  # the late run, and only it
    assert f"late {late['first']:,} d" in svg
    assert re.search(r'id="after-0-1"', svg)  # first (row 0) to second (row 1)
    for month in ("Feb", "Mar", "Apr", "May"):  # a tick on each month's first day
        assert f">{month}<" in svg or month in svg
