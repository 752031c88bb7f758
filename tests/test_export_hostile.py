"""Hostile plans through every export format (issue 22, items 3 and 7).

A saved plan's strings are driven with control characters and shell metacharacters (newline,
carriage return, ;, $(...), backticks, quotes, NUL, here-document delimiters), and so are the
words a fresh plan carries from its inputs (a catalog GPU's name, a config.json's folder, a
config's RoPE type), through megatron, megatron-bridge, torchtitan, deepspeed and slurm. Each
export is either refused in one line (ApsiError) or safe: every shell script passes `bash -n`;
bash's own parse of it (`declare -f` of the script wrapped in a function) has the same command
lines as the clean plan's; run with stand-ins for the launchers (torchrun, srun, deepspeed,
scontrol) it calls the same commands with as many arguments as the clean plan's and never the
payload's command; every Python file (the bridge recipe, the torchtitan module, the one slurm
writes) compiles to the clean plan's syntax tree but for its string constants. Then the issue's
own examples at the CLI: hand-edited plans refused with one line and exit 2.
"""

from __future__ import annotations

import ast
import functools
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from apsi import ApsiError, evaluate, export_config
from apsi.outputs.export import FORMATS, FRAMEWORK_OF, read_plan
from apsi.outputs.export.checks import comment_text, py_string

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="no bash to parse and run the scripts with")

MARK = "apsi_injected"
"""The payloads' command: a stand-in on PATH records any call to it (no real command is named)."""
PAYLOADS = (
    f"\n{MARK}\n#", f"H100\n{MARK} INJECTED\n#", f"\r{MARK}", f"$({MARK})", f"`{MARK}`", f"; {MARK};",
    f"'; {MARK}; '", f'"; {MARK}; "', f"\\\n{MARK}", "\x00", f"x\nEOF\n{MARK}\n", f'"""; {MARK}() #',
    f'\\"""\n{MARK}()\n"""', f"\u2028{MARK}", f"\x1b[2J{MARK}", f"\x85{MARK}", f"&& {MARK} ||", f"| {MARK}",
    f"$IFS{MARK}", f"${{{MARK}}}", f"x' \"$({MARK})\" '",
)
"""The issue's example (a newline starting a line of its own) and its kin, one per way out."""
PARTS = ("\n", "\r", "\x00", "\x7f", "\x9b", "\u2028", ";", "$(", ")", "`", "'", '"', '"""', "\\", "#", " ", "|",
         "&", "EOF", "$", "{", "}", MARK, "H100")
"""What hypothesis composes payloads of: metacharacters, controls, the delimiter, the command."""
HOSTILE = st.one_of(st.sampled_from(PAYLOADS), st.lists(st.sampled_from(PARTS), min_size=1, max_size=8).map("".join))

CARRIED = ("gpu", "model.name", "model.origin", "model.family", "model.architecture.rope_scaling.type",
           "layout.recompute_modules.0", "layout.sharding", "serving.gpu", "framework", "precision", "optimizer",
           "framework_knobs.dispatcher")
"""The saved plan's strings the exports read (the rest are drawn from every string of the plan)."""

