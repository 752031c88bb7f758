"""The `apsi` commands beyond planning: models, gpus, export, compare, schema, run, fleet and web
(serve is apsi.cli.serve's).

Owns those commands' typer functions, added to apsi.cli.app's app by register(); each forwards its
options 1:1 to the API (apsi.api.plan, apsi.outputs.export, apsi.api.scenarios, apsi.fleets) and prints what the API returns
through apsi.outputs.text or apsi.outputs.tables. Nothing here computes a plan or formats numbers, and nothing
heavier than typer is imported before a command runs (`apsi --help` stays fast).
"""

from __future__ import annotations

import os
import sys
from typing import Any, Optional

import typer

from apsi.cli.options import (
    _CATALOG, EXIT_RUN_FAILED, Inputs, _call, _check_output, _echo, _exit_help,
    _Fail, _format, _missed, _width, _write_export, _write_file, _write_via, SectionedCommand)
from apsi.outputs.export import formats_words


def models_cmd(json: bool = typer.Option(False, "--json", help="Print the presets as JSON, with sources.")) -> None:
    """List the model presets: give a name as PARAMS (apsi plan llama-3.1-405b)."""
    from apsi.api import plan as scale
    from apsi.outputs import text as render

    rows = scale.models()
    if json:
        import json as _json

        _echo(_json.dumps([r.model_dump() for r in rows], indent=2) + "\n")
    else:
        _echo(render.models_text(rows, width=_width()))


def gpus_cmd(
    catalog: Optional[str] = _CATALOG,
    json: bool = typer.Option(False, "--json", help="Print the catalog as JSON, with sources."),
) -> None:
    """List the GPU catalog."""
    from apsi.outputs import text as render
    from apsi.catalog import catalog as load

    table = list(_call(load, catalog).values())
    if json:
        import json as _json

        _echo(_json.dumps([g.model_dump() for g in table], indent=2) + "\n")
    else:
        _echo(render.gpus_text(table, width=_width()))


def export_cmd(
    plan_file: str = typer.Argument(..., help="A plan saved with `apsi plan ... --json > plan.json` (- reads "
                                               "standard input: apsi plan ... --json | apsi export - --to ...)."),
    to: str = typer.Option(..., "--to", help=f"{formats_words()}."),
    output: Optional[str] = typer.Option(None, "--output", help="Write it to this file."),
) -> None:
    """Turn a saved plan into the launch configuration of its framework."""
    from apsi.outputs import export as exports

    _call(exports.check_format, to)
    keep: Inputs = (("the saved plan", plan_file),)
    if output is not None:
        _check_output(output, keep)
    plan = _saved_plan(plan_file)
    _write_export(plan, to, output, keep)


MAX_PLAN_BYTES = 64 * 2**20
"""The largest saved plan `apsi export` and `apsi compare` read (a plan's JSON is some kilobytes)."""


def _read_plan_text(name: str) -> str:
    """A saved plan's text: a regular file only (a FIFO or a device is refused before it is opened:
    reading one would block or never end), at most MAX_PLAN_BYTES, UTF-8, with no key given twice
    in one object (JSON keeps the last silently) and no number past apsi.textfiles.MAX_DIGITS
    digits; whether it is a plan is apsi.outputs.export.read_plan's to judge."""
    import json

    from apsi.textfiles import load_json, read_text_file

    text = (_standard_input("saved plan", "JSON", MAX_PLAN_BYTES) if name == "-"
            else _call(read_text_file, name, "saved plan", MAX_PLAN_BYTES, kind="JSON"))
    try:
        _call(load_json, text, "saved plan " + ("on standard input" if name == "-" else name[:200]))
    except (json.JSONDecodeError, RecursionError):
        pass  # not JSON: read_plan says so in its own words
    return text


