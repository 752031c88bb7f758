"""DeepSpeed (ZeRO stage 0-3 + TP + PP, as Megatron-DeepSpeed runs it): its layout rules, its
pipeline split, and how each ZeRO stage keeps model states.

Owns what DeepSpeed does (UPB, DS, EAI; source keys in docs/sources.md):
- states by ZeRO stage, in bytes per parameter over the N data-parallel GPUs (UPB "ZeRO"; DS
  stage_1_and_2.py / stage3.py estimators): bf16 weights 2, bf16 gradients 2, the fp32 gradient
  DeepSpeed accumulates in (data_types.grad_accum_dtype, fp32 by default under bf16) 4, the fp32
  master 4 and Adam's moments 8. Stage 0 replicates all of it (20 B); stage 1 shards the fp32
  parts (2 + 2 + 16 / N); stage 2 the gradients too (2 + 18 / N, the estimator's figure); stage 3
  everything (20 / N) plus the largest layer's gathered weights and gradients (the estimator's
  4 x largest_layer_params). Under bf16, stage 1 with fp32 accumulation, and stage 0 under the
  pipeline engine, run DeepSpeed's BF16_Optimizer instead (engine._do_optimizer_sanity_check
  returns BFLOAT16; bf16_optimizer.py): it shards the fp32 master and the moments over DP but
  keeps the bf16 gradients and a flat accumulation buffer of every parameter (zeros_like the
  bf16 flat group, in grad_accum_dtype: fp32 at stage 1, bf16 at stage 0, where the export
  writes bf16 accumulation, the engine refusing fp32 there), 2 + 2 + 4 + 12 / N at stage 1
  (bf16_optimizer);
- ZeRO-2 and ZeRO-3 do not run under the pipeline engine: with pp > 1 the stage is 0 or 1
  (PipelineEngine);
- the split: PipelineModule(partition_method="type:transformer") spreads the decoder layers
  uniformly, the first L % pp stages one more (ds_utils.partition_uniform), the embedding on
  the first stage and the head on the last; the 1F1B TrainSchedule keeps min(pp - stage, m)
  micro-batches in flight; no interleaving; any m runs, fewer than pp too (TrainSchedule.steps
  runs 2 (m + pp - 1) steps and skips the micro-batch ids outside 0..m - 1, with no check of m
  against pp: DS pipe/schedule.py; micro_least 1, the base's);
- tensor parallelism is Megatron's (Megatron-DeepSpeed), with sequence parallelism, its padded
  vocabulary and its vocabulary-parallel cross-entropy; no context or expert parallelism is
  modelled, and no FP8 (DeepSpeed's ZeRO engine has no Transformer Engine FP8 recipe here).
"""

from __future__ import annotations

import functools
import sys
from typing import TYPE_CHECKING, Any, cast

from apsi.inputs import knobs
from apsi.errors import LayoutError
from apsi.training.frameworks import stages
from apsi.training.frameworks.megatron import padded_vocab
from apsi.training.frameworks.stages import rank_layers as rank_layers  # the Framework member
from apsi.model import memory as mem
from apsi.model.architecture import Architecture
from apsi.model.collectives import DpTraffic
from apsi.model.arithmetic import divisors
# The Protocol's defaults it keeps (apsi.training.frameworks.base), re-exported as its own.
from apsi.training.frameworks.base import (
    BUILDS_MTP as BUILDS_MTP, FP8_ACTIVATIONS as FP8_ACTIVATIONS, GRID_DOMINANCE as GRID_DOMINANCE,
    KEEPS_STAGE_OUTPUTS as KEEPS_STAGE_OUTPUTS, dp_key as dp_key, dp_step as dp_step,
    ep_choices as ep_choices, ep_overlap_allowed as ep_overlap_allowed, layer_bytes as layer_bytes,
    micro_group as micro_group, micro_least as micro_least, micro_rounds as micro_rounds,
    recompute_flops as recompute_flops, vpp_ok as vpp_ok,
)

if TYPE_CHECKING:
    from apsi.training.frameworks.interface import Defaults, Framework, KernelRates
    from apsi.inputs.question import Setup
    from apsi.model.schema import Plan