def _profile(examples: int) -> settings:
    """Derandomized (the same examples on every run) and bounded: the file runs in about 20 s."""
    return settings(max_examples=examples, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

STUBS = {
    "torchrun": "", "deepspeed": "",
    "scontrol": 'echo node0',
    # srun runs its command (after its options) as node 0, as on the first node.
    "srun": 'while [ "${1#--}" != "$1" ]; do shift; done; SLURM_NODEID=0 exec "$@"',
    MARK: 'touch "$APSI_MARK"',
}
"""Stand-ins for the commands the scripts launch: each records its name and argument count."""


@functools.lru_cache(maxsize=None)
def _plans() -> dict[str, object]:
    """One small plan per framework (Llama 3.1 8B, a preset, so every format has a model; 2 x 2
    x 4 on 16 GPUs, two nodes; Megatron with selective recomputation so that it writes modules)."""
    base = dict(tokens="1T", tp=2, pp=2, dp=4)
    return {"megatron": evaluate("llama-3.1-8b", framework="megatron", recompute="selective", **base),
            "torchtitan": evaluate("llama-3.1-8b", framework="torchtitan", **base),
            "deepspeed": evaluate("llama-3.1-8b", framework="deepspeed", **base)}


def _formats(framework: str) -> list[str]:
    return [f for f in FORMATS if FRAMEWORK_OF[f] in (framework, None)]


def _paths(value, path=()):
    """Every string leaf of a dumped plan, as a path of keys and indices."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, (*path, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _paths(item, (*path, i))
    elif isinstance(value, str):
        yield path


def _set(document: dict, path: tuple, value: str) -> None:
    node = document
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value


def _one_line(err: ApsiError) -> None:
    message = str(err)
    assert message and message.isprintable(), f"the refusal is not one printable line: {message!r}"


def _bash(script: str, *args: str, cwd: str | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", *args], input=script, capture_output=True, text=True, timeout=20, cwd=cwd, env=env)


def _command_lines(script: str) -> list[str]:
    """The script as bash parses it: wrapped in a function (never called), printed back by
    `declare -f`, which drops comments and puts each command on a line; each line's first word."""
    run = _bash(f"apsi_script() {{\n{script}\n}}\ndeclare -f apsi_script\n")
    assert run.returncode == 0, run.stderr
    return [line.split()[0] if line.split() else "" for line in run.stdout.splitlines()]


def _run(script: str) -> tuple[list[str], dict[str, str], bool]:
    """Run `script` in a fresh folder with the stand-ins first on PATH: the commands called (name
    and argument count, in order), the files it wrote, and whether the payload's command ran."""
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        bin_dir, work = root / "bin", root / "work"
        bin_dir.mkdir()
        work.mkdir()
        log, mark = root / "calls.log", root / "injected"
        for name, body in STUBS.items():
            stub = bin_dir / name
            stub.write_text(f'#!/bin/bash\necho "{name} $#" >> "$APSI_LOG"\n{body}\n')
            stub.chmod(0o755)
        (work / "hostfile").write_text("".join(f"host{i} slots=8\n" for i in range(64)))
        env = {"PATH": f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}", "HOME": folder, "APSI_LOG": str(log),
               "APSI_MARK": str(mark), "DATA_PATH": "data", "TOKENIZER": "tok", "HOSTFILE": "hostfile",
               "SLURM_JOB_NODELIST": "node[0-1]", "SLURM_JOB_ID": "4242", "LC_ALL": "C"}
        run = _bash(script, cwd=str(work), env=env)
        assert run.returncode == 0, f"the script failed: {run.stderr}"
        calls = log.read_text().splitlines() if log.exists() else []
        files = {p.name: p.read_text() for p in work.iterdir() if p.name != "hostfile"}
        return calls, files, mark.exists()


def _tree(text: str) -> str:
    """A Python file's syntax tree with every string constant blanked: its code, not its words."""
    tree = ast.parse(text)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            node.value = ""
    return ast.dump(tree)


def _clean(plan, fmt: str) -> tuple | None:
    """The clean plan's export in the terms _check compares, or None where it is refused."""
    if plan is None:
        return None
    try:
        text = export_config(plan, fmt)
    except ApsiError:
        return None
    return _shape(fmt, text)


@functools.lru_cache(maxsize=256)
def _shape(fmt: str, text: str) -> tuple:
    if fmt in ("megatron-bridge", "torchtitan"):
        compile(text, "export.py", "exec")
        return (_tree(text),)
    assert _bash(text, "-n").returncode == 0, "bash -n fails"
    calls, files, injected = _run(text)
    assert not injected, "the payload's command ran"
    nested = tuple(_command_lines(files[name]) for name in sorted(files) if name.endswith(".sh"))
    for name in sorted(files):
        if name.endswith(".sh"):
            assert _bash(files[name], "-n").returncode == 0, f"bash -n fails on {name}"
    python = tuple(_tree(files[name]) for name in sorted(files) if name.endswith(".py"))
    data = tuple(json.loads(files[name]) for name in sorted(files) if name.endswith(".json"))
    return _command_lines(text), calls, nested, python, data