def _saved_plan(name: str, purpose: str = "export"):
    """The Plan saved in file `name`, or one line naming the file and what is wrong with it (compare
    reads several; `purpose`: export or compare)."""
    from apsi.errors import ApsiError
    from apsi.outputs import export as exports

    text = _read_plan_text(name)
    try:
        return exports.read_plan(text, purpose)
    except ApsiError as err:
        raise _Fail(f"saved plan {'on standard input' if name == '-' else name[:200]}: {err}") from None


def compare_cmd(
    files: list[str] = typer.Argument(..., help="Two or more plans saved with `apsi plan ... --json > plan.json` "
                                                "(one of them - reads standard input)."),
) -> None:
    """Saved plans side by side, the rows where they differ marked."""
    from apsi.outputs.compare import compare_text

    if len(files) < 2:
        raise _Fail("compare takes two or more saved plans (apsi plan ... --json > a.json)")
    if files.count("-") > 1:
        raise _Fail("compare reads standard input (-) once: give the other plans as files")
    plans = []
    for name in files:
        plans.append(_saved_plan(name, "compare"))
    _echo(compare_text(plans, ["stdin" if n == "-" else os.path.basename(n) for n in files], width=_width()))


def schema_cmd(
    command: str = typer.Argument("plan", metavar="[plan|run|frontier|serve|serve-frontier|serve-reference|serve-disagg|fleet]",
                                  help="The command whose JSON output to describe (default plan)."),
) -> None:
    """The JSON schema of what a command prints as JSON, each field with its description and unit:
    plan (`apsi plan --json`, also what `apsi export` and `apsi compare` read), run (`apsi run FILE
    --format json`), frontier (`apsi frontier ... --json`), serve (`apsi serve ... --json`),
    serve-frontier (with --frontier), serve-reference (with --framework reference), serve-disagg
    (with --disagg) or fleet (`apsi fleet FILE --json`)."""
    import json as _json

    from apsi.outputs.schema import json_schema

    _echo(_json.dumps(_call(json_schema, command), indent=2) + "\n")


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
    from apsi.api import scenario_file, scenarios
    from apsi.outputs import tables

    fmt = _format(fmt, output)
    keep: Inputs = (("the scenario file", file),)
    if output is not None:
        _check_output(output, keep)
    source = file
    if file == "-":
        source = _call(scenario_file.parse_standard_input, _standard_input())
    from apsi.fleets.spec import has_fleet

    if _call(has_fleet, source):  # a fleet plan: its runs share one inventory (apsi fleet)
        _fleet(source, keep, fmt, output, None, None, jobs, fail_on_miss, None, None)
        return
    loaded = _call(scenarios.load, source)
    # Its catalog: and config.json files are inputs too: checked before anything is solved.
    keep = (*keep, *_scenario_inputs(loaded))
    if output is not None:
        _check_output(output, keep)
    results = _call(scenarios.solve, loaded, jobs=jobs, progress=tables.ProgressBar(sys.stderr))
    text = tables.render(results, fmt, _width() if output is None else None)
    if output is None:
        _echo(text)
    else:
        _write_file(output, text, keep)
    failed = sum(not r.ok for r in results)
    missed = sum(r.plan is not None and not r.plan.target_met for r in results) if fail_on_miss else 0
    total = f"of {len(results):,} run{'s' if len(results) != 1 else ''}"
    if failed:
        also = ("" if not missed else "; 1 misses its target" if missed == 1 else f"; {missed:,} miss their targets")
        rows = "its row says" if failed == 1 else "each one's row says"
        typer.echo(f"error: {failed:,} {total} failed; {rows} why{also}", err=True)
        raise typer.Exit(EXIT_RUN_FAILED)
    if missed:
        # The table shows NO, CSV and JSON target_met false.
        _missed(f"1 {total} misses its target; its row says so" if missed == 1 else
                f"{missed:,} {total} miss their targets; their rows say so")


