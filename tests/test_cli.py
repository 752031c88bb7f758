"""Tests for apsi.cli.app: `apsi plan`, `apsi serve`, `apsi gpus`, `apsi --version`, exit codes, output
that cannot be written (subprocesses writing to /dev/full and to a closed pipe) and --fail-on-miss.

The CLI is a thin shell over apsi.api.plan, so the numbers checked here are the reference plan's
(the reference arithmetic, written out in tests/test_scale.py) and the check is that they
reach the terminal unchanged. Runs go through apsi.cli.app.main in-process (the `apsi` fixture in
conftest.py), which is what the `apsi` console script calls.
"""

from __future__ import annotations

import errno
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from apsi import __version__, plan
from apsi.model.schema import Plan, ServingPlan

REFERENCE = ["plan", "1T", "--active", "32B", "--tokens", "15T", "--precision", "fp8"]


def _comparable(dumped: dict) -> dict:
    """A dumped Plan without what may differ between two solves of the same input: the solver's
    wall time, and the what-if `levers` the CLI may add (solved and tested on their own)."""
    out = {k: v for k, v in dumped.items() if k != "levers"}
    out["solver"] = {k: v for k, v in dumped["solver"].items() if k != "seconds"}
    return out


@pytest.mark.usefixtures("reference_default")  # the reference plan
def test_plan_human_output(apsi) -> None:
    run = apsi(*REFERENCE)
    assert run.code == 0, run.why()
    assert run.err == ""
    lines = run.out.splitlines()
    # The reference arithmetic's summary line: 520 x H100 (65 nodes), TP 8 x PP 1 x DP 65, no recompute,
    # memory per GPU (65.8 GiB: 28.66 states + 37.13 activations, see test_scale.py), 89.3 days.
    assert lines[0] == ("Training plan: 1T params (32B active), 15T tokens: 520 x H100 (65 nodes), "
                        "TP 8 x PP 1 x DP 65, no recomputation, 65.8 GiB/GPU, 89.3 days at 40% MFU")
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^  (\S+)\s+(.*)$", run.out, re.MULTILINE)}
    for label in ("Model", "Data", "Hardware", "Layout", "Memory/GPU", "Duration", "Serving"):
        assert label in rows, f"missing row {label}\n{run.out}"
    assert rows["Model"].startswith("1T parameters, 32B active per token (MoE)")
    # "3,576,279 steps of 4.19M tokens" and "~55,879 GB as 32-bit token ids" (the reference arithmetic).
    assert "3,576,279 steps of 4.19M tokens" in rows["Data"]
    assert "55,879 GiB as 32-bit token ids" in rows["Data"]
    assert rows["Hardware"].startswith("520 x H100 (80.0 GiB, 72.0 usable) in 65 nodes")
    assert rows["Layout"].startswith("TP 8 x PP 1 x DP 65 (tensor x pipeline x data parallel), ZeRO-3/FSDP")
    assert rows["Memory/GPU"].startswith("65.8 GiB of 72.0 usable")
    assert "(of 14,901 in total" in rows["Memory/GPU"]
    assert rows["Duration"].startswith("89.3 days (target 90 days: met)")
    # "931 GB weights in fp8 + KV cache -> 13 x H100" (931.3 GiB = 1e12 bytes).
    assert rows["Serving"] == "931.3 GiB weights in fp8 + 3.1 GiB KV cache -> 13 x H100"


@pytest.mark.usefixtures("reference_default")  # the reference plan
def test_plan_json_is_exactly_the_model_dump(apsi) -> None:
    run = apsi(*REFERENCE, "--json")
    assert run.code == 0, run.why()
    text = run.out.rstrip("\n")
    assert "\n" not in text  # one line: model_dump_json() has no indentation
    # Exactly Plan.model_dump_json(): parsing and dumping again gives the same bytes...
    assert Plan.model_validate_json(text).model_dump_json() == text
    # ...and the same values as the API, up to the solver's wall time.
    printed = json.loads(text)
    direct = json.loads(plan("1T", active="32B", tokens="15T", precision="fp8").model_dump_json())
    assert _comparable(printed) == _comparable(direct)
    # Field names scripts depend on (documented in README.md and apsi/model/schema.py).
    assert (printed["gpus"], printed["nodes"], printed["gpu"]) == (520, 65, "H100")
    assert {k: printed["layout"][k] for k in ("tp", "pp", "dp", "recompute")} == \
        {"tp": 8, "pp": 1, "dp": 65, "recompute": "none"}
    assert printed["memory_per_gpu_gib"] == pytest.approx(65.79, abs=0.01)
    assert printed["days"] == pytest.approx(89.3, abs=0.05)
    assert printed["serving"]["gpus"] == 13
    assert printed["solver"]["status"] == "OPTIMAL"
    assert printed["binding"] == "time"
    assert printed["target_met"] is True


def test_plan_options_forward_to_the_api(apsi) -> None:
    # 70B dense, 1.4T tokens: 208 H100 as TP 8 x DP 26 (the reference arithmetic's table); pinning --tp 4 keeps it.
    run = apsi("plan", "70B", "--tokens", "1.4T", "--tp", "4", "--json")
    assert run.code == 0, run.why()
    printed = json.loads(run.out)
    assert printed["layout"]["tp"] == 4
    direct = json.loads(plan("70B", tokens="1.4T", tp=4).model_dump_json())
    assert _comparable(printed) == _comparable(direct)


def test_plan_gpus_mode(apsi) -> None:
    run = apsi("plan", "70B", "--tokens", "1.4T", "--gpus", "100", "--json")
    assert run.code == 0, run.why()
    printed = json.loads(run.out)
    assert printed["gpus"] <= 100 and printed["target_met"] is False


