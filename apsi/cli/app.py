"""The `apsi` command: a thin shell over apsi.api.plan.

Owns the typer app, the entry point (user errors to one line and exit 2) and the two planning
commands, `plan` and `frontier`; the other commands live in apsi.cli.commands and the shared
option declarations in apsi.cli.options. Each option forwards 1:1 to the API keyword of the same
name; values go through as given (whole-number options typed and range-checked as the API checks
them) and the API validates them, so the CLI, scenario files and Python share one set of rules
and messages. A user error prints one line and exits 2, as does output that cannot be written
(a closed pipe ends quietly, 141); --fail-on-miss exits 3 on a missed target (the codes:
apsi.cli.options). Nothing here computes a plan or formats numbers.
"""

from __future__ import annotations

import errno
import io
import gc
import os
import sys
from typing import Any, Optional

import typer

try:  # typer vendors click from 0.2x on; older releases depend on click itself.
    from typer._click import exceptions as _click_errors
except ImportError:  # pragma: no cover - depends on the installed typer
    from click import exceptions as _click_errors  # type: ignore[import-not-found, no-redef]

from apsi import __version__
from apsi.cli import commands as cli_commands
from apsi.cli import values as cli_values
from apsi.cli.options import (
    _ACTIVE, _BATCH, _CATALOG, _CHECKPOINT, _DP, _FAILURES, _FRAMEWORK, _GPU, _LARGEST, _MAX_GPUS, _MFU, _OPTIMIZER, _PARAMS,
    _PP, _PRECISION, _PRICE, _PUE, _RECOMPUTE, _SEQ, _TOKENS, _TP, ARCHITECTURE_HELP, EXIT_CLOSED_PIPE, EXIT_INTERRUPTED,
    EXIT_USAGE, FRAMEWORK_HELP, Inputs, _architecture_options, _call, _check_output, _emit, _exit_help, _Fail, _format,
    _framework_knobs, _missed, _model_inputs, _options, _whole_option, _width, _write_export, _write_via, _OBJECTIVE_HELP,
    choices, SectionedCommand)
from apsi.inputs.objectives import DEFAULT as DEFAULT_OBJECTIVE, OBJECTIVES
from apsi.outputs.export import formats_words

__all__ = ["ARCHITECTURE_HELP", "FRAMEWORK_HELP", "app", "main"]

app = typer.Typer(add_completion=True, no_args_is_help=True, pretty_exceptions_enable=False,
                  rich_markup_mode=None, context_settings={"help_option_names": ["-h", "--help"]},
                  help="Plan large-model training and serving: memory per GPU, layout, GPU count, days.")


def _version(value: bool) -> None:
    if value:
        typer.echo(f"apsi {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print the version and exit.")) -> None:
    """Plan large-model training and serving."""


def _framework_options(framework: str | None, *, levers: bool | None, explain: bool = False, **knobs) -> dict:
    """The framework and its knobs for plan(); levers on by default under the reference (unless
    --no-levers), under the others only with --levers (each is a full plan: a plain plan stays fast);
    `explain` (the runner-up GPU type) under the others, as the reference always gives it."""
    from apsi.training.frameworks import DEFAULT

    name = DEFAULT if framework is None else framework
    if name.strip().lower() == "reference":
        return {"framework": name, "levers": levers is not False, **_options(**knobs)}
    return {"framework": name, **({"explain": True} if explain else {}), **_options(levers=levers or None, **knobs)}