def _check(plan, clean, framework: str) -> None:
    """Every format of `plan`'s framework: refused in one line, or shaped as the export of
    `clean`, the same plan with a plain word where `plan` has the payload (the same command
    lines, launcher calls, nested scripts' lines and Python code)."""
    for fmt in _formats(framework):
        try:
            text = export_config(plan, fmt)
        except ApsiError as err:
            _one_line(err)
            event(f"{fmt}: refused")
            continue
        event(f"{fmt}: exported")
        for line in text.splitlines():  # no line the payload started (a comment stays one)
            assert not line.lstrip().startswith(MARK), f"{fmt}: the payload is a line of its own: {line!r}"
        got, want = _shape(fmt, text), _clean(clean, fmt)
        if want is None:
            continue  # the plain word is refused where the payload is not: nothing to compare
        if fmt in ("megatron-bridge", "torchtitan"):
            assert got == want, f"{fmt}: the Python code differs from the clean plan's"
            continue
        lines, calls, nested, python, data = got
        assert (lines, calls, nested, python) == want[:4], f"{fmt}: the commands differ from the clean plan's"
        assert [sorted(d) for d in data] == [sorted(d) for d in want[4]]


@_profile(120)  # three in four are refused by read_plan, a control character in them
@given(framework=st.sampled_from(["megatron", "torchtitan", "deepspeed"]), data=st.data(), payload=HOSTILE,
       prefix=st.sampled_from(["", "H100", "llama-3.1-8b"]))
def test_a_hostile_saved_plan_is_refused_or_exported_safely(framework: str, data, payload: str, prefix: str) -> None:
    plan = _plans()[framework]
    document = json.loads(plan.model_dump_json())
    every = sorted(_paths(document), key=str)
    carried = [p for p in every if ".".join(map(str, p)) in CARRIED]
    path = data.draw(st.one_of(st.sampled_from(carried), st.sampled_from(every)) if carried
                     else st.sampled_from(every))
    _set(document, path, prefix + payload)
    try:
        hostile = read_plan(json.dumps(document))
    except ApsiError as err:
        _one_line(err)
        event("refused by read_plan")
        return
    assert (prefix + payload).isprintable(), f"{path}: a string that is not printable was read back"
    _set(document, path, prefix + "plain")
    try:
        clean = read_plan(json.dumps(document))
    except ApsiError:
        clean = None
    _check(hostile, clean, framework)


def _with(plan, field: str, value: str):
    """`plan` with one carried word replaced as a fresh plan's inputs would give it (no check: a
    catalog's GPU name, a config.json's folder as the model's origin, a config's RoPE type, a
    recomputed module), to test the exports' own quoting and escaping."""
    m = plan.model
    a = m.architecture
    update = {
        "gpu": lambda: {"gpu": value},
        "model.name": lambda: {"model": m.model_copy(update={"name": value})},
        "config folder": lambda: {"model": m.model_copy(update={"source": "config", "name": None,
                                                                "origin": f"/tmp/{value}/config.json"})},
        "rope type": lambda: {"model": m.model_copy(update={"architecture": a.model_copy(update={
            "rope_scaling": a.rope_scaling.model_copy(update={"type": value})})})},
        "recompute module": lambda: {"layout": plan.layout.model_copy(update={"recompute_modules": [value]})},
    }[field]()
    return plan.model_copy(update=update)


@_profile(50)
@given(framework=st.sampled_from(["megatron", "torchtitan", "deepspeed"]),
       field=st.sampled_from(["gpu", "model.name", "config folder", "rope type", "recompute module"]),
       payload=HOSTILE)
def test_hostile_words_of_a_fresh_plan_are_quoted_or_refused(framework: str, field: str, payload: str) -> None:
    plan = _plans()[framework]
    _check(_with(plan, field, payload), _with(plan, field, "plain"), framework)


CONFIG_FIELDS = ("folder", "model_type", "hidden_act", "rope_type", "architectures", "gpu name", "gpu description")
"""The words a config.json (and the folder it is in) and a catalog give a fresh plan."""


