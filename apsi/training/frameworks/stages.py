"""What one pipeline stage holds, whatever the framework: its layers, parameters and activations.

Owns placing the decoder layers of a pipeline split on the ranks (virtual stage j on rank j % pp,
the round-robin of Megatron-Core and torch.distributed.pipelining's looped schedules), counting the
parameters one GPU of a stage holds after tensor and expert parallelism, its activations for the
in-flight micro-batches of the schedule, its logits, and the reserve. How those parameters become
bytes of weights, gradients and optimizer state is the framework's (its `states` function):
Megatron's distributed optimizer, ZeRO stages, FSDP2. `memory` composes them, stage by stage.

A framework module (apsi.training.frameworks.interface.Framework) gives: `states(counts, **layout)`,
`vocab_rows(vocab, tp)` (the embedding rows it allocates), `layer_bytes` (its own activations per
layer, or None), BUILDS_MTP (whether it builds a model's multi-token-prediction blocks),
FP8_ACTIVATIONS (whether FP8 training caches the linear inputs in FP8), KEEPS_STAGE_OUTPUTS
(whether its pipeline keeps each stage's output) and LOGIT_BYTES (bytes per logit its loss keeps).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, NamedTuple

from apsi.inputs import knobs as knobs_
from apsi.errors import LayoutError
from apsi.model import memory as mem
from apsi.model.architecture import Architecture
from apsi.model.counting import LayerShards, layer_shards

if TYPE_CHECKING:
    from apsi.training.frameworks.interface import Framework


class Stage(NamedTuple):
    """One pipeline rank's share of the model."""

    layers: int
    moe_layers: int
    embedding: bool
    head: bool
    mtp: bool


class Counts(NamedTuple):
    """Parameters one GPU of a stage holds, by how the frameworks treat them."""

    dense: float
    """Non-expert parameters (attention, dense MLPs, norms, router, embedding, head), after TP."""
    experts: float
    """Routed-expert parameters, after EP x ETP."""
    linear: float
    """Of both, those in linear layers (what FP8 keeps an FP8 copy of)."""
    largest_layer: float
    """The largest decoder layer's parameters on this GPU (FSDP and ZeRO-3 gather one at a time)."""
    head: float
    """The output layer's parameters on this GPU (0 where the stage has none)."""


@functools.lru_cache(maxsize=4096)
def placement(a: Architecture, chunks: tuple[int, ...], pp: int, mtp: bool = True) -> tuple[Stage, ...]:
    """Each rank's layers, which of them have experts, and whether it holds the embedding, the head
    (and the loss) and the MTP blocks (on the last rank, as Bridge's DeepSeek-V3 layout; only where
    the framework builds them). Virtual stage j holds the next chunks[j] layers and runs on rank
    j % pp (Megatron's get_transformer_layer_offset; torch pipelining's "loop" style), so an
    interleaved rank's layers are not contiguous."""
    ids: list[list[int]] = [[] for _ in range(pp)]
    start = 0
    for j, n in enumerate(chunks):
        ids[j % pp].extend(range(start, start + n))
        start += n
    return tuple(Stage(layers=len(ids[r]), moe_layers=sum(1 for i in ids[r] if a.is_moe_layer(i)),
                       embedding=r == 0, head=r == pp - 1, mtp=mtp and r == pp - 1 and a.mtp_layers > 0)
                 for r in range(pp))


@functools.lru_cache(maxsize=65536)
def rank_layers(chunk_sizes: tuple[int, ...], pp: int) -> tuple[int, ...]:
    """Layers on each pipeline rank: the sum of its virtual stages j = rank, rank + p, ..."""
    return tuple(sum(chunk_sizes[r::pp]) for r in range(pp))


def _placed(shards: LayerShards, tp: int, kv_heads: int) -> float:
    """Parameters one GPU holds of a layer's non-expert part: TP-split / tp, K and V / min(tp, g)
    (more TP ranks than KV heads replicate each head), replicated whole."""
    return shards.tp / tp + shards.kv / min(tp, kv_heads) + shards.replicated


