"""Hostile inputs (issue 12), each reproduction a test: one line and exit 2 (an ApsiError from the
API), never a traceback, a hang or a silently wrong plan; a scenario's bad run costs only itself."""

from __future__ import annotations

import csv
import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from apsi import ApsiError, evaluate, plan, run_scenarios
from conftest import time_limit

APSI = [sys.executable, "-m", "apsi.cli.app"]
HANG = 120
"""Seconds past which a case is taken for a hang (each answers in about a second): a guard only,
never a speed test, so a loaded machine does not fail it (speed is benchmarks/'s to measure)."""


def _one_line(run) -> None:
    assert run.code == 2, run.why()
    assert run.err.count("\n") == 1 and run.err.startswith("error: "), run.why()


# 1. Tiny positive numbers overflowed the arithmetic.
@pytest.mark.parametrize("args", [
    ("plan", "7B", "--mfu", "1e-300"), ("plan", "7B", "--days", "1e-310"),
    ("plan", "7B", "--objective", "cost", "--price", "5e-324"), ("frontier", "7B", "--mfu", "5e-324"),
])
def test_tiny_numbers_are_one_line(apsi, args) -> None:
    _one_line(apsi(*args))


def test_tiny_numbers_in_the_api_and_a_scenario(tmp_path) -> None:
    with pytest.raises(ApsiError, match=r"^mfu: input should be greater than or equal to 0\.001"):
        evaluate("7B", tp=1, pp=1, dp=8, recompute="none", mfu=5e-324, framework="reference")
    path = tmp_path / "s.yaml"
    path.write_text("runs:\n  - {name: good, params: 7B}\n  - {name: tiny, params: 7B, mfu: 1.0e-300}\n")
    good, tiny = run_scenarios(str(path), jobs=1)
    assert good.ok and not tiny.ok and "mfu: input should be greater than or equal to 0.001" in tiny.error


# 2. Catalog figures were unchecked.
@pytest.mark.parametrize("figures, message", [
    ("memory_gib: .inf", "memory_gib: Input should be a finite number"),
    ("memory_gib: 1.0e300", "memory_gib: Input should be less than or equal to 1000000"),
    ("memory_gib: true", "memory_gib: a number is needed, not a boolean"),
    ("memory_gib: 80, bf16_tflops: 1.0e308", "bf16_tflops: Input should be less than or equal to 1000000"),
    ("memory_gib: 80, bf16_tflops: .inf", "bf16_tflops: Input should be a finite number"),
    ("memory_gib: 80, bf16_tflops: 1.0e-300", "bf16_tflops: Input should be greater than or equal to 0.001"),
    ("memory_gib: 80, bf16_tflops: 900, price_usd_per_hour: 1.0e308", "price_usd_per_hour: Input should be less"),
    ("memory_gib: 80, bf16_tflops: 900, scaleup_domain: 1000000000000", "scaleup_domain: Input should be less"),
])
def test_catalog_figures_are_checked(tmp_path, figures, message) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(f"gpus:\n  X1: {{{figures}}}\n")
    with pytest.raises(ApsiError, match=message):
        plan("7B", gpu="X1", catalog=str(path))


def test_a_large_domain_is_quick_and_duplicate_gpus_name_their_line(tmp_path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("gpus:\n  X1: {memory_gib: 80, bf16_tflops: 900, scaleup_domain: 1000000}\n")
    with time_limit(HANG):  # divisors in O(sqrt n), not a 1e8 loop
        plan("7B", gpu="X1", catalog=str(path), framework="reference")
    path.write_text("gpus:\n  X1: {memory_gib: 80, bf16_tflops: 900}\n  X1: {memory_gib: 40, bf16_tflops: 9}\n")
    with pytest.raises(ApsiError, match=r"key 'X1' appears twice \(first on line 2\)"):
        plan("7B", gpu="X1", catalog=str(path))


# 3. A billion-laughs alias bomb grew memory until killed (10^7 strings if expanded).
def _anchors() -> str:
    """The bomb's anchors as a flow mapping: a: &a [10 x "x"], b: &b [10 x *a], ... g: &g [10 x *f]."""
    out = ['a: &a ["x","x","x","x","x","x","x","x","x","x"]']
    for prev, name in zip("abcdef", "bcdefg"):
        out.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 10) + "]")
    return "{" + ", ".join(out) + "}"