def _scenario_inputs(results: list[Any]) -> Inputs:
    """The files a scenario's runs read: its catalog: file and each config.json given as params."""
    from apsi.inputs.hf_config import config_path

    out: dict[str, str] = {}
    for r in results:
        if r.catalog:
            out.setdefault(r.catalog, "the scenario's catalog file")
        params = r.inputs.get("params")
        if isinstance(params, str) and params not in out and (found := config_path(params)) is not None:
            out.setdefault(str(found), f"the config.json of {r.name!r}")
    return tuple((what, path) for path, what in out.items())


def fleet_cmd(
    file: str = typer.Argument(..., help="Scenario YAML file with a fleet: block (- reads standard input)."),
    fmt: Optional[str] = typer.Option(None, "--format", metavar="[table|csv|json|markdown]",
                                      help="table (default), csv, json or markdown; default from --output's extension."),
    json: bool = typer.Option(False, "--json", help="Print the FleetResult as JSON (proof status, objective values)."),
    output: Optional[str] = typer.Option(None, "--output", help="Write the plan to this file."),
    time_limit: Optional[float] = typer.Option(None, "--time-limit", help="Seconds for the program's stages "
                                               "together (default the file's time_limit_s, else 30)."),
    plot: Optional[str] = typer.Option(None, "--plot", help="Also draw the Gantt chart and GPUs in use (.png or .svg)."),
    jobs: Optional[str] = typer.Option(None, "--jobs", help="Processes computing the runs' frontiers; default: all "
                                       "cores (the plan does not depend on it)."),
    fail_on_miss: bool = typer.Option(False, "--fail-on-miss", help="Exit 3 when a deadline is missed or a required "
                                      "run cannot be scheduled (the plan is still printed)."),
    export: Optional[str] = typer.Option(None, "--export", help="Also write each scheduled run's launch "
                                         f"configuration ({formats_words()}) into --export-dir, one file per run."),
    export_dir: Optional[str] = typer.Option(None, "--export-dir", help="The folder --export writes into (made if "
                                             "missing)."),
    since: Optional[str] = typer.Option(None, "--since", help="Re-plan from this date (with --from): the runs the "
                                        "saved plan started before it stay where they are."),
    answer: Optional[str] = typer.Option(None, "--from", help="The saved plan to re-plan (apsi fleet FILE --json "
                                         "output; - reads standard input), with --since."),
    buy: bool = typer.Option(False, "--buy", help="Plan the least purchase that meets every deadline: what the "
                             "file's buy: block offers (else more of each type owned, rented from the start)."),
) -> None:
    """Plan many runs on one GPU inventory over months: each run's options from its own frontier,
    chosen and scheduled together by one CP-SAT program; a table per run, GPU use by month, totals."""
    from apsi.api import scenario_file

    keep: Inputs = (("the scenario file", file),) + ((("the saved plan (--from)", answer),) if answer else ())
    source: Any = file
    if file == "-":
        source = _call(scenario_file.parse_standard_input, _standard_input())
    _fleet(source, keep, _format(fmt, output, json), output, time_limit, plot, jobs, fail_on_miss, export, export_dir,
           since, answer, buy)


def _standard_input(what: str = "scenario", kind: str = "YAML", limit: int | None = None) -> str:
    """The `what` (a scenario, a saved plan) given on standard input (a file named "-"): its UTF-8
    text, read as bytes (the stream's own decoding would pass undecodable bytes on as surrogates,
    which the YAML and JSON parsers cannot take), at most `limit` bytes (default a scenario
    file's), or one line saying why not."""
    from apsi.api import scenario_file

    limit = scenario_file.MAX_FILE_BYTES if limit is None else limit
    if sys.stdin is None:
        raise _Fail(f"there is no standard input to read the {what} from: give a {kind} file")
    stream = getattr(sys.stdin, "buffer", sys.stdin)
    data = stream.read(limit + 1)
    if len(data) > limit:
        raise _Fail(f"the {what} on standard input is more than {limit:,} bytes; apsi reads at most that")
    if isinstance(data, str):  # a text stream without a buffer (a test's, an embedding's)
        return data
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise _Fail(f"the {what} on standard input is not UTF-8 text: give a {kind} file") from None


