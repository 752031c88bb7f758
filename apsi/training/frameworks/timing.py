"""The duration of a framework layout: the step-time model (apsi.model.steptime) or the flat MFU.

Owns turning a Setup and one layout (the knobs the framework's memory() takes, its split and its
micro-batches per replica) into seconds of training, the one function the search, evaluate(), the
frontier and the test oracle all call, and the per-configuration floor the search's bounds use.
With a given MFU (Setup.flat_mfu) the duration is the reference's: FLOPs / (GPUs x peak x mfu)
stretched by the bubble 1 + (p - 1) / (v m). Otherwise it is steps x the modelled step, steps the
batches the tokens take (rounded up).
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, Any

from apsi.inputs.question import Setup
from apsi.inputs.knobs import SETTINGS, flag_value
from apsi.model import arithmetic as ar
from apsi.model import memory as mem
from apsi.model import goodput
from apsi.model import steptail
from apsi.model import steptime as st
from apsi.model.counting import count_parameters

if TYPE_CHECKING:
    from apsi.training.frameworks.interface import Framework
    from apsi.model.architecture import Architecture
    from apsi.inputs.modelspec import ModelSpec


def _modules(layout: dict[str, Any]) -> tuple[str, ...]:
    return tuple(layout.get("modules") or mem.DEFAULT_MODULES)


@functools.lru_cache(maxsize=4096)
def flops_per_token(fw: Framework, model: ModelSpec, seq: int, recompute: str,
                    modules: tuple[str, ...]) -> tuple[int, int]:
    """(model, hardware) training FLOPs per token: the framework's own recomputation where it has
    one (torchtitan's per-op policy, fw.recompute_flops), else Megatron's modules."""
    plain = ar.flops_per_token(model, seq)
    hook = fw.recompute_flops
    if hook is not None and recompute == "selective":
        a = model.architecture
        head = a.width * a.vocab
        return plain, plain + hook(a, model.matmul_active - head, recompute)
    return plain, ar.flops_per_token(model, seq, recompute, modules)


@functools.lru_cache(maxsize=256)
def executed(model: ModelSpec) -> ModelSpec:
    """The model with the FLOPs the GPUs execute: the attention core over the causal triangle
    (FlashAttention skips the masked blocks), whatever convention its MFU is reported in."""
    return model if model.flops_convention == "causal" else model.model_copy(update={"flops_convention": "causal"})


def efficiency(fw: Framework, precision: str, layout: dict[str, Any]) -> float:
    """The framework's compute rate relative to Megatron's kernels in `precision` (its
    KERNEL_EFFICIENCY; fp16 and bf16 alike, as apsi.model.steptime.gemm_efficiency), times its
    eager share where the layout runs without torch.compile (the compile knob, torchtitan's)."""
    rates = fw.KERNEL_EFFICIENCY
    rate = rates["fp8" if precision == "fp8" else "bf16"]
    return rate if "compile" not in fw.KNOBS or flag_value("compile", fw.NAME, layout) else rate * rates["eager"]


@functools.lru_cache(maxsize=256)
def _params(a: Architecture) -> tuple[float, float]:
    parts = count_parameters(a).total
    return float(parts.total - parts.experts), float(parts.experts)


def sequence_parallel(fw: Framework, layout: dict[str, Any]) -> bool:
    """Whether the layout runs sequence parallelism: its sequence_parallel, else the framework's
    default (apsi.inputs.knobs: on under Megatron and torchtitan, off under DeepSpeed)."""
    return flag_value("sequence_parallel", fw.NAME, layout)


def shape(fw: Framework, s: Setup, layout: dict[str, Any], split: tuple[int, ...], micro_batches: int) -> st.Shape:
    """The step model's Shape of this layout under `split` (fields in order, as steptime.Shape)."""
    return st.Shape(layout["tp"], layout["pp"], layout["vpp"], layout["cp"], layout["ep"], layout["etp"], layout["dp"],
                    layout["micro_batch"], micro_batches, s.seq, fw.rank_layers(split, layout["pp"]),
                    layout["recompute"], _modules(layout), s.precision, bool(layout.get("tp_overlap")),
                    bool(layout.get("ep_overlap")) and fw.ep_overlap_allowed(layout),
                    efficiency(fw, s.precision, layout), fw.recompute_flops is None, layout.get("dispatcher") == "flex",
                    sequence_parallel(fw, layout), layout.get("cp_comm_type") == "all_gather")


def step(fw: Framework, s: Setup, layout: dict[str, Any], split: tuple[int, ...], micro_batches: int,
         layers: dict[Any, Any] | None = None) -> st.StepTime:
    """The modelled step of this layout on s.gpu. `layers`, a dict the caller keeps, holds the
    layer() answers already worked out for this setup (they depend on neither dp nor the split)."""
    a = s.model.architecture
    x = shape(fw, s, layout, split, micro_batches)
    traffic = fw.dp_traffic(layout["pp"], layout.get("zero", 0), s.precision, layout)
    if layers is None:
        dense, experts = _params(a)
        flops = flops_per_token(fw, executed(s.model), s.seq, x.recompute, x.modules)
        return st.step_time(a, s.gpu, x, flops, dense, experts, traffic)
    # The caller's cache, keyed by what each part depends on (hashing the pydantic models of the
    # setup once per search, not once per layout).
    if "params" not in layers:
        layers["params"] = _params(a)
    dense, experts = layers["params"]
    return st.step_time(a, s.gpu, x, _flops_of(fw, s, x, layers), dense, experts, traffic, one=_layer(fw, s, x, layers))


def _flops_of(fw: Framework, s: Setup, x: st.Shape, layers: dict[Any, Any]) -> tuple[int, int]:
    key = ("flops", x.recompute, x.modules)
    if key not in layers:
        layers[key] = flops_per_token(fw, executed(s.model), s.seq, x.recompute, x.modules)
    flops: tuple[int, int] = layers[key]
    return flops


def _layer(fw: Framework, s: Setup, x: st.Shape, layers: dict[Any, Any]) -> st.Layer:
    """steptime.layer for x, kept in the caller's cache (it depends on neither pp, dp nor the split)."""
    # x less pp, vpp, dp, the micro-batches and the rank layers (fields 1, 2, 6, 8 and 10).
    key = ("layer",) + x[:1] + x[3:6] + (x[7], x[9]) + x[11:]
    if key not in layers:
        plain, hw = _flops_of(fw, s, x, layers)
        layers[key] = st.layer(s.model.architecture, s.gpu, x, hw, plain)
    one: st.Layer = layers[key]
    return one


def micro_batch_floor(fw: Framework, s: Setup, layout: dict[str, Any], layers: dict[Any, Any]) -> float:
    """The least, over the framework's splits, of the slowest rank's micro-batch (its layers' compute
    and TP, EP and CP traffic, and the head on the last): seconds >= steps x (m + (p - 1) / v) x
    this, whatever the split memory picks and whatever dp and the optimizer add. `layers` is the
    caller's cache (step())."""
    a = s.model.architecture
    splits = fw.splits(a.layers, layout["pp"], layout["vpp"], a.mtp_layers)
    if not splits:
        return 0.0
    one = _layer(fw, s, shape(fw, s, layout, (), 1), layers)  # a layer's time is the split's anyway
    per, head = one.total, one.head
    return min(_slowest(per, head, most, last)
               for most, last in _rank_loads(fw, a.layers, layout["pp"], layout["vpp"], a.mtp_layers))


def split_micro_floor(fw: Framework, s: Setup, layout: dict[str, Any], split: tuple[int, ...],
                      layers: dict[Any, Any]) -> float:
    """micro_batch_floor under one split: its slowest rank's micro-batch, so that this split's
    seconds >= steps x (m + (p - 1) / v) x this (the split's own term of micro_batch_floor's least)."""
    a = s.model.architecture
    one = _layer(fw, s, shape(fw, s, layout, (), 1), layers)
    ranks = fw.rank_layers(split, layout["pp"])
    return _slowest(one.total, one.head, max(ranks[:-1], default=0), ranks[-1] + a.mtp_layers)


def _slowest(per: float, head: float, most: int, last: int) -> float:
    """The slowest rank's micro-batch of a split whose ranks before the last hold at most `most`
    layers of `per` seconds each and whose last holds `last` (MTP blocks counted) and the head."""
    return max(most * per, last * per + head)


def tail_parts(fw: Framework, s: Setup, layout: dict[str, Any],
               layers: dict[Any, Any]) -> tuple[int, float, tuple[Any, ...]]:
    """What tail_floor needs of a configuration, whatever its dp: over the framework's splits, the
    fewest layers the slowest rank holds and the most compute seconds of its micro-batch (with
    these steptail.tail is at its least, as it rises with the layers and falls with the compute;
    the slowest rank is steptime.step_time's: the first with the most of layers x (compute +
    traffic) per micro-batch, plus the head on the last), and (the layout's Shape, the dense and
    expert parameters, the framework's DP traffic, the HBM rate). `layers` is the caller's cache
    (step())."""
    a = s.model.architecture
    x = shape(fw, s, layout, (), 1)
    one = _layer(fw, s, x, layers)
    per, head, compute = one.total, one.head, one.compute
    fewest, most = math.inf, 0.0
    for n_most, n_last in _rank_loads(fw, a.layers, layout["pp"], layout["vpp"], a.mtp_layers):
        n, mb = (n_most, n_most * compute) if n_most * per >= n_last * per + head else (n_last, n_last * compute + head)
        fewest, most = min(fewest, n), max(most, mb)
    if "params" not in layers:
        layers["params"] = _params(a)
    dense, experts = layers["params"]
    traffic = fw.dp_traffic(layout["pp"], layout.get("zero", 0), s.precision, layout)
    return int(fewest), most, (x, dense, experts, traffic, one.hbm)


def tail_floor(s: Setup, parts: tuple[Any, ...], dp: int, micro_batches: int, n: int, compute_mb: float) -> float:
    """steptail.tail (PP fill and drain, exposed DP traffic, optimizer) at this dp for a slowest
    rank of `n` layers computing `compute_mb` per micro-batch (tail_parts' `parts`): with
    tail_parts' figures, no split's is less."""
    x, dense, experts, traffic, hbm = parts
    return sum(steptail.tail(s.model.architecture, s.gpu, x.at(dp, micro_batches), dense, experts, traffic, hbm, n,
                       compute_mb))


def tail_least(s: Setup, parts: tuple[Any, ...], n: int, compute_mb: float, dp: int) -> float:
    """A lower bound on tail_floor() at every dp from `dp` on (steptail.tail_least; tail_parts'
    `parts`, `n` and `compute_mb`)."""
    x, dense, experts, traffic, _ = parts
    return steptail.tail_least(s.model.architecture, s.gpu, x, dense, experts, traffic, n, compute_mb, dp)


@functools.lru_cache(maxsize=4096)
def _rank_loads(fw: Framework, layers: int, pp: int, vpp: int, mtp: int) -> tuple[tuple[int, int], ...]:
    """Per distinct split of the framework's: (the most layers on a rank before the last, the
    layers on the last with its MTP blocks), the two that decide its slowest rank."""
    out = set()
    for split in fw.splits(layers, pp, vpp, mtp):
        ranks = fw.rank_layers(split, pp)
        out.add((max(ranks[:-1], default=0), ranks[-1] + mtp))
    return tuple(sorted(out))


def steps(s: Setup, layout: dict[str, Any], micro_batches: int) -> int:
    return step_count(s.tokens, micro_batches, layout["micro_batch"], layout["dp"], s.seq)


def step_count(tokens: float, micro_batches: int, micro_batch: int, dp: int, seq: int) -> int:
    """Optimizer steps to train `tokens`: whole batches of m b dp sequences of seq tokens."""
    return math.ceil(tokens / (micro_batches * micro_batch * dp * seq))


def seconds(fw: Framework, s: Setup, layout: dict[str, Any], split: tuple[int, ...], micro_batches: int,
            layers: dict[Any, Any] | None = None) -> float:
    """Seconds of training for this layout: flat MFU or the step-time model (module docstring), with
    the time interruptions cost (apsi.model.goodput) unless s.failures is off."""
    if s.flat_mfu:
        flops = float(flops_per_token(fw, s.model, s.seq, layout["recompute"], _modules(layout))[1]) * s.tokens
        gpus: int = layout["tp"] * layout["pp"] * layout["cp"] * layout["dp"]
        bubble: float = 1 + (layout["pp"] - 1) / (layout["vpp"] * micro_batches)
        return flops / (gpus * s.peak_flops * s.mfu) * bubble
    ideal = steps(s, layout, micro_batches) * step(fw, s, layout, split, micro_batches, layers).step
    if not s.failures:
        return ideal
    return goodput.wall_seconds(ideal, layout["tp"] * layout["pp"] * layout["cp"] * layout["dp"], s.checkpoint_minutes)


def results(fw: Framework, s: Setup, layout: dict[str, Any], split: tuple[int, ...], micro_batches: int,
            secs: float) -> dict[str, Any]:
    """The Plan fields of the time: step, throughput, MFU and HFU and, under the step-time model,
    the step by part and the days across the calibration's spread (apsi.model.steptime)."""
    from apsi.model.schema import TimeBreakdown
    from apsi.units import SECONDS_PER_DAY

    gpus = layout["tp"] * layout["pp"] * layout["cp"] * layout["dp"]
    n_steps = steps(s, layout, micro_batches)
    trained = n_steps * micro_batches * layout["micro_batch"] * layout["dp"] * s.seq
    model_tok, hw_tok = flops_per_token(fw, s.model, s.seq, layout["recompute"], _modules(layout))
    rate = trained / (secs * gpus)
    out = dict(total_flops=float(hw_tok) * s.tokens, step_seconds=secs / n_steps, tokens_per_gpu_second=rate, model_tflops_per_gpu=rate * model_tok / 1e12,
               mfu=rate * model_tok / s.peak_flops, hfu=rate * hw_tok / s.peak_flops,
               caveats=caveats(fw, s))
    if s.flat_mfu:
        return out
    t = step(fw, s, layout, split, micro_batches)
    out["step_seconds"] = t.step
    low, high = st.CALIBRATION_SPREAD
    days = secs / SECONDS_PER_DAY
    ideal = n_steps * t.step
    if s.failures:
        out.update(interruptions=goodput.failure_rate(gpus) * secs, failure_days=(secs - ideal) / SECONDS_PER_DAY)
    out.update(time=TimeBreakdown(
        compute_seconds=t.compute, tp_seconds=t.tp, cp_seconds=t.cp, ep_seconds=t.ep, bubble_seconds=t.bubble,
        pp_seconds=t.pp, dp_seconds=t.dp, optimizer_seconds=t.optimizer, step_seconds=t.step, links=t.links),
        days_low=days * (1 + low), days_high=days * (1 + high))
    return out


def floor_k(fw: Framework, s: Setup, recompute: str, modules: tuple[str, ...], tp: int, cp: int, ep: int, etp: int,
            micro_batch: int, knobs: dict[str, Any]) -> tuple[float, float]:
    """K with seconds >= K / (t p c dp) (1 + (p - 1) / (v m)) for every layout of this
    recomputation, tp, cp, ep, etp and micro-batch, whatever its pp, vpp, split, ZeRO stage and dp:
    the steps are at least the tokens over the batch m b dp s, and each takes (m + (p - 1) / v)
    micro-batches of the slowest rank, which holds at least the average rank's share of the layers'
    micro-batch (compute and TP, EP and CP traffic, apsi.model.steptime.layer) and the head's; the
    data-parallel traffic and the optimizer only add. At a flat MFU the bound is the duration's K.
    With K, one layer's micro-batch (0 at a flat MFU), for bounds that weigh the slowest rank."""
    if s.flat_mfu:
        return float(flops_per_token(fw, s.model, s.seq, recompute, modules)[1]) * s.tokens / (s.peak_flops * s.mfu), 0.0
    plain, hw = flops_per_token(fw, executed(s.model), s.seq, recompute, modules)
    a = s.model.architecture
    layout = dict(tp=tp, pp=1, vpp=1, cp=cp, ep=ep, etp=etp, dp=1, micro_batch=micro_batch, recompute=recompute,
                  modules=modules, **{name: knobs.get(name) for name in SETTINGS})
    x = shape(fw, s, layout, (a.layers,), 1)
    one = st.layer(a, s.gpu, x, hw, plain)
    per_micro_batch = (a.layers + a.mtp_layers) * one.total + one.head
    return s.tokens / (s.seq * micro_batch) * per_micro_batch * tp * cp * (1 - 1e-9), one.total


def least_floor_k(fw: Framework, s: Setup, recompute: str, modules: tuple[str, ...], tp: int, cp: int,
                  eps: list[int], etps: list[int], micro_batch: int, knobs: dict[str, Any]) -> tuple[float, float]:
    """floor_k's (K, one layer's micro-batch), each at most its least over the expert grids of
    `eps` x `etps`, from one evaluation: a layer's compute falls as ep grows (fewer, larger expert
    GEMMs per rank: steptime.compute), its attention TP and CP traffic do not depend on the grid,
    and its EP and expert-TP traffic are at least 0, so the layer at the largest ep and etp 1 less
    its EP traffic is below every grid's. With the TP overlap (which hides TP traffic under the
    very GEMMs ep shrinks) or no etp 1 to take, every grid is evaluated."""
    if s.flat_mfu or tp > 1 and knobs.get("tp_overlap") or 1 not in etps or len(eps) * len(etps) == 1:
        parts = [floor_k(fw, s, recompute, modules, tp, cp, ep, etp, micro_batch, knobs) for ep in eps for etp in etps]
        return min(k for k, _ in parts), min(one for _, one in parts)
    plain, hw = flops_per_token(fw, executed(s.model), s.seq, recompute, modules)
    a = s.model.architecture
    layout = dict(tp=tp, pp=1, vpp=1, cp=cp, ep=max(eps), etp=1, dp=1, micro_batch=micro_batch, recompute=recompute,
                  modules=modules, **{name: knobs.get(name) for name in SETTINGS})
    one = st.layer(a, s.gpu, shape(fw, s, layout, (a.layers,), 1), hw, plain)
    layer = one.compute + one.tp + one.cp
    per_micro_batch = (a.layers + a.mtp_layers) * layer + one.head
    return s.tokens / (s.seq * micro_batch) * per_micro_batch * tp * cp * (1 - 1e-9), layer * (1 - 1e-9)


VALIDATED: dict[str, tuple[str, ...]] = {"timing": ("megatron", "torchtitan", "deepspeed"),
                                         "memory": ("megatron", "torchtitan")}
"""The frameworks with validation rows in docs/validation.md (benchmarks/validation.py): step time
(whole training reports: Llama 3, DeepSeek-V3, Nemotron-4 and Megatron-Core's GPT-3 strong scaling
under Megatron, OLMo 2 under torchtitan, BLOOM and MT-NLG under DeepSpeed) and memory (published
layouts that trained, torchtitan's published peaks).
tests/test_honest.py checks this against benchmarks/validation.py."""
TIMING_CAVEAT = "no validated timing row"
MEMORY_CAVEAT = "no validated memory reading"
"""The words a caveat opens with after the framework's name (apsi.outputs.text marks figures by them)."""


def caveats(fw: Framework, s: Setup) -> list[str]:
    """Plan.caveats: each kind of figure of this plan whose framework has no validation row
    (VALIDATED). The timing one is left out at a given flat MFU (the days are then the MFU's), and
    the reference arithmetic has none: it is the specification's formula (docs/method.md sections
    3.1 to 3.3, held by tests/golden), not a model of a framework."""
    out: list[str] = []
    if fw.NAME == "reference":
        return out
    if not s.flat_mfu and fw.NAME not in VALIDATED["timing"]:
        out.append(f"{fw.TITLE}: {TIMING_CAVEAT} (docs/validation.md has no {fw.TITLE} run; its step time rests on "
                   f"constants fitted to other frameworks' benchmarks, kernel efficiency {efficiency(fw, s.precision, {}):g})")
    if fw.NAME not in VALIDATED["memory"]:
        out.append(f"{fw.TITLE}: {MEMORY_CAVEAT} (docs/validation.md has no published {fw.TITLE} layout or peak; "
                   "its memory is its estimators' formulas)")
    return out
