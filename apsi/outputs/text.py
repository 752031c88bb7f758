"""Text for people: the plan block, the GPU table, the serving estimate, the GPU/day frontier.

Formatting only. Every number comes from a model built elsewhere; nothing here computes a plan.
GiB is always 2^30 bytes and is labelled so.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from apsi.inputs import knobs
from apsi.fit import columns, wrap
from apsi.fmt import billions, model_title, count as _n, counted, duration, gib as _gib, load, mwh, usd
from apsi.units import human

if TYPE_CHECKING:  # annotations only: `apsi gpus` should not build the plan models
    from apsi.catalog import GPU
    from apsi.model.architecture import Architecture
    from apsi.model.schema import FrontierPoint
    from apsi.model.schema import ModelRow, ModelShape, Plan, ServingPlan

_RECOMPUTE_WORDS = {"none": "no recomputation", "selective": "selective recomputation",
                    "full": "full recomputation"}


def recompute_words(lay) -> str:
    """The recomputation in words, with the modules a selective one re-runs where it names them."""
    words = _RECOMPUTE_WORDS[lay.recompute]
    return f"{words} ({', '.join(lay.recompute_modules)})" if lay.recompute == "selective" and lay.recompute_modules \
        else words


def _mlp_name(a: Architecture) -> str:
    act = (a.activation or "").lower()
    if a.mlp == "swiglu":
        return "GeGLU" if act.startswith("gelu") else "SwiGLU"
    return "squared-ReLU" if act == "relu2" else "GELU"


def model_words(m: ModelShape) -> str:
    """The Model line: the source, the shape and the parameters.

    "Llama 3.1 405B (preset): 126 layers x 16,384, FFN 53,248 SwiGLU, 128 heads / 8 KV, vocab
    128,256; 405.85B parameters". A bare size keeps the reference's wording."""
    if m.source == "size" or m.architecture is None:
        moe = f", {human(m.active_params)} active per token (MoE)" if m.moe else " (dense)"
        return f"{human(m.params)} parameters{moe}; {m.layers} layers x {m.width:,} wide, {m.heads} heads"
    a = m.architecture
    label = {"preset": f"{m.name} (preset)", "config": f"{m.origin} ({m.family} config)",
             "shape": f"{m.origin} (size; {', '.join(m.derived) or 'nothing'} derived)"}[m.source]
    mlp = _mlp_name(a)
    if a.moe:
        dense = f" ({a.layers - a.moe_layers} dense, FFN {a.ffn:,})" if a.moe_layers < a.layers else ""
        shared = f" + {a.shared_experts} shared" if a.shared_experts else ""
        ffn = f"{dense}, {a.experts} experts (top-{a.top_k}){shared} of FFN {a.expert_ffn:,} {mlp}"
    else:
        ffn = f", FFN {a.ffn:,} {mlp}"
    if a.mla:
        attention = f"MLA {a.heads} heads (KV latent {a.kv_lora_rank:,} + {a.qk_rope_dim})"
    else:
        attention = f"{a.heads} heads / {a.kv_heads} KV" + (f" of {a.head_dim}" if a.head_dim * a.heads != a.width else "")
    vocab = (f"vocab {a.vocab:,}" + (" tied" if a.tied else "")) if a.vocab else "no vocabulary"
    counts = f"{billions(m.params)} parameters"
    if m.moe:
        counts += f", {billions(m.active_params)} active"
    if m.mtp_params:
        counts += f" (+ {billions(m.mtp_params)} in {a.mtp_layers} MTP block{'s' if a.mtp_layers > 1 else ''})"
    return f"{label}: {a.layers} layers x {a.width:,}{ffn}, {attention}, {vocab}; {counts}"


def _degrees(lay) -> str:
    """TP x PP x DP, with CP, EP and VPP where they are not 1."""
    extra = "".join(f" x {k} {v:,}" for k, v in (("CP", lay.cp),) if v != 1)
    text = f"TP {lay.tp} x PP {lay.pp}{extra} x DP {_n(lay.dp)}"
    return text + "".join(f", {k} {v}" for k, v in (("EP", lay.ep), ("VPP", lay.vpp)) if v != 1)