@pytest.mark.usefixtures("reference_default")  # the reference plan
def test_plan_target_not_met_says_so(apsi) -> None:
    # 2T dense on B200 with a 16M batch: 31,248 GPUs in about 102 days (the reference arithmetic: ~103).
    run = apsi("plan", "2T", "--tokens", "40T", "--gpu", "B200", "--precision", "fp8", "--batch", "16M")
    assert run.code == 0, run.why()
    assert "31,248 x B200" in run.out.splitlines()[0]
    assert re.search(r"^  Duration\s+102\.0 days \(target 90 days: NOT met\)", run.out, re.MULTILINE), run.out


def test_serve(apsi) -> None:
    # The reference arithmetic: 1T in fp8 -> 13 x H100 (931.3 GiB of weights + 3.1 GiB KV cache, 72 GiB usable).
    run = apsi("serve", "1T", "--active", "32B", "--precision", "fp8", "--framework", "reference")
    assert run.code == 0, run.why()
    assert run.out == ("Serving 1T params in fp8: 931.3 GiB weights + 3.1 GiB KV cache (1 x 4,096 tokens) "
                       "= 934.4 GiB -> 13 x H100\n")


def test_serve_json(apsi) -> None:
    run = apsi("serve", "1T", "--active", "32B", "--precision", "fp8", "--json", "--framework", "reference")
    assert run.code == 0, run.why()
    s = ServingPlan.model_validate_json(run.out)
    assert s.model_dump_json() == run.out.rstrip("\n")
    assert (s.gpus, s.gpu) == (13, "H100")


def test_gpus_table(apsi) -> None:
    run = apsi("gpus")
    assert run.code == 0, run.why()
    rows = {line.split()[0]: line.split() for line in run.out.splitlines() if line.strip()}
    for name in ("H100", "H200", "B200", "GB200", "A100", "A100-40", "L40S", "MI300X", "MI325X",
                 "RTX5090", "RTX4090", "RTX3090", "GTX1660"):
        assert name in rows, f"{name} missing\n{run.out}"
    # gpus.yaml: H100 80 GB, 989.4 BF16 / 1,978.9 FP8 dense (S1); A100 has no FP8 (S17); GB200 NVL72
    # domain (S15).
    assert rows["H100"][1:4] == ["80", "989.4", "1,978.9"]
    assert rows["A100"][3] == "-"
    assert rows["GB200"][5] == "72"


def test_gpus_json_carries_sources(apsi) -> None:
    run = apsi("gpus", "--json")
    assert run.code == 0, run.why()
    table = {g["name"]: g for g in json.loads(run.out)}
    assert table["H100"]["bf16_tflops"] == pytest.approx(989.4)
    # gpus.yaml: H100's bf16_tflops cites S1, which its sources list resolves to Klockwood's notes.
    assert table["H100"]["sources"]["bf16_tflops"] == (
        "S1: Glenn Klockwood, H100 notes: https://glennklockwood.com/garden/processors/h100")


def test_gpus_with_a_catalog_file(apsi, tmp_path) -> None:
    file = tmp_path / "mine.yaml"
    file.write_text("gpus:\n  X1:\n    memory_gib: 100\n    bf16_tflops: 500\n", encoding="utf-8")
    run = apsi("gpus", "--catalog", str(file))
    assert run.code == 0, run.why()
    assert re.search(r"^X1\s+100\s+500\.0\s+-", run.out, re.MULTILINE), run.out


def test_version(apsi) -> None:
    run = apsi("--version")
    assert run.code == 0, run.why()
    assert run.out == f"apsi {__version__}\n"


def test_no_arguments_prints_help(apsi) -> None:
    run = apsi()
    assert run.code == 0, run.why()
    assert "plan" in run.out and "serve" in run.out and "gpus" in run.out


def test_command_help(apsi) -> None:
    run = apsi("plan", "--help")
    assert run.code == 0, run.why()
    for option in ("--active", "--tokens", "--gpu", "--gpus", "--days", "--precision", "--optimizer", "--seq",
                   "--layers", "--width", "--mfu", "--heads", "--batch", "--max-gpus", "--catalog", "--tp",
                   "--pp", "--dp", "--recompute", "--json"):
        assert option in run.out, f"{option} missing from apsi plan --help"


@pytest.mark.parametrize(
    ("args", "pattern"),
    [
        (["plan", "abc"], r"^error: params 'abc' is not a size"),
        (["plan", "70B", "--gpu", "H10"], r"^error: unknown GPU 'H10': did you mean H100\?"),
        (["plan", "70B", "--bogus"], r"^error: No such option: --bogus"),
        (["plan"], r"^error: Missing argument 'PARAMS'|^error: Missing argument 'params'"),
        (["frob"], r"^error: No such command 'frob'"),
        (["serve", "70B", "--batch", "0", "--framework", "reference"], r"^error: batch is the number of sequences served at once, .*got '0'$"),
        (["gpus", "--catalog", "/nonexistent/apsi.yaml"], r"^error: catalog file /nonexistent/apsi\.yaml does not exist$"),
    ],
)
def test_user_errors_exit_2_with_one_line(apsi, args: list[str], pattern: str) -> None:
    run = apsi(*args)
    assert run.code == 2, run.why()
    assert run.out == ""
    assert run.err.count("\n") == 1 and run.err.endswith("\n"), run.why()
    assert re.search(pattern, run.err), run.why()
    assert "Traceback" not in run.err


def test_architecture_options_match_the_api() -> None:
    # The CLI lists the architecture options itself (so that --help does not load pydantic);
    # they must be apsi.inputs.modelspec's, in its order.
    from apsi.cli.app import ARCHITECTURE_HELP
    from apsi.inputs.modelspec import ARCHITECTURE_OPTIONS

    assert tuple(name for name, _ in ARCHITECTURE_HELP) == ARCHITECTURE_OPTIONS


