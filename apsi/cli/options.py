"""The option declarations and helpers the `apsi` commands share (apsi.cli.app, apsi.cli.commands).

Owns the typer options common to several commands, the groups of architecture options and
framework knobs, the whole-number options' parser (typed and range-checked as the API checks them,
so a bad one is click's one-line usage error), writing a command's output (--output, --plot: only
regular files that are none of the command's inputs, replaced whole), and the exit codes.
It computes no plan and formats no numbers; it imports only typer at load time so that
`apsi --help` stays fast.
The names keep their leading underscore: they are the CLI modules' own, not an API.
"""

from __future__ import annotations

import functools
import inspect
import os
import re
import sys
from collections.abc import Callable
from typing import Any, Optional

import typer

from apsi.inputs import knobs
from apsi.inputs.objectives import OBJECTIVES
from apsi.training.frameworks import DEFAULT as DEFAULT_FRAMEWORK, FRAMEWORKS


class SectionedCommand(typer.core.TyperCommand):
    """A command whose `--help` lists its options in sections: each knob in its group
    (apsi.inputs.knobs.group_of: Layout, Framework settings), the architecture fields under
    Architecture, the rest under Options."""

    def format_options(self, ctx: Any, formatter: Any) -> None:
        sections: dict[str, list[tuple[str, str]]] = {"Arguments": [], "Options": []}
        for name in _SECTION_ORDER:
            sections.setdefault(name, [])
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            if param.param_type_name == "argument":
                sections["Arguments"].append(record)
            else:
                sections.setdefault(_SECTIONS.get(param.name or "", "Options"), []).append(record)
        for title, records in sections.items():
            if records:
                with formatter.section(title):
                    formatter.write_dl(records)


class _Fail(Exception):
    """A user error already worded for one line."""


# -- exit codes ----------------------------------------------------------------------------------

EXIT_RUN_FAILED = 1
"""`apsi run`: a run has no plan (its row says why); the other runs are still printed."""
EXIT_USAGE = 2
"""Bad input or options, or the output cannot be written (to --output or standard output)."""
EXIT_MISSED = 3
"""With --fail-on-miss, a target is not met (what was planned is still printed)."""
EXIT_INTERRUPTED = 130
"""Interrupted (Ctrl-C): 128 + SIGINT, as a shell reports it."""
EXIT_CLOSED_PIPE = 141
"""The reader of standard output went away (apsi ... | head): 128 + SIGPIPE, as a shell reports
a command a closed pipe stopped; nothing is printed."""


def _exit_help(run: bool = False) -> str:
    """The exit codes a command's --help lists (`run`: with 1, a failed run)."""
    rows = [(0, "done")]
    if run:
        rows.append((EXIT_RUN_FAILED, "a run failed; its row says why (this wins over 3)"))
    rows += [(EXIT_USAGE, "bad input or options, or the output cannot be written; one line on stderr"),
             (EXIT_MISSED, "--fail-on-miss and a target missed, or (apsi fleet) no schedule at all; the output is "
                           "still printed"),
             (EXIT_INTERRUPTED, "interrupted"), (EXIT_CLOSED_PIPE, "the output's pipe was closed (apsi ... | head)")]
    # \b keeps click from rewrapping the lines.
    return "\b\nExit codes:\n" + "\n".join(f"  {code:<4} {text}" for code, text in rows)


def _missed(message: str, asked: bool = True) -> None:
    """Under --fail-on-miss (`asked`), or for a fleet with no schedule at all: `message` (what missed
    which target) as one line, and exit 3."""
    typer.echo(f"error: {message}" + (" (--fail-on-miss)" if asked else ""), err=True)
    raise typer.Exit(EXIT_MISSED)


def _call(fn, *args, **kwargs):
    from apsi.errors import ApsiError

    try:
        return fn(*args, **kwargs)
    except ApsiError as err:
        raise _Fail(str(err)) from None


def _width() -> int | None:
    from apsi.fit import terminal_width

    return terminal_width(sys.stdout)


def _options(**kw):
    return {k: v for k, v in kw.items() if v is not None}


# -- whole-number options ------------------------------------------------------------------------