def _stages(layers: list[int]) -> str:
    """7 | 8 x 14 | 7: each run of equal stages once, with its count."""
    from apsi.fmt import runs

    return " | ".join(f"{n} x {k}" if k > 1 else str(n) for n, k in runs(layers))


def _layout_words(p: Plan) -> str:
    lay = p.layout
    n = lay.micro_batches_per_replica  # whole, or a reference plan's fraction; never an exponent
    micro = (f"{n:,.0f}" if float(n).is_integer() or n >= 1000 else f"{n:,.4g}") + (
        f" micro-batch{'' if n == 1 else 'es'} of {lay.micro_batch_sequences} "
        f"sequence{'' if lay.micro_batch_sequences == 1 else 's'} per replica")
    if p.framework == "reference":
        return f"TP {lay.tp} x PP {lay.pp} x DP {_n(lay.dp)} (tensor x pipeline x data parallel), ZeRO-3/FSDP sharding, {micro}"
    schedule = f"interleaved, {lay.vpp} virtual stages per rank" if lay.vpp > 1 else "1F1B"
    experts = f", experts EP {lay.ep} x ETP {lay.etp}" if p.model.moe else ""
    return (f"{_degrees(lay)} ({lay.sharding}"
            f"{', sequence parallel' if lay.sequence_parallel else ''}{experts}{_knob_words(p)}); layers per stage "
            f"{_stages(lay.stage_layers)}, {schedule}; {micro}")


_KNOB_WORDS = {k.name: k.label for k in knobs.KNOBS if k.label}
"""How the Layout line names each framework knob the plan was given (Plan.framework_knobs; apsi.inputs.knobs)."""


def _knob_words(p: Plan) -> str:
    """The given settings as applied, and a flag on by default under the plan's framework that was
    turned off as "no ..." (torchtitan's compile false: "no torch.compile")."""
    inert = inert_knobs(p)
    words = [_KNOB_WORDS[k].format(v) if v is not False else "no " + _KNOB_WORDS[k]
             for k, v in p.framework_knobs.items()
             if k in _KNOB_WORDS and k not in inert and (v is not False or p.framework in knobs.BY_NAME[k].on)]
    return "".join(", " + w for w in words)


def inert_knobs(p: Plan) -> dict[str, str]:
    """The plan's given settings that change nothing on its layout, each with why (the framework
    module's inert_settings: Megatron's ep_overlap off the layouts it runs on, tp_overlap at tp
    1, the flex dispatcher at ep 1, the CP all-gather at cp 1). The Layout line does not show them
    as applied."""
    if p.framework != "megatron" or not p.framework_knobs:
        return {}
    from apsi.training.frameworks import megatron

    lay = p.layout
    return megatron.inert_settings(dict(p.framework_knobs), dict(
        tp=lay.tp, pp=lay.pp, vpp=lay.vpp, cp=lay.cp, ep=lay.ep, recompute=lay.recompute,
        modules=tuple(lay.recompute_modules)))


def _memory_words(p: Plan) -> str:
    mem = p.memory
    if p.framework == "reference":
        return (f"{_gib(p.memory_per_gpu_gib)} GiB of {_gib(mem.usable_gib)} usable: model states "
                f"{_gib(mem.model_states_gib)} (of {_gib(mem.model_states_total_gib)} in total, "
                f"{p.optimizer}), activations {_gib(mem.activations_gib)}")
    where = f" on pipeline stage {mem.peak_stage} (the most loaded)" if len(mem.stages_gib) > 1 else ""
    return (f"{_gib(p.memory_per_gpu_gib)} GiB of {_gib(mem.usable_gib)}{where}: weights {_gib(mem.weights_gib)}, "
            f"gradients {_gib(mem.gradients_gib)}, optimizer {_gib(mem.optimizer_gib)} ({p.optimizer}), "
            f"activations {_gib(mem.activations_gib)}, logits {_gib(mem.logits_gib)}, reserve {_gib(mem.reserve_gib)}")


