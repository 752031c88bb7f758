"""torchtitan (FSDP2 + TP + PP + CP + EP): its layout rules, its pipeline split, how FSDP2 keeps
model states, its selective activation checkpointing, and its loss.

Owns what torchtitan does (TT-PD, TT-FSDP, TT-CFG, FSDP2; source keys in docs/sources.md):
- states: fp32 parameters, gradients and optimizer moments (training.dtype float32) sharded over
  dp_shard x cp, replicated over dp_replicate (HSDP); the computation all-gathers bf16 copies
  (mixed_precision_param). Without PP each transformer block is resharded after forward
  (fsdp_reshard_after_forward "default" = True): two blocks' bf16 weights and gradients live at
  once (the current one and the prefetched or reducing one), and norm + output are never
  resharded; each block's gradients are reduce-scattered from an fp32 copy (mixed_precision_reduce,
  FSDP2's foreach_reduce), two blocks at a time. With PP "default" is False: the stage's bf16 weights stay gathered, and between
  micro-batches the pipeline turns gradient sync off, so FSDP2 accumulates the stage's unsharded
  gradients in the reduce dtype, fp32 (FSDPParam.unsharded_accumulated_grad; torch pipelining's
  backward_maybe_with_nosync), all reduce-scattered at the last micro-batch;
- routed experts are FSDP-sharded over the data-parallel ranks outside EP: dp_shard x cp x tp / ep
  with etp 1, dp_shard x cp / ep with etp = tp (torchtitan's ParallelDims);
- the split: generate_llm_fqn_per_model_part spreads L + 1 (embedding) + 1 (norm + output) over
  pp x v stages, the remainder to the first stages; v = 1 is the 1F1B schedule, v >= 2
  Interleaved1F1B (2 by default), each stage on rank j % pp;
- the interleaved schedule's micro-batch counts: torch.distributed.pipelining's
  ScheduleInterleaved1F1B (and ScheduleInterleavedZeroBubble) runs a replica's n micro-batches in
  max(1, n // pp) rounds and refuses an n that is not a multiple of them (rounds_ok, TORCH-PIPE);
- 1F1B's: torch's Schedule1F1B (pipeline_parallel_schedule "1F1B", torchtitan's default, one stage
  per rank) refuses fewer micro-batches than stages, n < pp (micro_least, TORCH-PIPE); torchtitan
  itself only warns there (build_pipeline_schedule, TT-FSDP);
- activations as apsi.model.memory with sequence parallelism on the norms (torchtitan's TP plan)
  and no FP8 caching (torchao's Float8Linear saves the high-precision input and recasts in
  backward); selective checkpointing is its per-op policy: every other matmul output and the
  SDPA output are kept, the rest recomputed from the block input;
- the loss: cross_entropy(pred.float()) keeps the bf16 logits, their fp32 copy and the fp32
  log-softmax, 10 B per logit (torchtitan/components/loss.py), vocabulary-parallel over tp
  (loss_parallel);
- no multi-token-prediction blocks (torchtitan's DeepSeek-V3 builds none) and no vocabulary padding.
"""

from __future__ import annotations

import functools
import math
import sys
from typing import TYPE_CHECKING, Any, cast

from apsi.inputs import knobs
from apsi.errors import LayoutError
from apsi.training.frameworks import stages
from apsi.training.frameworks.batch import rounds_around, rounds_ok
from apsi.training.frameworks.stages import rank_layers as rank_layers  # the Framework member
from apsi.model import memory as mem
from apsi.model.architecture import Architecture
from apsi.model.collectives import DpTraffic
from apsi.model.arithmetic import divisors
# The Protocol's defaults it keeps (apsi.training.frameworks.base), re-exported as its own.
from apsi.training.frameworks.base import (
    BUILDS_MTP as BUILDS_MTP, FP8_ACTIVATIONS as FP8_ACTIVATIONS, GRID_DOMINANCE as GRID_DOMINANCE,
    default_etp as default_etp, ep_overlap_allowed as ep_overlap_allowed, micro_group as micro_group,
)