MAX_COUNT, MAX_STAGES = knobs.MAX_COUNT, knobs.MAX_STAGES
"""The largest GPU count and parallel degree, and the most pipeline stages (apsi.inputs.knobs, which
tests/test_knobs.py checks against the API's limits)."""
WHOLE_RANGES: dict[str, tuple[int, int]] = {
    "gpus": (1, MAX_COUNT), "node_granularity": (1, MAX_COUNT),
    **{k.name: (k.low, k.high) for k in knobs.KNOBS if k.kind == "degree" and k.name != "micro_batch"},
}
"""The options typed as whole numbers at the command line, with the ranges plan() checks
(apsi.inputs.question _Numbers and _Knobs); the framework's own rules (megatron's zero 0 or 1) stay the API's."""
_WHOLE = re.compile(r"([+-]?\d+(?:_\d+)*)(?:\.0*)?")
"""A whole number as plan() reads a string (pydantic's lax int: "8", " 8 ", "+8", "1_000", "8.0")."""


def _whole(name: str, sizes: bool = False) -> Callable[[Any], int]:
    """The parser of a whole-number option: its value as an int in WHOLE_RANGES[name], or click's
    one-line usage error naming the option and the valid values. With `sizes`, a count with a
    suffix or a power ("16K", "2^13") is read as plan() reads it (apsi.units.parse_size)."""
    low, high = WHOLE_RANGES[name]
    valid = f"a whole number from {low:,} to {high:,}" + (", such as 512, 16K or 2^13" if sizes else "")

    def parse(value: Any) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            number = value
        else:
            text = str(value).strip()
            match = _WHOLE.fullmatch(text)
            if match and len(match.group(1)) > 30:  # before int(): past 4,300 digits it raises
                raise typer.BadParameter(f"{text[:20]}... ({len(match.group(1)):,} digits) is out of range: "
                                         f"give {valid}")
            if match:
                number = int(match.group(1))
            elif sizes and re.search(r"[kKmMbBtT^]", text):
                from apsi.errors import ApsiError
                from apsi.units import parse_size

                try:
                    number = parse_size(text, name)
                except ApsiError:
                    raise typer.BadParameter(f"{str(value)[:40]!r} is not {valid}") from None
            else:
                raise typer.BadParameter(f"{str(value)[:40]!r} is not {valid}")
        if not low <= number <= high:
            raise typer.BadParameter(f"{str(value)[:40]} is out of range: give {valid}")
        return number

    return parse


def _whole_option(name: str, help: str, sizes: bool = False) -> Any:
    """A --kebab-case whole-number option for `name`, its range shown in --help."""
    low, high = WHOLE_RANGES[name]
    return typer.Option(None, "--" + name.replace("_", "-"), min=low, max=high, parser=_whole(name, sizes),
                        help=help)


# Option declarations shared by plan and frontier-like commands; all strings or simple types so
# that the API, not click, judges the values.
_PARAMS = typer.Argument(..., help="A size (21B, 1T, 1.5e12), a preset (see `apsi models`) or a Hugging Face "
                                   "config.json or its folder.")
_LARGEST = typer.Option(False, "--largest", help="Instead of PARAMS: the largest model that trains on the GPUs, "
                        "days and tokens given (all three needed): bare sizes under the shape rule, or the members "
                        "of a preset family given as PARAMS (llama-3.1, qwen3, ...).")
_ACTIVE = typer.Option(None, "--active", help="Active parameters per token (MoE); default: all.")
_TOKENS = typer.Option(None, "--tokens", help="Training tokens; default 20 per active parameter.")
_GPU = typer.Option("H100", "--gpu", help="GPU name (see `apsi gpus`).")
# The rest of the plan options, declared once and shared by `plan`, `frontier` (and `serve`).
_PRECISION = typer.Option("bf16", "--precision", metavar="[bf16|fp16|fp8]", help="Training precision.")
_OPTIMIZER = typer.Option("adamw", "--optimizer", metavar="[adamw|adam8bit|sgd]", help="The optimizer.")
_SEQ = typer.Option(None, "--seq", help="Sequence length, tokens (a suffix is decimal: 4K is 4,000; give 4096 for 4,096); "
                    "default 4096, or a model's learned positions where fewer (GPT-3's 2048).")
