"""Tests for scenario files (apsi.api.scenarios, apsi.outputs.tables, `apsi run`).

Expected plans come from the reference arithmetic (its table of plans),
with the tolerances of the planner core; other expectations are counts worked out by hand in
the comments (a product of list lengths, a line number in the file under test).
"""

from __future__ import annotations

import csv
import inspect
import io
import json
import re
from pathlib import Path

import pytest

from apsi import ApsiError, plan, run_scenarios
from apsi.api import scenario_file, scenarios
from apsi.outputs import tables
from apsi.inputs.question import resolve

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def write(tmp_path: Path, text: str, name: str = "s.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def without_levers(item: dict) -> dict:
    """A plan dump without `levers` (what-if plans `apsi plan` adds by default, plan() does not)."""
    return {k: v for k, v in item.items() if k != "levers"}


# -- keys, types and shapes ----------------------------------------------------------------------


def test_run_keys_are_plans_keywords():
    # A run may set every keyword plan() takes: resolve()'s, except the per-file catalog and the
    # internal serving_only, plus levers, which plan() handles itself, and the architecture fields
    # that resolve() takes as **architecture.
    from apsi.inputs.modelspec import ARCHITECTURE_OPTIONS
    from apsi.api.plan import FRAMEWORK_KNOBS

    keywords = (set(inspect.signature(resolve).parameters) - {"catalog", "serving_only", "architecture"}
                | {"levers", "framework", "batch_tolerance"} | set(FRAMEWORK_KNOBS) | set(ARCHITECTURE_OPTIONS))
    assert set(scenario_file.RUN_KEYS) == keywords


def test_unknown_key_names_run_key_line_and_valid_keys(tmp_path):
    path = write(tmp_path, "runs:\n  - name: big\n    params: 70B\n    gpuz: H100\n")
    [result] = scenarios.load(path)
    # 'gpuz' is on line 4 of the file above.
    assert result.error.startswith("run 'big' (line 4): unknown key 'gpuz': did you mean gpu? valid: name, kind, "
                                   "params")
    assert all(key in result.error for key in scenario_file.RUN_KEYS)


@pytest.mark.parametrize("key, suggestion", [("serve", "kind: serve"), ("tensor_parallel", "tp"),
                                             ("pipeline_model_parallel_size", "pp"), ("num_layers", "layers")])
def test_another_tools_name_suggests_apsis(tmp_path, key, suggestion):
    # `serve: true` once got "did you mean levers?" and tensor_parallel "sequence_parallel"
    # (apsi.errors.ALIASES: Megatron's and Hugging Face's names for apsi's).
    path = write(tmp_path, f"runs:\n  - name: a\n    params: 70B\n    {key}: 2\n")
    [result] = scenarios.load(path)
    assert f"unknown key {key!r}: did you mean {suggestion}? valid: " in result.error


@pytest.mark.parametrize(("line", "pattern"), [
    ("days: {a: 1}", r"days must be a number or a string .* got \{'a': 1\} \(a mapping\)"),
    ("gpu: true", r"gpu must be .* got True \(true/false\)"),
    ("days: 2024-01-01", r"days must be .* \(a date value\)"),
    ("precision: [bf16, [fp8]]", r"precision lists \['fp8'\] \(a list\)"),
    ("gpu: []", r"gpu is an empty list"),
    ("name: [a, b]", r"name must be a one-line string, got \['a', 'b'\]"),
    ('name: "two\\nlines"', r"name must be a one-line string, got 'two\\nlines'"),
    ("levers: 1", r"levers must be true or false .* got 1 \(a number\)"),
])
def test_wrong_types_are_the_runs_error(tmp_path, line, pattern):
    path = write(tmp_path, f"runs:\n  - params: 7B\n    {line}\n")
    [result] = scenarios.load(path)
    assert result.plan is None
    assert result.error.startswith("run 'run 1' (line 3): ")  # the bad key is on line 3
    assert re.search(pattern, result.error), result.error


@pytest.mark.parametrize(("text", "pattern"), [
    ("", r"is empty: a scenario needs a 'runs:' list"),
    ("# only a comment\n", r"is empty"),
    ("- params: 7B\n", r"must be a mapping with a 'runs:' list, got a list"),
    ("runs: []\n", r"'runs' is empty"),
    ("defaults: {days: 30}\n", r"'runs' is missing"),
    ("runs: {params: 7B}\n", r"'runs' is a mapping"),
    ("runs:\n  - params: [7B\n", r"is not valid YAML at line 3"),
    ("runs:\n  - {params: 7B}\nrunz: 1\n", r"\(line 3\): unknown top-level key 'runz': did you mean runs\?"),
    ("defaults: {gpuz: H100}\nruns: [{params: 7B}]\n", r"defaults \(line 1\): unknown key 'gpuz'"),
    ("defaults: {name: x}\nruns: [{params: 7B}]\n", r"defaults \(line 1\): unknown key 'name'"),
    ("runs:\n  - params: 7B\n    params: 8B\n", r"line 3: key 'params' appears twice \(first on line 2\)"),
    ("runs: [{params: 7B}]\nevil: !!python/object/apply:os.system [echo]\n", r"not valid YAML"),
    ("catalog: missing.yaml\nruns: [{params: 7B}]\n", r"catalog file .*missing.yaml does not exist"),
])
def test_bad_files_raise_one_line(tmp_path, text, pattern):
    path = write(tmp_path, text)
    with pytest.raises(scenario_file.ScenarioError, match=pattern) as caught:
        run_scenarios(path, jobs=1)
    assert "\n" not in str(caught.value)


def test_bad_file_exits_2_with_one_line(tmp_path, apsi):
    for path in (write(tmp_path, ""), tmp_path / "absent.yaml", tmp_path):
        run = apsi("run", str(path))
        assert run.code == 2, run.why()
        assert run.out == "" and run.err.count("\n") == 1 and run.err.startswith("error: "), run.why()
    binary = tmp_path / "b.yaml"
    binary.write_bytes(b"\xff\xfe\x00runs")
    run = apsi("run", str(binary))
    assert run.code == 2 and "is not UTF-8 text" in run.err, run.why()


@pytest.mark.parametrize(("catalog", "pattern"), [
    ('"x\\0"', r"catalog file '.*x\\x00' cannot be used: embedded null byte$"),
    ("loop-a.yaml", r"catalog file '.*loop-a\.yaml' cannot be used: .*(loop|symbolic links)"),
    ("folder", r"catalog file .*folder is a directory: give a regular YAML file$"),
])
def test_catalog_paths_that_cannot_be_a_file_are_one_line(tmp_path, apsi, catalog, pattern):
    # A NUL byte, a symlink loop and a directory as the file's `catalog:` are the scenario's
    # problem: one line naming the file and the path, exit 2, as a missing catalog is.
    (tmp_path / "loop-a.yaml").symlink_to("loop-b.yaml")
    (tmp_path / "loop-b.yaml").symlink_to("loop-a.yaml")
    (tmp_path / "folder").mkdir()
    path = write(tmp_path, f"catalog: {catalog}\nruns:\n  - {{params: 7B}}\n")
    with pytest.raises(scenario_file.ScenarioError, match=rf"^scenario file .*s\.yaml: {pattern}") as caught:
        scenarios.load(path)
    assert "\n" not in str(caught.value)
    run = apsi("run", str(path))
    assert run.code == 2, run.why()
    assert run.out == "" and run.err == f"error: {caught.value}\n", run.why()


def test_config_paths_that_cannot_be_read_cost_only_their_run(tmp_path):
    # A run whose params is a path with a NUL byte, a symlink loop, a link to nothing or a folder
    # without config.json keeps one line naming the run and the problem; the other runs load.
    (tmp_path / "loop-a.json").symlink_to("loop-b.json")
    (tmp_path / "loop-b.json").symlink_to("loop-a.json")
    (tmp_path / "gone.json").symlink_to("absent/config.json")
    (tmp_path / "empty").mkdir()
    path = write(tmp_path, 'runs:\n  - {name: nul, params: "x\\0.json"}\n  - {name: loop, params: loop-a.json}\n'
                           "  - {name: gone, params: gone.json}\n  - {name: folder, params: empty}\n"
                           "  - {name: good, params: 7B, framework: reference, levers: false}\n")
    results = run_scenarios(path, jobs=1)
    link = "cannot be read: a symbolic link to no file (a loop or a missing target)"
    expected = [
        r"run 'nul' \(line 2\): params 'x\\x00\.json' cannot be read: a path cannot hold a NUL byte; ",
        rf"run 'loop' \(line 3\): params '.*loop-a\.json' {re.escape(link)}; ",
        rf"run 'gone' \(line 4\): params '.*gone\.json' {re.escape(link)}; ",
        r"run 'folder' \(line 5\): .*empty has no config\.json: give a Hugging Face model folder or its config\.json$",
    ]
    for result, pattern in zip(results, expected):
        assert result.plan is None and re.match(pattern, result.error), result.error
        assert "\n" not in result.error
    good = results[-1]
    assert good.error is None and good.plan == plan("7B", framework="reference")


def test_non_mapping_runs_are_errors_and_others_still_load(tmp_path):
    path = write(tmp_path, "runs:\n  - 42\n  - just text\n  - {params: 7B}\n")
    results = scenarios.load(path)
    assert [r.error for r in results[:2]] == [
        "run 'run 1' (line 2) is a number, not a mapping of plan() keywords such as 'params: 70B'",
        "run 'run 2' (line 3) is a string, not a mapping of plan() keywords such as 'params: 70B'"]
    assert results[2].error is None and results[2].inputs == {"params": "7B"}


def test_missing_params_and_duplicate_names(tmp_path):
    path = write(tmp_path, "runs:\n  - {gpu: H100}\n  - {name: a, params: 7B}\n  - {name: a, params: 8B}\n")
    missing, first, second = scenarios.load(path)
    assert "params is missing" in missing.error
    assert first.error is None
    assert second.error == ("run 'a' (line 4): the name 'a' is already used (line 3): "
                            "give each run its own name")


def test_a_name_taken_by_an_unnamed_run_says_so(tmp_path):
    # The message pointed at line 2, where no name is written: the unnamed run there is "run 1".
    path = write(tmp_path, "runs:\n  - {params: 7B}\n  - {name: run 1, params: 8B}\n")
    first, second = scenarios.load(path)
    assert first.name == "run 1" and first.error is None
    assert second.error == ("run 'run 1' (line 3): the name 'run 1' is already used (line 2, the name given to an "
                            "unnamed run): give each run its own name")


def test_a_null_kind_is_the_default_kind(tmp_path):
    # null puts a key back to the function's default (docs/scenarios.md): kind's is train, over the
    # file's defaults; it was refused as "unknown kind None".
    path = write(tmp_path, "defaults: {kind: null}\nruns:\n  - {name: a, kind: null, params: 7B}\n")
    (run,) = scenarios.load(path)
    assert run.error is None and run.kind == "train" and "kind" not in run.inputs


# -- expansion -----------------------------------------------------------------------------------


def test_lists_expand_to_their_product_with_distinct_names(tmp_path):
    path = write(tmp_path, "runs:\n  - name: m\n    params: 7B\n"
                           "    gpu: [H100, H200, B200]\n    precision: [bf16, fp8]\n")
    results = scenarios.load(path)
    # 3 GPUs x 2 precisions = 6 runs, names in product order (last key fastest).
    assert [r.name for r in results] == [
        "m gpu=H100 precision=bf16", "m gpu=H100 precision=fp8", "m gpu=H200 precision=bf16",
        "m gpu=H200 precision=fp8", "m gpu=B200 precision=bf16", "m gpu=B200 precision=fp8"]
    assert results[3].inputs == {"params": "7B", "gpu": "H200", "precision": "fp8"}
    assert {r.line for r in results} == {2}


def test_defaults_layer_under_runs_and_null_restores_plans_default(tmp_path):
    path = write(tmp_path, "defaults:\n  days: [30, 60]\n  gpu: B200\nruns:\n"
                           "  - {name: a, params: 7B}\n  - {name: b, params: 7B, days: 45}\n"
                           "  - {name: c, params: 7B, gpu: null, days: 30}\n")
    a30, a60, b, c = scenarios.load(path)
    # The defaults' list of two deadlines expands run a into 2; b and c override it with one value.
    assert (a30.name, a60.name, a60.inputs) == ("a days=30", "a days=60", {"params": "7B", "gpu": "B200", "days": 60})
    assert (b.name, b.inputs["days"]) == ("b", 45)
    assert c.inputs == {"params": "7B", "days": 30}


def test_expansion_is_capped(tmp_path):
    sizes = ", ".join(f"{n}B" for n in range(1, 101))
    path = write(tmp_path, f"runs:\n  - params: [{sizes}]\n    seq: [{sizes}]\n    days: [{sizes}]\n")
    # 100 x 100 x 100 = 1,000,000 runs, past MAX_RUNS.
    with pytest.raises(scenario_file.ScenarioError, match=r"expands to 1,000,000 runs; at most 100,000"):
        scenarios.load(path)


# -- solving and output --------------------------------------------------------------------------

MIXED = """\
runs:
  - {name: 7B, params: 7B}
  - {name: typo, params: 7B, gpuz: H100}
  - {name: no such gpu, params: 7B, gpu: H1000}
  - {name: 21B, params: 21B, tokens: 420B, mfu: 0.4}
"""


def test_one_bad_run_among_good_ones(tmp_path, apsi):
    path = write(tmp_path, MIXED)
    run = apsi("run", str(path), "--format", "csv", "--jobs", "1")
    assert run.code == 1, run.why()
    rows = list(csv.DictReader(io.StringIO(run.out)))
    assert [r["name"] for r in rows] == ["7B", "typo", "no such gpu", "21B"]
    for row, params in ((rows[0], {"params": "7B"}), (rows[3], {"params": "21B", "tokens": "420B", "mfu": 0.4})):
        expected = plan(**params)
        assert (int(row["gpus"]), float(row["days"]), row["error"]) == (expected.gpus, expected.days, "")
    assert rows[1]["gpus"] == "" and "unknown key 'gpuz'" in rows[1]["error"]
    assert rows[2]["error"].startswith("run 'no such gpu' (line 4): unknown GPU 'H1000': did you mean H100?")
    assert run.err == "error: 2 of 4 runs failed; each one's row says why\n"
    # 21B dense, 420B tokens: 20 GPUs in the reference arithmetic's table; a framework plan keeps
    # whole nodes, 8 GPUs each on H100 (gpus.yaml), so the next multiple, 24.
    assert int(rows[3]["gpus"]) == 24


@pytest.mark.usefixtures("reference_default")  # the reference plan
def test_same_run_through_plan_cli_plan_and_cli_run(tmp_path, apsi):
    keywords = {"params": "1T", "active": "32B", "tokens": "15T", "precision": "fp8"}
    path = write(tmp_path, "runs:\n  - {name: ref, params: 1T, active: 32B, tokens: 15T, precision: fp8}\n")
    from_run = apsi("run", str(path), "--format", "json")
    from_plan = apsi("plan", "1T", "--active", "32B", "--tokens", "15T", "--precision", "fp8", "--json")
    assert from_run.code == 0 and from_plan.code == 0, from_run.why() + from_plan.why()
    [item] = json.loads(from_run.out)
    assert item.pop("name") == "ref"
    direct = plan(**keywords).model_dump(mode="json")
    assert without_levers(item) == without_levers(json.loads(from_plan.out)) == without_levers(direct)
    # Reference plan (the reference arithmetic): 520 x H100, 89.3 days.
    assert (item["gpus"], round(item["days"], 1)) == (520, 89.3)


def test_jobs_do_not_change_the_output(tmp_path, apsi):
    # 12 runs, more than PARALLEL_MIN_RUNS, so --jobs 2 really uses two worker processes.
    path = write(tmp_path, "runs:\n  - params: [1B, 3B, 7B, 13B]\n    gpu: [H100, B200, MI300X]\n"
                           "  - {name: bad, params: 7B, precision: fp4}\n")
    assert 12 > scenarios.PARALLEL_MIN_RUNS
    for fmt in ("table", "csv", "markdown", "json"):
        one, two = (apsi("run", str(path), "--format", fmt, "--jobs", jobs) for jobs in ("1", "2"))
        assert one.code == two.code == 1, one.why() + two.why()
        assert one.out == two.out and one.out.count("error: run 'bad'") == (fmt in ("table", "markdown"))


def test_runs_asking_the_same_question_are_solved_once_and_each_gets_its_answer(tmp_path, monkeypatch):
    # 2 x 2 runs written out, two pairs of the same question under other names, a fifth that asks
    # for 70B as "70b" (another key: solved on its own) and a sixth bad run twice.
    path = write(tmp_path, "runs:\n"
                           "  - {name: a, params: 7B, gpu: H100}\n  - {name: b, params: 7B, gpu: H100}\n"
                           "  - {name: c, params: 13B, gpu: H100, days: 30}\n  - {name: d, params: 13B, days: 30, gpu: H100}\n"
                           "  - {name: e, params: 7b, gpu: H100}\n"
                           "  - {name: f, params: 7B, precision: fp4}\n  - {name: g, params: 7B, precision: fp4}\n")
    asked = []
    solve_one = scenarios._solve
    monkeypatch.setattr(scenarios, "_solve", lambda task: asked.append(task) or solve_one(task))
    results = scenarios.solve(scenarios.load(path), jobs=1)
    assert len(asked) == 4  # a, c, e, f: the questions, each once
    by = {r.name: r for r in results}
    assert by["a"].plan is by["b"].plan and by["c"].plan is by["d"].plan
    assert by["e"].plan is not by["a"].plan and by["e"].plan.model.origin == "7b"  # the size as typed
    assert (by["e"].plan.gpus, by["e"].plan.days) == (by["a"].plan.gpus, by["a"].plan.days)
    assert by["a"].plan == plan(params="7B", gpu="H100")
    assert by["f"].plan is by["g"].plan is None
    assert by["f"].error.startswith("run 'f' (line 7): ") and by["g"].error.startswith("run 'g' (line 8): ")
    assert by["f"].error.split(": ", 1)[1] == by["g"].error.split(": ", 1)[1]
    assert scenarios.question_key(by["a"]) == scenarios.question_key(by["b"]) != scenarios.question_key(by["e"])


def test_runs_alike_share_a_batch_and_large_affinities_are_split():
    # Tasks 0, 2, 4 share one affinity, 1 and 3 another: with one worker, one batch per affinity;
    # with two, a batch holds at most ceil(5 / (2 workers x 4)) = 1 task, in the affinities' order.
    keys = ["a", "b", "a", "b", "a"]
    assert scenarios.affinity_batches(keys, 1) == [[0, 2, 4], [1, 3]]
    assert scenarios.affinity_batches(keys, 2) == [[0], [2], [4], [1], [3]]
    # 40 tasks, 2 workers: at most ceil(40 / 8) = 5 per batch; an affinity of 12 becomes 5 + 5 + 2.
    keys = ["x"] * 12 + ["y"] * 28
    batches = scenarios.affinity_batches(keys, 2)
    assert [len(b) for b in batches] == [5, 5, 2, 5, 5, 5, 5, 5, 3]
    assert sorted(t for b in batches for t in b) == list(range(40))
    # The affinity leaves out what moves only the target (days, tokens, objective): a deadline sweep
    # of one model on one GPU is one affinity; another GPU or optimizer is another.
    def key(**inputs):
        return scenarios.affinity_key(scenarios.Result(name="r", line=None, inputs=inputs))
    assert key(params="70B", gpu="H100", days=30) == key(params="70B", gpu="H100", days=90, objective="cost")
    assert key(params="70B", gpu="H100") != key(params="70B", gpu="B200") != key(params="70B", gpu="B200",
                                                                                optimizer="adam8bit")


def test_progress_reaches_every_run_with_two_workers(tmp_path):
    path = write(tmp_path, "runs:\n  - params: [1B, 3B, 7B]\n    gpu: [H100, B200, MI300X]\n    days: [30, 60]\n")
    seen = []
    results = scenarios.run_scenarios(path, jobs=2, progress=lambda done, total: seen.append((done, total)))
    assert len(results) == 18 > scenarios.PARALLEL_MIN_RUNS and all(r.plan is not None for r in results)
    assert seen[0] == (0, 18) and seen[-1] == (18, 18) and [d for d, _ in seen] == sorted(d for d, _ in seen)
    assert [r.name for r in results] == [r.name for r in scenarios.load(path)]  # file order


def test_output_file_and_bad_options(tmp_path, apsi):
    path = write(tmp_path, "runs:\n  - {params: 7B}\n")
    out = tmp_path / "out.md"
    run = apsi("run", str(path), "--format", "markdown", "--output", str(out))
    assert run.code == 0 and run.out == "", run.why()
    assert out.read_text().splitlines()[0].startswith("| name | GPU | GPUs |")
    for args, message in ((("--format", "xml"), "unknown format 'xml'"),
                          (("--jobs", "0"), "jobs must be a whole number from 1 to 1,024, got '0'"),
                          (("--output", str(tmp_path / "no" / "dir.csv")), "cannot write")):
        run = apsi("run", str(path), *args)
        assert run.code == 2 and message in run.err and run.err.count("\n") == 1, run.why()


def test_the_format_is_named_in_any_case_as_every_other_choice(tmp_path, apsi):
    # --format CSV was refused where --precision FP8 and --export Megatron were taken: the name is
    # matched in any case, for a plan, a scenario file and the Python renderers alike.
    from apsi.fleets.render import render as render_fleet
    from apsi.outputs.tables import render

    path = write(tmp_path, "runs:\n  - {params: 7B}\n")
    lower, upper = apsi("run", str(path), "--format", "csv"), apsi("run", str(path), "--format", "CSV")
    assert upper.code == 0 and upper.out == lower.out and upper.out.startswith("name,gpu,gpus,"), upper.why()
    plan = apsi("plan", "llama-3.1-8b", "--tokens", "1T", "--format", "Json")
    assert plan.code == 0 and plan.out.startswith("{"), plan.why()
    both = apsi("plan", "llama-3.1-8b", "--tokens", "1T", "--json", "--format", "JSON")
    assert both.code == 0 and both.out == plan.out, both.why()
    results = run_scenarios(path, jobs=1)
    assert render(results, "Markdown") == render(results, "markdown")
    with pytest.raises(ValueError, match="unknown format 'XML'"):
        render(results, "XML")
    with pytest.raises(ValueError, match="unknown format 'XML'"):
        render_fleet(None, "XML")  # type: ignore[arg-type]


def test_catalog_is_relative_to_the_scenario_file(tmp_path):
    (tmp_path / "cat").mkdir()
    write(tmp_path / "cat", "gpus:\n  H100-96:\n    memory_gib: 96\n    bf16_tflops: 989.4\n"
                            "    scaleup_domain: 8\n", name="gpus.yaml")
    path = write(tmp_path, "catalog: cat/gpus.yaml\nruns:\n  - {params: 7B, gpu: H100-96}\n")
    [result] = run_scenarios(path, jobs=1)
    assert result.ok and result.plan.gpu == "H100-96", result.error
    assert result.catalog == str((tmp_path / "cat" / "gpus.yaml").resolve())


def test_mapping_scenario_has_no_lines():
    [result] = run_scenarios({"runs": [{"params": "7B", "days": "soon"}]}, jobs=1)
    assert result.line is None and result.error.startswith("run 'run 1': days:")
    with pytest.raises(ApsiError, match="jobs must be a whole number"):
        run_scenarios({"runs": [{"params": "7B"}]}, jobs="two")


def test_table_and_markdown_show_errors_in_the_row():
    ok = scenarios.Result(name="a|b", line=1, inputs={"params": "7B"}, plan=plan("7B"))
    bad = scenarios.Result(name="c", line=2, inputs={}, error="run 'c' (line 2): x | y")
    table = tables.render([ok, bad], "table").splitlines()
    # The name column is as wide as its widest entry, "name" (4); then two spaces.
    assert table[2] == "c" + " " * 3 + "  error: run 'c' (line 2): x | y"
    md = tables.render([ok, bad], "markdown").splitlines()
    assert md[2].startswith("| a\\|b | H100 |") and md[3].startswith("| c | error: run 'c' (line 2): x \\| y |")
    # Header and separator rows have one cell per column: name + COLUMNS.
    assert md[0].count(" | ") == md[3].count(" | ") == len(tables.COLUMNS)


def test_table_energy_keeps_three_figures_below_100_mwh():
    # A 1B-token run of Llama 3.2 1B takes about 0.004 MWh (8 x H100 for minutes): the table used
    # to print it as "0". Whole MWh from 100 up, three significant figures below.
    ok = scenarios.Result(name="tiny", line=1, inputs={}, plan=plan("llama-3.2-1b", tokens="1B"))
    energy = ok.plan.energy_mwh
    assert 0 < energy < 0.1
    cell = tables.render([ok], "table").splitlines()[1].split()[-1]
    assert cell != "0" and abs(float(cell) / energy - 1) < 0.005
    assert tables._energy(2277.4) == "2,277" and tables._energy(99.94) == "99.9" and tables._energy(None) == "-"


def test_progress_bar_only_on_a_terminal_with_many_runs(monkeypatch):
    import time

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setenv("NO_COLOR", "1")
    shown, hidden, few = Terminal(), io.StringIO(), Terminal()
    bar, quiet, short = tables.ProgressBar(shown), tables.ProgressBar(hidden), tables.ProgressBar(few)
    for done in range(10):
        bar(done, 9)
        quiet(done, 9)
        short(done, tables.PROGRESS_MIN_RUNS)
        time.sleep(0.01)
    assert hidden.getvalue() == "" and few.getvalue() == ""
    out = shown.getvalue()
    # 9 runs > PROGRESS_MIN_RUNS: rich's bar counts them and, after the first, estimates the rest
    # (h:mm:ss); NO_COLOR leaves out colour codes ("\x1b[3xm"); it erases itself at the end.
    assert "4/9 runs, 0:00:0" in out and " left" in out
    assert "\x1b[3" not in out and "\x1b[9" not in out
    assert out.endswith("\x1b[1A\x1b[2K")  # the cursor back up to the bar's line, and the line cleared


# -- examples/ -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def example_results() -> dict[str, list[scenarios.Result]]:
    from apsi.fleets.spec import has_fleet

    # A file with a fleet: block is planned as one fleet (tests/test_fleet.py), not run by run.
    return {path.name: run_scenarios(path, jobs=2) for path in sorted(EXAMPLES.glob("*.yaml")) if not has_fleet(path)}


def test_every_example_solves(example_results):
    assert len(example_results) >= 4
    for name, results in example_results.items():
        assert results and all(r.ok for r in results), (name, [r.error for r in results if not r.ok])


def test_reference_table(example_results):
    rows = {r.name: r.plan for r in example_results["reference-table.yaml"]}
    # Expected values: the reference arithmetic's table, within the planner core's tolerances.
    p = rows["21B dense"]  # "20 GPUs, about 88 days"
    assert p.gpus == 20 and 86 <= p.days <= 88
    p = rows["70B dense"]  # "208 GPUs (8 x 26), about 89 days"
    assert (p.gpus, p.layout.tp, p.layout.dp) == (208, 8, 26) and 88.5 <= p.days <= 89.5
    p = rows["1T MoE fp8"]  # "520 GPUs, about 89 days"; the reference plan prints 89.3 days
    assert p.gpus == 520 and p.days == pytest.approx(89.3, abs=0.05)
    p = rows["2T MoE B200 fp8"]  # "226 B200, about 15 days": memory decides, far inside 90 days
    assert p.binding == "memory" and p.target_met and p.days < 45
    p = rows["2T dense B200 fp8"]  # "31,248 B200, about 103 days" with a 16M batch (3,906 x 4,096)
    assert not p.target_met and p.gpus == 31_248 and (p.layout.tp, p.layout.dp) == (8, 3_906)
    assert 101 <= p.days <= 103
    p = rows["2T dense H100"]  # "~500 days": not met, hundreds of days
    assert not p.target_met and p.days >= 200


def test_reference_table_formats_agree(example_results):
    results = example_results["reference-table.yaml"]
    as_json = json.loads(tables.render(results, "json"))
    as_csv = list(csv.DictReader(io.StringIO(tables.render(results, "csv"))))
    md = [line.split(" | ") for line in tables.render(results, "markdown").splitlines()[2:]]
    text = tables.render(results, "table").splitlines()[1:]
    for r, j, c, m, t in zip(results, as_json, as_csv, md, text, strict=True):
        assert (j["name"], j["gpus"], j["days"]) == (c["name"], int(c["gpus"]), float(c["days"]))
        assert r.plan.gpus == j["gpus"] and r.plan.days == j["days"]
        assert m[2] == f"{j['gpus']:,}" and m[7] == f"{j['days']:,.2f}"
        assert t.startswith(r.name) and f"{j['gpus']:,}" in t and f"{j['days']:,.2f}" in t


def test_a_run_refused_for_a_key_keeps_its_other_inputs(tmp_path):
    # Its CSV row once lost every input_* column: the known keys' checked values stay with it.
    path = write(tmp_path, "runs:\n  - {name: ok, params: 7B, gpu: H100}\n  - {name: bad, params: 7B, days: 30, "
                           "gpuz: H100, tokens: [1T, 2T]}\n")
    ok, bad = scenarios.load(path)
    assert bad.error.startswith("run 'bad' (line 3): unknown key 'gpuz'")
    assert bad.inputs == {"params": "7B", "days": 30}  # the list, never expanded, is left out


def test_the_run_csv_has_the_counted_parameters_framework_mfu_and_step_time(tmp_path):
    # Each solved row carries what the plan planned: the counted parameters (total and active),
    # the framework, its MFU and its step seconds (apsi.outputs.tables.CSV_ONLY); a failed row leaves them empty.
    import csv
    import io

    from apsi import plan
    from apsi.outputs.tables import to_csv

    path = write(tmp_path, "runs:\n  - {name: a, params: 7B, gpu: H100}\n  - {name: b, params: 7B, gpu: X}\n")
    results = scenarios.solve(scenarios.load(path), jobs=1)
    a, b = csv.DictReader(io.StringIO(to_csv(results)))
    p = plan("7B", gpu="H100")
    assert (int(a["params"]), int(a["active_params"]), a["framework"]) == (p.model.params, p.model.active_params,
                                                                        "megatron")
    assert float(a["mfu"]) == p.mfu and float(a["step_seconds"]) == p.step_seconds
    assert b["params"] == b["framework"] == b["step_seconds"] == "" and b["error"]


def test_a_yaml_list_of_recompute_modules_is_one_run_and_a_list_of_lists_expands(tmp_path) -> None:
    # recompute_modules is a set of names (Megatron's --recompute-modules core_attn mlp): written as
    # a YAML list it expanded into one run per module. A list of names is one value now, and a list
    # of such lists one run each (scenario_file.SET_KEYS).
    text = ("runs:\n"
            "  - {name: one, params: llama-3.1-8b, tokens: 100B, recompute: selective,\n"
            "     recompute_modules: [core_attn, mlp]}\n"
            "  - {name: two, params: llama-3.1-8b, tokens: 100B, recompute: selective,\n"
            "     recompute_modules: [[core_attn], [core_attn, mlp]]}\n")
    rows = run_scenarios(write(tmp_path, text), jobs=1)
    assert [r.name for r in rows] == ["one", "two recompute_modules=core_attn", "two recompute_modules=core_attn,mlp"]
    one = plan("llama-3.1-8b", tokens="100B", recompute="selective", recompute_modules="core_attn,mlp")
    assert rows[0].plan.layout == rows[2].plan.layout == one.layout
    assert rows[0].plan.memory_per_gpu_gib == one.memory_per_gpu_gib != rows[1].plan.memory_per_gpu_gib


def test_lists_take_null_once_each_and_names_and_inventories_as_documented(tmp_path) -> None:
    # "null puts a key back to plan()'s default" held for a value, not in a list ("days lists None
    # (null)") nor for name; a value listed twice made a second run of the same name, refused as
    # "already used"; an empty recompute_modules spoke of expansion; a serving run's inventory
    # mapping was refused though serve() takes one.
    text = ("runs:\n"
            "  - {name: a, params: 7B, tokens: 100B, framework: reference, days: [30, null]}\n"
            "  - {name: b, params: 7B, tokens: 100B, framework: reference, tp: [1, 1]}\n"
            "  - {name: null, params: 7B, tokens: 100B, framework: reference}\n"
            "  - {name: c, params: llama-3.1-8b, tokens: 100B, recompute: selective, recompute_modules: []}\n"
            "  - {name: s, kind: serve, params: llama-3.1-8b, rate: 10, inventory: {H100: 16}}\n")
    rows = run_scenarios(write(tmp_path, text), jobs=1)
    by = {r.name: r for r in rows}
    assert by["a days=null"].plan == plan("7B", tokens="100B", framework="reference")
    assert by["a days=30"].plan == plan("7B", tokens="100B", framework="reference", days=30)
    assert by["b"].error == "run 'b' (line 3): tp lists 1 twice: give each value once"
    assert by["run 3"].error is None
    assert by["c"].error.endswith("recompute_modules is an empty list: give the modules it names (such as "
                                  "[core_attn, mlp])")
    from apsi import serve

    assert by["s"].error is None and by["s"].serve.gpus == serve("llama-3.1-8b", rate=10, inventory={"H100": 16}).gpus


def test_an_inventory_listed_as_mappings_is_refused_for_what_it_is(tmp_path) -> None:
    # A list expands to one run per value, so `inventory: [{H100: 8}, {H200: 4}]` would be two
    # runs of one type each, where its writer most likely meant one inventory of both; it was
    # refused as "inventory lists {'H100': 8} (a mapping): each listed value must be a number or a
    # string", naming neither reading. A list of NAME=COUNT strings compares inventories.
    text = ("runs:\n"
            "  - {name: m, kind: serve, params: llama-3.1-8b, rate: 5, inventory: [{H100: 8}, {H200: 4}]}\n"
            "  - {name: s, kind: serve, params: llama-3.1-8b, rate: 5, inventory: [H100=8, 'H100=8,H200=4']}\n")
    rows = run_scenarios(write(tmp_path, text), jobs=1)
    by = {r.name: r for r in rows}
    assert by["m"].error == ("run 'm' (line 2): inventory lists a mapping: give one inventory as one mapping "
                             "({H100: 8, H200: 4}), or several to compare as a list of NAME=COUNT strings "
                             "([H100=8, 'H100=8,H200=4'])")
    assert by["s inventory=H100=8"].error is None and by["s inventory=H100=8,H200=4"].error is None
