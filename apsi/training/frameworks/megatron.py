"""Megatron-Core (Megatron-LM, NeMo, Megatron-Bridge): its layout rules, its pipeline split, how it
shards model states, and the memory of each pipeline stage.

Owns what Megatron does (MLM-DOPT, MLM-DDP, MLM-PS, MLM-MOE, MLM-PR4687, MLM-ARGS, MLM-TC; source keys in
docs/sources.md): the distributed optimizer (bf16 weights, fp32 main gradients, fp32 master and Adam moments
sharded over DP x CP; routed experts over the expert-data-parallel group), sequence parallelism whenever TP > 1,
MoE parallel folding (EP over TP x CP x DP), the uneven and interleaved pipeline splits, and each legal-layout
rule with the valid values in its message. Activation accounting is apsi.model.memory's.

Worked example: Megatron-Bridge's Llama 3.1 405B on 1,024 H100 (TP 8, PP 8, CP 2, VPP 8, DP 8,
s 8,192, micro-batch 1, GBS 1,536: m = 192; MB-RECIPE, derived). (126 + 2) / 8 = 16 per stage, so
stage 0 is the embedding and 15 layers: (15 x 3,187,703,808 + 2,101,346,304) / 8 parameters per
GPU at 2 + 4 + 12 / 16 bytes = 39.2 GiB of states, plus 133 layer-micro-batches of 254 MiB = 33.1
GiB of activations.
"""

from __future__ import annotations

import functools
import math
import sys
from typing import TYPE_CHECKING, Any, cast

from apsi.inputs import knobs
from apsi.errors import LayoutError
from apsi.training.frameworks import stages
from apsi.training.frameworks.stages import rank_layers as rank_layers  # the Framework member
from apsi.model import memory as mem
from apsi.model.architecture import Architecture
from apsi.model.collectives import DpTraffic
from apsi.model.arithmetic import divisors
# The Protocol's defaults it keeps (apsi.training.frameworks.base), re-exported: micro_least 1, as its
# 1F1B warms up min(pp - rank - 1, m) micro-batches (MLM-SCHED), running fewer than its stages.
from apsi.training.frameworks.base import (
    KEEPS_STAGE_OUTPUTS as KEEPS_STAGE_OUTPUTS, KERNEL_EFFICIENCY as KERNEL_EFFICIENCY, layer_bytes as layer_bytes,
    micro_least as micro_least, micro_rounds as micro_rounds, recompute_flops as recompute_flops)

if TYPE_CHECKING:
    from apsi.training.frameworks.interface import Defaults, Degrees, Framework
    from apsi.inputs.question import Setup
    from apsi.model.schema import Plan

NAME = "megatron"
"""The name --framework takes."""
TITLE = "Megatron"
"""Megatron in messages."""
KNOBS: tuple[str, ...] = knobs.of(NAME)
"""The layout knobs Megatron takes (evaluate() and plan() keywords; apsi.inputs.knobs declares them)."""
DEFAULTS: Defaults = {"pp": 1, "vpp": 1, "cp": 1, "ep": 1, "micro_batch": 1, "recompute": "none", "zero": 1}
"""Megatron's defaults: no pipeline, context or expert parallelism, one sequence per micro-batch,
no recomputation (recompute_granularity None), the distributed optimizer (zero 1; Bridge's
recipes and NeMo set use_distributed_optimizer), expert TP = TP (MLM-ARGS)."""
MEMORY_KNOBS: tuple[str, ...] = knobs.carried(NAME)
"""Framework knobs passed to memory() and the step time (dp_traffic; tp_overlap, ep_overlap and
dispatcher only the step time uses, and memory() ignores)."""
GRID_DOMINANCE = True
"""Expert grids with the same ep x etp share their experts' shards and dp rule; the search keeps the
one with the most EP, the smallest routed inputs (apsi.model.memory.moe_activation_bytes)."""
DP_RULES = "the expert grid (ep x etp | tp x cp x dp) or the interleaved schedule's groups of pp micro-batches"
"""Megatron's rules on dp, for the message when none is left (dp_step, micro_group)."""

