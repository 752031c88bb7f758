"""Megatron-Core (Megatron-LM, NeMo, Megatron-Bridge): its layout rules, its pipeline split, how it
shards model states, and the memory of each pipeline stage.

Owns what modelling.md Secs. 2.1, 6.1-6.2 and 7.1 say Megatron does: the distributed optimizer
(bf16 weights, fp32 main gradients, fp32 master and Adam moments sharded over DP x CP; routed
experts over the expert-data-parallel group), sequence parallelism whenever TP > 1, MoE parallel
folding (EP over TP x CP x DP), the uneven and interleaved pipeline splits, and each legal-layout
rule with the valid values in its message. Activation accounting is apsi.model.memory's.

Worked example: Megatron-Bridge's Llama 3.1 405B on 1,024 H100 (TP 8, PP 8, CP 2, VPP 8, DP 8,
s 8,192, micro-batch 1, GBS 1,536: m = 192; modelling.md 1.8). (126 + 2) / 8 = 16 per stage, so
stage 0 is the embedding and 15 layers: (15 x 3,187,703,808 + 2,101,346,304) / 8 parameters per
GPU at 2 + 4 + 12 / 16 bytes = 39.2 GiB of states, plus 133 layer-micro-batches of 254 MiB = 33.1
GiB of activations.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

from apsi.errors import LayoutError
from apsi.model import memory as mem
from apsi.model.architecture import Architecture
from apsi.model.arithmetic import divisors
from apsi.model.counting import layer_shards
from apsi.units import GIB

WEIGHT_BYTES = 2
"""bf16 parameters (--bf16)."""
GRAD_BYTES = 4
"""fp32 main-gradient buffer, replicated over DP (MLM-DOPT "bf16 / fp32" row)."""
SHARDED_BYTES = {"adamw": 12, "adam8bit": 6, "sgd": 8}
"""Bytes per parameter the distributed optimizer shards over DP x CP: fp32 master 4 + Adam moments
4 + 4 (MLM-DOPT: 6 + 12/d for bf16 / fp32); 8-bit Adam moments 1 + 1 (bitsandbytes: 75% less than
8 B); SGD momentum 4."""
FP8_COPY_BYTES = 2
"""FP8 training keeps the bf16 weight and adds an fp8 copy of each linear weight, and on Hopper
its transpose (TE performance_considerations: "Master weights", "Handling transposes"); MXFP8 on
Blackwell keeps rowwise and columnwise copies too: 2 B per linear weight on both. Bridge's
fp8_param_gather, which drops the bf16 copy, is not modelled (docs/validation.md)."""


class Stage(NamedTuple):
    """One pipeline stage's share of the model."""

    layers: int
    moe_layers: int
    embedding: bool
    head: bool
    mtp: bool


