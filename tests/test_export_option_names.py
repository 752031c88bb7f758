"""No export starts a process with an option that came from a name or a path (issue 38).

Names that read as options (--help, -rf, --trust-remote-code, --config=x, -, --) are given where a
user's words reach an export: a config.json's folder and a catalog GPU's name for the training
formats (megatron, megatron-bridge, torchtitan, deepspeed, slurm), the model folder for the
engines' launch scripts (vllm, sglang, trtllm), the run names of a fleet. Each shell script is run
with stand-ins for every program it launches (torchrun, srun, deepspeed, scontrol, vllm, python3,
trtllm-serve), which record their whole argument lists. Each launch must call the same programs
with the same arguments as the export of the same plan with a plain name, but for a model path,
which is the name made a path (./--help); no argument is the name or starts with it; a file
written for a run has a name that starts with neither '-' nor '.'. The Python exports
(megatron-bridge, torchtitan) start no process: their names are string constants
(tests/test_export_hostile.py compiles them).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml

from apsi import evaluate, export_config, serve
from apsi.catalog import find_gpu
from apsi.outputs.export import FORMATS, FRAMEWORK_OF
from apsi.outputs.export.engines import EXPORTS, launch

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="no bash to run the scripts with")

NAMES = ("--help", "-rf", "--trust-remote-code", "--config=x", "-", "--", "-e")
"""Names an option parser would take for options (or for the end of the options)."""
PLAIN = "plain"
PROGRAMS = ("torchrun", "srun", "deepspeed", "scontrol", "vllm", "python3", "trtllm-serve")
"""Every program the exports launch (apsi.outputs.export's launchers, apsi.outputs.export.engines.PROGRAM)."""
SHELL = ("megatron", "deepspeed", "slurm")
"""The training formats that are shell scripts (the others are Python modules)."""


def _calls(script: str, cwd: Path) -> list[list[str]]:
    """Run `script` in `cwd` with a recording stand-in for each of PROGRAMS first on PATH: every
    call, as [program, argument, ...]. srun runs the command after its options (as on node 0)."""
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        log = root / "calls"
        for name in PROGRAMS:
            stub = root / name
            tail = 'while [ "${1#--}" != "$1" ]; do shift; done; SLURM_NODEID=0 exec "$@"' if name == "srun" else (
                "echo node0" if name == "scontrol" else "")
            stub.write_text(f"#!/bin/bash\nprintf '%s\\0' {name} \"$@\" >> \"$APSI_LOG\"; printf '\\n' >> \"$APSI_LOG\"\n"
                            f"{tail}\n")
            stub.chmod(0o755)
        env = {"PATH": f"{root}:{os.environ.get('PATH', '/usr/bin:/bin')}", "HOME": folder, "APSI_LOG": str(log),
               "DATA_PATH": "data", "TOKENIZER": "tok", "HOSTFILE": "hostfile", "SLURM_JOB_NODELIST": "node[0-1]",
               "SLURM_JOB_ID": "4242", "NODE_RANK": "0", "DIST_INIT_ADDR": "node0:5000", "LC_ALL": "C"}
        (cwd / "hostfile").write_text("".join(f"host{i} slots=8\n" for i in range(64)))
        run = subprocess.run(["bash", "-c", script, "launch"], cwd=cwd, env=env, capture_output=True, text=True,
                             timeout=30)
        assert run.returncode == 0, f"the script failed: {run.stderr}"
        text = log.read_text() if log.exists() else ""
    return [line.split("\0")[:-1] for line in text.split("\0\n") if line]


def _no_option_from(name: str, calls: list[list[str]]) -> None:
    """No argument is `name` or starts with it. Only for names a launcher's own options cannot be
    (-, -- and -e can: for them the comparison with the plain name's calls is the check)."""
    if len(name) <= 2:
        return
    for call in calls:
        for word in call[1:]:
            assert not word.startswith(name), f"{call[0]} was given {word!r}, from the name {name!r}"


# -- training ----------------------------------------------------------------------------------------


def _training_plan(folder: Path, framework: str, where: str, name: str):
    """Llama 3.1 70B from a config.json in a folder, on a catalog's one GPU (H100's figures), with
    `name` as the folder's name or the GPU's (tp 8 x pp 2 on 16 GPUs)."""
    config = (Path(__file__).parent / "configs" / "llama-3.1-70b.json").read_text()
    model = folder / (name if where == "folder" else "model")
    model.mkdir()
    (model / "config.json").write_text(config)
    gpu = {k: v for k, v in find_gpu("H100").model_dump(exclude_none=True).items() if k != "name"}
    gpu_name = name if where == "gpu" else "H100X"
    (folder / "catalog.yaml").write_text(yaml.safe_dump({"gpus": {gpu_name: gpu}}))
    return evaluate(str(model / "config.json"), framework=framework, tokens="1T", tp=8, pp=2, dp=1, gpu=gpu_name,
                    catalog=str(folder / "catalog.yaml"))


@pytest.mark.parametrize("fmt", SHELL)
@pytest.mark.parametrize("where", ["folder", "gpu"])
@pytest.mark.parametrize("name", NAMES)
def test_a_training_launch_takes_no_option_from_a_name(fmt: str, where: str, name: str, tmp_path: Path) -> None:
    framework = FRAMEWORK_OF[fmt] or "megatron"
    (tmp_path / "hostile").mkdir()
    (tmp_path / "plain").mkdir()
    hostile = export_config(_training_plan(tmp_path / "hostile", framework, where, name), fmt)
    plain = export_config(_training_plan(tmp_path / "plain", framework, where, PLAIN), fmt)
    calls = _calls(hostile, tmp_path)
    assert calls, "the script launched nothing"
    assert calls == _calls(plain, tmp_path)  # the same programs with the same arguments
    _no_option_from(name, calls)


def test_the_training_formats_are_the_shell_and_python_ones() -> None:
    # SHELL and the two Python modules cover apsi.outputs.export.FORMATS: a new format is added to one.
    assert sorted(FORMATS) == sorted((*SHELL, "megatron-bridge", "torchtitan"))


# -- serving -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("engine", EXPORTS)
@pytest.mark.parametrize("name", NAMES)
def test_an_engine_launch_takes_the_model_folder_as_a_path(engine: str, name: str, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    config = (Path(__file__).parent / "configs" / "llama-3.1-70b.json").read_text()
    for folder in (name, PLAIN):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "config.json").write_text(config)
    monkeypatch.chdir(tmp_path)
    hostile, plain = (serve(folder, engine=engine, gpu="H100") for folder in (name, PLAIN))
    calls = _calls(launch(hostile, engine), tmp_path)
    assert calls, "the script launched nothing"
    # The same call with ./NAME where the plain plan has ./plain: the folder as a path, never bare.
    want = [[f"./{name}" if word == f"./{PLAIN}" else word for word in call]
            for call in _calls(launch(plain, engine), tmp_path)]
    assert calls == want
    _no_option_from(name, calls)


# -- fleets ------------------------------------------------------------------------------------------


def _fleet_files(name: str) -> dict[str, str]:
    """The megatron exports of a one-run fleet (Llama 3.1 8B on up to 64 H100) whose run is `name`."""
    import apsi
    from apsi.fleets.export import fleet_exports
    from apsi.fleets.spec import read_fleet

    data = {"fleet": {"start": "2026-07-01", "horizon_days": 120, "gpus": {"H100": 64}},
            "runs": [{"name": name, "params": "llama-3.1-8b", "tokens": "100B"}]}
    result = apsi.fleet(json.loads(json.dumps(data)), jobs=1)
    files, refused = fleet_exports(read_fleet(data), result, "megatron")
    assert not refused
    return files


@pytest.mark.parametrize("name", NAMES)
def test_a_fleet_run_named_like_an_option_launches_as_a_plain_one(name: str, tmp_path: Path) -> None:
    files, plain = _fleet_files(name), _fleet_files(PLAIN)
    assert len(files) == 1 and len(plain) == 1
    (file_name, script), (_, clean) = next(iter(files.items())), next(iter(plain.items()))
    assert not file_name.startswith(("-", ".")), file_name
    calls = _calls(script, tmp_path)
    assert calls and calls == _calls(clean, tmp_path)
    _no_option_from(name, calls)