@app.command("plan", epilog=_exit_help(), cls=SectionedCommand)
@_architecture_options()
@_framework_knobs()
def plan_cmd(
    ctx: typer.Context,
    params: Optional[str] = typer.Argument(None, help="A size (21B, 1T, 1.5e12), a preset (see `apsi models`) or a "
                                           "Hugging Face config.json or its folder; with --largest, a preset family "
                                           "or nothing."),
    largest: bool = _LARGEST,
    active: Optional[str] = _ACTIVE,
    tokens: Optional[str] = _TOKENS,
    gpu: str = _GPU,
    gpus: Optional[int] = _whole_option("gpus", "GPUs you have: the fastest layout on at most N.", sizes=True),
    days: str = typer.Option("90", "--days", help="Target duration in days."),
    precision: str = _PRECISION,
    optimizer: str = _OPTIMIZER,
    seq: Optional[str] = _SEQ,
    batch: Optional[str] = _BATCH,
    mfu: Optional[str] = _MFU,
    max_gpus: str = _MAX_GPUS,
    catalog: Optional[str] = _CATALOG,
    tp: Optional[int] = _TP,
    pp: Optional[int] = _PP,
    dp: Optional[int] = _DP,
    recompute: Optional[str] = _RECOMPUTE,
    framework: Optional[str] = _FRAMEWORK,
    objective: str = typer.Option(DEFAULT_OBJECTIVE, "--objective", metavar=choices(OBJECTIVES), help=_OBJECTIVE_HELP),
    price: Optional[str] = _PRICE,
    pue: str = _PUE,
    failures: bool = _FAILURES,
    checkpoint_minutes: Optional[str] = _CHECKPOINT,
    include_consumer: bool = typer.Option(False, "--include-consumer",
                                          help="With --gpu any: consider GeForce parts too (frameworks)."),
    levers: Optional[bool] = typer.Option(None, "--levers/--no-levers",
                                          help="Solve nearby changes again and list them (on by default "
                                          "under the reference arithmetic only)."),
    explain: bool = typer.Option(False, "--explain", help="Show every lever and the what-if figures in full."),
    plot: Optional[str] = typer.Option(None, "--plot", help="Also write the memory per GPU as a chart (.png or .svg)."),
    json: bool = typer.Option(False, "--json", help="Print the Plan as JSON."),
    export: Optional[str] = typer.Option(None, "--export", help="Print the plan as a launch configuration: "
                                         f"{formats_words()} (plans under its framework)."),
    fmt: Optional[str] = typer.Option(None, "--format", metavar="[table|csv|json|markdown]", help="table (the plan block; default), json, csv or markdown "
                                      "(one row); default from --output's extension."),
    output: Optional[str] = typer.Option(None, "--output", help="Write the plan (or --export's file) to this file."),
    fail_on_miss: bool = typer.Option(False, "--fail-on-miss", help="Exit 3 when the plan misses the --days target "
                                      "(it is still printed: the fastest layout within the GPU cap)."),
    *,
    architecture: dict[str, Any],
    knobs: dict[str, Any],
) -> None:
    """Plan a training run: layout, memory per GPU, GPU count, days, cost, serving.

    --gpu takes a name, a comma-separated list or any: the program then chooses the type too."""
    from apsi.api import plan as scale
    from apsi.outputs import text as render

    keep = _model_inputs(None if largest else params, catalog)
    _check_outputs(output, plot, keep)
    if plot is not None:
        from apsi import plot as charts

        _call(charts.check_file, plot)
    if export is not None and (fmt is not None or json):
        raise _Fail("--export writes a launch configuration: give it without --format or --json")
    fmt = _format(fmt, output, json)
    if export is not None:
        from apsi.outputs import export as exports

        _call(exports.check_format, export)
        if framework is None:
            framework = exports.default_framework(export)
        levers = False
    options = _options(
        active=active, tokens=tokens, gpu=gpu, gpus=gpus, days=days, precision=precision,
        optimizer=optimizer, seq=seq, batch=batch, mfu=mfu, max_gpus=max_gpus, catalog=catalog, tp=tp, pp=pp,
        dp=dp, recompute=recompute, objective=objective, price=price, pue=pue, **architecture,
        failures=None if failures else False, checkpoint_minutes=checkpoint_minutes,
        include_consumer=True if include_consumer else None,
        **_framework_options(framework, levers=levers, explain=True, **knobs))
    found = None
    if largest:
        found, plan = _largest(ctx, params, options)
        params = found.size
    elif params is None:
        raise _Fail("Missing argument 'PARAMS': give a size, a preset or a config.json, or --largest to search for "
                    "the size (see apsi plan --help)")
    else:
        plan = _call(scale.plan, params, **options)
    if export is not None:
        _write_export(plan, export, output, keep)
        _largest_lines(found, err=True)
        if plot is not None:  # the chart beside the launch file, as beside any other output (it was dropped)
            _write_via(plot, lambda temp: _call(charts.memory_plot, plan, temp), _plot_keep(keep, output), "--plot")
            typer.echo(f"memory plot written to {plot}", err=True)
        _check_target(plan, fail_on_miss)
        return
    if fmt == "table":
        text = render.plan_text(plan, explain=explain, width=_width() if output is None else None)
        if found is not None:
            from apsi.api.largest import summary

            text += "\n" + "".join(line + "\n" for line in summary(found))
    elif fmt == "json":
        # The answer's Plan, as `apsi plan` writes one (apsi export reads it); the search's summary
        # goes to stderr, as beside CSV (the API's largest() gives the sizes tried as data).
        text = plan.model_dump_json() + "\n"
    else:
        from apsi.outputs import tables
        from apsi.api.scenarios import Result

        inputs = {"params": params, **{k: v for k, v in options.items() if k not in ("levers", "explain")}}
        text = tables.render([Result(name=str(params), line=None, inputs=inputs, plan=plan)], fmt)
    _emit(text, output, keep)
    if fmt != "table":
        _largest_lines(found, err=True)
    if plot is not None:
        _write_via(plot, lambda temp: _call(charts.memory_plot, plan, temp), _plot_keep(keep, output), "--plot")
        typer.echo(f"memory plot written to {plot}", err=True)
    _check_target(plan, fail_on_miss)