WEIGHT_BYTES = 2
"""bf16 parameters (--bf16)."""
GRAD_BYTES = 4
"""fp32 main-gradient buffer, replicated over DP (MLM-DOPT "bf16 / fp32" row)."""
FP16_GRAD_BYTES = 2
"""fp16 training keeps fp16 main gradients (MLM-DOPT "fp16 / fp16" row: 4 + 16/d); so does bf16 training with
--grad-reduce-in-bf16 (derived from MLM-DOPT: 4 + 12/d), as Megatron-Bridge's performance recipes set
(grad_reduce_in_fp32=False)."""
FP16_EXTRA_SHARDED = 4
"""fp16 training's fp32 copy of its main gradients, in the sharded optimizer state (MLM-DOPT "fp16 / fp16": 16/d)."""
SHARDED_BYTES = {"adamw": 12, "adam8bit": 6, "sgd": 8}
"""Bytes per parameter the distributed optimizer shards over DP x CP: fp32 master 4 + Adam moments 4 + 4
(MLM-DOPT: 6 + 12/d for bf16 / fp32); 8-bit Adam moments 1 + 1 (bitsandbytes: 75% less than 8 B); SGD momentum 4."""
BF16_MOMENTS_SAVED = 4
"""Adam's two moments in bf16 instead of fp32 (the precision-aware optimizer's --exp-avg-dtype and
--exp-avg-sq-dtype bf16, MLM-ARGS; "reducing optimizer memory by 50%" of the moments, MLM-MOE):
4 + 2 + 2 = 8 B sharded instead of 12, as DeepSeek-V3 trained (DSV3 3.3.1, derived)."""
FP8_COPY_BYTES = 2
"""FP8 training keeps the bf16 weight and adds an fp8 copy of each linear weight, and on Hopper
its transpose (TE performance_considerations: "Master weights", "Handling transposes"); MXFP8 on
Blackwell keeps rowwise and columnwise copies too: 2 B per linear weight on both. With
--fp8-param-gather (Bridge's FP8 recipes set it) the FP8 copy is the primary weight and the bf16
one goes (MB-GUIDE; MLM-MOE "Eliminate BF16 weight copies")."""