@functools.lru_cache(maxsize=65536)
def counts(a: Architecture, stage: Stage, *, tp: int, ep: int, etp: int, vocab_rows: int) -> Counts:
    """The parameters one GPU of `stage` holds: each layer's placed by _placed, routed experts /
    (ep x etp); the first stage adds the vocabulary-parallel embedding (`vocab_rows` rows over tp),
    the last the head and the final norm and the MTP blocks (each a layer of the later kind plus
    its 2h -> h projection and 3 norms) with the embedding the MTP blocks read (Megatron builds one
    where mtp_process)."""
    dense, sparse = layer_shards(a, False), (layer_shards(a, True) if a.moe else None)
    later = sparse or dense
    n_dense = stage.layers - stage.moe_layers
    kv = a.kv_heads

    def linear_of(shards: LayerShards) -> float:
        return shards.tp / tp + shards.kv / min(tp, kv)

    params = n_dense * _placed(dense, tp, kv) + (stage.moe_layers * _placed(sparse, tp, kv) if sparse else 0.0)
    experts = stage.moe_layers * sparse.experts / (ep * etp) if sparse else 0.0
    linear = n_dense * linear_of(dense) + experts + (stage.moe_layers * linear_of(sparse) if sparse else 0.0)
    largest = max(_placed(dense, tp, kv) if n_dense else 0.0,
                  _placed(sparse, tp, kv) + sparse.experts / (ep * etp) if sparse and stage.moe_layers else 0.0)
    norm = a.width * (2 if a.norm == "layernorm" else 1 if a.norm == "rmsnorm" else 0)
    table = vocab_rows * a.width / tp
    head = 0.0
    if stage.embedding:
        params += table + a.position_embeddings * a.width
    if stage.head:
        # A tied head is the embedding itself on one stage; pipelined, the last stage keeps a copy.
        head = table if not a.tied or not stage.embedding else 0.0
        params += head + norm
    if stage.mtp:
        block = linear_of(later) + 2 * a.width * a.width / tp
        params += a.mtp_layers * (_placed(later, tp, kv) + 2 * a.width * a.width / tp + 3 * norm)
        params += table if not a.tied and not stage.embedding else 0
        experts += a.mtp_layers * later.experts / (ep * etp)
        linear += a.mtp_layers * (block + later.experts / (ep * etp))
    return Counts(params, experts, linear, largest, head)


def activations(a: Architecture, stage: Stage, index: int, *, tp: int, pp: int, cp: int, etp: int, vpp: int,
                micro_batch: int, micro_batches: int, seq: int, recompute: str, fp8: bool,
                modules: tuple[str, ...] = mem.DEFAULT_MODULES, hook: Any = None, keeps_outputs: bool = False,
                sp: bool = True) -> float:
    """Bytes of activations one GPU of stage `index` keeps at its peak: each layer's
    (apsi.model.memory, or the framework's `layer_bytes(a, moe, seq=..., ...)`, `hook`, where it
    checkpoints differently) times the micro-batches in flight on this rank, plus, under
    recomputation, the working set of the one layer (full) or checkpointed block (selective mlp /
    moe) being recomputed. With keeps_outputs (a framework whose pipeline keeps each stage's output
    tensor until its backward) every in-flight micro-batch holds one more hidden state per virtual
    stage (Megatron frees them: deallocate_pipeline_outputs). `sp`: sequence parallelism
    (apsi.model.memory splits the s b h tensors over tp with it only). The parts no micro-batch
    count changes are _per_stage's, kept."""
    layers, working = _per_stage(a, stage, tp, pp, cp, etp, vpp, micro_batch, seq, recompute, fp8, modules, hook,
                                 keeps_outputs, sp)
    stored = mem.in_flight(index, pp, vpp, micro_batches) * layers
    for extra in working:
        stored += extra
    return stored


@functools.lru_cache(maxsize=65536)
def _per_stage(a: Architecture, stage: Stage, tp: int, pp: int, cp: int, etp: int, vpp: int, micro_batch: int,
               seq: int, recompute: str, fp8: bool, modules: tuple[str, ...], hook: Any, keeps_outputs: bool,
               sp: bool) -> tuple[float, tuple[float, ...]]:
    """activations()'s parts that depend on the stage and the layout but not on the micro-batches
    or dp: the bytes of one micro-batch's layers on the stage, and the recomputation's working sets
    added once (in the order activations() adds them). Cached: the search evaluates the same
    stages at dp after dp."""
    local = seq // cp
    if hook is None:
        def layer_bytes(moe: bool) -> float:
            return mem.layer_activation_bytes(a, moe, local, micro_batch, tp, recompute, fp8, etp if moe else 1,
                                              modules, sp)
    else:
        def layer_bytes(moe: bool) -> float:
            return hook(a, moe, seq=local, micro_batch=micro_batch, tp=tp, etp=etp, recompute=recompute,
                        sequence_parallel=sp)
    n_dense = stage.layers - stage.moe_layers
    per_dense = layer_bytes(False) if n_dense or (stage.mtp and not a.moe) else 0.0
    per_sparse = layer_bytes(True) if a.moe else 0.0
    layers = n_dense * per_dense + stage.moe_layers * per_sparse
    if stage.mtp:
        layers += a.mtp_layers * (per_sparse if a.moe else per_dense)
    if keeps_outputs and pp > 1:
        # The pipeline keeps each virtual stage's output for its backward (torch pipelining's
        # fwd_cache), except where the loss is computed: one hidden state, SP-sharded, per stage.
        chunks = vpp - (1 if stage.head else 0)
        layers += chunks * mem.BF16 * local * micro_batch * a.width / (tp if sp else 1)
    working: list[float] = []
    if recompute == "full":
        # The one layer being recomputed holds its whole set of activations in its backward.
        working.append(mem.working_layer_bytes(a, stage.moe_layers > 0, local, micro_batch, tp, fp8, etp, sp))
    elif recompute == "selective":
        # ... and a checkpointed MLP or MoE block its own.
        if "mlp" in modules and n_dense:
            working.append(mem.mlp_activation_bytes(a, local, micro_batch, tp, a.ffn, fp8, sp=sp))
        if "moe" in modules and stage.moe_layers:
            working.append(mem.moe_activation_bytes(a, local, micro_batch, tp, fp8, etp, sp=sp))
    return layers, tuple(working)