def _plot_keep(keep: Inputs, output: str | None) -> Inputs:
    """What --plot may not replace: the inputs, and the --output file (written first)."""
    return (*keep, ("the --output file", output))


def _check_outputs(output: str | None, plot: str | None, keep: Inputs) -> None:
    """Refuse, before anything is solved, an --output or --plot that is not a regular file's name
    or that names an input (or each other)."""
    if output is not None:
        _check_output(output, keep)
    if plot is not None:
        _check_output(plot, _plot_keep(keep, output), "--plot")
        if output is not None and os.path.realpath(plot) == os.path.realpath(output):
            raise _Fail(f"--plot {plot} is the --output file too: give each its own file")


def _largest(ctx: typer.Context, params: str | None, options: dict) -> tuple[Any, Any]:
    """--largest: apsi.api.largest.largest() with PARAMS as the family (None: the shape rule), --days
    forwarded only when given (largest() needs it; plan's own default is 90)."""
    from apsi.api import largest as sizing

    # click's ParameterSource (vendored by typer from 0.2x on, hence by name): DEFAULT when not typed.
    if getattr(ctx.get_parameter_source("days"), "name", None) == "DEFAULT":
        options = {k: v for k, v in options.items() if k != "days"}
    found = _call(sizing.largest, params, **options)
    return found, found.plan


def _largest_lines(found, err: bool) -> None:
    """--largest's summary lines beside a machine-readable output (on stderr)."""
    if found is not None:
        from apsi.api.largest import summary

        for line in summary(found):
            typer.echo(line, err=err)


def _check_target(plan, fail_on_miss: bool) -> None:
    """Under --fail-on-miss, exit 3 when `plan` misses its target."""
    if fail_on_miss and not plan.target_met:
        from apsi.fmt import duration

        _missed(f"the plan takes {duration(plan.days)}: it misses its target of {duration(plan.target_days)}")


