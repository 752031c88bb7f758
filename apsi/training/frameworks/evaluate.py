"""One layout judged under a framework's rules and memory model: evaluate(framework=...).

Owns turning a validated Setup and the layout knobs (tp, pp, vpp, cp, ep, etp, dp, micro-batch,
recompute, zero and the framework's own) into a Plan: the framework's legal-layout check, every
pipeline stage's memory, the peak stage against the GPU's capacity less the reserve, and the
duration (apsi.training.frameworks.timing: the step-time model, or a given flat MFU with the real
schedule's bubble). No search here: apsi.training.frameworks.planner chooses the layout for
plan().
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Callable

from apsi.errors import LayoutError
from apsi.training.frameworks import timing
from apsi.model import goodput
from apsi.inputs.question import FRAMEWORK_SETTINGS, Setup
from apsi.model import arithmetic as ar
from apsi.model import memory as mem
from apsi.model.schema import Layout, MemoryBreakdown, Plan, SolverReport
from apsi.units import GIB

if TYPE_CHECKING:
    from apsi.training.frameworks.interface import Framework
    from apsi.model.architecture import Architecture


def capacity_gib(s: Setup) -> float:
    """What the GPU offers a framework: the memory the driver reports (catalog visible_memory_gib),
    or the catalog capacity where that is not listed."""
    return s.gpu.visible_memory_gib or s.gpu.memory_gib


def placeable(fw: Framework, s: Setup) -> tuple[Setup, list[str]]:
    """The run with an architecture a framework can place, and what was assumed to get it: a bare
    size as its shape-rule architecture, a bare MoE size's experts placed (apsi.inputs.modelspec.placed,
    which `apsi serve` uses too, so both plan the same model), and the MTP blocks left out where
    the framework builds none (Framework.BUILDS_MTP)."""
    from apsi.inputs.modelspec import placed

    model, notes = placed(s.model, f"{fw.TITLE} places experts")
    if model.architecture.mtp_layers and not fw.BUILDS_MTP:
        # The framework trains the model without its MTP blocks: their memory, FLOPs and time alike
        # (its stages never held them; its steps ran them, its MFU counted them).
        n = model.architecture.mtp_layers
        model = _without_mtp(model)
        notes = [*notes, f"{fw.TITLE} builds no multi-token-prediction blocks: planned without the model's "
                         f"{n} MTP block{'s' if n > 1 else ''} (Megatron trains them: --framework megatron)"]
    return (s if model is s.model else s.model_copy(update={"model": model})), notes


def _without_mtp(m: Any) -> Any:
    """The model (an apsi.inputs.modelspec.ModelSpec) without its multi-token-prediction blocks,
    counted: its FLOPs' matrix weights less theirs."""
    from apsi.model.architecture import interned
    from apsi.model.counting import count_parameters

    arch = interned(m.architecture.model_copy(update={"mtp_layers": 0}))
    matmul = count_parameters(arch).matmul_active if m.parts is not None else m.matmul_active
    return m.model_copy(update={"architecture": arch, "mtp_params": 0, "matmul_active": matmul})


SPLIT_TIE = 1e-9
"""Two splits' durations within a billionth of each other tie (as apsi.training.frameworks.layouts.Seconds
orders modelled durations): the framework's order of preference decides."""


def split_taken(splits: tuple[tuple[int, ...], ...], fits: Callable[[tuple[int, ...]], bool],
                seconds: Callable[[tuple[int, ...]], float],
                floor: Callable[[tuple[int, ...]], float] | None = None) -> tuple[int, ...] | None:
    """The split a layout takes: of the framework's splits under which it fits, the one whose
    duration is least (each split is its own layout: its ranks hold different layers, so the
    slowest rank and the bubble differ), ties within SPLIT_TIE going to the earlier in the
    framework's order; None where none fits. Memory is judged fastest split first, so a layout
    whose fastest split fits is judged once.

    `floor`, where given, is a lower bound of each split's seconds (the search's): the seconds are
    then worked out lowest floor first, and a split whose floor is above the fastest candidate's
    seconds by more than a tie (4 SPLIT_TIE) is never worked out, as it can neither be faster nor
    tie; the answer, and the splits whose memory is judged, are the same."""
    if len(splits) == 1:
        return splits[0] if fits(splits[0]) else None
    if floor is None:
        secs = {j: seconds(x) for j, x in enumerate(splits)}
        order: list[int] = []
    else:
        lows = [floor(x) for x in splits]
        order = sorted(range(len(splits)), key=lambda j: (lows[j], j))
        secs = {}
    told, failed = 0, set()
    while True:
        left = [(secs[j], j) for j in secs if j not in failed]
        best = min(left) if left else None
        if told < len(order) and (best is None or lows[order[told]] <= best[0] * (1 + 4 * SPLIT_TIE)):
            secs[order[told]] = seconds(splits[order[told]])
            told += 1
            continue
        if best is None:
            return None
        i = best[1]
        if not fits(splits[i]):
            failed.add(i)
            continue
        # An earlier split of the framework's within a billionth of it, that fits, wins the tie (one
        # not worked out is further from it than a tie).
        return next((splits[j] for j in range(i) if j in secs
                     and abs(secs[j] - secs[i]) <= SPLIT_TIE * max(secs[j], secs[i]) and fits(splits[j])), splits[i])


