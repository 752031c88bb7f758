"""Text for people: the plan block, the GPU table, the serving estimate.

Formatting only. Every number comes from a model built elsewhere; nothing here computes a plan.
GiB is always 2^30 bytes and is labelled so.
"""

from __future__ import annotations

from apsi.catalog import GPU
from apsi.model.schema import Plan, ServingPlan
from apsi.units import human

_RECOMPUTE_WORDS = {"none": "no recomputation", "selective": "selective recomputation",
                    "full": "full recomputation"}


def _n(x: float) -> str:
    return f"{x:,.0f}"


def _gib(x: float) -> str:
    return f"{x:,.1f}" if x < 1000 else f"{x:,.0f}"


def binding_sentence(p: Plan) -> str:
    """One sentence on what decided the plan, with its numbers."""
    usable = p.memory.usable_gib
    if p.binding == "memory":
        return (f"memory: {_gib(p.memory.model_states_total_gib)} GiB of model states and "
                f"{_gib(p.memory.activations_gib)} GiB of activations per GPU must fit in {_gib(usable)} GiB "
                f"usable; time alone would need fewer GPUs")
    if p.binding == "time":
        if p.target_met:
            return f"time: fewer GPUs would take longer than the {p.target_days:g}-day target"
        return "time: no rule was slack; only the pinned values bound this layout"
    if p.binding == "batch":
        return (f"batch: data parallelism cannot exceed the batch of {_n(p.batch_sequences)} sequences; "
                "a larger batch (--batch) would allow more GPUs")
    if p.binding == "max_gpus":
        return f"cluster cap: at most {_n(p.gpus)} GPUs were allowed (--max-gpus)"
    if p.binding == "gpus":
        return f"GPU count: the fastest layout on at most the {_n(p.gpus)} GPUs given (--gpus)"
    return "pinned values: dropping the pinned tp/pp/dp/recompute gives a better plan"


def plan_text(p: Plan) -> str:
    m, lay = p.model, p.layout
    active = f" ({human(m.active_params)} active)" if m.moe else ""
    status = "met" if p.target_met else "NOT met"
    head = (f"Training plan: {human(m.params)} params{active}, {human(p.tokens)} tokens: "
            f"{_n(p.gpus)} x {p.gpu} ({_n(p.nodes)} node{'s' if p.nodes != 1 else ''}), "
            f"TP {lay.tp} x PP {lay.pp} x DP {_n(lay.dp)}, {_RECOMPUTE_WORDS[lay.recompute]}, "
            f"{_gib(p.memory_per_gpu_gib)} GiB/GPU, {p.days:,.1f} days at {p.mfu * 100:g}% MFU")
    moe = f", {human(m.active_params)} active per token (MoE)" if m.moe else " (dense)"
    mem = p.memory
    rows = [
        ("Model", f"{human(m.params)} parameters{moe}; {m.layers} layers x {m.width:,} wide, {m.heads} heads"),
        ("Data", f"{human(p.tokens)} tokens ({_gib(p.data_gib)} GiB as 32-bit token ids), {_n(p.steps)} steps "
                 f"of {human(p.batch_tokens)} tokens ({_n(p.batch_sequences)} x {_n(p.seq)})"),
        ("Hardware", f"{_n(p.gpus)} x {p.gpu} ({_gib(mem.gpu_memory_gib)} GiB, {_gib(mem.usable_gib)} usable) in "
                     f"{_n(p.nodes)} node{'s' if p.nodes != 1 else ''}, {p.precision} at {p.peak_tflops:,.1f} "
                     "TFLOPS dense"),
        ("Layout", f"TP {lay.tp} x PP {lay.pp} x DP {_n(lay.dp)} (tensor x pipeline x data parallel), "
                   f"ZeRO-3/FSDP sharding, {lay.micro_batches_per_replica:,.4g} micro-batches of "
                   f"{lay.micro_batch_sequences} per replica"),
        ("Memory/GPU", f"{_gib(p.memory_per_gpu_gib)} GiB of {_gib(mem.usable_gib)} usable: model states "
                       f"{_gib(mem.model_states_gib)} (of {_gib(mem.model_states_total_gib)} in total, "
                       f"{p.optimizer}), activations {_gib(mem.activations_gib)}"),
        ("Duration", f"{p.days:,.1f} days (target {p.target_days:g}: {status}), "
                     f"{p.total_flops:.3g} FLOPs"),
        ("Serving", f"{_gib(p.serving.weights_gib)} GiB weights in {p.serving.precision} + "
                    f"{_gib(p.serving.kv_cache_gib)} GiB KV cache -> {_n(p.serving.gpus)} x {p.serving.gpu}"),
        ("Decided by", binding_sentence(p)),
        ("Solver", _solver_words(p)),
    ]
    rows += [("Note", note) for note in p.notes]
    return head + "\n\n" + "\n".join(f"  {k:<11} {v}" for k, v in rows) + "\n"


def _solver_words(p: Plan) -> str:
    s = p.solver
    if s.mode == "evaluate":
        return "not run: the layout was given (evaluate)"
    goal = "fewest GPUs meeting the target" if s.mode == "min_gpus" else "fastest layout within the GPU cap"
    proof = ("proved optimal" if s.status == "OPTIMAL"
             else "best found when the time limit stopped the search, not proved optimal")
    return f"{goal}, {proof} ({s.status}, {s.solves} solves, {s.seconds * 1000:,.0f} ms)"


def serving_text(s: ServingPlan, params: int) -> str:
    return (f"Serving {human(params)} params in {s.precision}: {_gib(s.weights_gib)} GiB weights + "
            f"{_gib(s.kv_cache_gib)} GiB KV cache ({s.batch} x {s.seq:,} tokens) = {_gib(s.total_gib)} GiB "
            f"-> {_n(s.gpus)} x {s.gpu}\n")


def gpus_text(gpus: list[GPU]) -> str:
    def f(x: float | None, fmt: str = "{:,.1f}") -> str:
        return "-" if x is None else fmt.format(x)

    header = ("GPU", "memory GiB", "BF16 TFLOPS", "FP8 TFLOPS", "HBM TB/s", "NVLink domain",
              "per node", "TDP W", "$/GPU-h")
    rows = [(g.name, f(g.memory_gib, "{:g}"), f(g.bf16_tflops), f(g.fp8_tflops), f(g.hbm_tbps, "{:g}"),
             str(g.scaleup_domain), str(g.gpus_per_node), f(g.tdp_w, "{:,.0f}"),
             f(g.price_usd_per_hour, "{:.2f}")) for g in gpus]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
             for r in [header, *rows]]
    note = ("TFLOPS are dense peaks (no 2:4 sparsity), BF16 with FP32 accumulation; '-' = not supported. "
            "Sources per figure: apsi gpus --json.")
    return "\n".join(lines) + "\n\n" + note + "\n"
