"""The `apsi` commands beyond planning: models, gpus, export, compare, schema and run.

Owns those commands' typer functions, added to apsi.cli's app by register(); each forwards its
options 1:1 to the API (apsi.scale, apsi.export, apsi.scenarios) and prints what the API returns
through apsi.render or apsi.tables. Nothing here computes a plan or formats numbers, and nothing
heavier than typer is imported before a command runs (`apsi --help` stays fast).
"""

from __future__ import annotations

import os
import sys
from typing import Any, Optional

import typer

from apsi.cli_options import (
    _ACTIVE, _CATALOG, _GPU, _PARAMS, EXIT_RUN_FAILED, Inputs, _architecture_options, _call, _check_output, _exit_help,
    _Fail, _format, _missed, _options, _width, _write_export, _write_file)


def models_cmd(json: bool = typer.Option(False, "--json", help="Print the presets as JSON, with sources.")) -> None:
    """List the model presets: give a name as PARAMS (apsi plan llama-3.1-405b)."""
    from apsi import render, scale

    rows = scale.models()
    if json:
        import json as _json

        typer.echo(_json.dumps([r.model_dump() for r in rows], indent=2))
    else:
        typer.echo(render.models_text(rows, width=_width()), nl=False)


def gpus_cmd(
    catalog: Optional[str] = _CATALOG,
    json: bool = typer.Option(False, "--json", help="Print the catalog as JSON, with sources."),
) -> None:
    """List the GPU catalog."""
    from apsi import render
    from apsi.catalog import catalog as load

    table = list(_call(load, catalog).values())
    if json:
        import json as _json

        typer.echo(_json.dumps([g.model_dump() for g in table], indent=2))
    else:
        typer.echo(render.gpus_text(table, width=_width()), nl=False)


def export_cmd(
    plan_file: str = typer.Argument(..., help="A plan saved with `apsi plan ... --json > plan.json`."),
    to: str = typer.Option(..., "--to", help="megatron, megatron-bridge, torchtitan, deepspeed or slurm."),
    output: Optional[str] = typer.Option(None, "--output", help="Write it to this file."),
) -> None:
    """Turn a saved plan into the launch configuration of its framework."""
    from apsi import export as exports

    _call(exports.check_format, to)
    keep: Inputs = (("the saved plan", plan_file),)
    if output is not None:
        _check_output(output, keep)
    plan = _call(exports.read_plan, _read_plan_text(plan_file))
    _write_export(plan, to, output, keep)


MAX_PLAN_BYTES = 64 * 2**20
"""The largest saved plan `apsi export` and `apsi compare` read (a plan's JSON is some kilobytes)."""


def _read_plan_text(name: str) -> str:
    """A saved plan's text: a regular file only (a FIFO or a device is refused before it is opened:
    reading one would block or never end), at most MAX_PLAN_BYTES, UTF-8, with no key given twice
    in one object (JSON keeps the last silently) and no number past apsi.textfiles.MAX_DIGITS
    digits; whether it is a plan is apsi.export.read_plan's to judge."""
    import json

    from apsi.textfiles import load_json, read_text_file

    text = _call(read_text_file, name, "saved plan", MAX_PLAN_BYTES, kind="JSON")
    try:
        _call(load_json, text, f"saved plan {name[:200]}")
    except (json.JSONDecodeError, RecursionError):
        pass  # not JSON: read_plan says so in its own words
    return text


def compare_cmd(
    files: list[str] = typer.Argument(..., help="Two or more plans saved with `apsi plan ... --json > plan.json`."),
) -> None:
    """Saved plans side by side, the rows where they differ marked."""
    from apsi import export as exports, render

    if len(files) < 2:
        raise _Fail("compare takes two or more saved plans (apsi plan ... --json > a.json)")
    plans = []
    for name in files:
        plans.append(_call(exports.read_plan, _read_plan_text(name)))
    typer.echo(render.compare_text(plans, [os.path.basename(n) for n in files], width=_width()), nl=False)