def test_plan_takes_a_preset_and_architecture_options(apsi) -> None:
    run = apsi("plan", "llama-3.1-8b", "--kv-heads", "32", "--tokens", "100B", "--json")
    assert run.code == 0, run.why()
    import json

    model = json.loads(run.out)["model"]
    assert (model["source"], model["architecture"]["kv_heads"], model["flops_convention"]) == ("preset", 32, "causal")


def test_framework_options_are_the_apis_knobs() -> None:
    # Every framework knob plan() takes has its option on plan and frontier (recompute_modules as a
    # comma-separated list, as scenario files may write it), plus the framework plan options
    # batch_tolerance and node_granularity.
    from apsi.cli.app import FRAMEWORK_HELP
    from apsi.api.plan import FRAMEWORK_KNOBS

    assert {name for name, _ in FRAMEWORK_HELP} == set(FRAMEWORK_KNOBS) | {"batch_tolerance", "node_granularity"}


def test_whole_number_options_have_the_apis_ranges() -> None:
    # The CLI types these options itself (so that --help does not load pydantic); each range must
    # be the one plan() checks: apsi.inputs.question' _Numbers (gpus, tp, pp, dp) and _Knobs (every knob).
    from annotated_types import Ge, Le

    from apsi.cli.options import WHOLE_RANGES
    from apsi.inputs.question import _Knobs, _Numbers

    def limits(model, name: str) -> tuple[int, int]:
        meta = model.model_fields[name].metadata
        return (next(m.ge for m in meta if isinstance(m, Ge)), next(m.le for m in meta if isinstance(m, Le)))

    for name, (low, high) in WHOLE_RANGES.items():
        model = _Knobs if name in _Knobs.model_fields else _Numbers
        assert limits(model, name) == (low, high), name
        if name in _Knobs.model_fields and name in _Numbers.model_fields:
            assert limits(_Numbers, name) == (low, high), name
    # Every integer knob plan() range-checks is typed, except micro_batch, which also takes "any".
    assert set(_Knobs.model_fields) - set(WHOLE_RANGES) == {"micro_batch"}


@pytest.mark.parametrize(("args", "message"), [
    (["--tp", "abc"], "Invalid value for '--tp': 'abc' is not a whole number from 1 to 1,000,000"),
    (["--tp", "0"], "Invalid value for '--tp': 0 is out of range: give a whole number from 1 to 1,000,000"),
    (["--pp", "100001"], "Invalid value for '--pp': 100001 is out of range: give a whole number from 1 to 100,000"),
    (["--zero", "4"], "Invalid value for '--zero': 4 is out of range: give a whole number from 0 to 3"),
    (["--zero", "-1"], "Invalid value for '--zero': -1 is out of range: give a whole number from 0 to 3"),
    (["--cp", "2.5"], "Invalid value for '--cp': '2.5' is not a whole number from 1 to 1,000,000"),
    (["--etp", "two"], "Invalid value for '--etp': 'two' is not a whole number from 1 to 1,000,000"),
    (["--gpus", "1Q"], "Invalid value for '--gpus': '1Q' is not a whole number from 1 to 1,000,000, such as 512, "
                       "16K or 2^13"),
    (["--gpus", "2M"], "Invalid value for '--gpus': 2M is out of range: give a whole number from 1 to 1,000,000, "
                       "such as 512, 16K or 2^13"),
])
def test_whole_number_options_refuse_other_values_in_one_line(apsi, args: list[str], message: str) -> None:
    for command in ("plan", "frontier"):
        run = apsi(command, "70B", *args)
        assert run.code == 2, run.why()
        assert run.out == "" and run.err.count("\n") == 1, run.why()
        assert run.err == f"error: {message} (see apsi {command} --help)\n", run.why()


def test_whole_number_options_show_their_range_in_help(apsi) -> None:
    run = apsi("plan", "--help")
    assert run.code == 0, run.why()
    text = " ".join(run.out.split())
    for option, shown in (("--tp", "[1<=x<=1000000]"), ("--pp", "[1<=x<=100000]"), ("--zero", "[0<=x<=3]"),
                          ("--gpus", "[1<=x<=1000000]"), ("--vpp", "[1<=x<=100000]")):
        assert shown in text[text.index(option + " "):].split(" --")[0], f"{option}: {shown} not in its help"


def test_whole_number_options_read_what_the_api_reads() -> None:
    # The same values plan() accepts as strings (pydantic's lax int, and for gpus the counts with a
    # suffix or a power that apsi.inputs.question reads with parse_size) reach it as the same int.
    from apsi.cli.options import _whole

    tp, gpus = _whole("tp"), _whole("gpus", sizes=True)
    assert [tp(v) for v in ("8", " 8 ", "+8", "8.0", "1_000")] == [8, 8, 8, 8, 1000]
    assert [gpus(v) for v in ("16K", "2^13", "1.5K", "512")] == [16_000, 8192, 1500, 512]


def test_recompute_modules_on_the_command_line(apsi) -> None:
    # The CLI's comma-separated modules are plan()'s list: the same layout and memory.
    from apsi import plan

    run = apsi("plan", "llama-3.1-70b", "--tokens", "1.4T", "--recompute", "selective", "--recompute-modules",
               "mlp,layernorm", "--json")
    assert run.code == 0, run.why()
    api = plan("llama-3.1-70b", tokens="1.4T", recompute="selective", recompute_modules=["layernorm", "mlp"])
    cli = json.loads(run.out)
    assert cli["layout"]["recompute_modules"] == ["layernorm", "mlp"] == api.layout.recompute_modules
    assert cli["memory_per_gpu_gib"] == api.memory_per_gpu_gib


