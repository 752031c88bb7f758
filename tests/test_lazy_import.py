"""Lazy imports: commands that plan nothing never import OR-Tools.

Owns the import-set property of the CLI (apsi/__init__.py's lazy exports, apsi/cli*.py's
imports inside commands, apsi/training/reference/program.py importing OR-Tools inside the solve). Each case runs
`apsi.cli.app.main([...])` in a fresh interpreter, since this test process may already hold OR-Tools,
and reads which modules were loaded. How long the commands take is measured, not tested:
benchmarks/process_time.py and docs/benchmarks.md.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

# Runs one command in-process in a new interpreter, then reports the loaded ortools modules on
# the last stderr line (the command's own output stays on stdout).
_CHILD = """
import sys
import apsi.cli.app
code = apsi.cli.app.main(sys.argv[1:])
loaded = sorted(m for m in sys.modules if m == "ortools" or m.startswith("ortools."))
print("ORTOOLS-MODULES=" + ",".join(loaded), file=sys.stderr)
sys.exit(code)
"""


def _ortools_modules(*argv: str) -> list[str]:
    env = {**os.environ, "COLUMNS": "100", "NO_COLOR": "1"}
    done = subprocess.run([sys.executable, "-c", _CHILD, *argv], capture_output=True, text=True, env=env,
                          timeout=120)
    assert done.returncode == 0, f"apsi {' '.join(argv)} exited {done.returncode}\n{done.stdout}\n{done.stderr}"
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ORTOOLS-MODULES="), done.stderr
    names = last.split("=", 1)[1]
    return names.split(",") if names else []


@pytest.mark.parametrize("argv", [
    ("--help",),
    ("--version",),
    ("gpus",),
    ("gpus", "--json"),
    ("plan", "--help"),
    ("run", "--help"),
], ids=" ".join)
def test_commands_that_plan_nothing_do_not_import_ortools(argv: tuple[str, ...]) -> None:
    loaded = _ortools_modules(*argv)
    assert loaded == [], f"apsi {' '.join(argv)} imported {', '.join(loaded)}"


def test_importing_apsi_and_its_cli_does_not_import_ortools() -> None:
    code = ("import sys, apsi, apsi.cli.app; "
            "bad = [m for m in sys.modules if m.split('.')[0] == 'ortools']; "
            "assert not bad, bad")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_the_check_sees_ortools_when_a_plan_is_solved() -> None:
    # Guards the two tests above against passing vacuously (e.g. if the probe stopped reading
    # sys.modules): a real plan must show OR-Tools loaded.
    loaded = _ortools_modules("plan", "1B", "--framework", "reference", "--no-levers")
    assert "ortools.sat.python.cp_model" in loaded, loaded