def schema_cmd(
    command: str = typer.Argument("plan", metavar="[plan|run|frontier|serve]",
                                  help="The command whose JSON output to describe (default plan)."),
) -> None:
    """The JSON schema of what a command prints as JSON, each field with its description and unit:
    plan (`apsi plan --json`, also what `apsi export` and `apsi compare` read), run (`apsi run FILE
    --format json`), frontier (`apsi frontier ... --json`) or serve (`apsi serve ... --json`)."""
    import json as _json

    from apsi.model.outputs import json_schema

    typer.echo(_json.dumps(_call(json_schema, command), indent=2))


def run_cmd(
    file: str = typer.Argument(..., help="Scenario YAML file (- reads standard input): optional defaults: and "
                                         "catalog:, and a runs: list."),
    fmt: Optional[str] = typer.Option(None, "--format", metavar="[table|csv|json|markdown]", help="table (default), csv, json or markdown; default from "
                                      "--output's extension."),
    output: Optional[str] = typer.Option(None, "--output", help="Write the results to this file."),
    jobs: Optional[str] = typer.Option(None, "--jobs", help="Processes solving in parallel; default: all cores."),
    fail_on_miss: bool = typer.Option(False, "--fail-on-miss", help="Exit 3 when a solved run misses its days "
                                      "target (every row is still printed)."),
) -> None:
    """Solve every run of a scenario file, one row per run; exit 1 if any run failed."""
    from apsi import scenarios, tables

    fmt = _format(fmt, output)
    keep: Inputs = (("the scenario file", None if file == "-" else file),)
    if output is not None:
        _check_output(output, keep)
    source = file
    if file == "-":
        text_in = sys.stdin.read(scenarios.MAX_FILE_BYTES + 1)
        if len(text_in) > scenarios.MAX_FILE_BYTES:
            raise _Fail(f"the scenario on standard input is more than {scenarios.MAX_FILE_BYTES:,} bytes; apsi reads "
                        "at most that")
        source = _call(scenarios.parse_text, text_in, "scenario on standard input")
    loaded = _call(scenarios.load, source)
    # Its catalog: and config.json files are inputs too: checked before anything is solved.
    keep = (*keep, *_scenario_inputs(loaded))
    if output is not None:
        _check_output(output, keep)
    results = _call(scenarios.solve, loaded, jobs=jobs, progress=tables.ProgressBar(sys.stderr))
    text = tables.render(results, fmt, _width() if output is None else None)
    if output is None:
        typer.echo(text, nl=False)
    else:
        _write_file(output, text, keep)
    failed = sum(not r.ok for r in results)
    missed = sum(r.plan is not None and not r.plan.target_met for r in results) if fail_on_miss else 0
    if failed:
        also = f"; {missed:,} miss their target" if missed else ""
        typer.echo(f"error: {failed:,} of {len(results):,} runs failed; each one's row says why{also}", err=True)
        raise typer.Exit(EXIT_RUN_FAILED)
    if missed:
        _missed(f"{missed:,} of {len(results):,} runs miss their target; their rows say target_met false")


def _scenario_inputs(results: list[Any]) -> Inputs:
    """The files a scenario's runs read: its catalog: file and each config.json given as params."""
    from apsi.hf_config import config_path

    out: dict[str, str] = {}
    for r in results:
        if r.catalog:
            out.setdefault(r.catalog, "the scenario's catalog file")
        params = r.inputs.get("params")
        if isinstance(params, str) and params not in out and (found := config_path(params)) is not None:
            out.setdefault(str(found), f"the config.json of {r.name!r}")
    return tuple((what, path) for path, what in out.items())


def register(app: typer.Typer) -> None:
    """Add these commands to `app`, in the order `apsi --help` lists them."""
    from apsi.cli_serve import serve_cmd

    app.command("serve")(serve_cmd)
    app.command("models")(models_cmd)
    app.command("gpus")(gpus_cmd)
    app.command("export")(export_cmd)
    app.command("compare")(compare_cmd)
    app.command("schema")(schema_cmd)
    app.command("run", epilog=_exit_help(run=True))(run_cmd)
