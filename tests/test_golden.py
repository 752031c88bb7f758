"""Bare sizes keep their answers: every command in tests/golden/reference.json prints what it did
before model architectures existed.

Owns the promise that a bare size (the reference arithmetic's shape rule: d = 128 L, FFN = 4 d, no
vocabulary, KV heads = heads) plans exactly as the reference arithmetic does. Text and CSV output
must be the same bytes. JSON output must hold every field it held then, with the same value
(equal floats, not close ones); fields added since (the architecture, its parts) may be present
too. The outputs were written by tests/golden/capture.py at commit f1818de, when the reference
arithmetic was the only framework; plan and frontier now ask for it with --framework reference,
and the scenario files name it in their defaults. One field was edited since: the cost question
over `--gpu any` also skips H800 ("no price"), a type the catalog gained later; its answer and
runner-up are as captured.
"""

from __future__ import annotations

import io
import json
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from apsi.cli.app import main
from golden.capture import _solver_masked, moved, reference_argv

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = json.loads((ROOT / "tests" / "golden" / "reference.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("case", GOLDEN, ids=[" ".join(c["argv"]) for c in GOLDEN])
def test_bare_size_output_is_unchanged(case: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    out, err = io.StringIO(), io.StringIO()
    # The reference arithmetic is no longer the default framework: asked for by name, as the
    # capture script runs it (tests/golden/capture.py reference_argv).
    argv = reference_argv(case["argv"])
    with redirect_stdout(out), redirect_stderr(err):
        code = main(argv)
    assert code == case["code"], err.getvalue()
    assert (where := moved(case, out.getvalue())) is None, where


def test_the_capture_script_writes_the_cases_this_test_reads() -> None:
    # tests/golden/capture.py once wrote Megatron's answers where this test reads the reference
    # arithmetic's: its commands are the file's, run the same way (reference_argv).
    from golden.capture import COMMANDS, run

    assert [c["argv"] for c in GOLDEN] == COMMANDS
    case = GOLDEN[0]
    assert run(case["argv"])["code"] == case["code"]
    assert _solver_masked(run(case["argv"])["stdout"]) == _solver_masked(case["stdout"])