NAME = "deepspeed"
"""The name --framework takes."""
TITLE = "DeepSpeed"
"""DeepSpeed in messages."""
KNOBS: tuple[str, ...] = knobs.of(NAME)
"""The layout knobs DeepSpeed takes (tensor and pipeline degrees, train_micro_batch_size_per_gpu,
activation checkpointing, zero_optimization.stage)."""
DEFAULTS: Defaults = {"pp": 1, "vpp": 1, "cp": 1, "ep": 1, "micro_batch": 1, "recompute": "none", "zero": 0}
"""DeepSpeed's defaults: zero_optimization.stage 0, one sequence per micro-batch, no checkpointing."""
MEMORY_KNOBS: tuple[str, ...] = knobs.carried(NAME)
"""No knob of its own goes to memory() beyond zero."""
DP_RULES = "the batch (train_batch_size = micro-batch x accumulation x dp)"
"""DeepSpeed's rule on dp, for the message when none is left."""
LOGIT_BYTES = mem.LOGIT_BYTES
"""Megatron-DeepSpeed's vocabulary-parallel cross-entropy keeps Megatron's bytes per logit."""
KERNEL_EFFICIENCY: KernelRates = {"bf16": 0.89, "fp8": 0.89, "eager": 1.0}
"""Megatron-DeepSpeed's compute rate relative to Megatron's kernels at the GPU's GEMM efficiency
(apsi.model.steptime.gemm_efficiency): fitted by benchmarks/calibrate.py on DeepSpeed's own
published throughput, Megatron-DeepSpeed's July 2023 sync notes (MDS-REBASE: GPT-3 2.7B on 8 A100,
TP 2 x PP 2, ZeRO-1, FlashAttention-2, 132 TFLOPs per GPU), after Ampere's own GEMM efficiency
(0.62, fitted on Megatron-LM's A100 table, MLM-SC21). Its --transformer-impl defaults to "local"
(Megatron's legacy layers, torch matmuls, MDS-ARGS), and it was priced at torchtitan's kernel efficiency
(0.645 then) before, which put BLOOM and MT-NLG 27-32% slow (docs/validation.md). Fitted against the H100 rows'
0.61 it was 0.9, carrying the A100's GEMMs reaching a little more of their peak into every GPU's
DeepSpeed plans; against the A100's own 0.62 it is 0.89. FP8 takes the same rate (no DeepSpeed
FP8 throughput is published with its layout), and it has no compile knob (eager 1.0). Its other
published row (GPT-3 13B on 128 V100) is not used: the catalog has no V100."""
BF16 = 2
FP32 = 4
MOMENT_BYTES = {"adamw": 8, "sgd": 4}
"""Optimizer moments per parameter: Adam's two fp32 moments; SGD's fp32 momentum. Megatron-DeepSpeed
builds its optimizer itself and hands it to deepspeed.initialize, and its --optimizer takes adam or
sgd only (MDS-OPT: megatron/arguments.py): no 8-bit Adam."""
LARGEST_LAYER_BYTES = 4
"""ZeRO-3's working set per parameter of the largest layer: its gathered bf16 weight and gradient
(DS stage3.py estimate_zero3_model_states_mem_needs: 4 x largest_layer_params)."""
vocab_rows = padded_vocab
"""Megatron-DeepSpeed pads the vocabulary as Megatron does."""


@functools.lru_cache(maxsize=65536)
def splits(layers: int, pp: int, vpp: int, mtp: int = 0) -> tuple[tuple[int, ...], ...]:
    """DeepSpeed's one split: uniform over the decoder layers, the first L % pp stages one more."""
    if vpp != 1 or not 1 <= pp <= layers:
        return ()
    base, extra = divmod(layers, pp)
    return (tuple(base + (1 if i < extra else 0) for i in range(pp)),)


def split_layers(layers: int, pp: int, vpp: int, mtp: int = 0) -> tuple[int, ...]:
    """The split of `splits`; LayoutError naming the rule when there is none."""
    options = splits(layers, pp, vpp, mtp)
    if options:
        return options[0]
    if vpp != 1:
        raise LayoutError(f"vpp {vpp} is not a DeepSpeed choice: its pipeline engine runs one stage per rank; valid: 1")
    raise LayoutError(f"pp {pp} cannot split {layers} layers: a pipeline stage needs at least one layer; "
                      f"valid: 1 to {layers}")


def tp_ok(a: Architecture, tp: int) -> bool:
    """Query and KV heads both split over tp (no KV replication)."""
    return a.heads % tp == 0 and (a.mla or a.kv_heads % tp == 0)