def memory(fw: Framework, a: Architecture, *, split: tuple[int, ...], tp: int, pp: int, cp: int, ep: int, etp: int,
           dp: int, vpp: int, micro_batch: int, seq: int, batch_sequences: int, recompute: str, precision: str,
           peak_only: bool = False, modules: tuple[str, ...] = mem.DEFAULT_MODULES,
           stop_above: float | None = None, **knobs: Any) -> list[dict[str, float] | None]:
    """Every pipeline stage's memory per GPU under framework `fw`, bytes by part (weights,
    gradients, optimizer, activations, logits, reserve) with its total, first stage to last.

    With peak_only, a stage identical to an earlier one (same layers, experts, embedding, head
    and MTP) is left out (None): it holds no more micro-batches in flight than the earlier one
    (apsi.model.memory.in_flight falls with the rank), so it cannot be the peak. The search uses
    this; the plan shows every stage. With stop_above, the list ends at the first stage whose
    total exceeds it (the search only asks whether a layout fits). `knobs` are the framework's
    own (optimizer, zero, dp_replicate, grad_dtype, fp8_param_gather), and sequence_parallel, which
    the activations take (its default the framework's, apsi.inputs.knobs.flag_value) and the states do not;
    torchtitan's compile, carried with the layout for the step time, is neither's."""
    sp = knobs_.flag_value("sequence_parallel", fw.NAME, knobs) and tp > 1
    knobs = {k: v for k, v in knobs.items() if k not in ("sequence_parallel", "compile")}
    micro_batches = batch_sequences // (micro_batch * dp)
    if len(split) != pp * vpp or sum(split) != a.layers:
        raise LayoutError(f"a split of {a.layers} layers over pp {pp} x vpp {vpp} needs {pp * vpp} virtual stages")
    fp8 = precision == "fp8"
    rows = fw.vocab_rows(a.vocab, tp)
    out: list[dict[str, float] | None] = []
    seen = set()
    for i, stage in enumerate(placement(a, tuple(split), pp, fw.BUILDS_MTP)):
        if peak_only and stage in seen:
            out.append(None)
            continue
        seen.add(stage)
        c = counts(a, stage, tp=tp, ep=ep, etp=etp, vocab_rows=rows)
        parts = fw.states(c, tp=tp, pp=pp, cp=cp, ep=ep, etp=etp, dp=dp, precision=precision,
                          micro_batches=micro_batches, **knobs)
        parts["activations"] = activations(
            a, stage, i, tp=tp, pp=pp, cp=cp, etp=etp, vpp=vpp, micro_batch=micro_batch, micro_batches=micro_batches,
            seq=seq, recompute=recompute, fp8=fp8 and fw.FP8_ACTIVATIONS, modules=tuple(modules), hook=fw.layer_bytes,
            keeps_outputs=fw.KEEPS_STAGE_OUTPUTS, sp=sp)
        parts["logits"] = (mem.logits_bytes(a, seq // cp, micro_batch, tp, rows, fw.LOGIT_BYTES, sp)
                           * (1 + (a.mtp_layers if fw.BUILDS_MTP else 0)) if stage.head else 0.0)
        parts["reserve"] = mem.reserve_bytes(parts["activations"] + parts["logits"])
        parts["total"] = sum(parts.values())
        out.append(parts)
        if stop_above is not None and parts["total"] > stop_above:
            break
    return out


def framework_memory(fw: Framework, a: Architecture, *, split: tuple[int, ...] | None = None, pp: int, vpp: int,
                     **layout: Any) -> list[dict[str, float] | None]:
    """memory() for framework `fw`, the split defaulting to the first of its splits (its
    split_layers, which names the rule when there is none)."""
    split = split or fw.split_layers(a.layers, pp, vpp, a.mtp_layers)
    return memory(fw, a, split=tuple(split), pp=pp, vpp=vpp, **layout)


def peak_bytes(fw: Framework, a: Architecture, **layout: Any) -> float:
    """The most loaded stage's total bytes under `fw` (memory(..., peak_only=True))."""
    return max(p["total"] for p in framework_memory(fw, a, peak_only=True, **layout) if p is not None)