def test_csv_has_a_column_per_degree_and_per_input(apsi, tmp_path) -> None:
    # Expected: the layout's own degrees in layout_* columns (equal to plan()'s), and each run's
    # inputs as written in input_* columns, empty where a run does not give the key.
    import csv
    import io

    scenario = tmp_path / "s.yaml"
    scenario.write_text("defaults: {tokens: 100B, framework: megatron}\nruns:\n"
                        "  - {params: 7B, seq: [2048, 4096]}\n  - {params: 13B, days: 30}\n", encoding="utf-8")
    run = apsi("run", str(scenario), "--format", "csv", "--jobs", "1")
    assert run.code == 0, run.why()
    rows = list(csv.DictReader(io.StringIO(run.out)))
    assert [r["input_seq"] for r in rows] == ["2048", "4096", ""]
    assert [r["input_days"] for r in rows] == ["", "", "30"]
    assert {r["input_tokens"] for r in rows} == {"100B"}
    expected = plan("13B", tokens="100B", days=30, framework="megatron").layout
    for degree in ("tp", "pp", "dp", "cp", "vpp", "ep", "etp", "zero"):
        assert rows[2][f"layout_{degree}"] == str(getattr(expected, degree))


def test_the_samples_in_the_readme_and_the_guides_are_what_apsi_prints() -> None:
    # Every ```text block opening with `$ apsi ...` in README.md and the guides (docs/samples.py:
    # training, serving, scenarios, fleets) is what that command prints now; `python
    # docs/samples.py` rewrites them when a change is meant to move them.
    import importlib.util

    spec = importlib.util.spec_from_file_location("samples", Path(__file__).resolve().parents[1] / "docs" / "samples.py")
    samples = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(samples)
    stale = []
    for path in samples.FILES:
        for match in samples.BLOCK.finditer(path.read_text(encoding="utf-8")):
            if samples.output(match.group(1)) != match.group(2):
                stale.append(f"{path.name}: {match.group(1)}")
    assert not stale, f"stale samples (run python docs/samples.py): {stale}"
    assert sum(1 for p in samples.FILES for _ in samples.BLOCK.finditer(p.read_text(encoding="utf-8"))) >= 7


def test_the_python_results_the_readme_and_training_guide_quote_are_what_apsi_returns() -> None:
    # The figures in a ```python block's comment are written by hand, and had drifted (the README
    # quoted 1952 GPUs for 89.8 days where the CLI sample above it, regenerated, said 2,016; the
    # training guide 79.1 days for the 1T plan's 78.8).
    root = Path(__file__).resolve().parents[1]
    readme = root.joinpath("README.md").read_text(encoding="utf-8")
    guide = root.joinpath("docs", "training.md").read_text(encoding="utf-8")
    p = plan("llama-3.1-70b", tokens="15T")
    assert f"p.gpus, p.days, p.layout.tp, p.binding, p.why     # {p.gpus}, {p.days:.1f}, {p.layout.tp}, " \
           f"'{p.binding}', \"{p.why[:13]} ...\"" in readme
    q = plan("1T", active="32B", tokens="15T", precision="fp8")
    assert f"# {(q.gpus, q.layout.tp, q.layout.pp, q.layout.dp, round(q.days, 1))}" in guide


def test_the_guides_quote_the_calibration_and_the_levers_as_they_are() -> None:
    # Hand-quoted figures had drifted: the calibration's median error (3.8% in three places where
    # docs/validation.md, regenerated, said 3.6%) and method.md 4.9's abridged lever lines (the fp8
    # lever's 85.8 days where training.md's regenerated sample said 89.7).
    import statistics

    from apsi.model import steptime

    root = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(root / "benchmarks"))
    import calibrate

    median = f"{statistics.median(abs(e) for e in calibrate.errors(calibrate.CALIBRATION)):.1%}"
    rows = len(calibrate.CALIBRATION)
    method = root.joinpath("docs", "method.md").read_text(encoding="utf-8")
    training = root.joinpath("docs", "training.md").read_text(encoding="utf-8")
    quoted = re.findall(r"[Mm]edian error\s+([\d.]+%) over (\d+) rows|\s([\d.]+%) over (\d+) rows\), and the days",
                        method + training)
    figures = [(a or c, int(b or d)) for a, b, c, d in quoted]
    assert len(figures) >= 2 and set(figures) == {(median, rows)}, (median, rows, figures)
    assert re.findall(r"error\s+([\d.]+%)\) and its error on whole", training) == [median]
    low, high = steptime.CALIBRATION_SPREAD
    assert f"residuals, −{-low:.1%}\nto +{high:.1%}" in method
    levers = re.search(r"\$ apsi plan llama-3.1-70b --tokens 15T --levers\n(.*?)```", method, re.S).group(1)
    lines = [line for line in levers.splitlines() if " x H100 in " in line or " x H200 in " in line or " x MI300X in " in line]
    assert len(lines) >= 8 and all(line.split(":", 1)[1] in training for line in lines), lines


def test_the_guides_list_every_plan_option_and_run_key() -> None:
    # training.md's list of `apsi plan` options and scenarios.md's of a run's keys claim to be
    # whole; both had left out --sequence-parallel and --compile (and cp_comm_type).
    import typer

    from apsi.api.scenario_file import RUN_KEYS
    from apsi.cli.app import app

    root = Path(__file__).resolve().parents[1]
    command = typer.main.get_command(app).commands["plan"]  # type: ignore[attr-defined]
    options = {o for p in command.params for o in (*p.opts, *p.secondary_opts) if o.startswith("--")} - {"--help"}
    training = root.joinpath("docs", "training.md").read_text(encoding="utf-8")
    m = re.search(r"`apsi plan` options: `(.*?)`,\nand the architecture fields `(.*?)`", training, re.S)
    assert set(re.findall(r"--[a-z0-9-]+", m.group(1) + " " + m.group(2))) == options
    scenarios = root.joinpath("docs", "scenarios.md").read_text(encoding="utf-8")
    m = re.search(r"A run's keys are `plan\(\)`'s keyword names \((.*?)\) plus an optional `name`", scenarios, re.S)
    assert set(re.findall(r"`([a-z_0-9]+)`", m.group(1))) == set(RUN_KEYS) - {"name", "kind"}