@app.command("frontier", epilog=_exit_help(), cls=SectionedCommand)
@_architecture_options()
@_framework_knobs()
def frontier_cmd(
    params: str = _PARAMS,
    active: Optional[str] = _ACTIVE,
    tokens: Optional[str] = _TOKENS,
    gpu: str = typer.Option("H100", "--gpu", help="GPU name (see `apsi gpus`); one type per frontier."),
    gpus: Optional[int] = _whole_option("gpus", "GPUs you have: the frontier stops at N.", sizes=True),
    days: str = typer.Option("90", "--days", help="Target duration in days (the target line)."),
    precision: str = _PRECISION,
    optimizer: str = _OPTIMIZER,
    seq: Optional[str] = _SEQ,
    batch: Optional[str] = _BATCH,
    mfu: Optional[str] = _MFU,
    max_gpus: str = _MAX_GPUS,
    catalog: Optional[str] = _CATALOG,
    tp: Optional[int] = _TP,
    pp: Optional[int] = _PP,
    dp: Optional[int] = _DP,
    recompute: Optional[str] = _RECOMPUTE,
    framework: Optional[str] = _FRAMEWORK,
    objective: str = typer.Option(DEFAULT_OBJECTIVE, "--objective", metavar=choices(OBJECTIVES),
                                   help="The marked plan's objective: " + _OBJECTIVE_HELP),
    price: Optional[str] = _PRICE,
    pue: str = _PUE,
    failures: bool = _FAILURES,
    checkpoint_minutes: Optional[str] = _CHECKPOINT,
    plot: Optional[str] = typer.Option(None, "--plot", help="Also write days against GPUs as a chart (.png or .svg)."),
    json: bool = typer.Option(False, "--json", help="Print every FrontierPoint as JSON."),
    fmt: Optional[str] = typer.Option(None, "--format", metavar="[table|csv|json|markdown]", help="table (default), json, csv or markdown (every point); "
                                      "default from --output's extension."),
    output: Optional[str] = typer.Option(None, "--output", help="Write the frontier to this file."),
    fail_on_miss: bool = typer.Option(False, "--fail-on-miss", help="Exit 3 when no point meets the --days target "
                                      "(the frontier is still printed)."),
    *,
    architecture: dict[str, Any],
    knobs: dict[str, Any],
) -> None:
    """The GPU/day frontier: at each GPU count where the fastest layout gets faster, that layout
    and its days, from the fewest GPUs that fit to the point where more GPUs stop helping."""
    from apsi.api import plan as scale
    from apsi.api import frontier as sweep
    from apsi.outputs import text as render

    keep = _model_inputs(params, catalog)
    _check_outputs(output, plot, keep)
    if plot is not None:
        from apsi import plot as charts

        _call(charts.check_file, plot)
    options = _options(
        active=active, tokens=tokens, gpu=gpu, gpus=gpus, days=days, precision=precision,
        optimizer=optimizer, seq=seq, batch=batch, mfu=mfu, max_gpus=max_gpus, catalog=catalog, tp=tp, pp=pp,
        dp=dp, recompute=recompute, objective=objective, price=price, pue=pue, **architecture,
        failures=None if failures else False, checkpoint_minutes=checkpoint_minutes,
        **_framework_options(framework, levers=False, **knobs))
    options.pop("levers", None)
    fmt = _format(fmt, output, json)
    from apsi.outputs.tables import FrontierProgress

    shown = FrontierProgress(sys.stderr)
    try:
        points = _call(sweep.frontier, params, **options, progress=shown)
    finally:
        shown.done()
    plan = None if fmt != "table" and plot is None else _call(scale.plan, params, **options)
    if fmt == "json":
        from apsi.outputs.schema import FrontierOutput

        _emit(FrontierOutput(points).model_dump_json() + "\n", output, keep)
    elif fmt == "table":
        assert plan is not None  # solved above: the table marks the plan on the frontier
        _emit(render.frontier_text(points, plan, width=_width() if output is None else None), output, keep)
    else:
        from apsi.outputs import tables

        _emit(tables.frontier_rows(points, fmt), output, keep)
    if plot is not None:
        _write_via(plot, lambda temp: _call(charts.frontier_plot, points, plan, temp), _plot_keep(keep, output),
                   "--plot")
        typer.echo(f"frontier plot written to {plot}", err=True)
    if fail_on_miss and not any(p.target_met for p in points):
        from apsi.fmt import count, duration

        fastest = (f": the fastest, on {count(points[-1].gpus)} GPUs, takes {duration(points[-1].days)}"
                   if points else "")
        _missed(f"no point meets the --days {days} target{fastest}")


cli_commands.register(app)
cli_values.dress(app)


def _negative_number(err: Exception, args: list[str]) -> str | None:
    """The argument behind click's "No such option: -5" when the user typed a negative number
    such as -5B as PARAMS (click reads it as the short options -5 and -B)."""
    name = getattr(err, "option_name", None) or ""
    if not isinstance(err, _click_errors.NoSuchOption) or not (name[1:2].isdigit() or name[1:2] == "."):
        return None
    return next((a for a in args if isinstance(a, str) and a.startswith(name)), name)


def main(argv: list[str] | None = None) -> int:
    """Entry point: runs the app, turning user errors into one line and exit code 2, and output
    that cannot be written into one line and exit 2 (a closed pipe: quietly, 141)."""
    _reported.clear()
    if sys.stdout is None:
        # Started with its standard output closed (`apsi plan 7B >&-`): Python gives None, and
        # click's echo then drops the text without a word; writing it is an error instead.
        sys.stdout = _ClosedOutput()
    try:
        return _main(argv)
    except OSError as err:
        if not _is_output_error(err):
            raise
        return _output_failed(err)
    except SystemExit as err:
        # typer answers a closed pipe under a command with sys.exit(1), the OSError as its context.
        if isinstance(err.__context__, OSError) and err.__context__.errno == errno.EPIPE:
            return _output_failed(err.__context__)
        raise


class _ClosedOutput(io.TextIOBase):
    """Standard output when the process was started with it closed: every write fails as a closed
    file descriptor's (EBADF), which main() reports in one line, exit 2."""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        raise OSError(errno.EBADF, "standard output is closed")