def _fleet(source: Any, keep: Inputs, fmt: str, output: str | None, time_limit: float | None, plot: str | None,
           jobs: str | None, fail_on_miss: bool, export: str | None, export_dir: str | None,
           since: str | None = None, answer: str | None = None, buy: bool = False) -> None:
    """apsi fleet (and apsi run on a file with a fleet: block): fleet(), its rendering, its exports."""
    from apsi.fleets import api, render

    if (export is None) != (export_dir is None):
        raise _Fail("--export FORMAT and --export-dir DIR go together: give both (one file per scheduled run)")
    if export is not None:
        from apsi.outputs import export as exports

        _call(exports.check_format, export)
    if output is not None:
        _check_output(output, keep)
    if plot is not None:
        from apsi import plot as charts

        _call(charts.check_file, plot)
        _check_output(plot, (*keep, ("the --output file", output)), "--plot")
    if export_dir is not None and os.path.lexists(export_dir) and not os.path.isdir(export_dir):
        raise _Fail(f"--export-dir {export_dir[:200]} is not a folder: give a folder (made if it does not exist)")
    if (since is None) != (answer is None):
        raise _Fail("--since DATE and --from FILE go together: the day to re-plan from and the saved plan (apsi fleet "
                    "FILE --json output) whose runs started before it stay")
    if time_limit is not None:
        _call(api.check_time_limit, time_limit, "--time-limit")
    saved: Any = answer
    if answer == "-":  # the saved plan on standard input: its JSON, which fleet() checks as a file's
        import json as _json

        from apsi.fleets.replan import MAX_ANSWER_BYTES
        from apsi.textfiles import load_json

        if keep[0][1] == "-":
            raise _Fail("--from - and the scenario file - cannot both be standard input: give one of them as a file")
        text = _standard_input("saved fleet plan (--from)", "JSON", MAX_ANSWER_BYTES)
        try:
            saved = _call(load_json, text, "the saved fleet plan on standard input")
        except (_json.JSONDecodeError, RecursionError) as err:
            raise _Fail(f"the saved fleet plan on standard input is not JSON ({str(err)[:120]}): give apsi fleet "
                        "FILE --json output") from None
    result = _call(api.fleet, source, time_limit_s=time_limit, jobs=jobs, since=since, answer=saved, buy=buy)
    # The exports are made before anything is printed or written: when no run can be exported the
    # command is refused with nothing else shown; a run that cannot costs only itself (exit 1).
    files, refused = (None, []) if export is None else _fleet_files(source, result, export)
    text = render.render(result, fmt, _width() if output is None else None)
    if output is None:
        _echo(text)
    else:
        _write_file(output, text, keep)
    if plot is not None:
        from apsi.fleets.plot import fleet_plot

        _write_via(plot, lambda temp: _call(fleet_plot, result, temp), (*keep, ("the --output file", output)), "--plot")
        typer.echo(f"fleet plot written to {plot}", err=True)
    if files is not None and export is not None and export_dir is not None:
        _fleet_exports(files, export, export_dir, keep)
        for why in refused:
            typer.echo(f"error: {why}", err=True)
    unscheduled = result.status in ("INFEASIBLE", "UNKNOWN")
    if (result.left_out or refused) and not unscheduled and not (fail_on_miss and result.late_runs):
        raise typer.Exit(1)  # a run refused, the others planned: as apsi run exits on a file with a bad run
    if unscheduled or (fail_on_miss and result.late_runs):
        # No schedule at all is never a success, asked or not.
        what = ("the required runs cannot all be scheduled" if unscheduled and result.status == "INFEASIBLE" else
                "no schedule was found within the time limit (--time-limit)"
                + (f"; the greedy first schedule left {len(result.unplaced):,} required run"
                   f"{'s' if len(result.unplaced) != 1 else ''} without room" if result.unplaced else "")
                if unscheduled else
                ("1 run misses its deadline" if result.late_runs == 1 else f"{result.late_runs:,} runs miss their deadlines"))
        _missed(what + (f": {result.conflict.text}" if result.conflict else ""), asked=not unscheduled)