@functools.lru_cache(maxsize=65536)
def splits(layers: int, pp: int, vpp: int, mtp: int = 0) -> tuple[tuple[int, ...], ...]:
    """Megatron's ways to lay `layers` over pp x vpp virtual stages, as the layers of each virtual
    stage in schedule order (virtual stage j runs on rank j % pp), in this order of preference:

    1. even: L / (p v) each (no flag needed);
    2. the embedding, the loss and any MTP blocks counted as a layer each
       (--account-for-embedding-in-pipeline-split and --account-for-loss-in-pipeline-split; Bridge's
       405B: 128 / 8 = 16, so 15 | 16 x 6 | 15; its DeepSeek-V3 layouts count the MTP block too);
    3. only the embedding, 4. only the loss, counted;
    5. uneven first and last ranks around equal middle ranks (--decoder-first/last-pipeline-num-
       layers, MLM-TC "Uneven PP"): every count > 0 and divisible by v, for the four middle widths
       from v floor(L / (p v)) up, each with the first and last split as evenly as v allows
       (Llama 3's 7 | 8 x 14 | 7; 6 | 10 x 2 | 6 and 4 | 3 x 8 | 4 for 32 layers on 4 and 10).

    Megatron accepts other first/last counts too; the search tries these. Empty when none exists."""
    if not 1 <= pp <= layers or vpp < 1 or (pp == 1 and vpp > 1):
        return ()
    chunks = pp * vpp
    out: list[tuple[int, ...]] = []

    def add(sizes: list[int]) -> None:
        # A virtual stage may hold no decoder layer (only the embedding or the loss); a rank holds one.
        if (sum(sizes) == layers and min(sizes) >= 0 and min(rank_layers(tuple(sizes), pp)) >= 1
                and tuple(sizes) not in out):
            out.append(tuple(sizes))

    if layers % chunks == 0:
        add([layers // chunks] * chunks)
    for embedding, loss in ((1, 1 + mtp), (1, 0), (0, 1 + mtp)):
        units = layers + embedding + loss
        if pp > 1 and units % chunks == 0:
            sizes = [units // chunks] * chunks
            sizes[0] -= embedding
            sizes[-1] -= loss
            add(sizes)
    if pp > 2:
        # Middle widths around L / pp, the first and last ranks taking the rest.
        start = max(vpp, vpp * (layers // (pp * vpp)))
        for middle in range(start, start + 4 * vpp, vpp):
            rest = layers - middle * (pp - 2)
            for first in sorted({vpp * (rest // (2 * vpp)), vpp * -(-rest // (2 * vpp))}):
                last = rest - first
                if first >= vpp and last >= vpp and last % vpp == 0:
                    per_rank = [first] + [middle] * (pp - 2) + [last]
                    add([per_rank[j % pp] // vpp for j in range(chunks)])
    elif pp == 2 and layers % vpp == 0:
        half = vpp * (layers // (2 * vpp))
        for first in sorted({half, layers - half}):
            if first >= vpp and (layers - first) >= vpp and (layers - first) % vpp == 0:
                per_rank = [first, layers - first]
                add([per_rank[j % 2] // vpp for j in range(chunks)])
    return tuple(out)


def split_layers(layers: int, pp: int, vpp: int, mtp: int = 0) -> tuple[int, ...]:
    """The first of `splits` (virtual-stage sizes); LayoutError naming the rule when none exists."""
    options = splits(layers, pp, vpp, mtp)
    if options:
        return options[0]
    if not 1 <= pp <= layers:
        raise LayoutError(f"pp {pp} cannot split {layers} layers: a pipeline stage needs at least one layer; "
                          f"valid: 1 to {layers}")
    if vpp == 1:
        valid = [p for p in range(1, layers + 1) if splits(layers, p, 1, mtp)]
        near = sorted(valid, key=lambda p: (abs(p - pp), p))[:8]
        raise LayoutError(f"pp {pp} cannot split {layers} layers the ways Megatron does (even, embedding/loss-"
                          f"balanced or first/last-uneven); nearest valid pp: {', '.join(map(str, sorted(near)))}")
    valid = [v for v in range(1, layers // pp + 2) if splits(layers, pp, v, mtp)]
    raise LayoutError(f"pp {pp} with vpp {vpp} cannot split {layers} layers: Megatron needs each stage's layers "
                      f"divisible by vpp (even, embedding/loss-balanced or first/last-uneven splits); "
                      f"valid vpp: {', '.join(map(str, valid)) or 'none'}")


def tp_ok(a: Architecture, tp: int) -> bool:
    """Heads split over tp; KV heads split over it, or replicated when tp exceeds them (MLM-ARGS)."""
    return a.heads % tp == 0 and (a.mla or a.kv_heads % tp == 0 or tp % a.kv_heads == 0)


def cp_ok(seq: int, cp: int, tp: int) -> bool:
    """The sequence splits into 2 cp load-balanced halves (MLM-ARGS validate_args: "seq-length
    should be a multiple of 2 * context-parallel-size"), and each CP rank's seq / cp tokens over
    the tp ranks that split the sequence (tp under sequence parallelism, 1 without: sp_ok)."""
    return (cp == 1 or seq % (2 * cp) == 0) and sp_ok(seq, cp, tp)


def sp_ok(seq: int, cp: int, tp: int) -> bool:
    """Sequence parallelism splits each CP rank's seq / cp tokens evenly over tp (MLM-SP: the
    embedding's scatter (or reduce-scatter) to the SP region asserts "First dimension of the tensor
    should be divisible by tensor parallel size", mappings.py _split_along_first_dim)."""
    return seq % (cp * tp) == 0


def ep_choices(a: Architecture) -> list[int]:
    """Any divisor of the experts (--expert-model-parallel-size; MLM-ARGS)."""
    return list(divisors(a.experts)) if a.moe else [1]


def etp_choices(a: Architecture, tp: int) -> list[int]:
    """Expert TP (--expert-tensor-parallel-size): any divisor of the experts' FFN width. It need not
    divide tp: parallel folding only needs ep x etp to tile tp x cp x dp (dp_step)."""
    return list(divisors(a.expert_ffn)) if a.moe else [1]


def default_etp(a: Architecture, tp: int) -> int:
    """expert_tensor_parallel_size defaults to tp (MLM-ARGS)."""
    return tp if a.moe else 1


def vpp_ok(pp: int, vpp: int) -> bool:
    """Virtual stages interleave a pipeline: vpp > 1 needs pp > 1."""
    return vpp == 1 or pp > 1


ZERO_OF = {"sgd": 0, "adam8bit": 1}
"""An optimizer's one ZeRO stage (MLM-OPT): DistributedOptimizer takes Adam only ("Only Adam, ... and
optimizers with an init_state_fn"); 8-bit moments (the precision-aware optimizer's) need it
(OptimizerConfig). Others take it: no replicated optimizer bytes for no gain under a flat MFU."""


def zero_choices(pp: int, optimizer: str = "adamw", moe: bool = False) -> tuple[int, ...]:
    """The optimizer's stage (ZERO_OF), the distributed optimizer for every other."""
    return (ZERO_OF.get(optimizer, 1),)


def zero_ok(pp: int, zero: int, optimizer: str = "adamw", moe: bool = False) -> bool:
    """A pinned ZeRO stage: the distributed optimizer on (1) or off (0), the optimizer's (ZERO_OF)."""
    return zero in (0, 1) and ZERO_OF.get(optimizer, zero) == zero


def micro_group(c: Degrees) -> int:
    """The interleaved schedule runs micro-batches in groups of pp (MLM-SCHED)."""
    return c.pp if c.vpp > 1 else 1


def dp_key(c: Degrees) -> tuple[int, ...]:
    """dp_step depends on tp x cp and the expert grid ep x etp."""
    return (c.tp * c.cp, c.ep * c.etp)


def dp_step(c: Degrees, knobs: dict[str, Any] | None = None) -> int:
    """dp must be a multiple of this: MoE parallel folding tiles tp x cp x dp with the expert grid
    ep x etp (MLM-MOE), so (ep x etp) / gcd(ep x etp, tp x cp) divides dp."""
    grid = c.ep * c.etp
    return grid // math.gcd(grid, c.tp * c.cp)


def check_training(precision: str, optimizer: str, knobs: dict[str, Any]) -> None:
    """The precision and optimizer the framework trains with, and the knobs that need one."""
    if knobs.get("zero") in (0, 1) and not zero_ok(1, knobs["zero"], optimizer):
        need, why = ZERO_OF[optimizer], ("DistributedOptimizer takes Adam only", "8-bit moments need it")
        raise LayoutError(f"optimizer {optimizer} runs under Megatron only {('without', 'with')[need]} the distributed "
                          f"optimizer (zero {need}; MLM-OPT: {why[need]}); valid: zero {need}, or optimizer adamw")
    if knobs.get("moments_dtype") == "bf16" and optimizer != "adamw":
        raise LayoutError(f"moments_dtype bf16 needs optimizer adamw (its fp32 moments become bf16), not {optimizer}")
    if knobs.get("moments_dtype") == "bf16" and knobs.get("zero") == 0:  # MLM-OPT OptimizerConfig.__post_init__
        raise LayoutError("moments_dtype bf16 runs under Megatron only with the distributed optimizer (MLM-OPT: its "
                          "precision-aware optimizer asserts it); valid: zero 1, or moments_dtype fp32")
    if precision != "fp8" and knobs.get("fp8_param_gather"):
        raise LayoutError(f"fp8_param_gather needs precision fp8, not {precision}")
    if knobs.get("tp_overlap") and knobs.get("sequence_parallel") is False:
        raise LayoutError("tp_overlap needs sequence_parallel: Megatron overlaps TP communication only with sequence "
                          "parallelism (MLM-ARGS: tp_comm_overlap asserts sequence_parallel); valid: sequence_parallel "
                          "true, or tp_overlap false")


def state_bytes_per_param(precision: str, optimizer: str, knobs: dict[str, Any]) -> float:
    """Model-state bytes per parameter before sharding: weight, gradient and optimizer state."""
    grad = FP16_GRAD_BYTES if precision == "fp16" or knobs.get("grad_dtype") == "bf16" else GRAD_BYTES
    return WEIGHT_BYTES + grad + _sharded(optimizer, precision, knobs.get("moments_dtype", "fp32"))


def _sharded(optimizer: str, precision: str, moments_dtype: str) -> float:
    """Bytes per parameter the distributed optimizer shards."""
    return (SHARDED_BYTES[optimizer] + (FP16_EXTRA_SHARDED if precision == "fp16" else 0)
            - (BF16_MOMENTS_SAVED if moments_dtype == "bf16" else 0))


def sharding(zero: int, dp: int, cp: int, pp: int, dp_replicate: int = 1) -> str:
    """How the plan's model states are kept, in words for the Layout line."""
    return ("Megatron: distributed optimizer over DP x CP" if zero == 1 else
            "Megatron: no distributed optimizer, every state replicated over DP")


def state_floor(pp: int, zero: int, precision: str, optimizer: str, knobs: dict[str, Any]) -> float:
    """Bytes per parameter of a GPU's TP x PP (x EP) shard that no data-parallel degree divides:
    the weights and gradients (and, without the distributed optimizer, the optimizer state)."""
    grad = FP16_GRAD_BYTES if precision == "fp16" or knobs.get("grad_dtype") == "bf16" else GRAD_BYTES
    return WEIGHT_BYTES + grad + (_sharded(optimizer, precision, knobs.get("moments_dtype", "fp32")) if zero == 0 else 0)


def sharded_floor(zero: int, precision: str, optimizer: str, knobs: dict[str, Any], *, tp: int, cp: int, ep: int,
                  etp: int) -> tuple[float, float]:
    """Bytes per parameter of a GPU's dense and expert shards that dp divides, at dp 1: the
    distributed optimizer's state, the dense part over dp x cp and the experts' over the expert
    data-parallel group tp x cp x dp / (ep x etp) (states(); the MoE folding rule makes that group
    whole at every legal dp); nothing without it (zero 0)."""
    if zero == 0:
        return 0.0, 0.0
    sharded = _sharded(optimizer, precision, knobs.get("moments_dtype", "fp32"))
    return sharded / cp, sharded * ep * etp / (tp * cp)


def check_layout(a: Architecture, *, tp: int, pp: int, cp: int, ep: int, etp: int, dp: int, vpp: int,
                 micro_batch: int, seq: int, batch_sequences: int, zero: int = 1, **_memory_knobs: Any) -> None:
    """Megatron's legal-layout rules (MLM-ARGS / MLM-TC / MLM-PS / MLM-SCHED);
    the first broken one raises LayoutError naming it and the valid values."""
    check_pins(a, seq, dict(tp=tp, pp=pp, cp=cp, ep=ep, etp=etp, vpp=vpp, zero=zero,
                            sequence_parallel=_memory_knobs.get("sequence_parallel")))
    if a.moe and tp > 1 and _memory_knobs.get("sequence_parallel") is False:
        raise LayoutError(f"sequence_parallel false with MoE and tp {tp} does not train under Megatron (its MoE layer "
                          "raises: \"MoE and tensor parallelism are enabled without also enabling sequence "
                          "parallelism\", MLM-MOE moe_layer.py); valid: sequence_parallel true, or tp 1")
    if (tp * cp * dp) % (ep * etp):
        raise LayoutError(f"ep {ep} x etp {etp} must divide tp x cp x dp = {tp * cp * dp} (MoE parallel folding: "
                          "the expert grid tiles the attention grid of each pipeline stage)")
    if batch_sequences % (micro_batch * dp):
        raise LayoutError(f"the batch of {batch_sequences:,} sequences is not a whole number of micro-batches of "
                          f"{micro_batch} on each of {dp:,} data-parallel replicas: Megatron needs "
                          "global batch % (micro-batch x dp) == 0")
    micro = batch_sequences // (micro_batch * dp)
    if vpp > 1 and (micro < pp or micro % pp):
        valid = [d for d in divisors(batch_sequences // micro_batch)
                 if (batch_sequences // (micro_batch * d)) % pp == 0 and batch_sequences // (micro_batch * d) >= pp]
        raise LayoutError(f"the interleaved schedule (vpp {vpp}) needs the micro-batches per replica ({micro:,}) to be "
                          f"a multiple of pp {pp} (MLM-SCHED: microbatch_group_size_per_vp_stage = pp); "
                          f"valid dp: {', '.join(f'{d:,}' for d in valid[-8:]) or 'none'}")


def check_pins(a: Architecture, seq: int, pins: dict[str, Any]) -> None:
    """The rules of the knobs in `pins` on their own (heads vs tp, sequence vs cp and, under
    sequence parallelism, vs tp x cp, experts vs ep and etp, layers vs pp and vpp), checked before
    a search so that a pin no layout allows is named. A knob not pinned breaks no rule: vpp alone
    needs only some pp that admits it, a pinned tp the cp it is pinned with (or 1)."""
    tp, pp, cp, ep, etp, vpp = (pins.get(k) for k in ("tp", "pp", "cp", "ep", "etp", "vpp"))
    if pins.get("zero") not in (None, 0, 1):
        raise LayoutError(f"zero {pins['zero']} is not a Megatron choice: its distributed optimizer shards the "
                          "optimizer state (zero 1, the default) or not (zero 0); valid: 0, 1")
    if tp is not None and a.heads % tp:
        raise LayoutError(f"tp {tp} does not divide the {a.heads} attention heads; valid: "
                          f"{', '.join(map(str, divisors(a.heads)[:12]))}")
    if tp is not None and not a.mla and a.kv_heads % tp and tp % a.kv_heads:
        valid = [t for t in divisors(a.heads) if a.kv_heads % t == 0 or t % a.kv_heads == 0]
        raise LayoutError(f"tp {tp} does not divide the {a.kv_heads} KV heads, nor do they divide it; valid: "
                          f"{', '.join(map(str, valid[:12]))}")
    if cp is not None and cp > 1 and seq % (2 * cp):
        raise LayoutError(f"cp {cp} needs the sequence ({seq:,}) divisible by 2 x cp = {2 * cp} (load-balanced halves)")
    if tp is not None and tp > 1 and knobs.flag_value("sequence_parallel", NAME, pins) and not sp_ok(seq, cp or 1, tp):
        # Sequence parallelism is on whenever tp > 1 unless sequence_parallel false (MLM-SP).
        c = cp or 1
        valid = [t for t in divisors(a.heads) if tp_ok(a, t) and sp_ok(seq, c, t)]
        split = f"tp x cp = {tp * c}" if c > 1 else "tp"
        raise LayoutError(f"tp {tp} with sequence parallelism needs the sequence ({seq:,}) divisible by {split}: "
                          f"Megatron splits each context-parallel rank's tokens evenly over the TP ranks (MLM-SP, "
                          f"tensor_parallel/mappings.py _split_along_first_dim); valid tp: "
                          f"{', '.join(map(str, valid[:12]))}" + ("" if a.moe else ", or sequence_parallel false"))
    if ep is not None and ep > 1 and not a.moe:
        raise LayoutError(f"ep {ep} needs experts: the model has none; valid: 1")
    if not a.moe and (pins.get("dispatcher") == "flex" or pins.get("ep_overlap")):
        # As ep: settings of how the experts' tokens travel, which a dense model has none of (they
        # were kept in the plan's framework_knobs and changed nothing).
        given = "dispatcher flex" if pins.get("dispatcher") == "flex" else "ep_overlap"
        raise LayoutError(f"{given} needs experts: the model has none (it sets how tokens reach their experts); "
                          "leave it out")
    if ep is not None and a.moe and a.experts % ep:
        raise LayoutError(f"ep {ep} does not divide the {a.experts} experts; valid: "
                          f"{', '.join(map(str, divisors(a.experts)[:12]))}")
    if etp is not None and etp > 1 and (not a.moe or a.expert_ffn % etp):
        raise LayoutError(f"etp {etp} must divide the experts' FFN width ({a.expert_ffn:,})" if a.moe
                          else f"etp {etp} needs experts: the model has none; valid: 1")
    if vpp is not None and vpp > 1 and pp is not None and pp < 2:
        raise LayoutError(f"vpp {vpp} needs pp > 1: virtual stages interleave a pipeline")
    _check_modules(a, pins.get("recompute_modules") or ())
    if pp is not None:
        split_layers(a.layers, pp, vpp or 1, a.mtp_layers)
    elif vpp is not None and not any(splits(a.layers, p, vpp, a.mtp_layers) for p in range(2, a.layers + 1)):
        raise LayoutError(f"vpp {vpp} fits no pipeline of {a.layers} layers")


_MODULE_NEEDS = {"mla_up_proj": "multi-latent attention", "moe": "experts", "moe_act": "experts",
                 "mlp": "a dense MLP layer", "layernorm": "norms"}
"""What a recompute module re-runs, which a model without it does not have."""


def _check_modules(a: Architecture, modules) -> None:
    """Pinned recompute_modules that exist on the architecture (apsi.training.frameworks.recompute.applicable):
    Megatron refuses mla_up_proj without MLA and moe_act without grouped-GEMM experts (its
    TransformerConfig), and a module of a part the model lacks would change nothing apsi counts."""
    from apsi.training.frameworks.recompute import applicable

    valid = applicable(a, True)
    wrong = [m for m in modules if m not in valid]
    if wrong:
        raise LayoutError(f"recompute module {wrong[0]} needs {_MODULE_NEEDS.get(wrong[0], 'a part')}, and the model has "
                          f"none; valid for it: {', '.join(valid)}")


def padded_vocab(vocab: int, tp: int) -> int:
    """The vocabulary Megatron allocates: padded to a multiple of 128 x tp
    (--make-vocab-size-divisible-by 128, times TP; MLM-VOCAB)."""
    step = 128 * tp
    return -(-vocab // step) * step if vocab else 0


vocab_rows = padded_vocab
"""The embedding rows Megatron allocates: the padded vocabulary."""
BUILDS_MTP = True
"""Megatron builds a model's MTP blocks (--mtp-num-layers) on the last pipeline stage."""
FP8_ACTIVATIONS = True
"""Transformer Engine caches FP8 linear inputs as 1-byte copies (apsi.model.memory)."""
LOGIT_BYTES = mem.LOGIT_BYTES
"""Its vocabulary-parallel cross-entropy's bytes per logit (apsi.model.memory)."""


def states(c: stages.Counts, *, tp: int, pp: int, cp: int, ep: int, etp: int, dp: int, precision: str,
           micro_batches: int, optimizer: str, zero: int = 1, grad_dtype: str = "fp32",
           fp8_param_gather: bool = False, moments_dtype: str = "fp32") -> dict[str, float]:
    """Bytes of weights, gradients and optimizer state one GPU of a stage holds (MLM-DOPT, MLM-TMU).

    Weights 2 B and gradients 4 B each (fp16: 2 B, with an fp32 copy in the sharded part,
    MLM-DOPT's 4 + 16/d); the optimizer's sharded bytes over DP x CP with the distributed
    optimizer (zero 1, the default; zero 0 is plain DDP, every byte replicated), experts' over
    the expert data-parallel group tp x cp x dp / (ep x etp) (MLM-PR4687).
    grad_dtype "bf16" keeps 2-byte gradients (--grad-reduce-in-bf16), moments_dtype "bf16" 2-byte
    Adam moments (--exp-avg-dtype / --exp-avg-sq-dtype bf16); FP8 adds an FP8 copy of each linear
    weight, and fp8_param_gather makes it the primary one (--fp8-param-gather)."""
    fp8 = precision == "fp8"
    expert_dp = max(1, tp * cp * dp // (ep * etp))
    sharded = _sharded(optimizer, precision, moments_dtype)
    grad = FP16_GRAD_BYTES if precision == "fp16" or grad_dtype == "bf16" else GRAD_BYTES
    total = c.dense + c.experts
    if fp8 and fp8_param_gather:
        # --fp8-param-gather: the linear weights' primary copy is FP8 (with its transpose), no bf16.
        weights = WEIGHT_BYTES * (total - c.linear) + FP8_COPY_BYTES * c.linear
    else:
        weights = WEIGHT_BYTES * total + (FP8_COPY_BYTES * c.linear if fp8 else 0)
    if zero == 0:
        optimizer_bytes = sharded * total
    else:
        optimizer_bytes = sharded * c.dense / (dp * cp) + sharded * c.experts / expert_dp
    return dict(weights=weights, gradients=grad * total, optimizer=optimizer_bytes)


def memory(a: Architecture, *, tp: int, pp: int, cp: int, ep: int, etp: int, dp: int, vpp: int, micro_batch: int,
           seq: int, batch_sequences: int, recompute: str, optimizer: str, precision: str,
           split: tuple[int, ...] | None = None, peak_only: bool = False,
           modules: tuple[str, ...] = mem.DEFAULT_MODULES, grad_dtype: str = "fp32",
           fp8_param_gather: bool = False, zero: int = 1, moments_dtype: str = "fp32",
           stop_above: float | None = None, sequence_parallel: bool | None = None,
           **step_only: Any) -> list[dict[str, float] | None]:
    """Every pipeline stage's memory per GPU, bytes by part with its reserve and total, first to
    last (apsi.training.frameworks.stages.memory under Megatron's sharding); the split defaults to the first
    of `splits`. `step_only` holds the settings only the step time uses (apsi.inputs.knobs: tp_overlap,
    ep_overlap, dispatcher, cp_comm_type), carried with the layout and ignored here; sequence_parallel (None:
    on, Megatron's default here) goes to the activations."""
    split = split or split_layers(a.layers, pp, vpp, a.mtp_layers)
    return stages.memory(cast("Framework", sys.modules[__name__]), a, split=tuple(split), tp=tp, pp=pp, cp=cp, ep=ep,
                         etp=etp, dp=dp, vpp=vpp, micro_batch=micro_batch, seq=seq, batch_sequences=batch_sequences,
                         recompute=recompute, precision=precision, peak_only=peak_only,
                         stop_above=stop_above, modules=modules,
                         optimizer=optimizer, zero=zero, grad_dtype=grad_dtype, fp8_param_gather=fp8_param_gather,
                         moments_dtype=moments_dtype, sequence_parallel=sequence_parallel)


def peak_bytes(a: Architecture, **layout: Any) -> float:
    """The most loaded stage's total bytes (memory(..., peak_only=True))."""
    return max(p["total"] for p in memory(a, peak_only=True, **layout) if p is not None)


def ep_overlap_allowed(layout: dict[str, Any]) -> bool:
    """Whether Megatron runs its EP A2A overlap on this layout (the ep_overlap knob): expert
    parallelism, the interleaved schedule under PP ("virtual_pipeline_model_parallel_size must be
    specified when pipeline_model_parallel_size > 1"), no full recomputation and no recomputed
    MoE block (MLM-TC TransformerConfig.__post_init__ asserts each); elsewhere the flag is off."""
    modules = layout.get("modules") or layout.get("recompute_modules") or ()
    return (layout.get("ep", 1) > 1 and (layout["pp"] == 1 or layout["vpp"] > 1)
            and layout.get("recompute") != "full" and not (layout.get("recompute") == "selective" and "moe" in modules))


def inert_settings(given: dict[str, Any], layout: dict[str, Any]) -> dict[str, str]:
    """Of the settings `given`, those that change nothing on `layout` (neither its memory nor its
    step time), each with the reason in words: ep_overlap where Megatron does not run it
    (ep_overlap_allowed; apsi.training.frameworks.timing.shape turns it off there), tp_overlap at tp 1
    (no TP collective to overlap, apsi.model.steptime.compute), the flex dispatcher at ep 1 (no
    all-to-all), the CP all-gather at cp 1. apsi.outputs.text leaves them off the Layout line."""
    out = {}
    if given.get("ep_overlap") and not ep_overlap_allowed(layout):
        out["ep_overlap"] = ("Megatron runs its EP A2A overlap only with EP > 1, VPP under PP, no full recomputation "
                             "and no recomputed MoE block (MLM-TC)")
    if given.get("tp_overlap") and layout.get("tp", 1) == 1:
        out["tp_overlap"] = "at TP 1 there is no TP collective to overlap"
    if given.get("dispatcher") == "flex" and layout.get("ep", 1) == 1:
        out["dispatcher"] = "at EP 1 no token is dispatched"
    if given.get("cp_comm_type") == "all_gather" and layout.get("cp", 1) == 1:
        out["cp_comm_type"] = "at CP 1 no K or V is exchanged"
    return out


def dp_traffic(pp: int, zero: int, precision: str, knobs: dict[str, Any]) -> DpTraffic:
    """The distributed optimizer's data-parallel traffic per step (UPB, MLM-ARGS, MB-GUIDE): gradients
    reduce-scattered in fp32 (bf16 with --grad-reduce-in-bf16, and under fp16) under the last
    micro-batch's backward (--overlap-grad-reduce), parameters all-gathered in bf16 (FP8 with
    --fp8-param-gather) under the first's forward (--overlap-param-gather), in buckets of
    max(40 M, 1 M x DP) parameters (MLM-DDP)."""
    grad = FP16_GRAD_BYTES if precision == "fp16" or knobs.get("grad_dtype") == "bf16" else GRAD_BYTES
    gather = 1 if precision == "fp8" and knobs.get("fp8_param_gather") else 2
    return DpTraffic(grad_bytes=grad, gather_bytes=gather, bucket_per_rank=1e6)


def plan(s: Setup, pins: dict[str, Any], tolerance: float, explain: bool = False) -> Plan:
    """The plan for `s` from the search over every legal Megatron layout (apsi.training.frameworks.planner)."""
    from apsi.training.frameworks import planner

    return planner.plan(cast("Framework", sys.modules[__name__]), s, pins, tolerance, explain=explain)