def _inputs(folder: Path, field: str, value: str) -> tuple[Path, Path, str]:
    """Llama 3.1 70B's config.json and a catalog of one GPU (H100's figures), with `value` as
    `field`; the config's path, the catalog's and the GPU's name."""
    import yaml

    from apsi.catalog import find_gpu

    config = json.loads((Path(__file__).parent / "configs" / "llama-3.1-70b.json").read_text())
    if field == "rope_type":
        config["rope_scaling"]["rope_type"] = value
    elif field == "architectures":
        config["architectures"] = [value]
    elif field in ("model_type", "hidden_act"):
        config[field] = value
    # A file name holds no NUL and no slash.
    where = folder / ("m" + value.replace("\x00", "").replace("/", "") if field == "folder" else "model")
    where.mkdir()
    (where / "config.json").write_text(json.dumps(config))
    gpu = {k: v for k, v in find_gpu("H100").model_dump(exclude_none=True).items() if k != "name"}
    name = value if field == "gpu name" else "H100X"
    if field == "gpu description":
        gpu["description"] = value
    catalog = folder / "catalog.yaml"
    catalog.write_text(yaml.safe_dump({"gpus": {name: gpu}}))
    return where / "config.json", catalog, name


def _config_plan(framework: str, field: str, value: str):
    """The plan (tp 8 x pp 2 on 16 GPUs) of those inputs, or None where planning refuses them in one line."""
    with tempfile.TemporaryDirectory() as folder:
        config, catalog, gpu = _inputs(Path(folder), field, value)
        try:
            return evaluate(str(config), framework=framework, tokens="1T", tp=8, pp=2, dp=1, gpu=gpu,
                            catalog=str(catalog))
        except ApsiError as err:
            # Refused in one line (a catalog refuses control characters in its names itself).
            _one_line(err)
            return None


@_profile(40)
@given(framework=st.sampled_from(["megatron", "deepspeed"]), field=st.sampled_from(CONFIG_FIELDS), payload=HOSTILE)
def test_hostile_config_and_catalog_words_are_quoted_or_refused(framework: str, field: str, payload: str) -> None:
    # The fresh plans themselves, from hostile files: refused in one line, or exported safely.
    hostile = _config_plan(framework, field, payload)
    if hostile is None:
        event("refused by planning")
        return
    _check(hostile, _config_plan(framework, field, "plain"), framework)


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(text=st.text(max_size=40))
def test_the_text_helpers_keep_a_word_on_one_line(text: str) -> None:
    # py_string is a Python literal of the text itself; comment_text holds no character that is
    # not printable (so no line break of any kind), and printable text is left as it is.
    assert ast.literal_eval(py_string(text)) == text
    assert py_string(text).isprintable() and comment_text(text).isprintable()
    assert len(f"# {comment_text(text)}".splitlines()) == 1
    if text.isprintable():
        assert comment_text(text) == text


def test_the_issues_example_is_refused_at_the_cli(apsi, tmp_path) -> None:
    # `"gpu": "H100\necho INJECTED\n#"` made line 4 of the sbatch script run `echo INJECTED`.
    document = json.loads(_plans()["megatron"].model_dump_json())
    document["gpu"] = "H100\necho INJECTED\n#"
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(document))
    for fmt in ("slurm", "megatron"):
        run = apsi("export", str(path), "--to", fmt)
        assert run.code == 2 and run.out == "", run.why()
        assert run.err.startswith(f"error: saved plan {path}: not a valid apsi plan: gpu holds the character \\n at "
                                  "position 5")
        assert len(run.err.splitlines()) == 1
    run = apsi("compare", str(path), str(path))
    # compare reads several: the line names the file.
    assert run.code == 2 and run.err.startswith(f"error: saved plan {path}: not a valid apsi plan: gpu"), run.why()