_BATCH = typer.Option(None, "--batch", help="Global batch in tokens (16M = 16,000,000); default 2^22.")
_MFU = typer.Option(None, "--mfu", help="A flat utilisation of the dense peak, 0-1, for every FLOP run, recomputation's included (a plan that "
                    "recomputes reports a lower MFU); for every duration (default: the step-time model; reference: 0.4).")
_MAX_GPUS = typer.Option("200000", "--max-gpus", help="Largest cluster to consider.")
_CATALOG = typer.Option(None, "--catalog", help="YAML file adding or overriding GPUs.")
_TP, _PP, _DP = (_whole_option(name, knobs.BY_NAME[name].help) for name in ("tp", "pp", "dp"))
_RECOMPUTE = typer.Option(None, "--recompute", metavar="[none|selective|full]", help=knobs.BY_NAME["recompute"].help)
_PRICE = typer.Option(None, "--price", help="$/GPU-hour, overriding the catalog's price.")
_FAILURES = typer.Option(True, "--failures/--no-failures",
                         help="Count the time interruptions cost at scale (frameworks' step-time model).")
_CHECKPOINT = typer.Option(None, "--checkpoint-minutes", help="Minutes between checkpoints (default 30).")
def choices(names: Any) -> str:
    """A metavar of names, from their owner's list: "[a|b|c]"."""
    return "[" + "|".join(names) + "]"


def words(names: Any) -> str:
    """Names in a sentence, from their owner's list: "a, b or c"."""
    names = list(names)
    return ", ".join(names[:-1]) + " or " + names[-1] if len(names) > 1 else "".join(names)


_FRAMEWORK = typer.Option(None, "--framework", metavar=choices(FRAMEWORKS),
                          help=f"{DEFAULT_FRAMEWORK} (default), {words(x for x in FRAMEWORKS if x not in (DEFAULT_FRAMEWORK, 'reference'))}: "
                               "their rules and memory; or reference (the reference arithmetic).")
_OBJECTIVE_HELP = "What to minimise: " + "; ".join(f"{name}, {what}" for name, what in OBJECTIVES.items()) + "."
# The framework knobs (plan() keywords beyond the reference's), added to plan and frontier by
# _framework_knobs and handed to the command as one `knobs` dict.
FRAMEWORK_HELP: tuple[tuple[str, str], ...] = (
    *((k.name, knobs.help_text(k)) for k in knobs.KNOBS if not k.reference),
    ("batch_tolerance", "How far the batch may move to one the layout runs (frameworks; default 0.05)."),
    ("node_granularity", "GPUs the plan's count is a multiple of (frameworks; default: whole nodes of the GPU "
                         "type, 1 for any count)."),
)
_PUE = typer.Option("1.3", "--pue", help="Facility power / IT power for the energy figure.")

# The architecture options (apsi.inputs.modelspec.ARCHITECTURE_OPTIONS, same order; tests/test_cli.py checks
# the two agree), added to plan, frontier and serve by _architecture_options. They are listed
# here rather than imported so that `apsi --help` does not load pydantic.
ARCHITECTURE_HELP: tuple[tuple[str, str], ...] = (
    ("layers", "Transformer layers; default: the preset's or config's, or from the size."),
    ("width", "Hidden size; for a size, default 128 x layers."),
    ("heads", "Attention (query) heads; for a size, default width / 128."),
    ("kv_heads", "Key/value heads (grouped-query attention); for a size, default heads."),
    ("head_dim", "Width of one attention head; for a size, default width / heads."),
    ("ffn", "Intermediate width of a dense MLP; for a size, default 4 x width."),
    ("mlp", "swiglu (gated: three matrices) or gelu (two)."),
    ("vocab", "Vocabulary size (0: no embedding, as the reference shape rule)."),
    ("tied", "true or false: input embedding and output head share one matrix."),
    ("experts", "Routed experts per MoE layer."),
    ("top_k", "Routed experts each token uses."),
    ("shared_experts", "Experts every token uses."),
    ("expert_ffn", "Intermediate width of one routed expert."),
    ("dense_layers", "Leading layers with a dense MLP in an MoE model."),
    ("q_lora_rank", "MLA: rank of the query down-projection."),
    ("kv_lora_rank", "MLA: rank of the compressed key/value latent."),
    ("qk_nope_dim", "MLA: per-head query/key width without rotary embedding."),
    ("qk_rope_dim", "MLA: per-head query/key width with rotary embedding."),
    ("v_head_dim", "MLA: per-head value width."),
    ("mtp_layers", "Multi-token-prediction blocks trained with the model."),
)
_SECTION_ORDER = ("Layout", "Framework settings", "Architecture")
_SECTIONS: dict[str, str] = {**{k.name: knobs.group_of(k) for k in knobs.KNOBS},
                             **{name: "Architecture" for name, _ in ARCHITECTURE_HELP}}
