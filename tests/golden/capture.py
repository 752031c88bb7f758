"""Writes tests/golden/reference.json: the outputs of bare-size commands, to pin them.

Run once against the code whose answers are to be kept (it was run at commit f1818de, before
model architectures were added); tests/test_golden.py then checks that every command still prints
the same answers. Each command runs as the test runs it (reference_argv: the reference arithmetic
asked for by name, now that it is not the default), so that a capture writes what the test reads.
Rerun only when a change is meant to move these answers, and say why in the commit;
`--check` (.ci/run) exits 1 where an answer moved, writing nothing:

    python tests/golden/capture.py [--check]
"""

from __future__ import annotations

import csv
import io
import json
import re
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

from apsi.cli.app import main

# The reference arithmetic's plan and table, README commands, the determinism cases,
# the frontier and serving: every bare-size path through the arithmetic.
COMMANDS: list[list[str]] = [
    ["plan", "1T", "--active", "32B", "--tokens", "15T", "--precision", "fp8"],
    ["plan", "1T", "--active", "32B", "--tokens", "15T", "--precision", "fp8", "--json"],
    ["plan", "21B", "--tokens", "420B", "--json"],
    ["plan", "21B", "--tokens", "420B"],
    ["plan", "70B", "--tokens", "1.4T", "--json"],
    ["plan", "70B", "--tokens", "1.4T"],
    ["plan", "2T", "--active", "64B", "--tokens", "1.28T", "--gpu", "B200", "--precision", "fp8", "--json"],
    ["plan", "2T", "--active", "64B", "--tokens", "1.28T", "--gpu", "B200", "--precision", "fp8"],
    ["plan", "2T", "--tokens", "40T", "--gpu", "B200", "--precision", "fp8", "--batch", "16M", "--json"],
    ["plan", "2T", "--tokens", "40T", "--batch", "16M", "--json"],
    ["plan", "2T", "--tokens", "40T", "--json"],
    ["plan", "70B", "--tokens", "1.4T", "--gpus", "100", "--json"],
    ["plan", "70B", "--tokens", "1.4T", "--gpus", "64", "--json"],
    ["plan", "70B", "--tokens", "1.4T", "--gpu", "any", "--objective", "cost", "--json"],
    ["plan", "70B", "--tokens", "1.4T", "--gpu", "H100,H200,MI300X", "--objective", "energy", "--pue", "1.2", "--json"],
    ["plan", "70B", "--tokens", "1.4T", "--tp", "4", "--recompute", "selective", "--json"],
    ["plan", "13B", "--tp", "2", "--recompute", "selective", "--batch", "3M", "--seq", "2048", "--gpu", "A100-40", "--json"],
    ["plan", "70B", "--layers", "80", "--json"],
    ["plan", "70B", "--width", "8192", "--heads", "64", "--json"],
    ["plan", "7B", "--seq", "8192", "--gpu", "A100", "--json"],
    ["frontier", "70B", "--tokens", "1.4T", "--json"],
    ["frontier", "70B", "--tokens", "1.4T"],
    ["frontier", "1T", "--active", "32B", "--tokens", "15T", "--precision", "fp8", "--json"],
    ["serve", "1T", "--active", "32B", "--precision", "fp8"],
    ["serve", "1T", "--active", "32B", "--precision", "fp8", "--json"],
    ["serve", "70B", "--precision", "fp8", "--json"],
    ["serve", "70B", "--kv-heads", "8", "--batch", "16", "--seq", "8192", "--json"],
    ["run", "examples/reference-table.yaml", "--format", "csv", "--jobs", "1"],
    ["run", "examples/moe-400b-bf16-vs-fp8.yaml", "--format", "csv", "--jobs", "1"],
]