def cp_ok(seq: int, cp: int, tp: int) -> bool:
    """No context parallelism (cp 1 only); with --sequence-parallel (`tp` the TP degree that splits
    the sequence, 1 without it) the embeddings' [s, b, h] split evenly over tp (MDS-SP: Embedding.forward's
    scatter_to_sequence_parallel_region, whose _split_along_first_dim asserts "First dimension of
    the tensor should be divisible by tensor parallel size")."""
    return cp == 1 and seq % tp == 0


def etp_choices(a: Architecture, tp: int) -> list[int]:
    """Experts are split over tp like the dense MLP (no expert parallelism here)."""
    return [tp] if a.moe else [1]


def default_etp(a: Architecture, tp: int) -> int:
    """The experts split over tp like the MLP."""
    return tp if a.moe else 1


def zero_choices(pp: int, optimizer: str = "adamw", moe: bool = False) -> tuple[int, ...]:
    """Every stage without a pipeline; 0 and 1 under the pipeline engine; no ZeRO-3 for an MoE
    (zero_ok)."""
    return ((0, 1, 2) if moe else (0, 1, 2, 3)) if pp == 1 else (0, 1)


def zero_ok(pp: int, zero: int, optimizer: str = "adamw", moe: bool = False) -> bool:
    """ZeRO-2 and ZeRO-3 need pp 1 (the pipeline engine runs stage 0 or 1); ZeRO-3 runs no MoE
    (DeepSpeed's runtime/engine.py, _configure_zero_optimizer: "MoE not supported with Stage 3")."""
    return (zero <= 1 or pp == 1) and not (moe and zero == 3)


def check_training(precision: str, optimizer: str, knobs: dict[str, Any]) -> None:
    """The precision and optimizer the framework trains with, and the knobs that need one."""
    if precision == "fp8":
        raise LayoutError("DeepSpeed trains in bf16 or fp16 here, not fp8 (no FP8 recipe in its ZeRO engine); "
                          "valid: bf16, fp16")
    _moments(optimizer)


def _moments(optimizer: str) -> int:
    if optimizer not in MOMENT_BYTES:
        raise LayoutError(f"optimizer {optimizer} is not one Megatron-DeepSpeed builds (its --optimizer takes adam or "
                          f"sgd, MDS-OPT); valid: {', '.join(MOMENT_BYTES)}")
    return MOMENT_BYTES[optimizer]


def state_bytes_per_param(precision: str, optimizer: str, knobs: dict[str, Any]) -> float:
    """bf16 weight and gradient, fp32 accumulated gradient and master, and the moments (module docstring)."""
    return BF16 + BF16 + FP32 + FP32 + _moments(optimizer)


def sharding(zero: int, dp: int, cp: int, pp: int, dp_replicate: int = 1) -> str:
    """How the plan's model states are kept, in words for the Layout line."""
    return f"DeepSpeed: ZeRO-{zero} over DP" if zero else "DeepSpeed: ZeRO-0, every state replicated over DP"


def state_floor(pp: int, zero: int, precision: str, optimizer: str, knobs: dict[str, Any]) -> float:
    """Bytes per parameter of a stage that no data-parallel degree divides, by ZeRO stage (the
    BF16_Optimizer's whole bf16 weight, gradient and accumulation buffer where it runs)."""
    if bf16_optimizer(precision, zero, pp):
        return BF16 + BF16 + (FP32 if zero == 1 else BF16)
    return {0: state_bytes_per_param(precision, optimizer, knobs), 1: BF16 + BF16, 2: BF16}.get(zero, 0.0)


def sharded_floor(zero: int, precision: str, optimizer: str, knobs: dict[str, Any], *, tp: int, cp: int, ep: int,
                  etp: int) -> tuple[float, float]:
    """Bytes per parameter of a GPU's shard that dp divides at ZeRO stage `zero`, at dp 1 (states():
    the fp32 master, gradient and moments from stage 1, the 16-bit gradient from 2, the 16-bit
    weight from 3), the same for dense and expert parameters."""
    each = state_bytes_per_param(precision, optimizer, knobs) - state_floor(1, zero, precision, optimizer, knobs)
    return each, each