@pytest.mark.parametrize("run", ["{name: v, params: 7B, tokens: *g}", "{name: *g, params: 7B}",
                                 "{name: k, params: 7B, bogus: *g}"])
def test_an_alias_bomb_in_a_run_is_that_runs_error(tmp_path, run) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(f"runs:\n  - {{name: good, params: 7B}}\n  - {{name: holder, params: 7B, stash: {_anchors()}}}\n"
                    f"  - {run}\n")
    with time_limit(HANG):
        results = run_scenarios(str(path), jobs=1)
    assert results[0].ok and not results[1].ok and "unknown key 'stash'" in results[1].error
    assert not results[-1].ok and len(results[-1].error) < 1000


# 4. Devices, FIFOs and /proc files read forever or blocked.
@pytest.mark.parametrize("path", ["/dev/zero", "/dev/urandom", "/proc/self/environ"])
def test_catalog_that_is_not_a_regular_file(path) -> None:
    if not os.path.exists(path):
        pytest.skip(f"no {path} here")
    with time_limit(HANG), pytest.raises(ApsiError, match=r"^catalog file "):
        plan("7B", catalog=path)


def test_catalog_and_scenario_fifo(tmp_path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(ApsiError, match=r"is a FIFO: give a regular YAML file$"):
        plan("7B", catalog=str(fifo))
    with pytest.raises(ApsiError, match=r"is a FIFO: give a regular YAML file$"):
        run_scenarios(str(fifo))
    scenario = tmp_path / "s.yaml"
    scenario.write_text(f"catalog: {fifo}\nruns:\n  - {{params: 7B}}\n")
    with pytest.raises(ApsiError, match=r"is a FIFO"):
        run_scenarios(str(scenario))


# 5. Two Ctrl-C during `apsi run --jobs 2` left workers behind.
@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "killpg"), reason="POSIX process groups")
def test_interrupts_leave_no_process(tmp_path) -> None:
    sizes = ", ".join(f"{i}B" for i in range(1, 61))
    path = tmp_path / "s.yaml"
    path.write_text(f"defaults: {{tokens: 1.4T}}\nruns:\n  - params: [{sizes}]\n    days: [30, 60, 90, 120]\n")
    for delay in (1.5, 2.5):
        proc = subprocess.Popen(APSI + ["run", str(path), "--jobs", "2"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True)
        time.sleep(delay)
        os.killpg(proc.pid, signal.SIGINT)
        os.killpg(proc.pid, signal.SIGINT)
        proc.communicate(timeout=60)
        assert proc.returncode in (130, 1, 0)
        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.2)
        else:
            pytest.fail("a worker outlived `apsi run` after two interrupts")


# 6. The cost objective over a GPU list returned a plan twice the cheapest and called it OPTIMAL.
@pytest.mark.parametrize("framework", ["reference", "megatron"])
def test_cost_with_a_far_dearer_gpu_is_still_the_cheapest(tmp_path, framework) -> None:
    path = tmp_path / "c.yaml"
    row = "memory_gib: 80, bf16_tflops: 989, scaleup_domain: 8, hbm_tbps: 3.35, tdp_w: 700"
    path.write_text(f"gpus:\n  CHEAP_A: {{{row}, price_usd_per_hour: 2}}\n  CHEAP_B: {{{row}, price_usd_per_hour: 1}}\n"
                    f"  GOLD: {{{row}, price_usd_per_hour: 1000000}}\n")
    with_gold = plan("7B", gpu="CHEAP_A,CHEAP_B,GOLD", objective="cost", catalog=str(path), framework=framework)
    without = plan("7B", gpu="CHEAP_A,CHEAP_B", objective="cost", catalog=str(path), framework=framework)
    assert (with_gold.gpu, with_gold.gpus, with_gold.cost_usd) == (without.gpu, without.gpus,
                                                                 pytest.approx(without.cost_usd, rel=1e-12))


