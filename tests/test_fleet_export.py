"""A fleet's slurm export launches its schedule (apsi.fleets.export, apsi.outputs.export.slurm):
each run's sbatch header carries its job name, begin day and time limit, read here by a parser of
sbatch's options, and submit.sh, run against a stand-in sbatch, submits the runs in schedule order
with --dependency=afterok on the job IDs of the runs each comes after."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

FLEET = {"fleet": {"start": "2026-07-01", "horizon_days": 60, "gpus": {"H100": 64}},
         "runs": [{"name": "small one", "params": "llama-3.2-1b", "tokens": "20B"},
                  {"name": "two", "params": "llama-3.2-1b", "tokens": "10B", "after": ["small one"]},
                  {"name": "three", "params": "llama-3.2-1b", "tokens": "10B", "after": ["two"]}]}
"""Under Megatron (the default framework), so every run has a framework to launch."""


def sbatch_options() -> argparse.ArgumentParser:
    """The sbatch options the scripts use, as sbatch's manual gives their forms: --begin as
    YYYY-MM-DD[THH:MM[:SS]], --time as days-hours:minutes:seconds."""
    parser = argparse.ArgumentParser(prog="sbatch", exit_on_error=False)
    parser.add_argument("--job-name", required=True)
    parser.add_argument("--begin", type=dt.datetime.fromisoformat)
    parser.add_argument("--time", required=True)
    parser.add_argument("--nodes", type=int, required=True)
    parser.add_argument("--ntasks-per-node", type=int)
    parser.add_argument("--gpus-per-node", type=int)
    parser.add_argument("--exclusive", action="store_true")
    return parser


def directives(text: str) -> argparse.Namespace:
    """The #SBATCH lines of a script (up to the first command, as sbatch reads them), parsed."""
    words: list[str] = []
    for line in text.splitlines()[1:]:
        if line.startswith("#SBATCH "):
            words += shlex.split(line[len("#SBATCH "):], comments=True)
        elif line and not line.startswith("#"):
            break
    return sbatch_options().parse_args(words)


def _hours(limit: str) -> float:
    days, clock = limit.split("-")
    h, m, s = (int(x) for x in clock.split(":"))
    return int(days) * 24 + h + m / 60 + s / 3600