def _split(layers: int, pp: int, vpp: int, mtp: int = 0) -> tuple[int, ...] | None:
    """The first of Megatron's splits of `layers` over `pp` stages that `vpp` allows, or None."""
    if not 1 <= pp <= layers:
        return None
    if pp == 1:
        return (layers,) if vpp == 1 else None
    if layers % pp == 0 and (layers // pp) % vpp == 0:
        return (layers // pp,) * pp
    # The embedding, the loss and any MTP blocks count as a layer each (virtual stages too), as
    # --account-for-embedding/loss-in-pipeline-split and Bridge's DeepSeek-V3 layouts do.
    k, extra = divmod(layers + 2 + mtp, pp)
    if extra == 0 and k >= 2 + mtp and k % vpp == 0:
        return (k - 1,) + (k,) * (pp - 2) + (k - 1 - mtp,)
    for middle in range(math.ceil(layers / pp), layers + 1):
        rest = layers - middle * (pp - 2)
        if rest < 2:
            return None
        if middle % vpp:
            continue
        for first in range(min(middle, rest - 1), 0, -1):
            last = rest - first
            if last <= middle and first <= last and first % vpp == 0 and last % vpp == 0:
                return (first,) + (middle,) * (pp - 2) + (last,)
    return None


def split_layers(layers: int, pp: int, vpp: int, mtp: int = 0) -> tuple[int, ...]:
    """Decoder layers per pipeline stage, the way Megatron lays them out (modelling.md 7.1).

    An even split when pp divides L; else (L + 2) / pp with the embedding and the loss counted as
    a layer each on the first and last stage (--account-for-embedding/loss-in-pipeline-split, as
    Bridge's 405B recipe: 128 / 8 = 16, so 15 | 16 x 6 | 15); else uneven first and last stages
    (--decoder-first/last-pipeline-num-layers) around equal middle stages, the first no heavier
    than the last, since it holds the most micro-batches in flight. With vpp > 1 every count must
    divide by vpp. Raises LayoutError naming the rule and the valid values when no split exists.
    """
    split = _split(layers, pp, vpp, mtp)
    if split is not None:
        return split
    if not 1 <= pp <= layers:
        raise LayoutError(f"pp {pp} cannot split {layers} layers: a pipeline stage needs at least one layer; "
                          f"valid: 1 to {layers}")
    valid = [v for v in range(1, layers // pp + 2) if _split(layers, pp, v, mtp) is not None]
    raise LayoutError(f"pp {pp} with vpp {vpp} cannot split {layers} layers: Megatron needs each stage's layers "
                      f"divisible by vpp (even, embedding/loss-balanced or first/last-uneven splits); "
                      f"valid vpp: {', '.join(map(str, valid)) or 'none'}")


def check_layout(a: Architecture, *, tp: int, pp: int, cp: int, ep: int, etp: int, dp: int, vpp: int,
                 micro_batch: int, seq: int, batch_sequences: int) -> None:
    """Megatron's legal-layout rules (modelling.md 7.1, MLM-ARGS / MLM-TC / MLM-PS); the first
    broken one raises LayoutError naming it and the valid values."""
    if a.heads % tp:
        raise LayoutError(f"tp {tp} does not divide the {a.heads} attention heads; valid: "
                          f"{', '.join(map(str, divisors(a.heads)[:12]))}")
    if not a.mla and a.kv_heads % tp and tp % a.kv_heads:
        valid = [t for t in divisors(a.heads) if a.kv_heads % t == 0 or t % a.kv_heads == 0]
        raise LayoutError(f"tp {tp} does not divide the {a.kv_heads} KV heads, nor do they divide it; valid: "
                          f"{', '.join(map(str, valid[:12]))}")
    if cp > 1 and seq % (2 * cp):
        raise LayoutError(f"cp {cp} needs the sequence ({seq:,}) divisible by 2 x cp = {2 * cp} (load-balanced halves)")
    if ep > 1 and not a.moe:
        raise LayoutError(f"ep {ep} needs experts: the model has none; valid: 1")
    if a.moe and a.experts % ep:
        raise LayoutError(f"ep {ep} does not divide the {a.experts} experts; valid: "
                          f"{', '.join(map(str, divisors(a.experts)[:12]))}")
    if (tp * cp * dp) % (ep * etp):
        raise LayoutError(f"ep {ep} x etp {etp} must divide tp x cp x dp = {tp * cp * dp} (MoE parallel folding: "
                          "the expert grid tiles the attention grid of each pipeline stage)")
    if etp != 1 and etp != tp:
        raise LayoutError(f"etp {etp} must be 1 or tp ({tp})")
    if vpp > 1 and pp < 2:
        raise LayoutError(f"vpp {vpp} needs pp > 1: virtual stages interleave a pipeline")
    split_layers(a.layers, pp, vpp, a.mtp_layers)
    if batch_sequences % (micro_batch * dp):
        raise LayoutError(f"the batch of {batch_sequences:,} sequences is not a whole number of micro-batches of "
                          f"{micro_batch} on each of {dp:,} data-parallel replicas: Megatron needs "
                          "global batch % (micro-batch x dp) == 0")


def check_pins(a: Architecture, seq: int, pins: dict) -> None:
    """The rules that pinned knobs alone can break (heads vs tp, sequence vs cp, experts vs ep,
    layers vs pp and vpp, etp), checked before a search so that a pin no layout allows is named."""
    tp, pp, cp, ep, vpp = (pins.get(k, 1) for k in ("tp", "pp", "cp", "ep", "vpp"))
    etp = pins.get("etp", 1)
    check_layout(a, tp=tp, pp=pp, cp=cp, ep=ep, etp=etp, dp=ep * etp, vpp=vpp, micro_batch=1, seq=seq,
                 batch_sequences=ep * etp)


@functools.lru_cache(maxsize=4096)
def _stages(a: Architecture, split: tuple[int, ...]) -> tuple[Stage, ...]:
    """Each stage's layers, which of them have experts, and whether it holds the embedding, the
    head (and the loss) and the MTP blocks (on the last stage, as Bridge's DeepSeek-V3 layout)."""
    out, start = [], 0
    for i, n in enumerate(split):
        layer_ids = range(start, start + n)
        moe = sum(1 for j in layer_ids if a.is_moe_layer(j))
        out.append(Stage(layers=n, moe_layers=moe, embedding=i == 0, head=i == len(split) - 1,
                         mtp=i == len(split) - 1 and a.mtp_layers > 0))
        start += n
    return tuple(out)


def _placed(shards, tp: int, kv_heads: int) -> float:
    """Parameters one GPU holds of a layer's non-expert part: TP-split / tp, K and V / min(tp, g)
    (more TP ranks than KV heads replicate each head), replicated whole."""
    return shards.tp / tp + shards.kv / min(tp, kv_heads) + shards.replicated


def stage_memory(a: Architecture, stage: Stage, index: int, *, tp: int, pp: int, cp: int, ep: int, etp: int,
                 dp: int, vpp: int, micro_batch: int, micro_batches: int, seq: int, recompute: str,
                 optimizer: str, fp8: bool) -> dict[str, float]:
    """Bytes one GPU of pipeline stage `index` holds, by part (weights, gradients, optimizer,
    activations, logits; memory() adds the reserve).

    Model states: each layer's parameters placed by _placed, routed experts / (ep x etp); bf16
    weights 2 B and fp32 gradients 4 B each, the optimizer's sharded bytes over DP x CP, experts'
    over the expert data-parallel group tp x cp x dp / (ep x etp) (MLM-PR4687, modelling.md 6.2).
    The first stage adds the (vocabulary-parallel) embedding, the last the head, the final norm
    and the MTP blocks (each a layer of the later kind plus its 2h -> h projection and 3 norms).
    Activations: each layer's (apsi.model.memory) times the micro-batches in flight on this rank.
    """
    dense, sparse = layer_shards(a, False), (layer_shards(a, True) if a.moe else None)
    later = sparse or dense
    n_dense = stage.layers - stage.moe_layers
    kv = a.kv_heads
    params = n_dense * _placed(dense, tp, kv) + (stage.moe_layers * _placed(sparse, tp, kv) if sparse else 0.0)
    experts = stage.moe_layers * sparse.experts / (ep * etp) if sparse else 0.0
    linear = n_dense * (dense.tp / tp + dense.kv / min(tp, kv)) + experts
    if sparse is not None:
        linear += stage.moe_layers * (sparse.tp / tp + sparse.kv / min(tp, kv))
    norm = a.width * (2 if a.norm == "layernorm" else 1 if a.norm == "rmsnorm" else 0)
    if stage.embedding:
        params += a.vocab * a.width / tp + a.position_embeddings * a.width
    if stage.head:
        # A tied head is the embedding itself on one stage; pipelined, the last stage keeps a copy.
        params += (a.vocab * a.width / tp if not a.tied or not stage.embedding else 0) + norm
    if stage.mtp:
        params += a.mtp_layers * (_placed(later, tp, kv) + 2 * a.width * a.width / tp + 3 * norm)
        experts += a.mtp_layers * later.experts / (ep * etp)
    expert_dp = max(1, tp * cp * dp // (ep * etp))
    sharded = SHARDED_BYTES[optimizer]
    weights = WEIGHT_BYTES * (params + experts) + (FP8_COPY_BYTES * linear if fp8 else 0)
    gradients = GRAD_BYTES * (params + experts)
    optimizer_bytes = sharded * params / (dp * cp) + sharded * experts / expert_dp

    local = seq // cp
    per_dense = mem.layer_activation_bytes(a, False, local, micro_batch, tp, recompute, fp8)
    per_sparse = mem.layer_activation_bytes(a, True, local, micro_batch, tp, recompute, fp8) if a.moe else 0.0
    layers = n_dense * per_dense + stage.moe_layers * per_sparse
    if stage.mtp:
        layers += a.mtp_layers * (per_sparse if a.moe else per_dense)
    stored = mem.in_flight(index, pp, vpp, micro_batches) * layers
    if recompute == "full":
        stored += mem.working_layer_bytes(a, stage.moe_layers > 0, local, micro_batch, tp, fp8)
    logits = mem.logits_bytes(a, local, micro_batch, tp) * (1 + a.mtp_layers) if stage.head else 0.0
    return dict(weights=weights, gradients=gradients, optimizer=optimizer_bytes, activations=stored, logits=logits)


def memory(a: Architecture, *, tp: int, pp: int, cp: int, ep: int, etp: int, dp: int, vpp: int, micro_batch: int,
           seq: int, batch_sequences: int, recompute: str, optimizer: str, fp8: bool,
           split: tuple[int, ...] | None = None, peak_only: bool = False) -> list[dict[str, float] | None]:
    """Every pipeline stage's memory per GPU, bytes by part with its reserve and total, first to last.

    With peak_only, a stage identical to an earlier one (same layers, experts, embedding, head
    and MTP) is left out (None): it holds no more micro-batches in flight than the earlier one
    (apsi.model.memory.in_flight falls with the rank), so it cannot be the peak. The search uses
    this; the plan shows every stage."""
    split = split or split_layers(a.layers, pp, vpp, a.mtp_layers)
    micro_batches = batch_sequences // (micro_batch * dp)
    out: list[dict[str, float] | None] = []
    seen = set()
    for i, stage in enumerate(_stages(a, split)):
        if peak_only and stage in seen:
            out.append(None)
            continue
        seen.add(stage)
        parts = stage_memory(a, stage, i, tp=tp, pp=pp, cp=cp, ep=ep, etp=etp, dp=dp, vpp=vpp, micro_batch=micro_batch,
                             micro_batches=micro_batches, seq=seq, recompute=recompute, optimizer=optimizer, fp8=fp8)
        parts["reserve"] = mem.reserve_bytes(parts["activations"] + parts["logits"])
        parts["total"] = sum(parts.values())
        out.append(parts)
    return out


def peak_bytes(a: Architecture, **layout) -> float:
    """The most loaded stage's total bytes (memory(..., peak_only=True))."""
    return max(p["total"] for p in memory(a, peak_only=True, **layout) if p is not None)
