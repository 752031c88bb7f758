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


def _stand_ins(bin_dir: Path) -> None:
    """srun that defers its command (its argv and the environment it would run in, saved under
    $DEFER/<job ID>) so that two jobs' batch shells both run before either job's nodes start, as
    two jobs beginning the same day may; scontrol naming one node; torchrun recording its argv
    under $RECORD/<job ID>."""
    bin_dir.mkdir()
    scripts = {"srun": 'while [[ "$1" == -* ]]; do shift; done\n'
                       'python3 -c \'import json, os, sys; json.dump({"argv": sys.argv[1:], "env": dict(os.environ)}, '
                       'open(os.path.join(os.environ["DEFER"], os.environ["SLURM_JOB_ID"]), "w"))\' "$@"\n',
               "scontrol": "echo node0\n",
               "torchrun": 'printf "%s\\n" "$@" > "$RECORD/$SLURM_JOB_ID"\n'}
    for name, body in scripts.items():
        (bin_dir / name).write_text("#!/bin/bash\n" + body, encoding="utf-8")
        (bin_dir / name).chmod(0o755)


def _heredocs(text: str, env: dict[str, str], cwd: Path) -> dict[str, str]:
    """{file the script writes (its name as the shell expands it): the text it writes}."""
    out = {}
    for target, body in re.findall(r"^cat > ([^\n]+) <<'EOF'\n(.*?)^EOF$", text, re.M | re.S):
        name = subprocess.run(["bash", "-c", f"printf %s {target}"], env=env, cwd=cwd, capture_output=True, text=True,
                              check=True).stdout
        out[name] = body
    return out


def test_concurrent_jobs_launch_their_own_files(tmp_path: Path) -> None:
    # Two torchtitan runs (and two deepspeed runs) beginning the same day with no dependency, their
    # sbatch files submitted from one folder: each batch script wrote apsi_node.sh and apsi_plan.py
    # (ds_config.json) there, so the job written last replaced the other's before its nodes read
    # them: the 70B job launched the 8B job's configuration on the 8B job's node count. Each job's
    # files now carry its job ID.
    import apsi
    from apsi.fleets.export import fleet_exports
    from apsi.fleets.spec import read_fleet

    bin_dir = tmp_path / "bin"
    _stand_ins(bin_dir)
    for framework in ("torchtitan", "deepspeed"):
        data = {"fleet": {"start": "2026-07-01", "horizon_days": 60, "gpus": {"H100": 256}},
                "runs": [{"name": "big 70b", "params": "llama-3.1-70b", "tokens": "30B", "framework": framework,
                          "deadline": "2026-07-04"},
                         {"name": "small", "params": "llama-3.1-8b", "tokens": "20B", "framework": framework,
                          "deadline": "2026-07-04"}]}
        result = apsi.fleet(data, jobs=1)
        assert [r.start for r in result.runs] == [dt.date(2026, 7, 1)] * 2 and not any(r.after for r in result.runs)
        files, refused = fleet_exports(read_fleet(data), result, "slurm")
        assert not refused
        out = tmp_path / framework
        (defer := out / "defer").mkdir(parents=True)
        (record := out / "record").mkdir()
        base = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "DEFER": str(defer),
                "RECORD": str(record), "SLURM_NODEID": "0", "SLURM_JOB_NODELIST": "node0", "DATA_PATH": "/data/x",
                "TOKENIZER": "tok"}
        jobs = {"big_70b.sbatch": "101", "small.sbatch": "102"}
        written = {}
        for file, job in jobs.items():  # both batch shells first
            (out / file).write_text(files[file], encoding="utf-8")
            env = {**base, "SLURM_JOB_ID": job}
            done = subprocess.run(["bash", file], cwd=out, env=env, capture_output=True, text=True, timeout=60)
            assert done.returncode == 0, done.stderr
            written[job] = _heredocs(files[file], env, out)
        for file, job in jobs.items():  # then each job's nodes
            srun = json.loads((defer / job).read_text())
            done = subprocess.run(srun["argv"], cwd=out, env=srun["env"], capture_output=True, text=True, timeout=60)
            assert done.returncode == 0, done.stderr
            argv = (record / job).read_text().splitlines()
            assert int(argv[argv.index("--nnodes") + 1]) == directives(files[file]).nodes
            own = written[job]
            if "--module" in argv:  # the configuration module the job wrote, not the other's
                module = argv[argv.index("--module") + 1] + ".py"
            else:
                module = argv[argv.index("--deepspeed_config") + 1]
            assert module in own and (out / module).read_text() == own[module]
            for name, text in own.items():
                assert (out / name).read_text() == text, (framework, file, name)
        assert not set(written["101"]) & set(written["102"])