HAND_EDITS = {
    "a negative degree": (lambda d: d["layout"].update(tp=-2), "layout.tp is -2: it is a whole number from 1 to 1,000,000"),
    "degrees not the GPUs": (lambda d: d["layout"].update(dp=8),
                             "tp 2 x pp 2 x cp 1 x dp 8 = 32 GPUs, but gpus is 16: a plan's degrees multiply to its "
                             "GPUs"),
    "an unknown framework": (lambda d: d.update(framework="megatronn"),
                             "framework 'megatronn' is not one of apsi's: did you mean megatron?"),
    "stages not the layers": (lambda d: d["layout"].update(stage_layers=[16, 15], virtual_stage_layers=[16, 15]),
                              "layout.virtual_stage_layers [16, 15] is not one of Megatron's splits of 32 layers"),
    "micro-batches not the batch": (lambda d: d["layout"].update(micro_batches_per_replica=3.0),
                                    "layout.micro_batches_per_replica 3 is not batch_sequences / "
                                    "(micro_batch_sequences x dp)"),
    "no micro-batch": (lambda d: d["layout"].update(micro_batch_sequences=0, micro_batch=0),
                       "layout.micro_batch_sequences is 0"),
    "zero nodes": (lambda d: d.update(nodes=0), "nodes is 0"),
    "a degree of 40 digits": (lambda d: d["layout"].update(dp=10**40),
                              "layout.dp is a number of 41 digits: it is a whole number from 1 to 1,000,000"),
    "a module Megatron lacks": (lambda d: d["layout"].update(recompute_modules=["$(reboot)"]),
                                "layout.recompute_modules holds '$(reboot)': valid: core_attn"),
    "a NUL in the model's name": (lambda d: d["model"].update(name="Llama\x00"),
                                  "model.name holds the character \\x00 at position 6"),
    "a tp the heads refuse": (lambda d: (d["layout"].update(tp=3, dp=4), d.update(gpus=24, nodes=3)),
                              "its layout breaks Megatron's rules: tp 3 does not divide the 32 attention heads"),
    "a setting Megatron lacks": (lambda d: d["framework_knobs"].update(fsdp=True),
                                 "framework_knobs.fsdp is not a Megatron setting"),
    "a figure that is not a number": (lambda d: d.update(days=float("inf")), "days is inf"),
}
"""Hand edits of a saved Megatron plan (tp 2 x pp 2 x dp 4 on 16 GPUs, 8 + 8 layers) and the
start of the one line each is refused with (after "not a valid apsi plan: ")."""


@pytest.mark.parametrize("edit", list(HAND_EDITS))
def test_a_hand_edited_plan_is_refused_in_one_line(edit: str, apsi, tmp_path) -> None:
    change, message = HAND_EDITS[edit]
    document = json.loads(_plans()["megatron"].model_dump_json())
    change(document)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(document))
    run = apsi("export", str(path), "--to", "slurm")
    assert run.code == 2 and run.out == "", run.why()
    assert run.err.startswith(f"error: saved plan {path}: not a valid apsi plan: " + message), run.err
    assert len(run.err.splitlines()) == 1


def test_fresh_plans_read_back_unchanged() -> None:
    # The rules are a fresh plan's: every one of these reads back as it was written.
    for plan in _plans().values():
        assert read_plan(plan.model_dump_json()) == plan


def test_a_catalog_gpu_and_a_config_folder_with_a_newline(apsi, tmp_path) -> None:
    # Fresh plans whose words come from the inputs: a user catalog's GPU named with a newline, a
    # config.json in a folder whose name holds one. Each is refused in one line or exported with
    # the name escaped in the comments, the script still the clean plan's commands.
    import yaml

    from apsi.catalog import find_gpu

    name = f"H100X\n{MARK}\n#"
    gpu = find_gpu("H100").model_dump(exclude_none=True)
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text(yaml.safe_dump({"gpus": {name: {k: v for k, v in gpu.items() if k != "name"}}}))
    folder = tmp_path / f"x\n{MARK}"
    folder.mkdir()
    source = Path(__file__).parent / "configs" / "llama-3.1-70b.json"
    (folder / "config.json").write_text(source.read_text())
    common = ("--tokens", "1T", "--tp", "8", "--pp", "1", "--dp", "2", "--framework", "megatron")
    for args in (("llama-3.1-8b", "--catalog", str(catalog), "--gpu", name, *common),
                 (str(folder / "config.json"), *common)):
        run = apsi("plan", *args, "--export", "slurm")
        if run.code == 2:
            assert len(run.err.splitlines()) == 1, run.why()
            continue
        assert run.code == 0, run.why()
        assert "\\n" + MARK in run.out  # escaped in the header's comment
        assert not any(line.startswith(MARK) for line in run.out.splitlines())
        assert _bash(run.out, "-n").returncode == 0
        calls, _, injected = _run(run.out)
        assert not injected and [c.split()[0] for c in calls] == ["scontrol", "srun", "torchrun"]


