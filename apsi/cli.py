"""The `apsi` command: a thin shell over apsi.scale.

Each option forwards 1:1 to the API keyword of the same name; values go through as given and the
API validates them, so the CLI, scenario files and Python share one set of rules and messages.
A user error prints one line and exits 2; nothing here computes a plan or formats numbers.
"""

from __future__ import annotations

import functools
import inspect
import os
import sys
from typing import Optional

import typer

try:  # typer vendors click from 0.2x on; older releases depend on click itself.
    from typer._click import exceptions as _click_errors
except ImportError:  # pragma: no cover - depends on the installed typer
    from click import exceptions as _click_errors

from apsi import __version__

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


class _Fail(Exception):
    """A user error already worded for one line."""


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


def _framework_options(framework: str | None, *, levers: bool | None, explain: bool = False, **knobs) -> dict:
    """The framework and its knobs for plan(); levers on by default under the reference (unless
    --no-levers), under the others only with --levers (each is a full plan: a plain plan stays fast);
    `explain` (the runner-up GPU type) under the others, as the reference always gives it."""
    from apsi.frameworks import DEFAULT

    name = DEFAULT if framework is None else framework
    if name.strip().lower() == "reference":
        return {"framework": name, "levers": levers is not False, **_options(**knobs)}
    return {"framework": name, **({"explain": True} if explain else {}), **_options(levers=levers or None, **knobs)}


# Option declarations shared by plan and frontier-like commands; all strings or simple types so
# that the API, not click, judges the values.
_PARAMS = typer.Argument(..., help="A size (21B, 1T, 1.5e12), a preset (see `apsi models`) or a Hugging Face "
                                   "config.json or its folder.")
_ACTIVE = typer.Option(None, "--active", help="Active parameters per token (MoE); default: all.")
_TOKENS = typer.Option(None, "--tokens", help="Training tokens; default 20 per active parameter.")
_GPU = typer.Option("H100", "--gpu", help="GPU name (see `apsi gpus`).")
# The rest of the plan options, declared once and shared by `plan`, `frontier` (and `serve`).
_PRECISION = typer.Option("bf16", "--precision", metavar="[bf16|fp16|fp8]", help="Training precision.")
_OPTIMIZER = typer.Option("adamw", "--optimizer", metavar="[adamw|adam8bit|sgd]", help="The optimizer.")
_SEQ = typer.Option("4096", "--seq", help="Sequence length, tokens.")
_BATCH = typer.Option(None, "--batch", help="Global batch in tokens (16M = 16,000,000); default 2^22.")
_MFU = typer.Option(None, "--mfu", help="A flat model FLOPs utilisation, 0-1, for every duration (default: the step-time model; reference: 0.4).")
_MAX_GPUS = typer.Option("200000", "--max-gpus", help="Largest cluster to consider.")
_CATALOG = typer.Option(None, "--catalog", help="YAML file adding or overriding GPUs.")
_TP = typer.Option(None, "--tp", help="Pin tensor parallelism.")
_PP = typer.Option(None, "--pp", help="Pin pipeline stages.")
_DP = typer.Option(None, "--dp", help="Pin data parallelism.")
_RECOMPUTE = typer.Option(None, "--recompute", metavar="[none|selective|full]", help="Pin recomputation.")
_PRICE = typer.Option(None, "--price", help="$/GPU-hour, overriding the catalog's price.")
_FAILURES = typer.Option(True, "--failures/--no-failures",
                         help="Count the time interruptions cost at scale (frameworks' step-time model).")
_CHECKPOINT = typer.Option(None, "--checkpoint-minutes", help="Minutes between checkpoints (default 30).")
_FRAMEWORK = typer.Option(None, "--framework", metavar="[megatron|torchtitan|deepspeed|reference]",
                          help="megatron (default), torchtitan, deepspeed: their rules and memory; or reference "
                               "(the reference arithmetic).")