def _fleet_files(source: Any, result: Any, fmt: str) -> tuple[dict[str, str], list[str]]:
    """--export: each scheduled run's launch configuration by file name, and why a run is not
    exported (apsi.fleets.export)."""
    from apsi.fleets.export import fleet_exports
    from apsi.fleets.spec import read_fleet

    return _call(fleet_exports, _call(read_fleet, source), result, fmt)


def _fleet_exports(files: dict[str, str], fmt: str, folder: str, keep: Inputs) -> None:
    """--export: the launch configurations (_fleet_files) written into `folder`."""
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as err:
        raise _Fail(f"cannot make the --export-dir {folder!r}: {err.strerror or err}") from None
    for name, text in files.items():
        _write_file(os.path.join(folder, name), text, keep, "--export-dir")
    typer.echo(f"{len(files):,} {fmt} configuration{'s' if len(files) != 1 else ''} written to {folder}", err=True)


def web_cmd(
    port: int = typer.Option(8000, "--port", min=1, max=65535, help="The port to listen on."),
    host: str = typer.Option("127.0.0.1", "--host", help="The address to listen on (default: this machine only)."),
    time_limit: float = typer.Option(120.0, "--time-limit", min=1.0, help="Seconds one question may run before it "
                                     "is ended."),
    processes: Optional[int] = typer.Option(None, "--processes", min=1, help="Questions answered at once; default: "
                                            "the cores."),
) -> None:
    """A local web page and JSON API for plan, serve, frontier and fleet (pip install 'apsi-planner[web]').

    The API answers GET or POST /api/plan, /api/serve, /api/frontier and /api/fleet with what the
    command prints under --json, for the same options (/api/plan?params=llama-3.1-70b&tokens=15T);
    /docs lists them."""
    from importlib.util import find_spec

    missing = [name for name in ("fastapi", "uvicorn") if find_spec(name) is None]
    if missing:
        raise _Fail(f"apsi web needs the web extra ({' and '.join(missing)} not installed): pip install "
                    "'apsi-planner[web]'")
    import json as _json
    import signal
    import subprocess

    # The web wing sits above the CLI (its API runs the CLI's commands): it runs as a program of
    # its own, `python -m apsi.web`, rather than being imported here.
    settings = {"host": host, "port": port, "seconds": time_limit, "processes": processes}
    typer.echo(f"apsi web: http://{host}:{port}/ (Ctrl-C stops it)", err=True)
    server = subprocess.Popen([sys.executable, "-m", "apsi.web", _json.dumps(settings)])

    def stop(signum: int, _frame: object) -> None:
        # A signal to this process (a supervisor's SIGTERM, a closed terminal's SIGHUP) stops the
        # server too: it was left running, its port held, answering.
        server.send_signal(signal.SIGTERM if signum != signal.SIGINT else signal.SIGINT)

    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(signum, stop)
    code = server.wait()
    if code:
        raise typer.Exit(code if code > 0 else 128 - code)


def register(app: typer.Typer) -> None:
    """Add these commands to `app`, in the order `apsi --help` lists them."""
    from apsi.cli.serve import serve_cmd

    app.command("serve", cls=SectionedCommand)(serve_cmd)
    app.command("models")(models_cmd)
    app.command("gpus")(gpus_cmd)
    app.command("export")(export_cmd)
    app.command("compare")(compare_cmd)
    app.command("schema")(schema_cmd)
    app.command("run", epilog=_exit_help(run=True))(run_cmd)
    app.command("fleet", epilog=_exit_help())(fleet_cmd)
    app.command("web")(web_cmd)
