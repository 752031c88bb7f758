"""Shared test fixtures: a pinned terminal, the CLI run in-process, and a guard against hangs.

Owns only test plumbing; no expected values live here.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest

# Help text and any wrapped output depend on the terminal width; pin it so CLI tests read the same
# on every machine (set at import too, for code that reads the width once).
os.environ["COLUMNS"] = "100"
os.environ.setdefault("NO_COLOR", "1")
# apsi's own output keeps its full lines in tests (the expected texts are unwrapped); the
# 80-column test (tests/test_hardening.py) takes this away.
os.environ["APSI_COLUMNS"] = "0"


@pytest.fixture(autouse=True)
def _pinned_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("APSI_COLUMNS", "0")


@dataclass(frozen=True)
class Run:
    """One in-process `apsi` invocation: exit code and captured streams."""

    code: int
    out: str
    err: str

    def why(self) -> str:
        """The streams, for an assertion message."""
        return f"exit {self.code}\n--- stdout ---\n{self.out}\n--- stderr ---\n{self.err}"


@pytest.fixture
def apsi(capsys: pytest.CaptureFixture[str]):
    """Run `apsi ARGS...` through apsi.cli.app.main and return a Run."""
    from apsi.cli.app import main

    def run(*args: str) -> Run:
        capsys.readouterr()  # drop anything printed before
        code = main(list(args))
        captured = capsys.readouterr()
        return Run(code, captured.out, captured.err)

    return run


@contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Fail with TimeoutError instead of hanging when the body runs past `seconds` (main thread,
    POSIX only; elsewhere it only runs the body)."""
    if not hasattr(signal, "setitimer"):
        yield
        return

    def expire(signum, frame):
        raise TimeoutError(f"took longer than {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture
def reference_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """Plan under the reference arithmetic when no framework is named: for the tests of the
    reference arithmetic's plans, the CP-SAT program and its sweeps, which were written before
    Megatron became the default framework (every call site reads apsi.training.frameworks.DEFAULT when it
    runs)."""
    import apsi.training.frameworks

    monkeypatch.setattr(apsi.training.frameworks, "DEFAULT", "reference")
