"""The JSON the commands print against the schemas `apsi schema COMMAND` prints (jsonschema).

Owns the contract between each command's JSON output (`apsi plan --json`, `apsi run FILE --format
json`, `apsi frontier ... --json`, `apsi serve ... --json`) and its schema: real output validates,
and the same output with one key added, removed or of the wrong type does not, so each check can
fail. Commands run in-process through apsi.cli.app.main (the `apsi` fixture in conftest.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from apsi.model import schema as models
from apsi.outputs import schema as outputs
from apsi.model import serve_schema as serving_models

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _validator(apsi, command: str) -> Draft202012Validator:
    run = apsi("schema", command)
    assert run.code == 0, run.why()
    document = json.loads(run.out)
    Draft202012Validator.check_schema(document)  # the schema is itself valid JSON Schema
    return Draft202012Validator(document)


def _valid(validator: Draft202012Validator, value) -> bool:
    return not list(validator.iter_errors(value))


def _json(apsi, *args: str, code: int = 0):
    run = apsi(*args)
    assert run.code == code, run.why()
    return json.loads(run.out)


# -- apsi schema ------------------------------------------------------------------------------


def test_schema_defaults_to_the_plan_and_matches_the_api(apsi) -> None:
    default = _json(apsi, "schema")
    assert default == _json(apsi, "schema", "plan") == outputs.json_schema("plan")
    assert default["title"] == "Plan"
    for command, title in (("run", "RunOutput"), ("frontier", "FrontierOutput"), ("serve", "ServePlan"),
                           ("serve-frontier", "ServeFrontierOutput"), ("serve-reference", "ServingPlan")):
        document = _json(apsi, "schema", command)
        assert document["title"] == title
        assert document == outputs.json_schema(command)
        assert document["$schema"] == outputs.JSON_SCHEMA_DIALECT


def test_schema_of_an_unknown_command_is_one_line_and_exit_2(apsi) -> None:
    run = apsi("schema", "frontiers")
    assert run.code == 2, run.why()
    assert run.out == ""
    assert run.err.count("\n") == 1
    assert "unknown schema 'frontiers'" in run.err and "plan, run, frontier, serve, serve-frontier, serve-reference" in run.err


def _own_models() -> set[str]:
    """Names of the models defined in apsi.model.schema, apsi.outputs.schema and apsi.model.serve_schema."""
    return {name for module in (models, outputs, serving_models) for name, value in vars(module).items()
            if isinstance(value, type) and value.__module__ == module.__name__}


@pytest.mark.parametrize("command", ["plan", "run", "frontier", "serve", "serve-frontier", "serve-reference"])
def test_every_field_of_apsis_own_models_has_a_description(command: str) -> None:
    document = outputs.json_schema(command)
    definitions = {document["title"]: document, **document.get("$defs", {})}
    own = _own_models()
    checked, missing = 0, []
    for name, definition in definitions.items():
        if name not in own:
            continue  # Architecture and ParameterParts describe themselves in their own modules
        for field, prop in definition.get("properties", {}).items():
            checked += 1
            if not prop.get("description"):
                missing.append(f"{name}.{field}")
    assert checked > 0
    assert missing == []


def _documented_models() -> list[type]:
    """Every Documented model apsi defines (the result models, the disaggregated plan, the fleet's)."""
    import importlib

    from apsi.model.documented import Documented

    for module in ("apsi.model.disagg_schema", "apsi.fleets.spec", "apsi.fleets.result", "apsi.fleets.conflicts",
                   "apsi.fleets.purchase", "apsi.fleets.options", "apsi.outputs.schema"):
        importlib.import_module(module)
    found, todo = [], [Documented]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub.__module__.startswith("apsi.") and sub not in found:
                found.append(sub)
                todo.append(sub)
    return found


def test_each_fields_description_is_its_docstring_as_pydantic_reads_it() -> None:
    # apsi.model.documented reads each module's source once where pydantic's
    # use_attribute_docstrings reads it again per class; pydantic's own reader is the oracle.
    from pydantic._internal._docs_extraction import extract_docstrings_from_cls

    models_seen, fields_seen = 0, 0
    for model in _documented_models():
        models_seen += 1
        for name, doc in extract_docstrings_from_cls(model, use_inspect=True).items():
            if name in model.model_fields:
                fields_seen += 1
                assert model.model_fields[name].description == doc, f"{model.__qualname__}.{name}"
    assert models_seen >= 30 and fields_seen >= 300, (models_seen, fields_seen)


def test_fixed_outputs_forbid_extra_keys() -> None:
    document = outputs.json_schema("run")
    for name in ("RunRow", "RunFailure", "Layout", "MemoryBreakdown", "ServingPlan"):
        assert document["$defs"][name]["additionalProperties"] is False, name
    assert outputs.json_schema("serve")["additionalProperties"] is False
    assert outputs.json_schema("serve-reference")["additionalProperties"] is False
    assert outputs.json_schema("frontier")["$defs"]["FrontierPoint"]["additionalProperties"] is False


# -- apsi plan --json ---------------------------------------------------------------------------

PLANS = {
    "megatron": ["deepseek-v3", "--precision", "fp8"],
    "megatron-gpu-choice": ["70B", "--gpu", "H100,B200"],
    "torchtitan": ["llama-3.1-70b", "--tokens", "15T", "--framework", "torchtitan"],
    "deepspeed": ["llama-3.1-8b", "--framework", "deepspeed", "--zero", "2"],
    "reference": ["1T", "--active", "32B", "--tokens", "15T", "--precision", "fp8", "--framework", "reference"],
}


@pytest.fixture(scope="module")
def plan_validator():
    return Draft202012Validator(outputs.json_schema("plan"))


@pytest.mark.parametrize("name", list(PLANS))
def test_plan_json_validates_against_the_plan_schema(apsi, name: str) -> None:
    validator = _validator(apsi, "plan")
    plan = _json(apsi, "plan", *PLANS[name], "--json")
    assert _valid(validator, plan), [e.message for e in validator.iter_errors(plan)]
    assert plan["framework"] == name.split("-")[0]
    # The same plan with one key too many, at the top or in the layout, or one missing, is refused.
    for broken in (dict(plan, extra=1), {k: v for k, v in plan.items() if k != "gpus"},
                   dict(plan, layout=dict(plan["layout"], tp_size=8)), dict(plan, gpus="520")):
        assert not _valid(validator, broken)


def test_the_reference_plan_carries_levers_and_a_megatron_one_a_gpu_choice(apsi) -> None:
    # Each plan above exercises the schema's optional parts: levers (the reference arithmetic
    # gives them by default), the choice between GPU types, MoE degrees (DeepSeek-V3: EP > 1).
    reference = _json(apsi, "plan", *PLANS["reference"], "--json")
    assert reference["levers"], "the reference plan lists its levers"
    assert _json(apsi, "plan", *PLANS["megatron-gpu-choice"], "--json")["gpu_choice"] is not None
    assert _json(apsi, "plan", *PLANS["megatron"], "--json")["layout"]["ep"] > 1


# -- apsi run --format json ---------------------------------------------------------------------


@pytest.mark.parametrize("example", ["frameworks.yaml", "reference-table.yaml", "megatron-layouts.yaml",
                                     "chinchilla-ladder.yaml"])
def test_run_json_validates_against_the_run_schema(apsi, example: str, plan_validator) -> None:
    validator = _validator(apsi, "run")
    rows = _json(apsi, "run", str(EXAMPLES / example), "--format", "json", "--jobs", "1")
    assert rows and _valid(validator, rows), [e.message for e in validator.iter_errors(rows)]
    assert all(list(row)[0] == "name" for row in rows)  # the run's name first, then the Plan
    # Each row is a plan with its name: without the name it is exactly a Plan (what the plan
    # schema refuses today is the `name` key alone).
    first = rows[0]
    assert not _valid(plan_validator, first)
    assert _valid(plan_validator, {k: v for k, v in first.items() if k != "name"})
    for broken in ([dict(first, extra=1)], [{k: v for k, v in first.items() if k != "name"}],
                   [dict(first, name=7)], first):
        assert not _valid(validator, broken)
    # The output is the models' dump: read back and dumped again, it is the same JSON.
    assert outputs.RunOutput.model_validate(rows).model_dump(mode="json") == rows


def test_a_failing_run_costs_only_its_own_row(apsi, tmp_path: Path) -> None:
    scenario = tmp_path / "runs.yaml"
    scenario.write_text("defaults:\n  framework: reference\n  tokens: 1.4T\nruns:\n"
                        "  - {name: good, params: 70B}\n"
                        "  - {name: bad, params: 70B, precision: fp9}\n"
                        "  - {name: also good, params: 21B}\n")
    validator = _validator(apsi, "run")
    rows = _json(apsi, "run", str(scenario), "--format", "json", "--jobs", "1", code=1)
    assert _valid(validator, rows), [e.message for e in validator.iter_errors(rows)]
    assert [r["name"] for r in rows] == ["good", "bad", "also good"]
    bad = rows[1]
    assert set(bad) == {"name", "error", "inputs"}
    assert "fp9" in bad["error"] and "bf16" in bad["error"]  # what was wrong, and what is valid
    assert bad["inputs"]["precision"] == "fp9" and bad["inputs"]["params"] == "70B"
    # The good runs are the plans `apsi plan` gives for the same inputs.
    for row, params in ((rows[0], "70B"), (rows[2], "21B")):
        alone = _json(apsi, "plan", params, "--framework", "reference", "--tokens", "1.4T", "--no-levers", "--json")
        assert {k: row[k] for k in ("gpus", "layout", "days")} == {k: alone[k] for k in ("gpus", "layout", "days")}
    # A failure row with a plan's key, or without its inputs, is refused.
    for broken in (dict(bad, gpus=8), {k: v for k, v in bad.items() if k != "inputs"}, dict(bad, error=None)):
        assert not _valid(validator, [rows[0], broken])


# -- apsi frontier --json -----------------------------------------------------------------------


@pytest.mark.parametrize("args", [
    ["70B", "--tokens", "1.4T", "--framework", "reference"],
    ["llama-3.1-8b"],  # Megatron's frontier: the exact walks, whole nodes
], ids=["reference", "megatron"])
def test_frontier_json_validates_against_the_frontier_schema(apsi, args: list[str]) -> None:
    validator = _validator(apsi, "frontier")
    points = _json(apsi, "frontier", *args, "--json")
    assert len(points) > 1 and _valid(validator, points), [e.message for e in validator.iter_errors(points)]
    first = points[0]
    for broken in ([dict(first, extra=1)], [{k: v for k, v in first.items() if k != "days"}],
                   [dict(first, layout=dict(first["layout"], foo=1))], [dict(first, target_met="yes")], first):
        assert not _valid(validator, broken)
    assert outputs.FrontierOutput.model_validate(points).model_dump(mode="json") == points


# -- apsi serve --json --------------------------------------------------------------------------


@pytest.mark.parametrize("schema, args", [
    ("serve", ["70B"]), ("serve", ["deepseek-v3", "--precision", "fp8", "--gpu", "H200", "--rate", "5"]),
    ("serve", ["llama-3.1-70b", "--precision", "fp8", "--inventory", "H100=8,H200=8", "--rate", "20"]),
    ("serve-reference", ["70B", "--framework", "reference"]),
    ("serve-reference", ["deepseek-v3", "--precision", "fp8", "--batch", "8", "--framework", "reference"]),
    # --disagg prints a DisaggPlan, which the serve schema refused (its pools' fields): its own.
    ("serve-disagg", ["llama-3.1-70b", "--precision", "fp8", "--ttft", "500", "--rate", "10", "--disagg"]),
], ids=["size", "preset", "inventory", "reference-size", "reference-preset", "disagg"])
def test_serve_json_validates_against_the_serve_schema(apsi, schema: str, args: list[str]) -> None:
    validator = _validator(apsi, schema)
    serving = _json(apsi, "serve", *args, "--json")
    assert _valid(validator, serving), [e.message for e in validator.iter_errors(serving)]
    for broken in (dict(serving, extra=1), {k: v for k, v in serving.items() if k != "gpus"},
                   dict(serving, gpus="13"), [serving]):
        assert not _valid(validator, broken)