"""Each option's `--help` section by its parameter's name (SectionedCommand)."""
_CONVENTION_HELP = "Attention FLOPs: causal (default for presets and configs) or full (default for sizes)."


def _option_group(helps: tuple[tuple[str, str], ...], into: str):
    """Give a command one --kebab-case option per (name, help), handed to it as one dict `into`
    (None for each option not given): a whole number for the names in WHOLE_RANGES, else a
    string for the API to judge."""
    names = [name for name, _ in helps]
    extra = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=Optional[int],
                               default=_whole_option(name, text))
             if name in WHOLE_RANGES else
             inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=Optional[str],
                               default=typer.Option(None, "--" + name.replace("_", "-"), help=text))
             for name, text in helps]

    def decorate(command):
        signature = inspect.signature(command)
        own = [p for p in signature.parameters.values() if p.name != into]

        @functools.wraps(command)
        def wrapper(**kwargs):
            group = {name: kwargs.pop(name) for name in names}
            return command(**kwargs, **{into: group})

        wrapper.__signature__ = signature.replace(parameters=own + extra)  # type: ignore[attr-defined]
        return wrapper

    return decorate


def _architecture_options(convention: bool = True):
    """Give a command one --kebab-case option per architecture field (and --flops-convention when
    `convention`), handed to it as one `architecture` dict (None for each option not given)."""
    helps = ARCHITECTURE_HELP + ((("flops_convention", _CONVENTION_HELP),) if convention else ())
    return _option_group(helps, "architecture")


def _framework_knobs():
    """Give a command the framework knobs of FRAMEWORK_HELP, handed to it as one `knobs` dict."""
    return _option_group(FRAMEWORK_HELP, "knobs")


def _format(fmt: str | None, output: str | None, json_flag: bool = False) -> str:
    """The output format: --format, else --json, else --output's extension (.json, .csv, .md), else table."""
    if fmt is not None:
        from apsi.outputs import tables

        name = _call(tables.check_format, fmt)
        if json_flag and name != "json":
            raise _Fail(f"--json and --format {fmt} disagree: give one")
        return name
    if json_flag:
        return "json"
    ext = os.path.splitext(output or "")[1].lower()
    return {".json": "json", ".csv": "csv", ".md": "markdown", ".markdown": "markdown"}.get(ext, "table")


Inputs = tuple[tuple[str, Optional[str]], ...]
"""A command's input files as (what it is, its path or None), which its outputs may not replace."""


def _emit(text: str, output: str | None, keep: Inputs = ()) -> None:
    if output is None:
        _echo(text)
    else:
        _write_file(output, text, keep)


def _echo(text: str) -> None:
    """`text` to standard output, all of it or a BrokenPipeError (exit 141). Under PYTHONUNBUFFERED
    (python -u) the text layer writes straight to the raw file, whose write may take part of the
    bytes: a pipe closed early dropped the rest, and the command exited 0 with its output cut. The
    bytes are then written in a loop, as a buffered writer does."""
    import io
    import sys

    stream = sys.stdout
    raw = getattr(stream, "buffer", None)
    if not isinstance(raw, io.RawIOBase):
        typer.echo(text, nl=False)
        return
    stream.flush()
    data = memoryview(text.encode(stream.encoding or "utf-8", stream.errors or "strict"))
    while data:
        written = raw.write(data)
        data = data[written or 0:]


def _write_export(plan, fmt: str, output: str | None, keep: Inputs = ()) -> None:
    from apsi.outputs import export as exports

    _emit(_call(exports.export_config, plan, fmt), output, keep)
    if output is not None:
        typer.echo(f"{fmt} configuration written to {output}", err=True)