if TYPE_CHECKING:
    from apsi.training.frameworks.interface import Defaults, Degrees, Framework, KernelRates
    from apsi.inputs.question import Setup
    from apsi.model.schema import Plan

NAME = "torchtitan"
"""The name --framework takes."""
TITLE = "torchtitan"
"""torchtitan in messages."""
KNOBS: tuple[str, ...] = knobs.of(NAME)
"""The layout knobs torchtitan takes ([parallelism] degrees, the pipeline's stages per rank and
micro-batch, [activation_checkpoint] mode)."""
DEFAULTS: Defaults = {"pp": 1, "vpp": 1, "cp": 1, "ep": 1, "micro_batch": 1, "recompute": "selective", "zero": 3,
                      "dp_replicate": 1}
"""torchtitan's defaults (TT-CFG job_config.py): degrees 1, data_parallel_shard_degree -1 (every
remaining GPU shards: dp_replicate 1), pipeline_parallel_microbatch_size 1, activation_checkpoint
mode "selective", expert_tensor_parallel_degree 1."""
MEMORY_KNOBS: tuple[str, ...] = knobs.carried(NAME)
"""HSDP's replicas go to memory() and states() as they are."""
DP_RULES = ("the data-parallel mesh (dp_replicate | dp; ep | dp_shard x cp x tp, or dp_shard x cp with etp = tp), "
            "the interleaved schedule's rounds (n micro-batches a multiple of max(1, n // pp)) or 1F1B's "
            "micro-batches (n >= pp at vpp 1)")
"""torchtitan's rules on dp, for the message when none is left (dp_step, micro_rounds, micro_least)."""
KEEPS_STAGE_OUTPUTS = True
"""torch.distributed.pipelining keeps each stage's output (fwd_cache) until its backward runs
autograd from it; Megatron frees the data (deallocate_pipeline_outputs)."""
LOGIT_BYTES = mem.BF16 + mem.FP32 + mem.FP32
"""bf16 logits, the fp32 copy cross_entropy(pred.float()) takes, and the fp32 log-softmax it saves."""
FP32 = 4
BF16 = 2
MOMENT_BYTES = {"adamw": 8}
"""Optimizer state per parameter at training.dtype float32: Adam's two moments. torchtitan's
OptimizersContainer builds Adam, AdamW and DistMuon only (TT-OPT: components/optimizer/optimizer.py
at 0.3): no SGD and no 8-bit optimizer."""
LIVE_BLOCKS = 2
"""Transformer blocks whose bf16 weights (and gradients) are gathered at once without PP: the one
computing and the one prefetched or reduce-scattering (FSDP2 implicit prefetching; MLM-DOCS
megatron_fsdp.md: at least two FSDP units)."""


def vocab_rows(vocab: int, tp: int) -> int:
    """torchtitan allocates the vocabulary as the config gives it (no padding)."""
    return vocab


@functools.lru_cache(maxsize=65536)
def splits(layers: int, pp: int, vpp: int, mtp: int = 0) -> tuple[tuple[int, ...], ...]:
    """torchtitan's one split of `layers` over pp x vpp stages (generate_llm_fqn_per_model_part with
    input and output weights 1): L + 2 units, (L + 2) // S per stage and one more on the first
    (L + 2) % S, the first and last stage giving one unit to the embedding and the output. Empty
    when a stage would get no unit or vpp = 1 is asked of a multi-stage schedule."""
    chunks = pp * vpp
    if pp < 1 or vpp < 1 or (pp == 1 and vpp > 1) or pp > layers + 2:
        return ()
    if chunks == 1:
        return ((layers,),)
    units = layers + 2
    base, extra = divmod(units, chunks)
    if base < 1:
        return ()
    sizes = [base + (1 if i < extra else 0) for i in range(chunks)]
    sizes[0] -= 1
    sizes[-1] -= 1
    return (tuple(sizes),)