def summary_line(p: Plan) -> str:
    """The plan in one line: model, tokens, GPUs, degrees, recomputation, memory, days, MFU."""
    return (f"{model_title(p.model)}, {human(p.tokens)} tokens: "
            f"{_n(p.gpus)} x {p.gpu} ({_n(p.nodes)} node{'s' if p.nodes != 1 else ''}), "
            f"{_degrees(p.layout)}, {recompute_words(p.layout)}, "
            f"{_gib(p.memory_per_gpu_gib)} GiB/GPU, {duration(p.days)} at "
            + (f"{p.mfu * 100:.3g}% MFU" if p.time is None else f"{p.mfu * 100:.1f}% MFU (modelled)"))


def plan_text(p: Plan, explain: bool = False, width: int | None = None) -> str:
    m = p.model
    status = "met" if p.target_met else "NOT met"
    head = "Training plan: " + summary_line(p)
    mem = p.memory
    rows = [
        ("Model", model_words(m)),
        ("Data", f"{human(p.tokens)} tokens ({_gib(p.data_gib)} GiB as 32-bit token ids), {_n(p.steps)} steps "
                 f"of {human(p.batch_tokens)} tokens ({_n(p.batch_sequences)} x {_n(p.seq)})"),
        ("Hardware", f"{_n(p.gpus)} x {p.gpu} ({_gib(mem.gpu_memory_gib)} GiB, {_gib(mem.usable_gib)} usable) in "
                     f"{_n(p.nodes)} node{'s' if p.nodes != 1 else ''}, {p.precision} at {p.peak_tflops:,.1f} "
                     "TFLOPS dense"),
        ("Layout", _layout_words(p)),
        ("Memory/GPU", _memory_words(p)),
        ("Duration", f"{duration(p.days)}{_range(p)} (target {counted(p.target_days, 'day')}: {status}), "
                     # The reference arithmetic's words stay its own, byte for byte (tests/test_golden.py).
                     f"{p.total_flops:.3g} FLOPs" + ("" if p.framework == "reference" else _flops_words(p))),
        *([("Step", _step_words(p))] if p.time is not None else []),
        *([("Failures", _failure_words(p))] if p.interruptions is not None else []),
        ("Cost", _cost_words(p)),
        ("Serving", _serving_words(p)),
        ("Why", p.why or p.binding),
    ]
    if p.gpu_choice is not None:
        rows.append(("GPU choice", _choice_words(p)))
    # The reference lists its levers by default, three unless explain; a framework plan has them
    # only when asked for (--levers), and shows every one.
    shown = p.levers if explain or p.framework != "reference" else p.levers[:3]
    rows += [("Lever" if i == 0 else "", lever.description) for i, lever in enumerate(shown)]
    if len(p.levers) > len(shown):
        rows.append(("", f"... {len(p.levers) - len(shown)} more with --explain"))
    rows.append(("Solver", _solver_words(p)))
    rows += [("Note", note) for note in p.notes]
    rows += [("Note", f"{_KNOB_WORDS[k].format(p.framework_knobs[k])} given but not applied: {why}")
             for k, why in inert_knobs(p).items() if k in _KNOB_WORDS]
    rows += [("Caveat", caveat) for caveat in p.caveats]
    if explain:
        extra = (f", logits {_gib(mem.logits_gib)}, reserve {_gib(mem.reserve_gib)}; stages "
                 + ", ".join(_gib(x) for x in mem.stages_gib)) if p.framework != "reference" else ""
        rows += [("Memory", f"weights {_gib(mem.weights_gib)}, gradients {_gib(mem.gradients_gib)}, optimizer "
                            f"states {_gib(mem.optimizer_gib)}, activations {_gib(mem.activations_gib)}{extra} GiB per GPU")]
    return wrap(head + "\n\n" + "\n".join(f"  {k:<11} {v}" for k, v in rows), width) + "\n"


