"""A fast run of benchmarks/framework_cpsat.py's and benchmarks/fleet_speed.py's pieces, so that the
benchmarks keep working.

Owns only that check: the script builds its table from apsi.training.frameworks.bounds.Search, so a change
to Search's interface shows up here rather than the next time someone measures.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import framework_cpsat  # noqa: E402

import apsi  # noqa: E402


def test_literal_cpsat_over_the_search_table_finds_the_walks_gpu_count():
    # A small question (8B, 160B tokens, a 128K-token batch: 32 sequences, so few dps): CP-SAT
    # over every admitted (configuration, dp) pair of the table, each pair's fits and duration
    # from Search.fits and Search.seconds, must find the walk's GPU count (apsi.plan), as the
    # walk is exact over those pairs (tests/test_search.py checks it against an enumeration).
    options = dict(tokens="160B", batch="128K")
    walk = apsi.plan("8B", framework="megatron", **options)
    table = framework_cpsat.Table("8B", options, None)
    assert table.pairs == sum(len(dps) for _, dps, _, _ in table.rows) > 0
    assert table.rank[framework_cpsat.walk_config(walk)] < table.families
    result = framework_cpsat.solve(table, framework_cpsat.flat, workers=1, time_limit=30, repeats=1,
                                   tie_break=False)
    assert result["status"] == "OPTIMAL"
    assert result["gpus"] == walk.gpus


def test_fleet_speed_fleet_reads_and_solves():
    # benchmarks/fleet_speed.py's fleet, at 6 runs: it reads as a fleet and the program proves it.
    import fleet_speed

    from apsi.fleets.api import _options, _program
    from apsi.fleets.program import schedule
    from apsi.fleets.spec import read_fleet

    spec = read_fleet(fleet_speed.fleet_data(6, 0))
    assert sorted(spec.inventory.gpus) == ["B200", "H100", "H200"] and spec.horizon_days == 365
    table, _, _ = _options(spec, 1)
    result = schedule(_program(spec, table), tuple(spec.objective), 20)
    assert result.status == "OPTIMAL", result