def test_the_slurm_export_submits_the_schedule_in_order(tmp_path: Path) -> None:
    spec = tmp_path / "fleet.yaml"
    spec.write_text(json.dumps(FLEET), encoding="utf-8")
    out = tmp_path / "out"
    run = subprocess.run([sys.executable, "-m", "apsi", "fleet", str(spec), "--json", "--export", "slurm",
                          "--export-dir", str(out)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    rows = {r["name"]: r for r in json.loads(run.stdout)["runs"]}
    files = {"small one": "small_one.sbatch", "two": "two.sbatch", "three": "three.sbatch"}
    assert sorted(p.name for p in out.iterdir()) == sorted([*files.values(), "submit.sh"])
    for name, file in files.items():
        got = directives((out / file).read_text(encoding="utf-8"))
        assert got.job_name == file.rsplit(".", 1)[0]
        assert got.begin == dt.datetime.fromisoformat(rows[name]["start"])  # its first day, at midnight
        assert re.fullmatch(r"\d+-\d\d:00:00", got.time)
        # At least the run's own days (the slow end of its range, rounded up to the hour).
        assert _hours(got.time) >= rows[name]["run_days"] * 24
        assert got.nodes * got.gpus_per_node == rows[name]["gpus"] and got.exclusive

    # submit.sh against a stand-in sbatch that logs its arguments and prints "id;cluster".
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "sbatch.log"
    fake = bin_dir / "sbatch"
    fake.write_text("#!/bin/bash\n"
                    f'n=$(( $(wc -l < {shlex.quote(str(log))} 2>/dev/null || echo 0) + 101 ))\n'
                    f'printf "%s\\n" "$*" >> {shlex.quote(str(log))}\n'
                    'echo "$n;cluster"\n', encoding="utf-8")
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(["bash", str(out / "submit.sh")], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    calls = [shlex.split(line) for line in log.read_text(encoding="utf-8").splitlines()]
    submitted = [c[-1] for c in calls]
    order = sorted(files, key=lambda n: (rows[n]["start"], list(files).index(n)))
    assert submitted == [files[n] for n in order]
    job = {file: str(101 + k) for k, file in enumerate(submitted)}
    for name, call in zip(order, calls):
        deps = [w for w in call if w.startswith("--dependency=")]
        wanted = [f"--dependency=afterok:{job[files[a]]}" for a in rows[name]["after"]]
        assert deps == wanted and "--parsable" in call


def test_a_run_that_cannot_be_exported_costs_only_itself(tmp_path: Path) -> None:
    # One run under the reference arithmetic stopped the whole export (nothing written, exit 2). It
    # is not exported, saying why; under slurm the run after it is not either (its dependency could
    # not be kept); the others are written and the command exits 1, as for a run left out.
    data = json.loads(json.dumps(FLEET))
    data["runs"][1]["framework"] = "reference"
    data["runs"].append({"name": "alone", "params": "llama-3.2-1b", "tokens": "10B"})
    spec = tmp_path / "fleet.json"
    spec.write_text(json.dumps(data), encoding="utf-8")
    out = tmp_path / "out"
    run = subprocess.run([sys.executable, "-m", "apsi", "fleet", str(spec), "--export", "slurm", "--export-dir",
                          str(out)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 1, run.stderr
    assert sorted(os.listdir(out)) == ["alone.sbatch", "small_one.sbatch", "submit.sh"]
    errors = [line for line in run.stderr.splitlines() if line.startswith("error: ")]
    assert errors == ["error: run 'two' cannot be exported as slurm: a reference-arithmetic plan has no framework "
                      "to launch: plan it under a framework (--framework megatron, framework='megatron') to export "
                      "slurm", "error: run 'three' is not exported: it runs after 'two', which is not"]
    assert "three" not in (out / "submit.sh").read_text() and "alone.sbatch" in (out / "submit.sh").read_text()
    # Nothing to export at all: refused in one line, nothing written.
    for r in data["runs"]:
        r["framework"] = "reference"
    spec.write_text(json.dumps(data), encoding="utf-8")
    none = tmp_path / "none"
    run = subprocess.run([sys.executable, "-m", "apsi", "fleet", str(spec), "--export", "megatron", "--export-dir",
                          str(none)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 2 and run.stdout == "" and not none.exists(), run.stderr
    assert run.stderr.startswith("error: run 'small one' cannot be exported as megatron: ")


def test_an_elastic_run_on_several_segments_is_not_exported_as_one_job() -> None:
    # Its segments change GPUs and pause for an outage (512 H100 until 2026-07-10, none until
    # 07-20); one sbatch file with one --begin and one --time would run through the outage on the
    # first segment's nodes. It is not exported, saying why; the other runs are.
    import apsi
    from apsi.fleets.export import fleet_exports
    from apsi.fleets.spec import read_fleet

    data = {"fleet": {"start": "2026-07-01", "horizon_days": 90,
                      "gpus": {"H100": [{"count": 512, "until": "2026-07-10"}, {"count": 512, "from": "2026-07-20"}]}},
            "runs": [{"name": "big", "params": "13B", "tokens": "4T", "elastic": True, "deadline": "2026-07-31"},
                     {"name": "small", "params": "llama-3.2-1b", "tokens": "10B"}]}
    result = apsi.fleet(data, jobs=1)
    assert len(result.runs[0].segments) == 2
    files, refused = fleet_exports(read_fleet(data), result, "slurm")
    assert sorted(files) == ["small.sbatch", "submit.sh"]
    assert refused == ["run 'big' is not exported: it is elastic, on 2 segments (each its own GPUs and days); export "
                       "each segment's plan with apsi plan --gpus N"]