def _model_inputs(params: str | None, catalog: str | None) -> Inputs:
    """The files a plan reads: PARAMS when it names a config.json (or a folder holding one) and --catalog."""
    found = None
    if params is not None:
        from apsi.inputs.hf_config import config_path

        found = config_path(params)
    return (("the model's config.json", None if found is None else str(found)), ("the --catalog file", catalog))


def _check_output(path: str, keep: Inputs = (), option: str = "--output") -> None:
    """Refuse an output that cannot be a regular file (a device such as /dev/null, a FIFO, a socket,
    a folder: writing would rename a file over it) or that is one of the command's inputs
    (`keep`; it would be overwritten), links followed."""
    import stat

    from apsi.textfiles import kind_of

    shown = str(path)[:200]
    try:
        target = os.path.realpath(path)
        info = os.stat(target) if os.path.lexists(target) else None
    except (OSError, ValueError) as err:
        raise _Fail(f"cannot write {shown!r}: {getattr(err, 'strerror', None) or err}") from None
    if info is None:
        # Checked before the command's work, so that nothing is printed or written ahead of the
        # refusal (a plan printed, its --output file written, and then its --plot refused).
        folder = os.path.dirname(target) or "."
        if not os.path.isdir(folder):
            raise _Fail(f"cannot write {shown}: its folder {folder[:200]} does not exist")
        return
    if stat.S_ISDIR(info.st_mode):
        raise _Fail(f"{option} {shown} is a directory: give a file name")
    if (special := kind_of(info.st_mode)) is not None:
        also = " (or leave --output out to print to standard output)" if option == "--output" else ""
        raise _Fail(f"{option} {shown} is {special}, not a regular file: give a file name{also}")
    for what, given in keep:
        if given is None:
            continue
        if given == "-":
            # The input read from standard input: the same file if stdin was redirected from it
            # (apsi run - --output runs.yaml < runs.yaml overwrote the scenario).
            try:
                stdin = os.fstat(0)
                same = stat.S_ISREG(stdin.st_mode) and (stdin.st_dev, stdin.st_ino) == (info.st_dev, info.st_ino)
            except (OSError, ValueError):
                same = False
            if same:
                raise _Fail(f"{option} {shown} is {what} itself (read from standard input): give another file")
            continue
        try:
            same = os.path.exists(given) and os.path.samefile(target, given)
        except (OSError, ValueError):
            same = False
        if same:
            raise _Fail(f"{option} {shown} is {what} itself: give another file")


def _write_file(path: str, text: str, keep: Inputs = (), option: str = "--output") -> None:
    """Write `text` to `path` whole or not at all: into a temporary file beside it, renamed over it
    once complete, so a full disk or a file-size limit leaves the old file as it was; only a
    regular file that is none of the command's inputs (`keep`) is replaced (_check_output)."""

    def write(temp: str) -> None:
        with open(temp, "w", encoding="utf-8") as out:
            out.write(text)

    _write_via(path, write, keep, option)


def _write_via(path: str, write: Callable[[str], None], keep: Inputs = (), option: str = "--output") -> None:
    """Have `write` write a temporary file beside `path` (with its extension, so a chart's format
    holds), then rename it over `path`: the file is replaced whole or not at all."""
    import tempfile

    _check_output(path, keep, option)
    target = os.path.realpath(path)
    folder = os.path.dirname(target) or "."
    try:
        fd, temp = tempfile.mkstemp(prefix=".apsi-", suffix=os.path.splitext(target)[1], dir=folder)
        os.close(fd)
    except OSError as err:
        raise _Fail(f"cannot write {path}: {err.strerror or err}") from None
    try:
        try:
            write(temp)
        except BaseException:
            os.unlink(temp)
            raise
        if os.path.exists(target):
            os.chmod(temp, os.stat(target).st_mode & 0o7777)
        else:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(temp, 0o666 & ~umask)
        _check_output(path, keep, option)  # nothing put in its place while it was written
        os.replace(temp, target)
    except (OSError, _Fail) as err:
        try:
            os.unlink(temp)
        except OSError:
            pass
        if isinstance(err, _Fail):
            raise
        raise _Fail(f"cannot write {path}: {err.strerror or err}; it is left as it was") from None