# 7. Tracebacks on paths.
def test_path_tracebacks(tmp_path) -> None:
    loop = tmp_path / "loop.yaml"
    os.symlink(loop, loop)
    with pytest.raises(ApsiError, match=r"^catalog file .* cannot be used: "):
        plan("7B", catalog=str(loop))
    with pytest.raises(ApsiError, match=r"^catalog file .* cannot be used: "):
        plan("7B", catalog="bad\0name.yaml")
    deep = tmp_path / "deep.yaml"
    deep.write_text("gpus: " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(ApsiError, match=r"^catalog file .*(nests too deeply|is not valid YAML at line 1: exceeded maximum nesting depth)"):
        plan("7B", catalog=str(deep))


# 8. A non-string key in a run killed the whole file.
@pytest.mark.parametrize("key", ["1: 2", "~: 1"])
def test_non_string_key_is_that_runs_error(tmp_path, key) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(f"runs:\n  - {{name: good, params: 7B}}\n  - {{name: bad, params: 7B, {key}}}\n")
    good, bad = run_scenarios(str(path), jobs=1)
    assert good.ok and not bad.ok and "keys are plan() keywords (strings)" in bad.error


# 9. `--jobs ²` (superscript digits pass isdigit) gave a traceback.
def test_superscript_jobs(apsi, tmp_path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("runs:\n  - {params: 7B}\n")
    run = apsi("run", str(path), "--jobs", "²")
    _one_line(run)
    assert "jobs must be a whole number from 1 to 1,024" in run.err


# 10. --output truncated first and left a partial file; --output as the scenario overwrote it.
def test_output_is_written_whole_or_not_at_all(tmp_path, apsi) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("runs:\n  - {params: 7B}\n  - {params: 8B}\n")
    run = apsi("run", str(path), "--output", str(path))
    _one_line(run)
    assert "is the scenario file itself" in run.err and path.read_text().startswith("runs:")
    out = tmp_path / "out.csv"
    out.write_text("OLD")
    script = ("import resource, sys; resource.setrlimit(resource.RLIMIT_FSIZE, (64, 64)); "
              "from apsi.cli.app import main; sys.exit(main(sys.argv[1:]))")
    done = subprocess.run([sys.executable, "-c", script, "run", str(path), "--format", "csv", "--output", str(out)],
                          capture_output=True, text=True)
    assert done.returncode == 2 and "left as it was" in done.stderr, done.stderr
    assert out.read_text() == "OLD"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".apsi-")] == []


# 11. Slow cliffs.
def test_a_large_catalog_loads_in_linear_time(tmp_path) -> None:
    path = tmp_path / "big.yaml"
    path.write_text("gpus:\n" + "".join(f"  G{i}: {{memory_gib: 80, bf16_tflops: 989, scaleup_domain: 8}}\n"
                                        for i in range(10_000)))
    with time_limit(HANG):  # 15 s once: a quadratic name lookup (now about 1 s)
        plan("7B", gpu="G9999", catalog=str(path), framework="reference")


@pytest.mark.parametrize("framework", ["megatron", "reference"])
def test_a_huge_frontier_is_refused_at_once(apsi, framework) -> None:
    with time_limit(HANG):  # 32 s and 3.4 GB once (now refused before any walk)
        run = apsi("frontier", "7B", "--seq", "1", "--max-gpus", "1000000", "--json", "--framework", framework)
    _one_line(run)


