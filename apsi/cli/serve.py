"""`apsi serve`: the serving plan (apsi.serving.serve), its frontier (--frontier, --plot), its
engine launch file (--export) and the disaggregated plan (--disagg, apsi.serving.disagg_plan); under --framework reference, the reference's quotient (weights plus
one batch's KV cache over GPU memory, apsi.api.plan.inference), byte for byte as it was.

Forwards its options 1:1 to the API and prints what it returns through apsi.serving.render.
"""

from __future__ import annotations

from typing import Any, Optional

import typer

from apsi.cli.options import (
    _ACTIVE, _CATALOG, _PARAMS, _architecture_options, _call, _check_output, _echo, _Fail, _format, _model_inputs,
    _options, _width, _write_file, _write_via, choices, words)
from apsi.serving.engines import DEFAULT_ENGINE, ENGINES

_REFERENCE_ONLY = ("seq", "batch")
_MODEL_ONLY = ("engine", "kv_precision", "isl", "osl", "prefix", "ttft", "tpot", "rate", "concurrency", "inventory",
               "objective", "tp", "pp", "price", "pue")


@_architecture_options(convention=False)
def serve_cmd(
    params: str = _PARAMS,
    engine: Optional[str] = typer.Option(None, "--engine", metavar=choices(ENGINES),
                                         help=f"The serving engine: {words(ENGINES)} (default {DEFAULT_ENGINE})."),
    precision: str = typer.Option("bf16", "--precision", metavar="[bf16|fp16|fp8|fp4]",
                                  help="Weight precision (fp4: NVFP4, on GPUs that have it)."),
    kv_precision: Optional[str] = typer.Option(None, "--kv-precision", metavar="[bf16|fp16|fp8]",
                                               help="KV-cache precision (default: the engine's: TensorRT-LLM fp8 under fp8/fp4 weights, vLLM and SGLang the model's 16-bit dtype)."),
    gpu: Optional[str] = typer.Option(None, "--gpu", help="GPU name, a list, or any (see `apsi gpus`); default H100, "
                                      "or the --inventory's types."),
    isl: Optional[str] = typer.Option(None, "--isl", help="Input tokens per request (default 1000)."),
    osl: Optional[str] = typer.Option(None, "--osl", help="Output tokens per request (default 1000)."),
    prefix: Optional[str] = typer.Option(None, "--prefix", help="Input tokens per request already cached."),
    ttft: Optional[str] = typer.Option(None, "--ttft", help="Time to first token target, ms (mean), or p99:MS."),
    tpot: Optional[str] = typer.Option(None, "--tpot", help="Time per output token target, ms."),
    rate: Optional[str] = typer.Option(None, "--rate", help="Load: requests per second."),
    concurrency: Optional[str] = typer.Option(None, "--concurrency", help="Load: requests in flight."),
    inventory: Optional[str] = typer.Option(None, "--inventory",
                                            help="GPUs on hand per type, e.g. H100=64,H200=32: the answer may mix replicas."),
    objective: Optional[str] = typer.Option(None, "--objective", metavar="[gpus|cost]",
                                            help="With a load: the fewest GPUs (default) or the least cost."),
    tp: Optional[str] = typer.Option(None, "--tp", help="Pin the replica's tensor-parallel size."),
    pp: Optional[str] = typer.Option(None, "--pp", help="Pin the replica's pipeline stages."),
    price: Optional[str] = typer.Option(None, "--price", help="$/GPU-hour, overriding the catalog's price."),
    pue: Optional[str] = typer.Option(None, "--pue", help="Facility power / IT power for the energy figure (default 1.3)."),
    active: Optional[str] = _ACTIVE,
    catalog: Optional[str] = _CATALOG,
    frontier: bool = typer.Option(False, "--frontier", help="List tokens/s per GPU against per user over layouts and batches."),
    disagg: bool = typer.Option(False, "--disagg", help="Prefill and decode on separate replica pools (xPyD), weighed "
                                "against aggregated serving; needs --rate and --ttft."),
    plot: Optional[str] = typer.Option(None, "--plot", help="With --frontier: also draw it (.png or .svg)."),
    export: Optional[str] = typer.Option(None, "--export", metavar=choices(ENGINES),
                                         help="Print the engine's launch script, the plan made under that engine (--engine, if given, must match)."),
    output: Optional[str] = typer.Option(None, "--output", help="Write the output to this file."),
    framework: Optional[str] = typer.Option(None, "--framework", metavar="[reference]",
                                            help="reference: the reference's quotient (weights plus KV cache over memory)."),
    seq: Optional[str] = typer.Option(None, "--seq", help="reference only: tokens of KV cache per sequence (4096)."),
    batch: Optional[str] = typer.Option(None, "--batch", help="reference only: sequences served at once (1)."),
    json: bool = typer.Option(False, "--json", help="Print the plan (or the frontier) as JSON."),
    *,
    architecture: dict[str, Any],
) -> None:
    """Plan serving a model: the replica layout and batch, TTFT, TPOT, tokens/s per GPU and per user,
    the replicas a load needs and the GPUs; with --inventory, the cheapest mix of replica kinds."""
    from apsi.serving import plan as serving
    from apsi.serving import render

    keep = _model_inputs(params, catalog)
    for path, option in ((output, "--output"), (plot, "--plot")):
        if path is not None:
            _check_output(path, keep, option)
    given = dict(engine=engine, kv_precision=kv_precision, isl=isl, osl=osl, prefix=prefix, ttft=ttft, tpot=tpot,
                 rate=rate, concurrency=concurrency, inventory=inventory, objective=objective, tp=tp, pp=pp, price=price,
                 pue=pue)
    if framework is not None:
        if framework.strip().lower() != "reference":
            raise _Fail(f"serve --framework takes only reference (the reference's quotient), got {framework!r}; "
                        "leave it out for the serving model")
        extra = [k for k in _MODEL_ONLY if given[k] is not None] + [k for k, v in (("frontier", frontier),
                                                                                   ("export", export),
                                                                                   ("disagg", disagg)) if v]
        if extra:
            raise _Fail(f"--{extra[0].replace('_', '-')} is the serving model's; the reference's quotient takes "
                        "--precision, --gpu, --seq and --batch")
        from apsi.api import plan as scale
        from apsi.outputs import text as training_render

        quotient = _call(scale.inference, params, **_options(precision=precision, gpu=gpu or "H100", seq=seq or "4096",
                                                             batch=batch or "1", active=active, catalog=catalog,
                                                             **architecture))
        _out(quotient.model_dump_json() if json else training_render.serving_text(quotient), output, keep, json)
        return
    for key, value in (("seq", seq), ("batch", batch)):
        if value is not None:
            raise _Fail(f"--{key} belongs to the reference's quotient (--framework reference); the serving model "
                        "takes --isl and --osl per request and the load as --rate or --concurrency")
    if plot is not None and not frontier:
        raise _Fail("--plot draws the serving frontier: give --frontier with it")
    if plot is not None:
        from apsi import plot as charts

        _call(charts.check_file, plot)
    if frontier:
        loads = [name for name, value in (("rate", rate), ("concurrency", concurrency), ("inventory", inventory),
                                          ("objective", objective)) if value is not None]
        if loads:
            raise _Fail(f"--frontier lists one replica at every layout and batch; --{loads[0]} sizes replicas for a "
                        "load: leave it out, or leave out --frontier")
    if frontier and export is not None:
        raise _Fail("--export launches one plan, and --frontier lists many: leave out one of them")
    if export is not None and json:
        raise _Fail("--export prints the engine's bash script, not JSON: leave out --json")
    # --output's extension chooses the format as under plan and frontier: .json is --json (it wrote
    # the text into s.json); serve has no CSV or markdown form, which is said, not written as text.
    form = _format(None, output, json) if export is None else "table"
    if form in ("csv", "markdown"):
        raise _Fail(f"--output {output}: apsi serve writes its text or JSON (--json, or a .json file), not "
                    f"{'CSV' if form == 'csv' else 'markdown'}; give a .txt or .json file")
    json = form == "json" or json
    if disagg and (frontier or export is not None):
        raise _Fail(f"--disagg plans two pools at a rate; {'--frontier' if frontier else '--export'} is the "
                    "aggregated plan's: leave out one of them")
    if export is not None and engine is None:
        # The launch is the engine's own, so the plan is that engine's (as plan --export takes
        # the format's framework); an unknown name is refused by launch() below, an --engine
        # given otherwise is refused there too.
        from apsi.outputs.export.engines import EXPORTS

        if export.strip().lower() in EXPORTS:
            given["engine"] = export.strip().lower()
    options = _options(gpu=gpu, precision=precision, active=active, catalog=catalog, **given, **architecture)
    if disagg:
        from apsi.serving.disagg_plan import serve_disagg

        pools = _call(serve_disagg, params, **options)
        _out(pools.model_dump_json() if json else render.disagg_text(pools, width=_width() if output is None else None),
             output, keep, json)
        return
    if frontier:
        points = _call(serving.serve_frontier, params, **options)
        if json:
            from apsi.model.serve_schema import ServeFrontierOutput

            text = ServeFrontierOutput(points).model_dump_json()
        else:
            text = render.frontier_text(points, width=_width() if output is None else None)
        _out(text, output, keep, json)
        if plot is not None:
            from apsi.serving.plot import frontier_plot

            from apsi.serving.engines import DEFAULT_ENGINE, engine as find_engine

            chosen = find_engine(given.get("engine") or DEFAULT_ENGINE)
            what = f"{params} on {chosen.title} {chosen.version} ({precision or 'bf16'} weights)"
            _write_via(plot, lambda temp: _call(frontier_plot, points, temp, what), keep, "--plot")
            typer.echo(f"serving frontier plot written to {plot}", err=True)
        return
    plan = _call(serving.serve, params, **options)
    if export is not None:
        from apsi.outputs.export.engines import launch

        _out(_call(launch, plan, export), output, keep, False)
        return
    _out(plan.model_dump_json() if json else render.serve_text(plan, width=_width() if output is None else None),
         output, keep, json)


def _out(text: str, output: str | None, keep: Any, json: bool) -> None:
    if output is None:
        _echo(text + ("\n" if json and not text.endswith("\n") else ""))
    else:
        _write_file(output, text if text.endswith("\n") else text + "\n", keep)