# The framework knobs (plan() keywords beyond the reference's), added to plan and frontier by
# _framework_knobs and handed to the command as one `knobs` dict.
FRAMEWORK_HELP: tuple[tuple[str, str], ...] = (
    ("cp", "Pin context parallelism (megatron, torchtitan)."),
    ("ep", "Pin expert parallelism (megatron, torchtitan)."),
    ("etp", "Pin expert tensor parallelism (megatron: a divisor of the experts' FFN; torchtitan: 1 or tp)."),
    ("vpp", "Pin virtual pipeline stages per rank (megatron, torchtitan)."),
    ("micro_batch", "Pin sequences per micro-batch (frameworks; default 1)."),
    ("recompute_modules", "With --recompute selective: the modules recomputed, comma-separated (megatron, "
                          "deepspeed: core_attn, mla_up_proj, layernorm, mlp, moe, moe_act; default core_attn)."),
    ("zero", "Pin the ZeRO stage: deepspeed 0-3, megatron 0 or 1 (distributed optimizer)."),
    ("dp_replicate", "Pin torchtitan's HSDP replicas (dp / dp_replicate shard)."),
    ("grad_dtype", "Gradient buffers: fp32 (Megatron's default) or bf16 (megatron)."),
    ("moments_dtype", "Adam's moments: fp32 (default) or bf16 (megatron)."),
    ("fp8_param_gather", "true: FP8 primary weights, no bf16 copy (megatron, fp8)."),
    ("tp_overlap", "true: TP collectives overlapped with GEMMs (megatron --tp-comm-overlap)."),
    ("ep_overlap", "true: EP all-to-all overlapped with another micro-batch (megatron EP A2A overlap)."),
    ("dispatcher", "EP token dispatcher: alltoall (default) or flex (megatron DeepEP/HybridEP: once per node)."),
    ("batch_tolerance", "How far the batch may move to one the layout runs (frameworks; default 0.05)."),
)
_PUE = typer.Option("1.3", "--pue", help="Facility power / IT power for the energy figure.")

# The architecture options (apsi.modelspec.ARCHITECTURE_OPTIONS, same order; tests/test_cli.py checks
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
_CONVENTION_HELP = "Attention FLOPs: causal (default for presets and configs) or full (default for sizes)."


def _option_group(helps: tuple[tuple[str, str], ...], into: str):
    """Give a command one --kebab-case string option per (name, help), handed to it as one dict
    `into` (None for each option not given)."""
    names = [name for name, _ in helps]
    extra = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=Optional[str],
                               default=typer.Option(None, "--" + name.replace("_", "-"), help=text))
             for name, text in helps]

    def decorate(command):
        signature = inspect.signature(command)
        own = [p for p in signature.parameters.values() if p.name != into]

        @functools.wraps(command)
        def wrapper(**kwargs):
            group = {name: kwargs.pop(name) for name in names}
            return command(**kwargs, **{into: group})

        wrapper.__signature__ = signature.replace(parameters=own + extra)
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


@app.command("plan")
@_architecture_options()
@_framework_knobs()
def plan_cmd(
    params: str = _PARAMS,
    active: Optional[str] = _ACTIVE,
    tokens: Optional[str] = _TOKENS,
    gpu: str = _GPU,
    gpus: Optional[str] = typer.Option(None, "--gpus", help="GPUs you have: the fastest layout on at most N."),
    days: str = typer.Option("90", "--days", help="Target duration in days."),
    precision: str = _PRECISION,
    optimizer: str = _OPTIMIZER,
    seq: str = _SEQ,
    batch: Optional[str] = _BATCH,
    mfu: Optional[str] = _MFU,
    max_gpus: str = _MAX_GPUS,
    catalog: Optional[str] = _CATALOG,
    tp: Optional[str] = _TP,
    pp: Optional[str] = _PP,
    dp: Optional[str] = _DP,
    recompute: Optional[str] = _RECOMPUTE,
    framework: Optional[str] = _FRAMEWORK,
    objective: str = typer.Option("gpus", "--objective", metavar="[gpus|days|cost|energy]", help="What to minimise."),
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
    export: Optional[str] = typer.Option(None, "--export", help="Print the plan as a launch configuration: megatron, "
                                         "megatron-bridge, torchtitan, deepspeed or slurm (plans under its framework)."),
    fmt: Optional[str] = typer.Option(None, "--format", metavar="[table|csv|json|markdown]", help="table (the plan block; default), json, csv or markdown "
                                      "(one row); default from --output's extension."),
    output: Optional[str] = typer.Option(None, "--output", help="Write the plan (or --export's file) to this file."),
    architecture: dict = None,
    knobs: dict = None,
) -> None:
    """Plan a training run: layout, memory per GPU, GPU count, days, cost, serving.

    --gpu takes a name, a comma-separated list or any: the program then chooses the type too."""
    from apsi import render, scale

    if plot is not None:
        from apsi import plot as charts

        _call(charts.check_file, plot)
    if export is not None and (fmt is not None or json):
        raise _Fail("--export writes a launch configuration: give it without --format or --json")
    fmt = _format(fmt, output, json)
    if export is not None:
        from apsi import export as exports

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
    plan = _call(scale.plan, params, **options)
    if export is not None:
        _write_export(plan, export, output)
        return
    if fmt == "table":
        text = render.plan_text(plan, explain=explain, width=_width() if output is None else None)
    elif fmt == "json":
        text = plan.model_dump_json() + "\n"
    else:
        from apsi import tables
        from apsi.scenarios import Result

        inputs = {"params": params, **{k: v for k, v in options.items() if k not in ("levers", "explain")}}
        text = tables.render([Result(name=str(params), line=None, inputs=inputs, plan=plan)], fmt)
    _emit(text, output)
    if plot is not None:
        _call(charts.memory_plot, plan, plot)
        typer.echo(f"memory plot written to {plot}", err=True)