def _flops_words(p: Plan) -> str:
    """The Duration line's FLOPs in words: the convention, a token's model FLOPs, and what the
    recomputation adds to the total (which counts it, the per-token figure not: 1.03e+22 is not
    4.82e+10 x 160.6B tokens under full recomputation, but a third more)."""
    words = f" ({p.model.flops_convention} attention, {p.model_flops_per_token:.3g} per token"
    model_total = p.model_flops_per_token * p.tokens
    if model_total > 0 and p.total_flops > model_total * (1 + 5e-4):
        words += f", the total {p.total_flops / model_total - 1:.0%} more for the recomputation"
    return words + ")"


def _serving_words(p: Plan) -> str:
    """The Serving line: the reference's quotient under the reference arithmetic (its words, byte
    for byte), else the serving plan's layout, replicas and TPOT (apsi.serving.render.serving_line)."""
    if p.framework == "reference":
        return (f"{_gib(p.serving.weights_gib)} GiB weights in {p.serving.precision} + "
                f"{_gib(p.serving.kv_cache_gib)} GiB KV cache -> {_n(p.serving.gpus)} x {p.serving.gpu}")
    if p.serve is None:
        return f"none on {p.gpu}; apsi serve on it says: {p.serve_refused}" if p.serve_refused else f"none on {p.gpu}"
    from apsi.serving.render import serving_line

    return serving_line(p.serve)


TIME_PARTS = (("compute", "compute", None), ("tp", "TP", "tp"), ("cp", "CP", "cp"), ("ep", "EP all-to-all", "ep"),
              ("bubble", "bubble", None), ("pp", "PP", "pp"), ("dp", "DP", "dp"), ("optimizer", "optimizer", None))
"""TimeBreakdown's parts in the order the Step line shows them: field, words, the link it names."""


def _range(p: Plan) -> str:
    if p.days_low is None or p.days_high is None:
        return ""
    return f", {duration(p.days_low)} to {duration(p.days_high)} across the calibrated efficiency"


def time_parts(p: Plan) -> list[tuple[str, float]]:
    """The step's parts with their seconds, each communication with the link it crosses."""
    t = p.time
    assert t is not None, "time_parts() takes a plan priced by the step-time model"
    out = []
    for field, words, link in TIME_PARTS:
        seconds = getattr(t, f"{field}_seconds")
        if field == "tp" and "etp" in t.links and "tp" not in t.links:
            link, words = "etp", "expert TP"  # at TP 1 the part is the experts' ETP traffic alone
        if field == "compute" or seconds > 0:
            where = {"nvlink": "NVLink", "scale-out": "scale-out"}.get(t.links.get(link or "") or "", "")
            out.append((f"{words} over {where}" if where else words, seconds))
    return out


def _step_words(p: Plan) -> str:
    assert p.step_seconds is not None and p.tokens_per_gpu_second is not None
    parts = ", ".join(f"{words} {_secs(x)}" for words, x in time_parts(p))
    return (f"{_secs(p.step_seconds)} per step, {p.tokens_per_gpu_second:,.0f} tokens/s per GPU, "
            f"{p.model_tflops_per_gpu:,.0f} TFLOP/s, MFU {p.mfu:.1%}, HFU {p.hfu:.1%}: {parts}")


def _secs(x: float) -> str:
    """Seconds to three figures, never an exponent: 0.0362 s; under a millisecond in microseconds
    (33.8 us, where ":.3g" wrote 3.38e-05 s); whole above 100."""
    if 0 < x < 1e-3:
        return f"{x * 1e6:,.3g} us"
    return f"{x:,.3g} s" if x < 100 else f"{x:,.0f} s"


def _failure_words(p: Plan) -> str:
    assert p.interruptions is not None and p.failure_days is not None
    return (f"{p.interruptions:,.1f} interruptions expected over the run, costing {duration(p.failure_days)} "
            "(restart and the work since the last checkpoint; --no-failures leaves them out)")


def _cost_words(p: Plan) -> str:
    cost = (f"{usd(p.cost_usd)} at ${p.price_usd_per_gpu_hour:,.2f}/GPU-hour" if p.cost_usd is not None
            else "no price for this GPU (give --price)")
    energy = (f"{mwh(p.energy_mwh)} at {p.power_w_per_gpu:,.0f} W per GPU x PUE {p.pue:g}"
              if p.energy_mwh is not None else "no board power for this GPU")
    return f"{_n(p.gpu_hours)} GPU-hours, {cost}; {energy}"