def _taken(fw: Framework, s: Setup, a: Architecture, capacity: float, layout: dict[str, Any],
           micro_batches: int) -> tuple[int, ...]:
    """split_taken for one layout evaluate() judges (the first of the framework's splits where none fits)."""
    options = fw.splits(a.layers, layout["pp"], layout["vpp"], a.mtp_layers) or (
        fw.split_layers(a.layers, layout["pp"], layout["vpp"], a.mtp_layers),)
    taken = split_taken(options, lambda x: fw.peak_bytes(a, split=x, **layout) <= capacity,
                        lambda x: 0.0 if s.flat_mfu else timing.seconds(fw, s, layout, x, micro_batches))
    return taken or options[0]


def evaluate_layout(fw: Framework, s: Setup, knobs: dict[str, Any], report: SolverReport) -> Plan:
    """The Plan for exactly this layout under framework `fw` on s.gpu, with every stage's memory.
    knobs["batch_sequences"], where given, is the batch the layout trains (the search's, within
    its tolerance); else the setup's."""
    k: dict[str, Any] = {**fw.DEFAULTS,
                         **{key: value for key, value in knobs.items() if value is not None and key != "split"}}
    tp, pp, vpp, cp, ep, dp, mb = (int(k[x]) for x in ("tp", "pp", "vpp", "cp", "ep", "dp", "micro_batch"))
    batch = int(k.get("batch_sequences") or s.batch_sequences)
    # A bare MoE size gets its experts first: the rules below judge the model plan() placed.
    s, notes = placeable(fw, s)
    a = s.model.architecture
    if knobs.get("zero") is None and "zero" in k and not fw.zero_ok(pp, int(k["zero"]), s.optimizer, a.moe):
        k["zero"] = fw.zero_choices(pp, s.optimizer, a.moe)[0]  # the default stage cannot run this model
    etp = int(k.get("etp") or fw.default_etp(a, tp))
    if batch != s.batch_sequences:
        from apsi.training.frameworks.batch import micro_batches, micro_rule
        from apsi.training.frameworks.space import Config

        # Under the interleaved schedule the micro-batches come in groups of pp (Framework.micro_group),
        # or in rounds torch accepts (Framework.micro_rounds), and torch's 1F1B takes at least pp
        # (Framework.micro_least), said where they moved the batch.
        group, rounds, least = micro_rule(fw, Config(0, pp, tp, cp, vpp, ep, int(k.get("etp") or 1), 0))
        whole = "whole micro-batches" if group == 1 else f"whole groups of {group:,} micro-batches (the interleaved schedule's)"
        moved = (micro_batches(s.batch_sequences, mb, dp, group, math.inf) or 0) * mb * dp != batch
        if rounds and moved:
            whole = (f"whole micro-batches in whole rounds (torch's interleaved schedule splits m micro-batches into "
                     f"max(1, m // {pp}) rounds)")
        elif least > 1 and moved:
            whole = (f"whole micro-batches, at least {least:,} (torch's 1F1B schedule runs no fewer micro-batches than "
                     "its stages)")
        notes.append(f"the batch is {batch:,} sequences ({batch * s.seq:,} tokens), the nearest to the "
                     f"{s.batch_sequences:,} asked that {k['micro_batch']} x dp {dp:,} x {whole} runs "
                     f"({(batch - s.batch_sequences) / s.batch_sequences:+.1%})")
        s = s.model_copy(update={"batch_sequences": batch, "batch_tokens": batch * s.seq})
    gpus = tp * pp * cp * dp
    cap = s.gpus if s.gpus is not None else s.max_gpus
    if gpus > cap:
        raise LayoutError(f"tp x pp x cp x dp = {gpus:,} GPUs exceeds the cap of {cap:,}")
    zero = int(k.get("zero", fw.DEFAULTS.get("zero", 1)))
    fw.check_training(s.precision, s.optimizer, k)
    fw.check_layout(a, tp=tp, pp=pp, cp=cp, ep=ep, etp=etp, dp=dp, vpp=vpp, micro_batch=mb, seq=s.seq,
                    batch_sequences=s.batch_sequences, zero=zero, **{x: k[x] for x in fw.MEMORY_KNOBS if x in k})
    # The split: the search's, or as the search takes it (split_taken), the fastest of the
    # framework's splits under which the layout fits; the first of them when none does.
    modules = tuple(k.get("recompute_modules") or mem.DEFAULT_MODULES)
    layout = dict(tp=tp, pp=pp, cp=cp, ep=ep, etp=etp, dp=dp, vpp=vpp, micro_batch=mb, seq=s.seq,
                  batch_sequences=s.batch_sequences, recompute=k["recompute"], optimizer=s.optimizer,
                  precision=s.precision, modules=modules, zero=zero, **{x: k[x] for x in fw.MEMORY_KNOBS if x in k})
    micro = s.batch_sequences // (mb * dp)
    split = knobs.get("split") or _taken(fw, s, a, capacity_gib(s) * GIB, layout, micro)
    # Without peak_only every stage is there (no None).
    stages = [x for x in fw.memory(a, split=split, **layout) if x is not None]
    peak = max(range(len(stages)), key=lambda i: (stages[i]["total"], -i))
    part = {key: value / GIB for key, value in stages[peak].items()}
    memory = MemoryBreakdown(
        weights_gib=part["weights"], gradients_gib=part["gradients"], optimizer_gib=part["optimizer"],
        model_states_gib=part["weights"] + part["gradients"] + part["optimizer"],
        activations_gib=part["activations"], logits_gib=part["logits"], reserve_gib=part["reserve"],
        total_gib=part["total"], usable_gib=capacity_gib(s), gpu_memory_gib=s.gpu.memory_gib,
        model_states_total_gib=s.model.trained_params * fw.state_bytes_per_param(s.precision, s.optimizer, k) / GIB,
        peak_stage=peak, stages_gib=[x["total"] / GIB for x in stages])
    chosen = Layout(tp=tp, pp=pp, dp=dp, recompute=k["recompute"], micro_batch_sequences=mb,
                    micro_batches_per_replica=micro, cp=cp, ep=ep, etp=etp, vpp=vpp, zero=zero,
                    dp_replicate=int(k.get("dp_replicate", 1)),
                    sharding=fw.sharding(zero, dp, cp, pp, int(k.get("dp_replicate", 1))),
                    stage_layers=list(fw.rank_layers(split, pp)), virtual_stage_layers=list(split),
                    sequence_parallel=tp > 1 and timing.sequence_parallel(fw, k),
                    # torchtitan's selective level is its per-op policy, not a list of modules.
                    recompute_modules=(list(modules) if k["recompute"] == "selective"
                                       and "recompute_modules" in fw.KNOBS else []))
    flops = ar.training_flops(s.model, s.tokens, s.seq, k["recompute"], modules)
    secs = timing.seconds(fw, s, layout, split, micro)
    if secs == float("inf"):
        raise LayoutError(f"on {gpus:,} GPUs interruptions (one every {1 / goodput.failure_rate(gpus):,.0f} s) come "
                          f"faster than a restart and half a {s.checkpoint_minutes:g}-minute checkpoint interval: "
                          "checkpoint more often (checkpoint_minutes), use fewer GPUs, or turn failures off")
    from apsi.training.assembly import finish

    plan = finish(s, chosen, memory, gpus, secs, report, "pinned", objective=s.objective, framework=fw.NAME,
                  flops=flops, notes=notes)
    knobs_used = {x: k[x] for x in FRAMEWORK_SETTINGS if x in k}
    return plan.model_copy(update={**timing.results(fw, s, layout, split, micro, secs), "framework_knobs": knobs_used})