# -- output that cannot be written ------------------------------------------------------------

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
FULL_DISK = "error: cannot write the output: No space left on device\n"
"""The one line for standard output on a full disk: ENOSPC's strerror on Linux (/dev/full)."""


def _process(*args: str, unbuffered: bool = False, **streams) -> subprocess.Popen:
    """`python -m apsi ARGS` (the console script's path: apsi.cli.app._entry) in a child process, its
    standard output buffered as Python sets it up by default, or not (PYTHONUNBUFFERED=1: then a
    write the reader leaves half-done is dropped by Python's text layer without an error)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    env.update({"COLUMNS": "100", "NO_COLOR": "1", **({"PYTHONUNBUFFERED": "1"} if unbuffered else {})})
    return subprocess.Popen([sys.executable, "-m", "apsi", *args], env=env, **streams)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full, where every write fails with ENOSPC")
@pytest.mark.parametrize("args", [
    ["schema"],
    ["gpus", "--json"],
    ["plan", "--help"],
    ["plan", "70B", "--framework", "reference", "--no-levers"],
    ["run", str(EXAMPLES / "frameworks.yaml"), "--format", "json", "--jobs", "1"],
], ids=" ".join)
@pytest.mark.parametrize("unbuffered", [False, True], ids=["buffered", "unbuffered"])
def test_a_full_disk_on_stdout_is_one_line_and_exit_2(args: list[str], unbuffered: bool) -> None:
    with open("/dev/full", "w") as full:
        child = _process(*args, unbuffered=unbuffered, stdout=full, stderr=subprocess.PIPE, text=True)
        _, err = child.communicate(timeout=120)
    assert child.returncode == 2, err
    assert err == FULL_DISK


@pytest.mark.parametrize("unbuffered", [False, True])
def test_a_closed_pipe_ends_quietly_with_141(unbuffered: bool) -> None:
    # The frontier's JSON (~450 KB) is more than a pipe holds: the reader takes 100 bytes and
    # leaves, as `apsi ... | head -c 100` does, while apsi is still writing. Under PYTHONUNBUFFERED
    # (common in containers) Python's text layer dropped the bytes the pipe did not take and the
    # command exited 0 with its output cut (apsi.cli.options._echo writes them all).
    child = _process("frontier", "70B", "--tokens", "1.4T", "--framework", "reference", "--json",
                     unbuffered=unbuffered, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert child.stdout is not None and child.stderr is not None
    head = child.stdout.read(100)
    child.stdout.close()
    err = child.stderr.read()
    assert child.wait(timeout=120) == 141, err
    assert head.startswith(b"[{") and err == b""


class _FailingStdout(io.StringIO):
    """A standard output whose final flush fails with `code` (the bytes held back until exit)."""

    def __init__(self, code: int) -> None:
        super().__init__()
        self.code = code

    def flush(self) -> None:
        raise OSError(self.code, os.strerror(self.code))


@pytest.mark.parametrize(("code", "exit_code", "err"), [(errno.ENOSPC, 2, FULL_DISK), (errno.EPIPE, 141, "")])
def test_the_flush_at_exit_is_reported_as_any_write(monkeypatch, capsys, code: int, exit_code: int, err: str) -> None:
    from apsi.cli import app as cli

    exits: list[int] = []
    monkeypatch.setattr(cli, "main", lambda: 0)  # the command wrote everything into the buffer
    monkeypatch.setattr(sys, "stdout", _FailingStdout(code))
    monkeypatch.setattr(os, "_exit", exits.append)
    cli._reported.clear()
    cli._entry()
    assert exits == [exit_code]
    assert capsys.readouterr().err == err


# -- --fail-on-miss -----------------------------------------------------------------------------

MISSING = ["70B", "--tokens", "15T", "--days", "5", "--gpus", "64", "--framework", "reference"]
"""70B on 15T tokens on at most 64 H100 under the reference arithmetic: thousands of days against a
5-day target (the fastest layout within the cap, target_met false)."""


def test_fail_on_miss_exits_3_after_printing_the_plan(apsi) -> None:
    plain = apsi("plan", *MISSING, "--no-levers", "--json")
    assert plain.code == 0, plain.why()  # without the flag a miss is not an error
    planned = json.loads(plain.out)
    assert planned["target_met"] is False and planned["gpus"] <= 64
    missed = apsi("plan", *MISSING, "--no-levers", "--json", "--fail-on-miss")
    assert missed.code == 3, missed.why()
    assert _comparable(json.loads(missed.out)) == _comparable(planned)  # the same plan, still printed
    assert missed.err.count("\n") == 1 and missed.err.startswith("error: "), missed.why()
    assert f"{planned['days']:,.1f} days" in missed.err and "5.0 days" in missed.err and "--fail-on-miss" in missed.err
    table = apsi("plan", *MISSING, "--fail-on-miss")  # the plan block too, with its levers
    assert table.code == 3 and "NOT met" in table.out, table.why()


def test_fail_on_miss_exits_0_when_the_target_is_met(apsi) -> None:
    run = apsi("plan", "70B", "--tokens", "1.4T", "--framework", "reference", "--no-levers", "--json", "--fail-on-miss")
    assert run.code == 0, run.why()
    assert json.loads(run.out)["target_met"] is True and run.err == ""


def test_fail_on_miss_on_the_frontier(apsi) -> None:
    missed = apsi("frontier", *MISSING, "--json", "--fail-on-miss")
    assert missed.code == 3, missed.why()
    points = json.loads(missed.out)
    assert points and not any(p["target_met"] for p in points)
    assert missed.err.count("\n") == 1 and "--days 5" in missed.err, missed.why()
    assert apsi("frontier", *MISSING, "--json").code == 0
    # README's frontier: 208 GPUs meet the 90-day target of 70B on 1.4T tokens.
    met = apsi("frontier", "70B", "--tokens", "1.4T", "--framework", "reference", "--json", "--fail-on-miss")
    assert met.code == 0, met.why()
    assert any(p["target_met"] for p in json.loads(met.out))


def test_fail_on_miss_on_a_scenario(apsi, tmp_path) -> None:
    scenario = tmp_path / "runs.yaml"
    runs = ("defaults: {framework: reference, tokens: 15T}\nruns:\n"
            "  - {name: meets, params: 7B, days: 90}\n"
            "  - {name: misses, params: 70B, days: 5, gpus: 64}\n")
    scenario.write_text(runs, encoding="utf-8")
    plain = apsi("run", str(scenario), "--format", "json", "--jobs", "1")
    assert plain.code == 0, plain.why()
    assert [r["target_met"] for r in json.loads(plain.out)] == [True, False]
    missed = apsi("run", str(scenario), "--format", "json", "--jobs", "1", "--fail-on-miss")
    assert missed.code == 3 and missed.out == plain.out, missed.why()
    assert missed.err == "error: 1 of 2 runs misses its target; its row says so (--fail-on-miss)\n"
    # A failed run still exits 1, the miss counted on the same line.
    scenario.write_text(runs + "  - {name: broken, params: 7B, precision: fp9}\n", encoding="utf-8")
    both = apsi("run", str(scenario), "--jobs", "1", "--fail-on-miss")
    assert both.code == 1, both.why()
    assert both.err == "error: 1 of 3 runs failed; its row says why; 1 misses its target\n"


@pytest.mark.parametrize(("command", "codes"), [("plan", ["0", "2", "3", "130", "141"]),
                                                ("frontier", ["0", "2", "3", "130", "141"]),
                                                ("run", ["0", "1", "2", "3", "130", "141"])])
def test_help_lists_the_exit_codes(apsi, command: str, codes: list[str]) -> None:
    run = apsi(command, "--help")
    assert run.code == 0, run.why()
    assert "--fail-on-miss" in run.out
    listed = re.findall(r"^    (\d+) ", run.out.split("Exit codes:", 1)[1], re.MULTILINE)
    assert listed == codes, run.out


def test_serve_export(apsi, tmp_path) -> None:
    # The dense example, launched: the script is the output, and it parses (bash -n).
    run = apsi("serve", "llama-3.1-70b", "--precision", "fp8", "--gpu", "H100", "--tpot", "30", "--rate", "10",
               "--export", "vllm")
    assert run.code == 0, run.why()
    # One exec line per replica kind of the plan (a mix is a case over $KIND), each launching the model.
    assert run.out.startswith("#!/bin/bash\n# Generated by apsi ")
    assert re.search(r"^ *exec vllm serve meta-llama/Llama-3.1-70B", run.out, re.MULTILINE), run.out
    check = subprocess.run(["bash", "-n"], input=run.out, capture_output=True, text=True, timeout=30)
    assert check.returncode == 0, check.stderr
    out = tmp_path / "launch.sh"
    run = apsi("serve", "qwen3-30b-a3b", "--gpu", "H100", "--engine", "sglang", "--export", "sglang",
               "--output", str(out))
    assert run.code == 0, run.why()
    assert "exec python3 -m sglang.launch_server --model-path Qwen/Qwen3-30B-A3B" in out.read_text()
    # Without --engine the export's engine makes the plan, as plan --export takes its framework:
    # the same script as with --engine sglang given.
    alone = tmp_path / "alone.sh"
    run = apsi("serve", "qwen3-30b-a3b", "--gpu", "H100", "--export", "sglang", "--output", str(alone))
    assert run.code == 0, run.why()
    assert alone.read_text() == out.read_text()


@pytest.mark.parametrize(("args", "message"), [
    (["--export", "vlm"], r"^error: unknown serving export 'vlm': did you mean vllm\? valid: vllm, sglang, trtllm$"),
    (["--engine", "vllm", "--export", "trtllm"], r"^error: the plan is vLLM's .*: plan it with --engine trtllm "
                                                 r"\(engine='trtllm'\) to export trtllm$"),
    (["--export", "vllm", "--json"], r"^error: --export prints the engine's bash script, not JSON: leave out --json$"),
    (["--export", "vllm", "--frontier"], r"^error: --export launches one plan, and --frontier lists many: leave out "
                                         r"one of them$"),
])
def test_serve_export_bad(apsi, args, message) -> None:
    run = apsi("serve", "llama-3.1-70b", "--precision", "fp8", "--gpu", "H100", *args)
    assert run.code == 2, run.why()
    assert run.out == "" and len(run.err.splitlines()) == 1 and re.search(message, run.err), run.err


def test_serve_export_needs_weights(apsi) -> None:
    run = apsi("serve", "70B", "--precision", "fp8", "--gpu", "H100", "--export", "vllm")
    assert run.code == 2, run.why()
    assert re.search(r"^error: an engine needs real weights, which a size or a config file not named config\.json "
                     r"does not name: give a preset \(apsi models\) or a Hugging Face model folder with its "
                     r"config\.json$", run.err), run.err


@pytest.mark.parametrize("command", ["run", "fleet"])
def test_output_onto_the_scenario_read_from_stdin_is_refused(command: str, tmp_path) -> None:
    # `apsi run - --output runs.yaml < runs.yaml` replaced the scenario with its results: standard
    # input redirected from the output file is that file (apsi.cli.options._check_output).
    source = EXAMPLES / ("fleet.yaml" if command == "fleet" else "reference-table.yaml")
    path = tmp_path / "runs.yaml"
    path.write_bytes(source.read_bytes())
    with open(path, "rb") as stdin:
        done = subprocess.run([sys.executable, "-m", "apsi", command, "-", "--output", str(path)], stdin=stdin,
                              capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr == (f"error: --output {path} is the scenario file itself (read from standard input): "
                           "give another file\n")
    assert path.read_bytes() == source.read_bytes()


def test_an_output_in_a_missing_folder_is_refused_before_anything_is_printed_or_written(apsi, tmp_path) -> None:
    # The plan was printed (or its --output file written) and only then its --plot refused.
    missing = tmp_path / "nodir" / "memory.png"
    written = tmp_path / "plan.txt"
    run = apsi("plan", "7B", "--tokens", "100B", "--output", str(written), "--plot", str(missing))
    assert run.code == 2 and run.out == "" and not written.exists(), run.why()
    assert run.err == f"error: cannot write {missing}: its folder {missing.parent} does not exist\n"
    run = apsi("frontier", "7B", "--tokens", "100B", "--plot", str(missing))
    assert run.code == 2 and run.out == "", run.why()


def test_serve_output_takes_its_format_from_the_extension(apsi, tmp_path) -> None:
    # plan, frontier, run and fleet choose the format from --output's extension; serve wrote its
    # text into s.json. It writes JSON there, and refuses a CSV or markdown name it cannot write.
    from apsi import serve
    from apsi.model.serve_schema import ServePlan

    written = tmp_path / "s.json"
    run = apsi("serve", "llama-3.1-8b", "--rate", "5", "--output", str(written))
    assert run.code == 0, run.why()
    assert ServePlan.model_validate_json(written.read_text(encoding="utf-8")) == serve("llama-3.1-8b", rate=5)
    run = apsi("serve", "llama-3.1-8b", "--rate", "5", "--output", str(tmp_path / "s.csv"))
    assert run.code == 2 and not (tmp_path / "s.csv").exists()
    assert run.err.startswith(f"error: --output {tmp_path / 's.csv'}: apsi serve writes its text or JSON")


def test_a_plot_is_written_beside_an_export_too(apsi, tmp_path) -> None:
    # `plan --export X --plot F` wrote the launch file and silently no chart.
    pytest.importorskip("matplotlib")
    chart = tmp_path / "memory.svg"
    run = apsi("plan", "7B", "--tokens", "100B", "--export", "megatron", "--plot", str(chart))
    assert run.code == 0 and run.out.startswith("#!/bin/bash"), run.why()
    assert chart.read_text(encoding="utf-8").lstrip().startswith("<?xml") and f"memory plot written to {chart}" in run.err


@pytest.mark.parametrize("command", ["run", "fleet"])
def test_a_scenario_on_standard_input_that_is_not_utf8_is_one_line_and_exit_2(command: str) -> None:
    # Read through the text stream, the undecodable bytes reached the YAML parser as surrogates and
    # it failed with a traceback; the same bytes in a file were already refused so.
    done = subprocess.run([sys.executable, "-m", "apsi", command, "-"], input=b"\xff\xfe runs: []\n",
                          capture_output=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stdout == b"" and done.stderr == b"error: the scenario on standard input is not UTF-8 text: give a YAML file\n"


@pytest.mark.parametrize("command", ["run", "fleet"])
@pytest.mark.parametrize(("text", "says"), [
    ("", "is empty: a scenario needs a 'runs:' list of plan() keyword mappings, such as 'runs: [{params: 70B}]'"),
    ("# only a comment\n", "is empty: a scenario needs a 'runs:' list of plan() keyword mappings, such as "
                           "'runs: [{params: 70B}]'"),
    ("[1, 2]\n", "must be a mapping with a 'runs:' list, got a list: such as 'runs: [{params: 70B}]'"),
])
def test_a_scenario_on_standard_input_that_is_not_a_mapping_says_what_it_is(apsi, monkeypatch, command, text,
                                                                              says) -> None:
    # The parsed text went on as the source and was refused as "a YAML file's path or a mapping, got
    # None"; a file of the same text was already refused so (scenarios.load).
    monkeypatch.setattr(sys, "stdin", io.StringIO(text))
    run = apsi(command, "-")
    assert run.code == 2 and run.out == "", run.why()
    assert run.err == f"error: the scenario on standard input {says}\n"


@pytest.mark.parametrize("args", [["serve", "llama-3.1-8b"], ["plan", "7B", "--no-levers"]])
def test_a_closed_standard_output_is_one_line_and_exit_2(args: list[str]) -> None:
    # Started with standard output closed, Python's sys.stdout is None and click dropped the text:
    # `apsi serve ... >&-` exited 0 having said nothing (apsi.cli.app._ClosedOutput).
    done = subprocess.run([sys.executable, "-m", "apsi", *args], stdin=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True, timeout=120, preexec_fn=lambda: os.close(1))
    assert done.returncode == 2
    assert done.stderr == "error: cannot write the output: standard output is closed\n"


# -- placeholders and shell completion ----------------------------------------------------------

COMMANDS = ("plan", "frontier", "serve", "run", "fleet", "export", "gpus", "models")
"""The commands with options of their own (compare and schema have none)."""


@pytest.mark.parametrize("command", COMMANDS)
def test_every_option_names_the_kind_of_value_it_takes(apsi, command: str) -> None:
    # typer's default placeholder is the Python type: "--export <str>", "--gpus <int range>".
    # apsi.cli.values gives each option the kind of its value (SIZE, N, FILE, [true|false], ...).
    run = apsi(command, "--help")
    assert run.code == 0
    options = [line for line in run.out.splitlines() if line.lstrip().startswith("--")]
    typed = [line for line in options if re.match(r"\s+--[\w-]+ <", line)]
    assert not typed, typed


def test_serve_catalog_has_its_help(apsi) -> None:
    run = apsi("serve", "--help")
    line = next(x for x in run.out.splitlines() if x.lstrip().startswith("--catalog"))
    assert "YAML file adding or overriding GPUs." in line


def _completions(words: str) -> list[str]:
    # What bash's completion asks of the program (typer's _APSI_COMPLETE protocol): the words so far
    # and the index of the one being completed.
    env = {**os.environ, "_APSI_COMPLETE": "complete_bash", "COMP_WORDS": words,
           "COMP_CWORD": str(len(words.split()) - (0 if words.endswith(" ") else 1))}
    done = subprocess.run([sys.executable, "-m", "apsi", *words.split()[1:]], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0 and not done.stderr, done.stderr
    return done.stdout.split()


def test_shell_completion_offers_each_list_from_its_owner() -> None:
    from apsi.catalog import PRECISIONS, catalog
    from apsi.outputs.export import FORMATS
    from apsi.outputs.export.engines import EXPORTS
    from apsi.training.frameworks import FRAMEWORKS
    from apsi.inputs.presets import presets
    from apsi.serving.replica import WEIGHT_BYTES

    assert _completions("apsi plan 70B --gpu ") == [*catalog(), "any"]
    assert _completions("apsi plan 70B --gpu H1") == ["H100"]
    assert _completions("apsi plan llama-3.1") == [n for n in presets() if n.startswith("llama-3.1")]
    assert _completions("apsi plan 70B --precision ") == list(PRECISIONS)
    assert _completions("apsi serve 70B --precision ") == list(WEIGHT_BYTES)  # fp4 serves, it does not train
    assert _completions("apsi plan 70B --framework ") == list(FRAMEWORKS)
    assert _completions("apsi plan 70B --export ") == list(FORMATS)
    assert _completions("apsi serve 70B --export ") == list(EXPORTS)
    assert _completions("apsi plan 70B --dispatcher ") == ["alltoall", "flex"]  # apsi.inputs.knobs
    assert _completions("apsi plan 70B --tp-overlap ") == ["true", "false"]


def test_export_and_compare_read_a_plan_from_standard_input(apsi, tmp_path) -> None:
    # `apsi plan ... --json | apsi export - --to megatron` was refused ("-" is not a file): export
    # and compare read a saved plan from standard input as run and fleet read a scenario.
    saved = tmp_path / "p.json"
    run = apsi("plan", "7B", "--tokens", "100B", "--json")
    assert run.code == 0, run.why()
    saved.write_text(run.out, encoding="utf-8")
    from_file = apsi("export", str(saved), "--to", "megatron")
    assert from_file.code == 0, from_file.why()

    def piped(*args: str, data: bytes) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "apsi", *args], input=data, capture_output=True, timeout=120,
                              env={**os.environ, "APSI_COLUMNS": "0"})

    done = piped("export", "-", "--to", "megatron", data=run.out.encode())
    assert done.returncode == 0 and done.stdout.decode() == from_file.out, done.stderr
    other = apsi("plan", "13B", "--tokens", "100B", "--json")
    done = piped("compare", str(saved), "-", data=other.out.encode())
    assert done.returncode == 0 and done.stdout.decode().splitlines()[0].split() == ["p.json", "stdin"], done.stdout
    done = piped("compare", "-", "-", data=run.out.encode())
    assert (done.returncode, done.stderr) == (2, b"error: compare reads standard input (-) once: give the other plans "
                                                 b"as files\n")
    done = piped("export", "-", "--to", "megatron", data=b"\xff\xfe{}")
    assert (done.returncode, done.stderr) == (2, b"error: the saved plan on standard input is not UTF-8 text: "
                                                 b"give a JSON file\n")


def test_a_fleet_replans_from_a_saved_plan_on_standard_input(apsi, tmp_path) -> None:
    # `apsi fleet FILE --json | apsi fleet FILE --since D --from -` was refused ("-" is not a file):
    # the re-plan from standard input is the re-plan from the same JSON in a file.
    example = str(EXAMPLES / "fleet-buy.yaml")
    saved = apsi("fleet", example, "--json", "--jobs", "1")
    assert saved.code == 0, saved.why()
    path = tmp_path / "answer.json"
    path.write_text(saved.out, encoding="utf-8")
    from_file = apsi("fleet", example, "--since", "2026-07-05", "--from", str(path), "--jobs", "1")

    def piped(*args: str, data: bytes) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "apsi", *args], input=data, capture_output=True, timeout=300,
                              env={**os.environ, "APSI_COLUMNS": "0"})

    done = piped("fleet", example, "--since", "2026-07-05", "--from", "-", "--jobs", "1", data=saved.out.encode())
    assert done.returncode == from_file.code == 0 and done.stdout.decode() == from_file.out, done.stderr
    done = piped("fleet", example, "--since", "2026-07-05", "--from", "-", data=b"nope")
    assert done.returncode == 2 and done.stderr.startswith(b"error: the saved fleet plan on standard input is not JSON")
    done = piped("fleet", "-", "--since", "2026-07-05", "--from", "-", data=path.read_bytes())
    assert (done.returncode, done.stderr) == (2, b"error: --from - and the scenario file - cannot both be standard "
                                                 b"input: give one of them as a file\n")