def _choice_words(p: Plan) -> str:
    c = p.gpu_choice
    assert c is not None, "_choice_words() takes a plan that chose its GPU type"
    text = f"{p.gpu} of {', '.join(c.considered)} by {c.objective}"
    if c.runner_up is not None:
        r = c.runner_up
        cost = f", {usd(r.cost_usd)}" if r.cost_usd is not None else ""
        energy = f", {mwh(r.energy_mwh)}" if r.energy_mwh is not None else ""
        text += f"; runner-up {_n(r.gpus)} x {r.gpu} in {duration(r.days)}{cost}{energy}"
    if c.skipped:
        text += f"; skipped {', '.join(c.skipped)}"
    return text


def _solver_words(p: Plan) -> str:
    s = p.solver
    if s.mode == "evaluate":
        return "not run: the layout was given (evaluate)"
    goal = {"min_gpus": "fewest GPUs meeting the target", "fastest": "fastest layout within the GPU cap",
            "min_cost": "cheapest layout meeting the target",
            "min_energy": "least-energy layout meeting the target"}[s.mode]
    proof = ("proved optimal" if s.status == "OPTIMAL"
             else "best found when the time limit stopped the search, not proved optimal")
    if s.method == "enumeration":
        over = f" and {s.space}" if s.space else ""
        return f"{goal}, proved optimal by walking every legal layout{over} (no CP-SAT solve)"
    # CP-SAT's deterministic time is a count of work in seconds-like units, not wall time: it is
    # shown as such, never as milliseconds.
    return (f"{goal}, {proof} ({s.status}; {s.solves} solves, {s.seconds:.2g} CP-SAT deterministic time units, "
            "a work count, not wall time)")


def serving_text(s: ServingPlan) -> str:
    what = f"{s.model_name} ({billions(s.params)} params)" if s.model_name else f"{human(s.params)} params"
    return (f"Serving {what} in {s.precision}: {_gib(s.weights_gib)} GiB weights + "
            f"{_gib(s.kv_cache_gib)} GiB KV cache ({s.batch:,} x {s.seq:,} tokens) = {_gib(s.total_gib)} GiB "
            f"-> {_n(s.gpus)} x {s.gpu}\n")


def gpus_text(gpus: list[GPU], width: int | None = None) -> str:
    def f(x: float | None, fmt: str = "{:,.1f}") -> str:
        return "-" if x is None else fmt.format(x)

    header = ("GPU", "memory GiB", "BF16 TFLOPS", "FP8 TFLOPS", "HBM TB/s", "NVLink domain",
              "per node", "TDP W", "$/GPU-h")
    rows = [(g.name, f(g.memory_gib, "{:g}"), f(g.bf16_tflops), f(g.fp8_tflops), f(g.hbm_tbps, "{:g}"),
             str(g.scaleup_domain), str(g.gpus_per_node), f(g.tdp_w, "{:,.0f}"),
             f(g.price_usd_per_hour, "{:.2f}")) for g in gpus]
    lines = columns(header, rows, [False] + [True] * (len(header) - 1), width)
    note = ("TFLOPS are dense peaks (no 2:4 sparsity), BF16 with FP32 accumulation; '-' = not supported. "
            "Sources per figure: apsi gpus --json.")
    return "\n".join(lines) + "\n\n" + wrap(note, width) + "\n"


def models_text(rows: list[ModelRow], width: int | None = None) -> str:
    """The presets as a table: counted total and active parameters beside the published size."""
    header = ("preset", "model", "family", "params", "active", "layers", "width", "published")
    table = [(r.key, r.name, r.family or "-", billions(r.params), billions(r.active_params), str(r.layers),
              f"{r.width:,}", (r.published.get("total") or "") + (f" / {r.published['active']}"
                                                               if r.published.get("active") else ""))
             for r in rows]
    right = (False, False, False, True, True, True, True, False)
    lines = columns(header, table, right, width)
    note = ("params and active are counted from each architecture (DeepSeek-V3 without its MTP block); "
            "give a preset as PARAMS (apsi plan llama-3.1-405b). Sources: apsi models --json.")
    return "\n".join(lines) + "\n\n" + wrap(note, width) + "\n"