def split_layers(layers: int, pp: int, vpp: int, mtp: int = 0) -> tuple[int, ...]:
    """The split of `splits`; LayoutError naming the rule when there is none."""
    options = splits(layers, pp, vpp, mtp)
    if options:
        return options[0]
    if pp == 1 and vpp > 1:
        raise LayoutError(f"vpp {vpp} needs pp > 1: an interleaved schedule runs several stages on each pipeline rank")
    most = (layers + 2) // max(1, vpp)
    raise LayoutError(f"pp {pp} x vpp {vpp} = {pp * vpp} stages is more than torchtitan spreads {layers} layers plus "
                      f"the embedding and output over (each stage needs a unit); valid pp at vpp {vpp}: 1 to {most}")


def tp_ok(a: Architecture, tp: int) -> bool:
    """torchtitan splits query and KV heads over tp (n_kv_heads // tp; no KV replication)."""
    return a.heads % tp == 0 and (a.mla or a.kv_heads % tp == 0)


def cp_ok(seq: int, cp: int, tp: int) -> bool:
    """seq_len divisible by tp (the TP degree that splits the sequence: tp under sequence
    parallelism, 1 without) times 2 cp when cp > 1 (TT-TRAIN: Trainer.__init__'s seq_len_divisor,
    "(parallel_dims.tp if config.parallelism.enable_sequence_parallel else 1) * (2 *
    parallel_dims.cp if parallel_dims.cp > 1 else 1)")."""
    return seq % seq_len_divisor(cp, tp) == 0


def seq_len_divisor(cp: int, tp: int) -> int:
    """What torchtitan 0.3 divides seq_len by (TT-TRAIN, Trainer.__init__), with `tp` the TP degree
    that splits the sequence (1 without sequence parallelism)."""
    return tp * (2 * cp if cp > 1 else 1)


def ep_choices(a: Architecture) -> list[int]:
    """expert_parallel_degree: any divisor of the experts (TT-PD)."""
    return list(divisors(a.experts)) if a.moe else [1]


def etp_choices(a: Architecture, tp: int) -> list[int]:
    """expert_tensor_parallel_degree is 1 or tp (TT-PD)."""
    return sorted({1, tp}) if a.moe else [1]


def vpp_ok(pp: int, vpp: int) -> bool:
    """Stages per rank above 1 are an interleaved schedule, which needs pp > 1."""
    return vpp == 1 or pp > 1


def micro_rounds(c: Degrees) -> int:
    """The pipeline size the micro-batches per replica are rounded over (rounds_ok): pp under the
    interleaved schedule (vpp > 1, Interleaved1F1B); 0, no such rule, under 1F1B."""
    return c.pp if c.vpp > 1 else 0


def fewest_micro_batches(pp: int, vpp: int) -> int:
    """The fewest micro-batches per replica torch's schedule runs over pp pipeline ranks: pp under
    1F1B (vpp 1): Schedule1F1B.__init__ raises ValueError when n_microbatches < num_stages, and its
    stages are the pp ranks' one each (TORCH-PIPE; ScheduleGPipe, which torchtitan also builds,
    has no such check, but 1F1B is its default and the one apsi models); 1 under Interleaved1F1B
    (any count below 2 pp is one round, rounds_ok) and without a pipeline (no schedule)."""
    return pp if vpp == 1 else 1


def micro_least(c: Degrees) -> int:
    """The fewest micro-batches per replica (fewest_micro_batches): pp under 1F1B, else 1."""
    return fewest_micro_batches(c.pp, c.vpp)


def zero_choices(pp: int, optimizer: str = "adamw", moe: bool = False) -> tuple[int, ...]:
    """FSDP2 shards everything: ZeRO-3 (ZeRO-2-like under PP, reshard_after_forward off)."""
    return (3,)


def zero_ok(pp: int, zero: int, optimizer: str = "adamw", moe: bool = False) -> bool:
    """FSDP2 is ZeRO-3 only (dp_replicate gives HSDP)."""
    return zero == 3


def dp_key(c: Degrees) -> tuple[int, ...]:
    """dp_step depends on tp, cp, ep and etp."""
    return (c.tp, c.cp, c.ep, c.etp)


