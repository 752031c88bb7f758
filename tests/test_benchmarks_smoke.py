"""A fast run of benchmarks/framework_cpsat.py's pieces, so that the benchmark keeps working.

Owns only that check: the script builds its table from apsi.frameworks.bounds.Search, so a change
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