def test_another_commands_json_is_named_for_what_it_is(apsi, tmp_path) -> None:
    # A serving plan, a fleet plan or a frontier given to export or compare was refused with the
    # schema's first complaint ("the document: gpu: Field required"); they are named now, and an
    # engine given as an export format points at apsi serve.
    serving = tmp_path / "serve.json"
    serving.write_text(json.dumps({"groups": [], "engine": "vllm", "gpus": 1}))
    fleet = tmp_path / "fleet.json"
    fleet.write_text(json.dumps({"runs": [], "horizon_days": 30}))
    front = tmp_path / "frontier.json"
    front.write_text(json.dumps([{"gpus": 8, "nodes": 1, "days": 1.5, "layout": {}}]))
    for path, what in ((serving, "a serving plan (apsi serve --json)"), (fleet, "a fleet plan (apsi fleet --json)"),
                       (front, "a frontier (apsi frontier --json)")):
        run = apsi("export", str(path), "--to", "megatron")
        assert run.code == 2 and f"saved plan {path}: not an apsi plan (the JSON of `apsi plan --json`): it is {what}" \
            in run.err and len(run.err.splitlines()) == 1, run.why()
    run = apsi("export", str(serving), "--to", "vllm")
    assert run.code == 2 and "export format 'vllm' is a serving engine's: apsi serve ... --export vllm writes it" \
        in run.err, run.why()
    # compare said a serving plan "has no training launch to export", export's words.
    run = apsi("compare", str(serving), str(serving))
    assert run.code == 2 and run.err.strip().endswith(
        "it is a serving plan (apsi serve --json): apsi compare weighs training plans (apsi plan --json)"), run.why()
    # apsi run's JSON is its runs, a training run's row its plan with its name first: the list is
    # named, and one row exports and compares as the plan does (its name was refused as an extra key).
    scenario = tmp_path / "runs.yaml"
    scenario.write_text("runs:\n  - {name: a, params: 7B, tokens: 100B}\n")
    runs = tmp_path / "runs.json"
    runs.write_text(apsi("run", str(scenario), "--format", "json").out)
    run = apsi("export", str(runs), "--to", "megatron")
    assert run.code == 2 and "it is a scenario file's runs (apsi run --format json): save one of its rows" in run.err
    row = tmp_path / "row.json"
    row.write_text(json.dumps(json.loads(runs.read_text())[0]))
    alone = tmp_path / "plan.json"
    alone.write_text(apsi("plan", "7B", "--tokens", "100B", "--json").out)
    exported = apsi("export", str(row), "--to", "megatron")
    assert exported.code == 0 and exported.out == apsi("export", str(alone), "--to", "megatron").out
    assert apsi("compare", str(row), str(alone)).code == 0


@pytest.mark.parametrize("tp", [True, "2", 2.0])
def test_a_degree_hand_edited_to_another_type_is_refused(tp, apsi, tmp_path) -> None:
    # "tp": true, "2" or 2.0 read as the whole number 1 or 2 (pydantic's lax mode) and exported;
    # plan(tp=True) is refused. A saved plan is read strictly: its degrees are JSON integers.
    document = json.loads(_plans()["megatron"].model_dump_json())
    document["layout"]["tp"] = tp
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(document))
    run = apsi("export", str(path), "--to", "megatron")
    assert run.code == 2 and "layout.tp: Input should be a valid integer" in run.err, run.why()


def test_a_job_that_is_not_a_slurm_job_is_refused_in_one_line() -> None:
    # export_config's `job` (slurm only) took any object: job="myjob" raised AttributeError from
    # inside the slurm writer, and any job with megatron a TypeError (its render() takes none).
    import datetime as dt

    from apsi import ApsiError, export_config, plan
    from apsi.outputs.export.slurm import Job

    p = plan("llama-3.1-8b", tokens="100B")
    shape = r"^job must be an apsi\.outputs\.export\.slurm\.Job\(name, begin, days\): "
    for job in ("myjob", 5, Job("a b", dt.date(2026, 7, 1), 3.0), Job("a", "2026-07-01", 3.0), Job("a", dt.date(2026, 7, 1), 0)):
        with pytest.raises(ApsiError, match=shape):
            export_config(p, "slurm", job=job)
    with pytest.raises(ApsiError, match=r"^job places a run in a fleet's schedule, which only the slurm export "
                                        r"writes; leave job out for megatron$"):
        export_config(p, "megatron", job=Job("a", dt.date(2026, 7, 1), 3.0))
    assert "#SBATCH --begin=2026-07-01" in export_config(p, "slurm", job=Job("a", dt.date(2026, 7, 1), 3.0))