@app.command("frontier")
@_architecture_options()
@_framework_knobs()
def frontier_cmd(
    params: str = _PARAMS,
    active: Optional[str] = _ACTIVE,
    tokens: Optional[str] = _TOKENS,
    gpu: str = typer.Option("H100", "--gpu", help="GPU name (see `apsi gpus`); one type per frontier."),
    gpus: Optional[str] = typer.Option(None, "--gpus", help="GPUs you have: the frontier stops at N."),
    days: str = typer.Option("90", "--days", help="Target duration in days (the target line)."),
    precision: str = _PRECISION,
    optimizer: str = _OPTIMIZER,
    seq: str = _SEQ,
    batch: Optional[str] = _BATCH,
    mfu: Optional[str] = _MFU,
    max_gpus: str = _MAX_GPUS,
    catalog: Optional[str] = _CATALOG,
    tp: Optional[str] = _TP,
    pp: Optional[str] = _PP,
    dp: Optional[str] = _DP,
    recompute: Optional[str] = _RECOMPUTE,
    framework: Optional[str] = _FRAMEWORK,
    objective: str = typer.Option("gpus", "--objective", metavar="[gpus|days|cost|energy]", help="The marked plan's objective."),
    price: Optional[str] = _PRICE,
    pue: str = _PUE,
    failures: bool = _FAILURES,
    checkpoint_minutes: Optional[str] = _CHECKPOINT,
    plot: Optional[str] = typer.Option(None, "--plot", help="Also write days against GPUs as a chart (.png or .svg)."),
    json: bool = typer.Option(False, "--json", help="Print every FrontierPoint as JSON."),
    fmt: Optional[str] = typer.Option(None, "--format", metavar="[table|csv|json|markdown]", help="table (default), json, csv or markdown (every point); "
                                      "default from --output's extension."),
    output: Optional[str] = typer.Option(None, "--output", help="Write the frontier to this file."),
    architecture: dict = None,
    knobs: dict = None,
) -> None:
    """The GPU/day frontier: at each GPU count where the fastest layout gets faster, that layout
    and its days, from the fewest GPUs that fit to the point where more GPUs stop helping."""
    from apsi import render, scale, sweep

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
    points = _call(sweep.frontier, params, **options)
    plan = None if fmt != "table" and plot is None else _call(scale.plan, params, **options)
    if fmt == "json":
        from pydantic import TypeAdapter

        _emit(TypeAdapter(list[sweep.FrontierPoint]).dump_json(points).decode() + "\n", output)
    elif fmt == "table":
        _emit(render.frontier_text(points, plan, width=_width() if output is None else None), output)
    else:
        from apsi import tables

        _emit(tables.frontier_rows(points, fmt), output)
    if plot is not None:
        _call(charts.frontier_plot, points, plan, plot)
        typer.echo(f"frontier plot written to {plot}", err=True)


@app.command("serve")
@_architecture_options(convention=False)
def serve_cmd(
    params: str = _PARAMS,
    precision: str = typer.Option("bf16", "--precision", metavar="[bf16|fp16|fp8]",
                                  help="Precision the weights and KV cache are served in."),
    gpu: str = _GPU,
    seq: str = typer.Option("4096", "--seq", help="Tokens of KV cache per sequence."),
    batch: str = typer.Option("1", "--batch", help="Sequences served at once."),
    active: Optional[str] = _ACTIVE,
    catalog: Optional[str] = typer.Option(None, "--catalog"),
    json: bool = typer.Option(False, "--json", help="Print the ServingPlan as JSON."),
    architecture: dict = None,
) -> None:
    """Estimate the GPUs needed to serve a model: weights plus KV cache (per KV head under GQA,
    the compressed latent under MLA)."""
    from apsi import render, scale

    serving = _call(scale.inference, params, **_options(
        precision=precision, gpu=gpu, seq=seq, batch=batch, active=active, catalog=catalog, **architecture))
    typer.echo(serving.model_dump_json() if json else render.serving_text(serving), nl=json)