def test_a_huge_scenario_file_is_refused_before_parsing(tmp_path) -> None:
    path = tmp_path / "s.yaml"
    with open(path, "w") as f:
        f.write("runs:\n")
        line = "  - {params: 7B, tokens: 140B, days: 90, gpu: H100}\n"
        f.write(line * (40 * 2**20 // len(line)))
    from apsi.api.scenario_file import MAX_FILE_BYTES

    with time_limit(HANG), pytest.raises(ApsiError, match=rf"bytes; apsi reads at most {MAX_FILE_BYTES:,}$"):
        run_scenarios(str(path))


# 12. Run names from list values collided; control characters reached the terminal.
def test_run_names_are_distinct_and_printable(tmp_path, apsi) -> None:
    path = tmp_path / "s.yaml"
    path.write_text('runs:\n  - {name: "red\\e[31mtext", params: 7B, days: [30.0000001, 30.0000002]}\n')
    results = run_scenarios(str(path), jobs=1)
    assert [r.ok for r in results] == [True, True]
    assert [r.name for r in results] == ["red\\x1b[31mtext days=30.0000001", "red\\x1b[31mtext days=30.0000002"]
    run = apsi("run", str(path), "--format", "csv", "--jobs", "1")
    assert "\x1b" not in run.out
    assert [row["name"] for row in csv.DictReader(io.StringIO(run.out))] == [r.name for r in results]


# 13. Unknown keywords named the internal resolve().
def test_unknown_keyword_lists_the_valid_ones() -> None:
    with pytest.raises(ApsiError, match=r"^unknown keyword 'bogus': did you mean \w+\? valid: .*tokens.*tp_overlap"):
        plan("7B", bogus=1)
    with pytest.raises(ApsiError, match=r"^unknown keyword 'tpp': did you mean tp\?"):
        plan("7B", tpp=1)


def test_no_traceback_reaches_the_cli(apsi, tmp_path) -> None:
    # The whole list above, through the command line: every answer is one line (no "Traceback").
    for args in (("plan", "7B", "--catalog", "/dev/zero"), ("plan", "7B", "--days", "1e-310")):
        run = apsi(*args)
        assert "Traceback" not in run.err
        _one_line(run)


@pytest.mark.slow
def test_public_api_passes_mypy_strict() -> None:
    # Issue 12: `mypy --strict` passes on the public API module (apsi.api.plan, re-exported by apsi).
    pytest.importorskip("mypy")
    root = Path(__file__).resolve().parents[1]
    run = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent", "--no-error-summary",
                          "--cache-dir", str(root / ".mypy_cache"), "apsi/api/plan.py", "apsi/__init__.py"],
                         capture_output=True, text=True, cwd=root)
    assert run.returncode == 0, run.stdout + run.stderr


@pytest.mark.parametrize("args", [("plan", "llama-3.1-70b"), ("plan", "1T", "--active", "32B", "--precision", "fp8"),
                                  ("plan", "70B", "--framework", "reference"), ("run", "examples/frameworks.yaml",
                                                                                "--jobs", "1"),
                                  ("frontier", "llama-3.1-70b", "--tokens", "1.4T"), ("gpus",), ("models",)])
def test_output_fits_80_columns(args) -> None:
    # Issue 12: at COLUMNS=80 no line of plan, run, frontier, gpus or models is over 80 characters.
    root = Path(__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items() if k != "APSI_COLUMNS"}
    done = subprocess.run(APSI + list(args), capture_output=True, text=True, cwd=root, env={**env, "COLUMNS": "80"})
    assert done.returncode == 0, done.stderr
    long = [line for line in done.stdout.splitlines() if len(line) > 80]
    assert long == [], long[:3]


def test_serve_any_gpu_chooses() -> None:
    # Issue 12: `apsi serve --gpu any` chose nothing (it took the first type). 70B in bf16 needs
    # 140.5 GiB: one MI300X (192 GiB x 90%) rather than two H100 or two H200 (80 and 141 GiB x 90%).
    from apsi import inference

    assert (inference("70B", gpu="any").gpu, inference("70B", gpu="any").gpus) == ("MI300X", 1)
    # Two of either: the cheaper per hour (catalog prices $2.69 and $3.59).
    assert (inference("70B", gpu="H100,H200").gpu, inference("70B", gpu="H100,H200").gpus) == ("H100", 2)


