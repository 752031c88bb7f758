"""The solver's status is honest: OPTIMAL only when every solve proved its optimum.

A search cut short by the time budget must say FEASIBLE (a layout, not proved best) or report
that none was found, and the command line must say so in words.
"""

from __future__ import annotations

import pytest

from apsi import plan
from apsi.training.reference import planning
from apsi.training.reference import program as solver
from apsi.cli.app import main
from apsi.errors import LayoutError
from apsi.inputs.question import resolve


# These tests are about the reference arithmetic and its CP-SAT program: plans that name no
# framework are planned under it here (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("reference_default")


def test_reference_plan_is_proved_optimal():
    # The reference plan is small: every solve finishes and proves its optimum.
    p = plan("1T", active="32B", tokens="15T", precision="fp8")
    assert p.solver.status == "OPTIMAL"
    assert p.solver.solves >= 2


def test_cut_short_search_is_never_called_optimal():
    # Choosing among every GPU type for the fastest layout is the largest program apsi builds
    # (about 0.1 deterministic seconds); with a budget of 1e-3 the search stops early. Whatever it
    # returns must not claim a proof.
    s = resolve("70B", tokens="1.4T", gpu="any")
    tight = planning.problem(s, objective="days", cap=200_000).model_copy(update={"time_limit_seconds": 1e-3})
    result = solver.solve_layout(tight)
    assert result.status in ("FEASIBLE", "UNKNOWN")
    full = solver.solve_layout(planning.problem(s, objective="days", cap=200_000))
    assert full.status == "OPTIMAL"


def test_plan_and_cli_say_when_the_proof_is_missing(monkeypatch, capsys):
    # A stand-in for CP-SAT that always stops with FEASIBLE shows the plumbing end to end: the
    # plan carries FEASIBLE and the text says, in words, that it is not proved optimal.
    real = solver._Run.solve

    def stopped_early(self, model):
        result = real(self, model)
        self.proved = False
        return result

    monkeypatch.setattr(solver._Run, "solve", stopped_early)
    p = plan("21B", tokens="420B")
    assert p.solver.status == "FEASIBLE"
    assert main(["plan", "21B", "--tokens", "420B", "--no-levers"]) == 0
    out = capsys.readouterr().out
    assert "not proved optimal" in out and "FEASIBLE" in out


def test_no_layout_in_time_is_an_error_not_a_plan(monkeypatch):
    # When the budget runs out before any layout is found, plan() raises instead of inventing one.
    def nothing_found(self, model):
        self.solves += 1
        return None, False, self.cp.UNKNOWN

    monkeypatch.setattr(solver._Run, "solve", nothing_found)
    with pytest.raises(LayoutError, match="no layout within its time limit"):
        plan("21B", tokens="420B")