@app.command("models")
def models_cmd(json: bool = typer.Option(False, "--json", help="Print the presets as JSON, with sources.")) -> None:
    """List the model presets: give a name as PARAMS (apsi plan llama-3.1-405b)."""
    from apsi import render, scale

    rows = scale.models()
    if json:
        import json as _json

        typer.echo(_json.dumps([r.model_dump() for r in rows], indent=2))
    else:
        typer.echo(render.models_text(rows, width=_width()), nl=False)


@app.command("gpus")
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


def _format(fmt: str | None, output: str | None, json_flag: bool = False) -> str:
    """The output format: --format, else --json, else --output's extension (.json, .csv, .md), else table."""
    from apsi import tables

    if fmt is not None:
        if json_flag and fmt != "json":
            raise _Fail(f"--json and --format {fmt} disagree: give one")
        return _call(tables.check_format, fmt)
    if json_flag:
        return "json"
    ext = os.path.splitext(output or "")[1].lower()
    return {".json": "json", ".csv": "csv", ".md": "markdown", ".markdown": "markdown"}.get(ext, "table")


def _emit(text: str, output: str | None) -> None:
    if output is None:
        typer.echo(text, nl=False)
    else:
        _write_file(output, text)


def _write_export(plan, fmt: str, output: str | None) -> None:
    from apsi import export as exports

    _emit(_call(exports.export_config, plan, fmt), output)
    if output is not None:
        typer.echo(f"{fmt} configuration written to {output}", err=True)


def _check_output(path: str, keep: tuple[str, ...] = ()) -> None:
    """Refuse an output that is one of the inputs (it would be overwritten) or cannot be a file."""
    try:
        target = os.path.realpath(path)
        if any(os.path.exists(k) and os.path.samefile(target, k) for k in keep if os.path.exists(target)):
            raise _Fail(f"--output {path} is the scenario file itself: give another file")
    except (OSError, ValueError) as err:
        raise _Fail(f"cannot write {str(path)[:200]!r}: {getattr(err, 'strerror', None) or err}") from None
    if os.path.isdir(target):
        raise _Fail(f"--output {path} is a directory: give a file name")