def test_the_same_output_options_on_plan_frontier_and_run(apsi, tmp_path) -> None:
    # Issue 12: --format table|csv|json|markdown and --output on plan, frontier and run, the format
    # taken from --output's extension; `-` reads a scenario from standard input.
    import json

    rows = list(csv.DictReader(io.StringIO(apsi("plan", "7B", "--format", "csv").out)))
    assert len(rows) == 1 and rows[0]["gpus"] == str(plan("7B").gpus)
    assert apsi("plan", "7B", "--format", "markdown").out.startswith("| name | GPU | GPUs |")
    out = tmp_path / "plan.json"
    assert apsi("plan", "7B", "--output", str(out)).code == 0
    assert json.loads(out.read_text())["gpus"] == plan("7B").gpus
    frontier_rows = list(csv.DictReader(io.StringIO(apsi("frontier", "70B", "--tokens", "1.4T", "--format", "csv").out)))
    assert frontier_rows and {"gpus", "tp", "pp", "cp", "dp", "vpp", "ep", "days"} <= set(frontier_rows[0])
    bad = apsi("plan", "7B", "--format", "xml")
    _one_line(bad)
    done = subprocess.run(APSI + ["run", "-", "--format", "csv", "--jobs", "1"], input="runs:\n  - {params: 7B}\n",
                          capture_output=True, text=True, env={**os.environ, "APSI_COLUMNS": "0"})
    assert done.returncode == 0 and list(csv.DictReader(io.StringIO(done.stdout)))[0]["gpus"] == str(plan("7B").gpus)


def test_compare_marks_the_differences(apsi, tmp_path) -> None:
    # Issue 12: `apsi compare A.json B.json ...` prints saved plans side by side, differences marked.
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(apsi("plan", "7B", "--json").out)
    b.write_text(apsi("plan", "7B", "--json", "--framework", "reference").out)
    run = apsi("compare", str(a), str(b))
    assert run.code == 0, run.why()
    lines = {line[2:].split("  ")[0]: line for line in run.out.splitlines() if line[:2] in ("* ", "  ")}
    assert lines["framework"].startswith("* ") and lines["GPU"].startswith("  ")
    assert run.out.rstrip().endswith("rows differ (marked *).")
    _one_line(apsi("compare", str(a)))


def test_any_gpu_means_data_centre_parts_unless_asked() -> None:
    # Issue 12: --gpu any under a framework considers data-centre parts only; include_consumer adds
    # the GeForce ones (catalog `consumer: true`). The reference arithmetic keeps the whole catalog.
    # (RTX4090 is left out of `any` beside RTX5090, which has every figure at least as good:
    # apsi.inputs.question.undominated; the part itself is then listed as skipped, saying so.)
    choice = plan("7B", gpu="any").gpu_choice
    assert "RTX5090" not in choice.considered and "H100" in choice.considered
    assert not any(s.startswith("RTX") for s in choice.skipped)
    with_consumer = plan("7B", gpu="any", include_consumer=True).gpu_choice
    assert "RTX5090" in with_consumer.considered
    assert "RTX4090: RTX5090 has every figure at least as good" in with_consumer.skipped
    assert "RTX5090" in plan("7B", gpu="any", framework="reference").gpu_choice.considered


def test_schema_describes_the_plan(apsi) -> None:
    # Issue 12: `apsi schema` prints the Plan's JSON schema, fields with their descriptions and units.
    import json

    schema = json.loads(apsi("schema").out)
    assert schema["title"] == "Plan"
    assert "seconds" in schema["properties"]["step_seconds"]["description"].lower()
    assert "GiB" in schema["$defs"]["MemoryBreakdown"]["description"]