def _main(argv: list[str] | None) -> int:
    try:
        # Outside standalone mode click returns, not raises, the code of a typer.Exit raised by a
        # command (apsi run exits 1 when a run failed); commands themselves return None.
        code = app(args=argv, prog_name="apsi", standalone_mode=False)
    except _Fail as err:
        _say(f"error: {err}")
        return EXIT_USAGE
    except _click_errors.UsageError as err:
        if type(err).__name__ == "NoArgsIsHelpError":
            typer.echo(err.ctx.get_help() if err.ctx else "")
            return 0
        where = err.ctx.command_path if err.ctx else "apsi"
        negative = _negative_number(err, sys.argv[1:] if argv is None else argv)
        message = f"{negative} is negative: it must be positive" if negative else err.format_message()
        _say(f"error: {message} (see {where} --help)")
        return EXIT_USAGE
    except _click_errors.ClickException as err:
        _say(f"error: {err.format_message()}")
        return EXIT_USAGE
    except (typer.Exit, getattr(_click_errors, "Exit", typer.Exit)) as err:
        return getattr(err, "exit_code", 0)
    except (typer.Abort, getattr(_click_errors, "Abort", typer.Abort)):
        return EXIT_INTERRUPTED
    return code if isinstance(code, int) else 0


_WRITE_ERRNOS = frozenset(getattr(errno, name) for name in ("EPIPE", "ENOSPC", "EFBIG", "EDQUOT", "EIO", "EBADF")
                          if hasattr(errno, name))
"""What writing the output can fail with (a closed pipe, a full disk or quota, a file-size limit, a
device error, a stream not open for writing); apsi's own file reads and writes turn theirs into
one-line errors where they happen, so these reaching main() are standard output's."""
_reported: list[OSError] = []
"""The output error already reported, so that the flush at exit does not report it again."""


def _is_output_error(err: OSError) -> bool:
    return err.errno in _WRITE_ERRNOS


def _say(line: str) -> None:
    """One line on stderr; nothing when stderr itself cannot be written."""
    try:
        typer.echo(line, err=True)
    except OSError:
        pass


def _output_failed(err: OSError) -> int:
    """Report that the output could not be written, once: a closed pipe quietly (exit 141: the
    reader went away, as `apsi ... | head` does), anything else as one line (exit 2, as for --output)."""
    first = not _reported
    _reported.append(err)
    if err.errno == errno.EPIPE:
        return EXIT_CLOSED_PIPE
    if first:
        _say(f"error: cannot write the output: {err.strerror or err}")
    return EXIT_USAGE


GC_THRESHOLD = (10_000, 100, 10)
"""The console script's collector thresholds (gc.set_threshold; _entry): the youngest generation
collected every 10,000 net allocations (CPython's default 700), the middle one every 100 of those
(CPython's 10: each of its passes walks every object the command's own imports made, about 8 ms
of `apsi plan 1T ...` each, three of them per plan), the oldest as by default."""


def _entry() -> None:
    """The console script. Once the command is done, output is flushed (a failure there reported
    as any other write's) and the process ends with os._exit: tearing down the interpreter
    (OR-Tools, numpy and pandas modules, which OR-Tools imports) took about 0.15-0.3 s of a 1.2 s
    `apsi plan` (benchmarks/process_time.py) and does nothing a finished command needs; files are
    written and worker pools closed before this.

    Before the command, the garbage collector is set for a one-shot process: the objects the
    imports made are frozen (gc.freeze: never traversed again; the process keeps them to its end
    anyway) and the youngest generation is collected after GC_THRESHOLD[0] net allocations, not
    CPython's 700. The search makes millions of short-lived tuples and few cycles: under CPython's
    defaults the collector took 0.9-1.4 s of `apsi frontier mixtral-8x22b` (1,192 collections),
    under these 0.28-0.34 s (102), the output the same byte for byte (docs/benchmarks.md). Only
    the console script does this: the API leaves its caller's collector alone."""
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLD)
    code = main()
    try:
        if sys.stdout is not None:  # None when apsi was started with its standard output closed
            sys.stdout.flush()
    except OSError as err:
        code = code if _reported else _output_failed(err)
    try:
        if sys.stderr is not None:
            sys.stderr.flush()
    except OSError:
        pass
    os._exit(code)


if __name__ == "__main__":
    _entry()
