"""Hostile and extreme input: every case in tests/bad_input_cases.py, through the CLI and the API.

Owns the contract for user errors: the CLI exits 2 with exactly one line on stderr that
starts with 'error:', prints nothing on stdout and never a traceback; the API raises
apsi.ApsiError (a ValueError) whose message matches the case's regex; nothing hangs. It also
checks that docs/bad-inputs.md shows what the program prints today.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

import apsi
from apsi import ApsiError
from bad_input_cases import API_CASES, CLI_CASES, DOC, command, scrub, table, table_in, write_files
from conftest import time_limit

HANG = 60
"""A user error is answered in well under a second (docs/bad-inputs.md); past HANG seconds the
call is taken for a hang. Only a hang guard: how fast the answer comes is benchmarks/'s to measure,
so a loaded machine never fails the test."""


@pytest.fixture
def scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder holding the cases' catalog files, made the working directory."""
    write_files(tmp_path)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("case", CLI_CASES, ids=[c.id for c in CLI_CASES])
def test_cli_answers_one_line_and_exit_2(case, scratch, apsi) -> None:
    with time_limit(HANG):
        run = apsi(*case.argv)
    assert run.code == 2, f"{command(case)}\n{run.why()}"
    assert run.out == "", run.why()
    assert run.err.endswith("\n") and run.err.count("\n") == 1, f"not one line:\n{run.why()}"
    assert run.err.startswith("error: "), run.why()
    assert "Traceback" not in run.err
    message = run.err[len("error: "):].rstrip("\n")
    assert re.match(case.pattern, message), f"{command(case)}\nmessage: {message}\npattern: {case.pattern}"


@pytest.mark.parametrize("case", API_CASES, ids=[c.id for c in API_CASES])
def test_api_raises_apsi_error(case, scratch) -> None:
    name, args, kwargs = case.api
    function = getattr(apsi, name)
    with time_limit(HANG), pytest.raises(ApsiError, match=f"^(?:{case.api_pattern or case.pattern})") as raised:
        function(*args, **kwargs)
    assert isinstance(raised.value, ValueError)
    assert "\n" not in str(raised.value)


def test_apsi_error_is_a_value_error() -> None:
    assert issubclass(ApsiError, ValueError)
    errors = importlib.import_module("apsi.errors")
    for name in ("InputError", "UnknownNameError", "LayoutError"):
        assert issubclass(getattr(errors, name), ApsiError)


def test_docs_table_is_current(scratch, apsi) -> None:
    """docs/bad-inputs.md holds, row by row, what each command prints now (regenerate it with
    `python tests/bad_input_cases.py`)."""
    results = []
    for case in CLI_CASES:
        run = apsi(*case.argv)
        results.append((case, run.code, scrub(run.err, scratch), len(run.out.splitlines())))
    documented = table_in(DOC.read_text(encoding="utf-8"))
    assert documented == table(results), "docs/bad-inputs.md is stale: run python tests/bad_input_cases.py"
