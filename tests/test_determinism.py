"""Determinism: the same input gives byte-identical plans, from the API and from `apsi plan --json`.

Owns the claim that a plan depends on its input only: repeated calls in one process, the CLI's
JSON, and fresh processes with different string-hash seeds all give the same bytes. It does not
test what the plan says (test_scale.py, test_crosscheck.py) nor --jobs (test_scenarios.py).

Nothing is removed before comparing: solver.seconds is CP-SAT's deterministic time, not a wall
time (apsi.model.schema.SolverReport), so it too must repeat exactly. Should it ever become a
wall time again, this test fails and says so through the field that differs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import apsi
from apsi.cli.app import main

# These tests are about the reference arithmetic and its CP-SAT program: plans that name no
# framework are planned under it here (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("reference_default")

# Representative inputs: the reference plan (the reference arithmetic), a dense row of its table, the
# fastest layout on a GPU cap, a target no layout meets (the reference's 2T dense on H100),
# an MoE on B200 in fp8, and a pinned layout with a batch that DP does not divide.
CASES = {
    "reference 1T MoE": ("1T", dict(active="32B", tokens="15T", precision="fp8")),
    "70B dense": ("70B", dict(tokens="1.4T")),
    "fastest on 64": ("70B", dict(tokens="1.4T", gpus=64)),
    "target not met": ("2T", dict(tokens="40T")),
    "2T MoE B200 fp8": ("2T", dict(active="64B", tokens="1.28T", gpu="B200", precision="fp8")),
    "pinned": ("13B", dict(tp=2, recompute="selective", batch="3M", seq=2048, gpu="A100-40")),
    "megatron search": ("deepseek-v3", dict(framework="megatron", tokens="14.8T", precision="fp8", gpu="H100,B200")),
}


def argv(params: str, options: dict) -> list[str]:
    """The `apsi plan` command line for plan(params, **options)."""
    args = ["plan", params]
    for key, value in options.items():
        args += [f"--{key.replace('_', '-')}", str(value)]
    return args + ["--json"]


def first_difference(a: str, b: str) -> str:
    """Where two JSON plans differ, for an assertion message."""
    x, y = json.loads(a), json.loads(b)

    def walk(u, v, path):
        if isinstance(u, dict) and isinstance(v, dict):
            for k in sorted(set(u) | set(v)):
                found = walk(u.get(k), v.get(k), f"{path}.{k}")
                if found:
                    return found
            return None
        return None if u == v else f"{path}: {u!r} != {v!r}"

    return walk(x, y, "plan") or "same values, different bytes"


@pytest.mark.parametrize("name", list(CASES))
def test_repeated_plans_are_byte_identical(name):
    # Expected: the first call's JSON; every later call must repeat it byte for byte.
    params, options = CASES[name]
    first = apsi.plan(params, **options).model_dump_json()
    for _ in range(2):
        again = apsi.plan(params, **options).model_dump_json()
        assert again == first, first_difference(first, again)


@pytest.mark.parametrize("name", list(CASES))
def test_cli_json_is_byte_identical_and_is_the_plan(name, capsys):
    # Expected: Plan.model_dump_json() of the same input (`--json` prints exactly it;
    # the CLI lists levers by default, the API on levers=True), and the same bytes on a second run.
    params, options = CASES[name]
    outputs = []
    for _ in range(2):
        capsys.readouterr()
        code = main(argv(params, options))
        out, err = capsys.readouterr()
        assert code == 0, err
        outputs.append(out)
    assert outputs[0] == outputs[1], first_difference(outputs[0], outputs[1])
    # Levers are solved under the reference arithmetic only; the CLI asks for them there, and for
    # the Why line's what-ifs (explain) under a framework.
    levers = options.get("framework", "reference") == "reference"
    api = apsi.plan(params, **options, **({"levers": True} if levers else {"explain": True})).model_dump_json()
    assert outputs[0].rstrip("\n") == api, first_difference(outputs[0], api)


def test_fresh_processes_with_different_hash_seeds_agree(capsys):
    # Expected: this process's output. String hashing is randomised per process (PYTHONHASHSEED),
    # so anything that iterates a set or dict of names in hash order would show up here. One
    # child process per seed runs every command, to keep start-up cost (OR-Tools import) down.
    commands = [argv(CASES[name][0], {"framework": "reference", **CASES[name][1]})
                for name in ("reference 1T MoE", "fastest on 64")]
    here = []
    for command in commands:
        capsys.readouterr()
        assert main(command) == 0
        here.append(capsys.readouterr().out)
    script = ("import json, sys\nfrom apsi.cli.app import main\n"
              "for command in json.loads(sys.argv[1]):\n    assert main(command) == 0, command\n")
    for seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        done = subprocess.run([sys.executable, "-c", script, json.dumps(commands)],
                              capture_output=True, text=True, env=env, timeout=300)
        assert done.returncode == 0, done.stderr
        assert done.stdout == "".join(here), first_difference(here[0], done.stdout.splitlines()[0])