def test_a_progress_that_is_not_a_function_is_one_line() -> None:
    # frontier(progress=123) raised TypeError: 'int' object is not callable, mid-walk.
    import apsi

    with pytest.raises(apsi.ApsiError, match=r"^progress must be a function of \(points, gpus\), got 123$"):
        apsi.frontier("llama-3.1-8b", max_gpus=64, progress=123)
    with pytest.raises(apsi.ApsiError, match=r"^progress must be a function of \(done, total\), got 'x'$"):
        apsi.run_scenarios({"runs": [{"params": "7B", "tokens": "10B"}]}, progress="x")


def test_wide_characters_keep_the_columns_aligned(tmp_path) -> None:
    # A run named in CJK (two terminal columns per character, Unicode's East_Asian_Width W) pushed
    # its row's cells a column right per character: the table padded by characters, not columns.
    from apsi.fit import columns, shown

    assert (shown("東京-7B"), shown("e\u0301"), shown("abc"), shown("\u0e01\u0e34"), shown("a\u200db")) == (7, 1, 3, 1, 2)
    lines = columns(["name", "gpus", "days"], [["東京-7B", "8", "12.5"], ["ascii", "1,024", "3.0"]],
                    [False, True, True], None)
    # Every line's "days" cell ends on the same terminal column.
    assert len({shown(line) for line in lines}) == 1, lines
    scenario = tmp_path / "runs.yaml"
    scenario.write_text("defaults: {framework: reference, gpu: H100}\nruns:\n"
                        "  - {name: 東京-7b, params: 7B}\n  - {name: ascii-7b, params: 7B}\n", encoding="utf-8")
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(APSI + ["run", str(scenario), "--jobs", "1"], capture_output=True, text=True, cwd=root,
                          env={**os.environ, "APSI_COLUMNS": "0"})
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith(("name", "東京", "ascii"))][:3]
    # The last column is right-aligned: every row ends on one terminal column.
    assert len(rows) == 3 and len({shown(line) for line in rows}) == 1, rows


def test_wide_characters_wrap_by_columns() -> None:
    # A labelled line of CJK words (two columns each character) wrapped by characters ran past the
    # terminal: 50 characters of it took up to 90 columns.
    import textwrap

    from apsi.fit import _wrap_shown, shown, wrap

    line = "  Run          " + "训练任务 " * 20 + "end"
    lines = wrap(line, 50).split("\n")
    assert max(shown(x) for x in lines) == 50 and all(x.startswith("               ") for x in lines[1:]), lines
    assert " ".join(x.strip() for x in lines).split() == line.split()
    # A CJK word longer than a line is cut by columns; a combining mark takes none.
    lines = wrap("  名前  " + "x" * 30 + "長い単語" * 20 + " e\u0301 fin", 50).split("\n")
    assert all(shown(x) <= 50 for x in lines) and shown(lines[0]) == 50, lines
    # A wide character the last column cannot hold starts the next line; the space before it goes.
    assert wrap("abcdefgh \u6f22\u6f22\u6f22\u6f22\u6f22\u6f22", 10) == "abcdefgh\n    \u6f22\u6f22\u6f22\n    \u6f22\u6f22\u6f22"
    # On ASCII it is textwrap's fill, chunk for chunk (the same lines, textwrap's quirks included).
    rng = __import__("random").Random(7)
    for _ in range(2000):
        words = ["x" * rng.choice([rng.randint(1, 8), rng.randint(1, 120)]) for _ in range(rng.randint(1, 20))]
        text = " " * rng.randint(0, 4) + "".join(w + " " * rng.randint(1, 3) for w in words).rstrip()
        width, indent = rng.randint(40, 100), " " * rng.randint(0, 19)
        assert _wrap_shown(text, width, indent) == (textwrap.wrap(
            text, width, subsequent_indent=indent, break_long_words=True, break_on_hyphens=False) or [""])