def check_pins(a: Architecture, seq: int, pins: dict[str, Any]) -> None:
    """The rules of the knobs in `pins` on their own, each naming the valid values."""
    tp, pp, cp, ep, etp, vpp, zero = (pins.get(k) for k in ("tp", "pp", "cp", "ep", "etp", "vpp", "zero"))
    if tp is not None and a.heads % tp:
        raise LayoutError(f"tp {tp} does not divide the {a.heads} attention heads; valid: "
                          f"{', '.join(map(str, divisors(a.heads)[:12]))}")
    if tp is not None and not a.mla and a.kv_heads % tp:
        valid = [t for t in divisors(a.kv_heads) if a.heads % t == 0]
        raise LayoutError(f"tp {tp} does not divide the {a.kv_heads} KV heads; valid: {', '.join(map(str, valid[:12]))}")
    for key, value in (("cp", cp), ("ep", ep), ("vpp", vpp)):
        if value is not None and value != 1:
            raise LayoutError(f"{key} {value} is not a DeepSpeed knob apsi models (no context or expert parallelism, "
                              "one pipeline stage per rank); valid: 1")
    if tp is not None and tp > 1 and knobs.flag_value("sequence_parallel", NAME, pins) and not cp_ok(seq, 1, tp):
        valid = [t for t in divisors(a.heads) if tp_ok(a, t) and cp_ok(seq, 1, t)]
        raise LayoutError(f"tp {tp} with sequence parallelism needs the sequence ({seq:,}) divisible by tp: "
                          "Megatron-DeepSpeed's --sequence-parallel splits the tokens evenly over the TP ranks "
                          f"(MDS-SP, tensor_parallel/mappings.py _split_along_first_dim); valid tp: "
                          f"{', '.join(map(str, valid[:12]))}, or sequence_parallel false (its default)")
    if etp is not None and etp != (tp if a.moe else 1) and tp is not None:
        raise LayoutError(f"etp {etp} is not a DeepSpeed choice: experts split over tp like the MLP; valid: "
                          f"{tp if a.moe else 1}")
    if zero is not None and pp is not None and pp > 1 and zero > 1:
        raise LayoutError(f"zero {zero} does not run under DeepSpeed's pipeline engine (pp {pp}): ZeRO-2 and ZeRO-3 "
                          "need pp 1; valid with a pipeline: 0, 1")
    if zero == 3 and a.moe:
        raise LayoutError("zero 3 does not run a MoE under DeepSpeed (runtime/engine.py: \"MoE not supported with "
                          "Stage 3\"); valid: 0, 1, 2")
    if pp is not None:
        split_layers(a.layers, pp, vpp or 1)


def check_layout(a: Architecture, *, tp: int, pp: int, cp: int, ep: int, etp: int, dp: int, vpp: int,
                 micro_batch: int, seq: int, batch_sequences: int, zero: int = 0,
                 sequence_parallel: bool | None = None) -> None:
    """DeepSpeed's legal-layout rules; the first broken one raises LayoutError. Sequence
    parallelism (off by default, MDS-ARGS) may be on or off on any layout: the experts split over
    tp like the MLP (etp = tp), the case apsi.model.memory counts without it."""
    check_pins(a, seq, dict(tp=tp, pp=pp, cp=cp, ep=ep, etp=etp, vpp=vpp, zero=zero,
                            sequence_parallel=sequence_parallel))
    if batch_sequences % (micro_batch * dp):
        raise LayoutError(f"the batch of {batch_sequences:,} sequences is not micro-batch {micro_batch} x dp {dp:,} x "
                          "a whole number of accumulation steps (train_batch_size = train_micro_batch_size_per_gpu x "
                          "gradient_accumulation_steps x dp)")


def bf16_optimizer(precision: str, zero: int, pp: int) -> bool:
    """Whether DeepSpeed keeps the states with its BF16_Optimizer (module docstring): bf16 at ZeRO
    stage 1 with fp32 accumulation (the export's), or at stage 0 under the pipeline engine
    (DS engine._do_optimizer_sanity_check)."""
    return precision == "bf16" and (zero == 1 or (zero == 0 and pp > 1))


