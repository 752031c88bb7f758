"""A new objective, framework, serving engine and export target are each one declaration plus
their own logic (docs/architecture.md, "Adding a name"): the probe below adds one of each to a
scratch copy of apsi, touching only the files docs/architecture.md names, and checks that every
list derived from the declaration (the CLI's choices and help, the question's checks, the walk,
the registries) takes it up, and that what has no logic for it refuses it in one line.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

PROBE_CHECKS = r"""
import json, subprocess, sys
import apsi
from apsi import plan, serve
from apsi.errors import ApsiError
from apsi.outputs.export import TARGETS, export_config
out = {"where": apsi.__file__}
p = plan("7B", tokens="20B", gpu="H100", objective="probe")
out["objective"] = [p.gpus, p.objective]
try:
    plan("7B", tokens="20B", gpu="H100", objective="probe", framework="reference")
except ApsiError as err:
    out["objective_reference"] = str(err)
q = plan("7B", tokens="20B", gpu="H100", framework="probe")
out["framework"] = [q.framework, q.gpus]
out["export"] = export_config(plan("7B", tokens="20B", gpu="H100"), "probe")
out["extension"] = TARGETS["probe"].extension
s = serve("llama-3.1-8b", engine="probe", rate=1)
out["engine"] = [s.engine, s.gpus]
def helps(*argv):
    done = subprocess.run([sys.executable, "-m", "apsi", *argv, "--help"], capture_output=True, text=True,
                          env={"COLUMNS": "300", "NO_COLOR": "1", "PYTHONPATH": sys.path[0]})
    return done.stdout
out["plan_help"] = helps("plan")
out["serve_help"] = helps("serve")
print(json.dumps(out))
"""


def _add(path: Path, after: str, text: str) -> None:
    """Insert `text` right after the first `after` in the file (the probe's one declaration)."""
    source = path.read_text(encoding="utf-8")
    assert after in source, (path, after)
    path.write_text(source.replace(after, after + text, 1), encoding="utf-8")


@pytest.mark.slow
def test_a_new_objective_framework_engine_and_export_target_are_one_declaration_each(tmp_path: Path) -> None:
    tree = tmp_path / "apsi"
    shutil.copytree(ROOT / "apsi", tree, ignore=shutil.ignore_patterns("__pycache__"))
    # An objective: its declaration, and the walk it is decided by (the frameworks' own logic).
    _add(tree / "inputs" / "objectives.py", '"energy": "the least energy meeting the target",\n',
         '    "probe": "the fewest GPUs meeting the target, by another name",\n')
    _add(tree / "training" / "frameworks" / "objectives.py", "_watts),\n",
         '    "probe": Objective("probe", "min_gpus", "the GPUs their duration and memory floors allow them", None),\n')
    # A framework: its module (DeepSpeed's rules under another name) and its declaration.
    text = (tree / "training" / "frameworks" / "deepspeed.py").read_text(encoding="utf-8")
    text = re.sub(r'^NAME = "deepspeed"$', 'NAME = "probe"', text, flags=re.M)
    text = re.sub(r'^TITLE = "DeepSpeed"$', 'TITLE = "Probe"', text, flags=re.M)
    (tree / "training" / "frameworks" / "probe.py").write_text(text, encoding="utf-8")
    _add(tree / "training" / "frameworks" / "__init__.py", 'FRAMEWORKS: tuple[str, ...] = ("megatron", ',
         '"probe", ')
    # A serving engine: its module (vLLM's figures under another name) and its declaration.
    (tree / "serving" / "probe.py").write_text(
        'from apsi.serving.vllm import ENGINE as _VLLM\n\n'
        'ENGINE = _VLLM.model_copy(update={"name": "probe", "title": "Probe"})\n', encoding="utf-8")
    _add(tree / "serving" / "engines.py", 'ENGINES: tuple[str, ...] = ("vllm", ', '"probe", ')
    # An export target: its module and its declaration.
    (tree / "outputs" / "export" / "probe.py").write_text(
        'def render(plan):\n    return f"# probe launch of {plan.gpus} GPUs\\n"\n', encoding="utf-8")
    _add(tree / "outputs" / "export" / "__init__.py", 'TARGETS: dict[str, Target] = {\n',
         '    "probe": Target("probe", None, "txt"),\n')

    done = subprocess.run([sys.executable, "-c", PROBE_CHECKS], capture_output=True, text=True, timeout=600,
                          cwd=tmp_path, env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["where"].startswith(str(tree))
    # The walk decides the new objective as it was declared (the fewest GPUs), and the reference
    # arithmetic, with no program for it, says so in one line.
    assert got["objective"][1] == "probe" and got["objective"][0] == json.loads(
        subprocess.run([sys.executable, "-c", "import json, apsi; print(json.dumps(apsi.plan('7B', tokens='20B', "
                        "gpu='H100').gpus))"], capture_output=True, text=True, cwd=tmp_path,
                       env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"}, timeout=300).stdout)
    assert "objective probe has no model in the reference arithmetic's program" in got["objective_reference"]
    assert got["framework"][0] == "probe" and got["framework"][1] > 0
    assert got["export"].startswith("# probe launch of ")
    assert got["extension"] == "txt"
    assert got["engine"][0] == "probe" and got["engine"][1] > 0
    # The CLI's choices and help come from the declarations.
    assert "[gpus|days|cost|energy|probe]" in got["plan_help"]
    assert "[megatron|probe|torchtitan|deepspeed|reference]" in got["plan_help"]
    assert "launch configuration: probe, megatron, " in " ".join(got["plan_help"].split())
    assert "[vllm|probe|sglang|trtllm]" in got["serve_help"]


def test_the_walk_decides_every_declared_objective() -> None:
    # apsi.inputs.objectives owns the names; the frameworks' walk has one entry for each.
    from apsi.inputs.objectives import OBJECTIVES
    from apsi.training.frameworks.objectives import OBJECTIVES as WALKS

    assert list(WALKS) == list(OBJECTIVES)