def reference_argv(argv: list[str]) -> list[str]:
    """The command as it runs now: plan, frontier and serve ask for the reference arithmetic by name
    (it was the only framework when the outputs were captured; for serve, the reference's quotient,
    which the serving model replaced). tests/test_golden.py runs each case through this too."""
    argv = list(argv)
    if argv[0] in ("plan", "frontier", "serve"):
        argv[2:2] = ["--framework", "reference"]
    return argv


def run(argv: list[str]) -> dict:
    """One case: the command as captured (`argv`, the key the test reads) and what it prints now."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(reference_argv(argv))
    return {"argv": argv, "code": code, "stdout": out.getvalue(), "stderr": err.getvalue()}


def _kept(old, new, path: str = "") -> str | None:
    """Where `new` does not keep `old` (every old key with an equal value), or None."""
    if isinstance(old, dict):
        if not isinstance(new, dict):
            return f"{path}: was an object, now {new!r:.80}"
        for key, value in old.items():
            if key not in new:
                return f"{path}.{key}: missing"
            if (where := _kept(value, new[key], f"{path}.{key}")) is not None:
                return where
        return None
    if isinstance(old, list):
        if not isinstance(new, list) or len(new) != len(old):
            return f"{path}: was a list of {len(old)}, now {new!r:.80}"
        for i, (a, b) in enumerate(zip(old, new)):
            if (where := _kept(a, b, f"{path}[{i}]")) is not None:
                return where
        return None
    return None if old == new and type(old) is type(new) else f"{path}: {old!r} became {new!r}"


def _columns_kept(old: str, new: str) -> str | None:
    """Where the CSV `new` lacks a column of `old` or changes a value in it, or None."""
    before, after = list(csv.DictReader(io.StringIO(old))), list(csv.DictReader(io.StringIO(new)))
    if len(before) != len(after):
        return f"{len(before)} rows became {len(after)}"
    for i, (a, b) in enumerate(zip(before, after)):
        for key, value in a.items():
            if b.get(key) != value:
                return f"row {i} column {key}: {value!r} became {b.get(key)!r}"
    return None


def _solver_masked(text: str) -> str:
    return re.sub(r"(\((?:OPTIMAL|FEASIBLE); \d+ solves), [^)]*\)", r"\1, ...)", text)


def _solver_masked(text: str) -> str:
    return re.sub(r"(\((?:OPTIMAL|FEASIBLE); \d+ solves), [^)]*\)", r"\1, ...)", text)


def moved(case: dict, stdout: str) -> str | None:
    """Where `stdout` (what the case's command prints now) does not keep the captured answer, or
    None. Text and CSV must be the same bytes (CSV may gain columns, the Solver line's work figure
    aside); JSON must hold every captured field with the same value (fields added since may be
    present too)."""
    if "--json" in case["argv"]:
        return _kept(json.loads(case["stdout"]), json.loads(stdout))
    if "csv" in case["argv"]:
        return _columns_kept(case["stdout"], stdout)
    return None if _solver_masked(stdout) == _solver_masked(case["stdout"]) else "the text differs"


if __name__ == "__main__":
    root = Path(__file__).resolve().parents[2]
    import os

    os.chdir(root)
    results = [run(argv) for argv in COMMANDS]
    path = Path(__file__).with_name("reference.json")
    text = json.dumps(results, indent=1) + "\n"
    if "--check" in sys.argv[1:]:  # CI (.ci/run): exit 1 if an answer moved (moved()), writing nothing
        golden = json.loads(path.read_text(encoding="utf-8"))
        where = [f"{' '.join(old['argv'])}: {w}" for old, new in zip(golden, results)
                 if (w := "exit code" if old["code"] != new["code"] else moved(old, new["stdout"]))]
        if where or [x["argv"] for x in golden] != COMMANDS:
            sys.exit(f"{path}: {len(where)} reference answer(s) moved: " + "; ".join(where[:5]))
        print(f"{path}: the {len(results)} reference answers are kept", file=sys.stderr)
    else:
        path.write_text(text, encoding="utf-8")
        print(f"wrote {len(results)} outputs to {path}", file=sys.stderr)