def _extra_degrees(lay) -> str:
    """The framework degrees that are not 1: CP 2 VPP 8 EP 64."""
    return " ".join(f"{name} {value}" for name, value in (("CP", lay.cp), ("VPP", lay.vpp), ("EP", lay.ep))
                    if value != 1)


def frontier_text(points: list[FrontierPoint], p: Plan, rows: int = 40, width: int | None = None) -> str:
    """The GPU/day frontier as a table: every point if there are at most `rows`, else about `rows`
    spread evenly in log(GPUs), always with the first, the last and the plan's point (`p`)."""
    from apsi.api.frontier import sample

    first, last = points[0], points[-1]

    def days(x: float) -> str:
        return f"{x:,.1f}" if x >= 10 else f"{x:.3g}"

    head = (f"GPU/day frontier: {model_title(p.model)}, {human(p.tokens)} tokens on {p.gpu} "
            f"({p.precision}, " + (f"{p.mfu * 100:.3g}% MFU" if p.time is None else f"{p.mfu * 100:.1f}% MFU at the plan")
            + f")\n{_n(len(points))} GPU counts at which the fastest layout gets "
            f"faster, from {_n(first.gpus)} GPUs ({days(first.days)} days) to {_n(last.gpus)} GPUs "
            f"({days(last.days)} days); no layout within the GPU cap is faster than the last.")
    header: tuple[str, ...] = ("GPUs", "nodes", "days", "TP", "PP", "DP", "recompute", "GiB/GPU",
                               f"{load(p.target_days)}-day target", "")
    shown = sample(points, rows, keep_gpus=(p.gpus,))
    # The days fall strictly along the frontier: a decimal more where two rows would read the same.
    places = 1
    while places < 3 and any(f"{a.days:,.{places}f}" == f"{b.days:,.{places}f}" for a, b in zip(shown, shown[1:])
                             if a.days >= 10):
        places += 1

    def cell(x: float) -> str:
        return f"{x:,.{places}f}" if x >= 10 else f"{x:.{places + 2}g}"

    table: list[tuple[str, ...]] = [(_n(x.gpus), _n(x.nodes), cell(x.days), str(x.layout.tp),
              str(x.layout.pp), _n(x.layout.dp), x.layout.recompute, _gib(x.memory_per_gpu_gib),
              "met" if x.target_met else "-", "<- plan" if x.gpus == p.gpus and x.layout == p.layout else "")
             for x in shown]
    left: tuple[int, ...] = (6, 9)
    extra = [_extra_degrees(x.layout) for x in shown]
    if any(extra):
        # Framework degrees other than TP x PP x DP (CP, VPP, EP), as a column after DP.
        header = header[:6] + ("other",) + header[6:]
        table = [row[:6] + (more or "-",) + row[6:] for row, more in zip(table, extra)]
        left = (6, 7, 10)
    lines = columns(header, table, [i not in left for i in range(len(header))], width, indent="  ")
    tail = []
    if len(shown) < len(points):
        tail.append(f"Showing {len(shown)} of {_n(len(points))} points (log-spaced in GPUs, with the first, the "
                    f"last and the plan's); {_n(len(points) - len(shown))} omitted, --json gives all.")
    if not any(row[-1] for row in table):
        tail.append(f"The plan ({p.objective}): {_n(p.gpus)} x {p.gpu}, TP {p.layout.tp} x PP {p.layout.pp} x "
                    f"DP {_n(p.layout.dp)}, {days(p.days)} days: not a frontier point (it is not the fastest "
                    f"on {_n(p.gpus)} GPUs).")
    else:
        tail.append(f"The plan (apsi plan, same options): {_n(p.gpus)} x {p.gpu} in {days(p.days)} days.")
    return wrap(head, width) + "\n\n" + "\n".join(lines) + "\n\n" + wrap("\n".join(tail), width) + "\n"