def _expert_shard(tp: int, cp: int, shard: int, ep: int, etp: int) -> int:
    """Ranks an expert's parameters are FSDP-sharded over: the data-parallel ranks outside EP."""
    return max(1, (shard * cp * (1 if etp == tp and tp > 1 else tp)) // ep)


def dp_step(c: Degrees, knobs: dict[str, Any] | None = None) -> int:
    """dp must be a multiple of this: dp_replicate divides it (HSDP), and EP borrows from
    dp_shard x cp x tp (etp 1) or dp_shard x cp (etp = tp), so ep / gcd(ep, cp [x tp]) divides
    dp_shard = dp / dp_replicate (TT-PD)."""
    replicate: int = (knobs or {}).get("dp_replicate", 1)
    borrowed = c.cp * (1 if c.etp == c.tp and c.tp > 1 else c.tp)
    return replicate * (c.ep // math.gcd(c.ep, borrowed))


def check_training(precision: str, optimizer: str, knobs: dict[str, Any]) -> None:
    """The precision and optimizer the framework trains with, and the knobs that need one."""
    if precision == "fp16":
        raise LayoutError("torchtitan trains in bf16 (mixed_precision_param) or float8, not fp16; valid: bf16, fp8")
    _moments(optimizer)


def state_bytes_per_param(precision: str, optimizer: str, knobs: dict[str, Any]) -> float:
    """fp32 parameter, fp32 gradient and fp32 moments, before sharding."""
    return FP32 + FP32 + _moments(optimizer)


def _moments(optimizer: str) -> int:
    if optimizer not in MOMENT_BYTES:
        raise LayoutError(f"optimizer {optimizer} is not one torchtitan builds; valid: {', '.join(MOMENT_BYTES)}")
    return MOMENT_BYTES[optimizer]


def sharding(zero: int, dp: int, cp: int, pp: int, dp_replicate: int = 1) -> str:
    """How the plan's model states are kept, in words for the Layout line."""
    shard = dp // dp_replicate * cp
    words = f"torchtitan: FSDP2 over dp_shard x cp = {shard:,}"
    if dp_replicate > 1:
        words += f", HSDP with {dp_replicate:,} replicas"
    return words + (", each stage's weights kept gathered under PP" if pp > 1 else "")


def state_floor(pp: int, zero: int, precision: str, optimizer: str, knobs: dict[str, Any]) -> float:
    """Bytes per parameter of a stage that no data-parallel degree divides: under PP its gathered
    bf16 weights and its unsharded gradients (2 bytes at least); without PP nothing."""
    return BF16 + BF16 if pp > 1 else 0.0


def sharded_floor(zero: int, precision: str, optimizer: str, knobs: dict[str, Any], *, tp: int, cp: int, ep: int,
                  etp: int) -> tuple[float, float]:
    """Bytes per parameter of a GPU's dense and expert shards that dp divides, at dp 1: the fp32
    parameter, gradient and moments FSDP2 shards, the dense part over dp_shard x cp and the experts'
    over their shard group (_expert_shard, whole at every legal dp: dp_step)."""
    replicate = knobs.get("dp_replicate", 1)
    each = FP32 + FP32 + _moments(optimizer)
    borrowed = 1 if etp == tp and tp > 1 else tp
    return each * replicate / cp, each * replicate * ep / (cp * borrowed)


def check_pins(a: Architecture, seq: int, pins: dict[str, Any]) -> None:
    """The rules of the knobs in `pins` on their own, each naming the valid values."""
    tp, pp, cp, ep, etp, vpp = (pins.get(k) for k in ("tp", "pp", "cp", "ep", "etp", "vpp"))
    if tp is not None and a.heads % tp:
        raise LayoutError(f"tp {tp} does not divide the {a.heads} attention heads; valid: "
                          f"{', '.join(map(str, divisors(a.heads)[:12]))}")
    if tp is not None and not a.mla and a.kv_heads % tp:
        valid = [t for t in divisors(a.kv_heads) if a.heads % t == 0]
        raise LayoutError(f"tp {tp} does not divide the {a.kv_heads} KV heads (torchtitan splits them, it does not "
                          f"replicate them); valid: {', '.join(map(str, valid[:12]))}")
    # torchtitan 0.3 refuses a seq_len its sequence and context parallelism do not split evenly
    # (TT-TRAIN, Trainer.__init__: "Training sequence length ... must be divisible by ...").
    split = tp if tp is not None and knobs.flag_value("sequence_parallel", NAME, pins) else 1
    if cp is not None and cp > 1 and seq % seq_len_divisor(cp, split):
        words = f"tp x 2 x cp = {seq_len_divisor(cp, split)}" if split > 1 else f"2 x cp = {2 * cp}"
        raise LayoutError(f"cp {cp} needs the sequence ({seq:,}) divisible by {words} (torchtitan's seq_len_divisor, "
                          "TT-TRAIN Trainer.__init__)")
    if split > 1 and seq % split:  # (cp > 1 was judged above, with tp)
        valid = [t for t in divisors(a.heads) if tp_ok(a, t) and seq % t == 0]
        raise LayoutError(f"tp {tp} with sequence parallelism needs the sequence ({seq:,}) divisible by tp "
                          f"(torchtitan's seq_len_divisor, TT-TRAIN Trainer.__init__); valid tp: "
                          f"{', '.join(map(str, valid[:12]))}, or sequence_parallel false")
    if ep is not None and ep > 1 and not a.moe:
        raise LayoutError(f"ep {ep} needs experts: the model has none; valid: 1")
    if ep is not None and a.moe and a.experts % ep:
        raise LayoutError(f"ep {ep} does not divide the {a.experts} experts; valid: "
                          f"{', '.join(map(str, divisors(a.experts)[:12]))}")
    if etp is not None and etp > 1 and (not a.moe or etp != (tp or 1)):
        raise LayoutError(f"etp {etp} must be 1 or tp ({tp or 1}): torchtitan's expert_tensor_parallel_degree"
                          if a.moe else f"etp {etp} needs experts: the model has none; valid: 1")
    if vpp is not None and vpp > 1 and pp is not None and pp < 2:
        raise LayoutError(f"vpp {vpp} needs pp > 1: an interleaved schedule runs several stages on each pipeline rank")
    if pp is not None:
        split_layers(a.layers, pp, vpp or 1)


def check_layout(a: Architecture, *, tp: int, pp: int, cp: int, ep: int, etp: int, dp: int, vpp: int,
                 micro_batch: int, seq: int, batch_sequences: int, zero: int = 3, dp_replicate: int = 1,
                 sequence_parallel: bool | None = None, compile: bool | None = None) -> None:
    """torchtitan's legal-layout rules (TT-PD, TT-CFG, TT-FSDP); the first broken one raises LayoutError.
    torch.compile (`compile`) runs on any layout: only the step time reads it."""
    check_pins(a, seq, dict(tp=tp, pp=pp, cp=cp, ep=ep, etp=etp, vpp=vpp, sequence_parallel=sequence_parallel))
    if sequence_parallel is False and a.moe and tp > 1 and etp != tp:
        raise LayoutError(f"sequence_parallel false with MoE, tp {tp} and etp {etp} is not modelled (every TP "
                          "rank would route all its tokens; apsi.model.memory counts MoE without SP at etp = tp "
                          f"only); valid: sequence_parallel true, or etp {tp}")
    if zero != 3:
        raise LayoutError(f"zero {zero} is not a torchtitan choice: FSDP2 shards parameters, gradients and optimizer "
                          "state (zero 3); use dp_replicate for HSDP")
    if dp % dp_replicate:
        raise LayoutError(f"dp_replicate {dp_replicate} must divide dp {dp:,}: HSDP replicates over dp_replicate and "
                          f"shards over dp / dp_replicate; valid: {', '.join(map(str, divisors(dp)[:12]))}")
    grid = (dp // dp_replicate) * cp * (1 if etp == tp and tp > 1 else tp)
    if grid % ep:
        raise LayoutError(f"ep {ep} must divide dp_shard x cp{' x tp' if grid != (dp // dp_replicate) * cp else ''} = "
                          f"{grid} (torchtitan's expert-parallel mesh borrows those ranks)")
    if batch_sequences % (micro_batch * dp):
        raise LayoutError(f"the batch of {batch_sequences:,} sequences is not a whole number of micro-batches of "
                          f"{micro_batch} on each of {dp:,} data-parallel replicas: torchtitan's global batch is the "
                          "local batch x dp, and the local batch a multiple of the pipeline micro-batch")
    micro = batch_sequences // (micro_batch * dp)
    if vpp > 1 and not rounds_ok(micro, pp):  # the interleaved schedule's rule (micro_rounds)
        below, above = rounds_around(micro, 1, pp)  # micro refused: one below it, one above
        raise LayoutError(f"the interleaved schedule (vpp {vpp}, Interleaved1F1B) runs the {micro:,} micro-batches "
                          f"per replica in max(1, {micro:,} // pp {pp}) = {max(1, micro // pp)} rounds, and torch "
                          "refuses a count that is not a multiple of them (ScheduleInterleaved1F1B); valid near it: "
                          f"{below:,} or {above:,} (a batch of {below * micro_batch * dp:,} or "
                          f"{above * micro_batch * dp:,} sequences at dp {dp:,}; any count below {2 * pp} runs, and "
                          "every multiple of pp)")
    least = fewest_micro_batches(pp, vpp)
    if micro < least:  # 1F1B's rule (micro_least)
        fewer = batch_sequences // (micro_batch * least)
        narrower = f", or dp {fewer:,} or less for a batch of {batch_sequences:,}" if fewer else ""
        runs = f"{micro:,} micro-batch{'es' if micro != 1 else ''}"
        raise LayoutError(f"the 1F1B schedule (vpp 1, Schedule1F1B) runs the {runs} per replica over "
                          f"pp {pp} stages, and torch refuses fewer micro-batches than stages; valid: {least:,} or "
                          f"more (a batch of {least * micro_batch * dp:,} sequences or more at dp {dp:,}{narrower}), "
                          "or vpp 2 or more (Interleaved1F1B runs fewer)")


def states(c: stages.Counts, *, tp: int, pp: int, cp: int, ep: int, etp: int, dp: int, precision: str,
           micro_batches: int, optimizer: str, zero: int = 3, dp_replicate: int = 1) -> dict[str, float]:
    """Bytes of weights, gradients and optimizer state one GPU of a stage holds under FSDP2
    (module docstring): fp32 shards over dp_shard x cp, plus the gathered bf16 working copies."""
    shard = (dp // dp_replicate) * cp
    expert_shard = _expert_shard(tp, cp, dp // dp_replicate, ep, etp)
    moments = _moments(optimizer)
    total = c.dense + c.experts
    sharded = c.dense / shard + c.experts / expert_shard
    if pp > 1:
        # reshard_after_forward off: the stage's bf16 weights stay gathered, and its unsharded
        # gradients accumulate in fp32 over the micro-batches.
        gathered = BF16 * total
        unsharded_grads = (FP32 if micro_batches > 1 else BF16) * total
    else:
        gathered = BF16 * (LIVE_BLOCKS * c.largest_layer + c.head)
        unsharded_grads = BF16 * LIVE_BLOCKS * c.largest_layer
    # The reduce-scatter input of each block in flight, in the reduce dtype (FSDP2 foreach_reduce
    # copies the unsharded gradients into a mixed_precision_reduce = float32 buffer).
    reducing = FP32 * LIVE_BLOCKS * c.largest_layer
    return dict(weights=FP32 * sharded + gathered, gradients=FP32 * sharded + unsharded_grads + reducing,
                optimizer=moments * sharded)


def layer_bytes(a: Architecture, moe: bool, *, seq: int, micro_batch: int, tp: int, etp: int, recompute: str,
                sequence_parallel: bool = True) -> float:
    """Bytes one layer keeps per micro-batch. Selective is torchtitan's per-op policy
    (_apply_op_sac: save aten.mm outputs except every second one, and the SDPA outputs): in
    Attention and FeedForward order wq, wk, wv, wo, w1, w3, w2 that keeps Q, V, w1's output and
    w2's, plus the block input the checkpoint keeps, the SDPA output and its fp32 log-sum-exp.
    MLA and MoE blocks are counted with nothing recomputed (their op order is not modelled).
    Without sequence parallelism (parallelism.enable_sequence_parallel false, TT-CFG) the block
    input and w2's output, s b h each, are whole on every TP rank."""
    sp = sequence_parallel
    if recompute != "selective":
        return mem.layer_activation_bytes(a, moe, seq, micro_batch, tp, recompute, False, etp, mem.DEFAULT_MODULES, sp)
    if moe or a.mla:
        return mem.layer_activation_bytes(a, moe, seq, micro_batch, tp, "none", False, etp, mem.DEFAULT_MODULES, sp)
    sb, d = seq * micro_batch, a.head_dim
    kv = BF16 * sb * a.kv_heads * d / min(tp, a.kv_heads)
    if not sp:
        sequence = BF16 * sb * (a.width + a.width)
        return sequence + (BF16 * sb * (a.heads * d + a.heads * d + a.ffn) + FP32 * sb * a.heads) / tp + kv
    kept = BF16 * sb * (a.width + a.heads * d + a.heads * d + a.ffn + a.width) + FP32 * sb * a.heads
    return kept / tp + kv


def memory(a: Architecture, **layout: Any) -> list[dict[str, float] | None]:
    """Every pipeline stage's memory per GPU (apsi.training.frameworks.stages.memory under this module)."""
    return stages.framework_memory(cast("Framework", sys.modules[__name__]), a, **layout)


def peak_bytes(a: Architecture, **layout: Any) -> float:
    """The most loaded stage's total bytes (apsi.training.frameworks.stages.peak_bytes)."""
    return stages.peak_bytes(cast("Framework", sys.modules[__name__]), a, **layout)


KERNEL_EFFICIENCY: KernelRates = {"bf16": 0.795, "fp8": 0.66, "eager": 0.855}
"""torchtitan's compute rate relative to Megatron's Transformer Engine kernels (apsi.model.steptime
GEMM_EFFICIENCY is Megatron's), by precision under torch.compile, each fitted by
benchmarks/calibrate.py on TT-BENCH's compiled rows of that precision up to 8K tokens against
Megatron's rate in it (bf16 on its Llama 3.1 8B rows, FP8 on its 8B, 70B and 405B float8 rows, all
on 96 GB H100s capped at 500 W), and `eager`, the share of it a model without torch.compile keeps
(the compile knob false), fitted on its eager bf16 rows (Tables 1 and 3 ran the same layouts eager,
5,762 and 5,605 tokens/s, and compiled, 6,667 and 6,514). Megatron's bf16 rate has a Megatron row of
its own (MLM-DOCS's GPT-3 175B on 96 H100), so the ratios are measured apart; before, one ratio (0.65)
served every torchtitan plan and Megatron's bf16 rate was inferred through it."""


def recompute_flops(a: Architecture, matmul_layers: int, recompute: str) -> int:
    """Extra FLOPs per token its selective level re-runs: the per-op policy recomputes every second
    aten.mm of the forward (TT-FSDP _apply_op_sac), half the layers' 2 N forward FLOPs,
    and keeps the attention (SDPA) outputs."""
    return matmul_layers if recompute == "selective" else 0


def dp_traffic(pp: int, zero: int, precision: str, knobs: dict[str, Any]) -> DpTraffic:
    """FSDP2's traffic (TT-CFG, UPB): fp32 reduce-scatters (mixed_precision_reduce) and
    bf16 all-gathers. Without PP it reshards after forward, so each micro-batch gathers every
    block twice and reduces it, prefetched under the neighbouring block's compute; under PP the
    stage stays gathered and its gradients are reduced once per step (TT-FSDP apply_fsdp)."""
    return DpTraffic(grad_bytes=FP32, gather_bytes=BF16, per_micro_batch=pp == 1)


def plan(s: Setup, pins: dict[str, Any], tolerance: float, explain: bool = False) -> Plan:
    """The plan for `s` from the search over every legal torchtitan layout (apsi.training.frameworks.planner)."""
    from apsi.training.frameworks import planner

    return planner.plan(cast("Framework", sys.modules[__name__]), s, pins, tolerance, explain=explain)
