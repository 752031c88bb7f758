"""Writes tests/golden/reference.json: the outputs of bare-size commands, to pin them.

Run once against the code whose answers are to be kept (it was run at commit f1818de, before
model architectures were added); tests/test_golden.py then checks that every command still prints
the same answers. Each command runs as the test runs it (reference_argv: the reference arithmetic
asked for by name, now that it is not the default), so that a capture writes what the test reads.
Rerun only when a change is meant to move these answers, and say why in the commit.
"""

from __future__ import annotations

import io
import json
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


if __name__ == "__main__":
    root = Path(__file__).resolve().parents[2]
    import os

    os.chdir(root)
    results = [run(argv) for argv in COMMANDS]
    path = Path(__file__).with_name("reference.json")
    path.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {len(results)} outputs to {path}", file=sys.stderr)