def _write_file(path: str, text: str, keep: tuple[str, ...] = ()) -> None:
    """Write `text` to `path` whole or not at all: into a temporary file beside it, renamed over it
    once complete, so a full disk or a file-size limit leaves the old file as it was."""
    import tempfile

    _check_output(path, keep)
    target = os.path.realpath(path)
    folder = os.path.dirname(target) or "."
    try:
        fd, temp = tempfile.mkstemp(prefix=".apsi-", dir=folder)
    except OSError as err:
        raise _Fail(f"cannot write {path}: {err.strerror or err}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        if os.path.exists(target):
            os.chmod(temp, os.stat(target).st_mode & 0o7777)
        else:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(temp, 0o666 & ~umask)
        os.replace(temp, target)
    except OSError as err:
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise _Fail(f"cannot write {path}: {err.strerror or err}; it is left as it was") from None


@app.command("export")
def export_cmd(
    plan_file: str = typer.Argument(..., help="A plan saved with `apsi plan ... --json > plan.json`."),
    to: str = typer.Option(..., "--to", help="megatron, megatron-bridge, torchtitan, deepspeed or slurm."),
    output: Optional[str] = typer.Option(None, "--output", help="Write it to this file."),
) -> None:
    """Turn a saved plan into the launch configuration of its framework."""
    from apsi import export as exports

    _call(exports.check_format, to)
    try:
        with open(plan_file, encoding="utf-8") as f:
            text = f.read(64 * 2**20)
    except (OSError, UnicodeDecodeError) as err:
        raise _Fail(f"cannot read {plan_file}: {getattr(err, 'strerror', None) or err}") from None
    _write_export(_call(exports.read_plan, text), to, output)


@app.command("compare")
def compare_cmd(
    files: list[str] = typer.Argument(..., help="Two or more plans saved with `apsi plan ... --json > plan.json`."),
) -> None:
    """Saved plans side by side, the rows where they differ marked."""
    from apsi import export as exports, render

    if len(files) < 2:
        raise _Fail("compare takes two or more saved plans (apsi plan ... --json > a.json)")
    plans = []
    for name in files:
        try:
            with open(name, encoding="utf-8") as f:
                text = f.read(64 * 2**20)
        except (OSError, UnicodeDecodeError) as err:
            raise _Fail(f"cannot read {name}: {getattr(err, 'strerror', None) or err}") from None
        plans.append(_call(exports.read_plan, text))
    typer.echo(render.compare_text(plans, [os.path.basename(n) for n in files], width=_width()), nl=False)


@app.command("schema")
def schema_cmd() -> None:
    """The JSON schema of a plan (what `apsi plan --json` prints), each field with its description and unit."""
    import json as _json

    from apsi.model.schema import Plan

    typer.echo(_json.dumps(Plan.model_json_schema(), indent=2))


@app.command("run")
def run_cmd(
    file: str = typer.Argument(..., help="Scenario YAML file (- reads standard input): optional defaults: and "
                                         "catalog:, and a runs: list."),
    fmt: Optional[str] = typer.Option(None, "--format", metavar="[table|csv|json|markdown]", help="table (default), csv, json or markdown; default from "
                                      "--output's extension."),
    output: Optional[str] = typer.Option(None, "--output", help="Write the results to this file."),
    jobs: Optional[str] = typer.Option(None, "--jobs", help="Processes solving in parallel; default: all cores."),
) -> None:
    """Solve every run of a scenario file, one row per run; exit 1 if any run failed."""
    from apsi import scenarios, tables

    fmt = _format(fmt, output)
    if output is not None and file != "-":
        _check_output(output, keep=(file,))
    source = file
    if file == "-":
        text_in = sys.stdin.read(scenarios.MAX_FILE_BYTES + 1)
        if len(text_in) > scenarios.MAX_FILE_BYTES:
            raise _Fail(f"the scenario on standard input is more than {scenarios.MAX_FILE_BYTES:,} bytes; apsi reads "
                        "at most that")
        source = _call(scenarios.parse_text, text_in, "scenario on standard input")
    results = _call(scenarios.run_scenarios, source, jobs=jobs, progress=tables.ProgressBar(sys.stderr))
    text = tables.render(results, fmt, _width() if output is None else None)
    if output is None:
        typer.echo(text, nl=False)
    else:
        _write_file(output, text, keep=(file,))
    failed = sum(not r.ok for r in results)
    if failed:
        typer.echo(f"error: {failed:,} of {len(results):,} runs failed; each one's row says why", err=True)
        raise typer.Exit(1)


def _negative_number(err: Exception, args: list[str]) -> str | None:
    """The argument behind click's "No such option: -5" when the user typed a negative number
    such as -5B as PARAMS (click reads it as the short options -5 and -B)."""
    name = getattr(err, "option_name", None) or ""
    if not isinstance(err, _click_errors.NoSuchOption) or not (name[1:2].isdigit() or name[1:2] == "."):
        return None
    return next((a for a in args if isinstance(a, str) and a.startswith(name)), name)


def main(argv: list[str] | None = None) -> int:
    """Entry point: runs the app, turning user errors into one line and exit code 2."""
    try:
        # Outside standalone mode click returns, not raises, the code of a typer.Exit raised by a
        # command (apsi run exits 1 when a run failed); commands themselves return None.
        code = app(args=argv, prog_name="apsi", standalone_mode=False)
    except _Fail as err:
        typer.echo(f"error: {err}", err=True)
        return 2
    except _click_errors.UsageError as err:
        if type(err).__name__ == "NoArgsIsHelpError":
            typer.echo(err.ctx.get_help() if err.ctx else "")
            return 0
        where = err.ctx.command_path if err.ctx else "apsi"
        negative = _negative_number(err, sys.argv[1:] if argv is None else argv)
        message = f"{negative} is negative: it must be positive" if negative else err.format_message()
        typer.echo(f"error: {message} (see {where} --help)", err=True)
        return 2
    except _click_errors.ClickException as err:
        typer.echo(f"error: {err.format_message()}", err=True)
        return 2
    except (typer.Exit, getattr(_click_errors, "Exit", typer.Exit)) as err:
        return getattr(err, "exit_code", 0)
    except (typer.Abort, getattr(_click_errors, "Abort", typer.Abort)):
        return 130
    return code if isinstance(code, int) else 0


def _entry() -> None:
    """The console script. Once the command is done, output is flushed and the process ends with
    os._exit: tearing down the interpreter (OR-Tools, numpy and pandas modules, which OR-Tools
    imports) took about 0.15-0.3 s of a 1.2 s `apsi plan` (benchmarks/process_time.py) and does
    nothing a finished command needs; files are written and worker pools closed before this."""
    code = main()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except OSError:  # a closed pipe (apsi ... | head): nothing left to deliver
            pass
    os._exit(code)


if __name__ == "__main__":
    _entry()