def states(c: stages.Counts, *, tp: int, pp: int, cp: int, ep: int, etp: int, dp: int, precision: str,
           micro_batches: int, optimizer: str, zero: int = 0) -> dict[str, float]:
    """Bytes of weights, gradients and optimizer state one GPU of a stage holds at ZeRO stage
    `zero` (module docstring)."""
    total = c.dense + c.experts
    if bf16_optimizer(precision, zero, pp):
        # The bf16 weight whole and the fp32 master over DP; the bf16 gradient and the flat
        # accumulation buffer whole (fp32 at stage 1, bf16 at stage 0); the moments over DP.
        accumulated = FP32 if zero == 1 else BF16
        return dict(weights=BF16 * total + FP32 * total / dp, gradients=(BF16 + accumulated) * total,
                    optimizer=_moments(optimizer) * total / dp)

    def part(stage: int) -> float:
        """The parameters' share on this GPU of a state ZeRO shards from `stage` on."""
        return total / dp if zero >= stage else total

    weights = BF16 * part(3) + FP32 * part(1) + (LARGEST_LAYER_BYTES / 2 * c.largest_layer if zero == 3 else 0)
    gradients = BF16 * part(2) + FP32 * part(1) + (LARGEST_LAYER_BYTES / 2 * c.largest_layer if zero == 3 else 0)
    return dict(weights=weights, gradients=gradients, optimizer=_moments(optimizer) * part(1))


def memory(a: Architecture, **layout: Any) -> list[dict[str, float] | None]:
    """Every pipeline stage's memory per GPU (apsi.training.frameworks.stages.memory under this module)."""
    return stages.framework_memory(cast("Framework", sys.modules[__name__]), a, **layout)


def peak_bytes(a: Architecture, **layout: Any) -> float:
    """The most loaded stage's total bytes (apsi.training.frameworks.stages.peak_bytes)."""
    return stages.peak_bytes(cast("Framework", sys.modules[__name__]), a, **layout)


BUCKET_ELEMENTS = 5e8
"""DeepSpeed's reduce_bucket_size and allgather_bucket_size defaults, 5e8 elements (DS zero/config.py;
apsi.outputs.export.deepspeed writes them), the messages its once-per-step collectives move."""


def dp_traffic(pp: int, zero: int, precision: str, knobs: dict[str, Any]) -> DpTraffic:
    """ZeRO's traffic (UPB "ZeRO"; DS engine.py, stage_1_and_2.py, stage3.py, zero/config.py) in the
    model's 16-bit type (communication_data_type defaults to it), with DeepSpeed's own overlap,
    not Megatron's:
    - stage 0 all-reduces the gradients after the backward (engine.allreduce_gradients; overlap_comm
      is a ZeRO optimizer's, and stage 0 has none): exposed;
    - stages 1 and 2 reduce-scatter them under the backward (overlap_comm, which apsi's export sets),
      stage 2 on every micro-batch (its gradients are partitioned), stage 1 on the last; under the
      pipeline engine (pp > 1) the reduction is its own step after the last backward
      (PipelineEngine._exec_reduce_grads): exposed. The updated bf16 weights are all-gathered
      inside the optimizer step (all_gather_dp_groups): exposed;
    - stage 3 gathers every layer forward and backward on every micro-batch, prefetched
      (stage3_prefetch_bucket_size; overlap_comm is on by default at stage 3), and reduce-scatters
      it under the backward: 3x the parameter volume of stages 1 and 2's 2x (Rajbhandari et al.
      2020 Sec. 7), exposed as apsi.model.steptail.exposed_dp says."""
    if zero == 0:
        return DpTraffic(grad_bytes=BF16, gather_bytes=0, all_reduce=True, bucket_elements=BUCKET_ELEMENTS,
                         reduce_hidden=False)
    if zero == 3:
        return DpTraffic(grad_bytes=BF16, gather_bytes=BF16, per_micro_batch=True, bucket_elements=BUCKET_ELEMENTS)
    return DpTraffic(grad_bytes=BF16, gather_bytes=BF16, bucket_elements=BUCKET_ELEMENTS, reduce_hidden=pp == 1,
                     gather_hidden=False, reduce_per_micro_batch=zero == 2)


def plan(s: Setup, pins: dict[str, Any], tolerance: float, explain: bool = False) -> Plan:
    """The plan for `s` from the search over every legal DeepSpeed layout (apsi.training.frameworks.planner)."""
    from apsi.training.frameworks import planner

    return planner.plan(cast("Framework", sys.modules[__name__]), s, pins, tolerance, explain=explain)
