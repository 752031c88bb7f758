"""Pydantic models for what apsi returns: plans, layouts, memory breakdowns, serving estimates.

Data only: no arithmetic beyond field validation. Units are in the field names
(`_gib` = 2^30 bytes, `_seconds`, `days`, `_usd`, `_mwh`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from apsi.model.architecture import Architecture
from apsi.model.counting import ParameterParts
from apsi.model.deferred import Deferring
from apsi.model.serve_schema import ServePlan
from apsi.model.notebook import Shown
from apsi.model.documented import Documented

Recompute = Literal["none", "selective", "full"]
Binding = Literal["time", "memory", "batch", "max_gpus", "gpus", "pinned", "cost", "energy"]
SolverStatus = Literal["OPTIMAL", "FEASIBLE", "INFEASIBLE", "UNKNOWN", "MODEL_INVALID", "NOT_SOLVED"]


class ModelShape(Documented):
    """The transformer being planned."""

    params: int
    """Total parameters (all experts for a mixture-of-experts model)."""
    active_params: int
    """Parameters used per token; equals params for a dense model."""
    layers: int
    """Transformer (decoder) layers."""
    width: int
    """Hidden size d."""
    heads: int
    """Attention (query) heads."""
    moe: bool
    """True when active_params < params (mixture of experts)."""
    name: str | None = None
    """The model's name, for a preset (Llama 3.1 405B)."""
    source: str = "size"
    """size (the reference shape rule), shape (a size with architecture fields), preset or config."""
    origin: str = ""
    """What was given: the size as typed, the preset's key or the config.json's path."""
    family: str | None = None
    """The config's model_type (llama, deepseek_v3, ...), for a preset or a config."""
    architecture: Architecture | None = None
    """Every dimension of the model planned (for a size: the shape the reference rule gives)."""
    parts: ParameterParts | None = None
    """Parameters by part when the architecture gives the count (None when the size does)."""
    active_parts: ParameterParts | None = None
    """Parameters used per token by part (None when the size gives the count)."""
    mtp_params: int = 0
    """Parameters of multi-token-prediction blocks, trained with the model and not in params."""
    derived: list[str] = []
    """Fields not given, filled by the reference shape rule or solved from the size."""
    flops_convention: str = "full"
    """causal or full: how the attention core's FLOPs are counted (docs/method.md)."""


class Layout(Documented):
    """How the GPUs are split: gpus = tp * pp * cp * dp (cp is 1 under reference)."""

    tp: int
    """Tensor-parallel degree (inside one NVLink domain)."""
    pp: int
    """Pipeline-parallel stages (1F1B schedule)."""
    dp: int
    """Data-parallel replicas. How model states are sharded over them is the framework's (`sharding`);
    under the reference arithmetic over all GPUs (ZeRO-3)."""
    recompute: Recompute
    """Activation recomputation: none, selective (attention core) or full (whole layer)."""
    micro_batch_sequences: int
    """Sequences per micro-batch."""
    micro_batches_per_replica: float
    """Batch sequences / (dp x micro-batch): gradient-accumulation steps, exact ratio."""
    cp: int = 1
    """Context-parallel degree: each sequence split over cp GPUs (Megatron; 1 under reference)."""
    ep: int = 1
    """Expert-parallel degree, folded over tp x cp x dp (Megatron's MoE parallel folding)."""
    etp: int = 1
    """Tensor parallelism inside the experts (Megatron --expert-tensor-parallel-size)."""
    vpp: int = 1
    """Virtual pipeline stages per pipeline rank (interleaved schedule when > 1)."""
    zero: int = 3
    """How model states are sharded over the data-parallel GPUs, as a ZeRO stage: 3 under
    reference (everything over every GPU) and torchtitan (FSDP2); Megatron's distributed optimizer
    is 1 (0 without it); DeepSpeed's is its zero_optimization stage."""
    dp_replicate: int = 1
    """Of dp, the replicas that do not shard states among themselves (torchtitan HSDP's
    data_parallel_replicate_degree); states are sharded over dp / dp_replicate (x cp)."""
    stage_layers: list[int] = []
    """Decoder layers on each pipeline stage, first to last (empty under reference: L / pp each)."""
    virtual_stage_layers: list[int] = []
    """Decoder layers of each of the pp x vpp virtual stages in schedule order (virtual stage j on
    rank j mod pp): the split itself (empty under reference)."""
    sequence_parallel: bool = False
    """Megatron's sequence parallelism (on whenever tp > 1)."""
    recompute_modules: list[str] = []
    """Under selective recomputation in a framework, the modules recomputed (Megatron
    --recompute-modules; core_attn by default). Empty under reference."""
    sharding: str = ""
    """How the framework keeps the model states, in words (empty under reference: ZeRO-3 over
    every GPU)."""
    micro_batch: int = 0
    """Sequences per micro-batch under the knob's name (`micro_batch`); the same number as
    micro_batch_sequences, filled from it."""

    @model_validator(mode="before")
    @classmethod
    def _micro_batch(cls, data: Any) -> Any:
        if isinstance(data, dict) and not data.get("micro_batch"):
            data = {**data, "micro_batch": data.get("micro_batch_sequences", 0)}
        return data


class TimeBreakdown(Documented):
    """One training step, seconds, by part (apsi.model.steptime); the parts sum to step_seconds."""

    compute_seconds: float
    """The slowest pipeline rank's GEMMs, attention and memory-bound work, over the step."""
    tp_seconds: float
    """Exposed tensor-parallel collectives."""
    cp_seconds: float
    """Context-parallel K/V exchange attention does not hide."""
    ep_seconds: float
    """Expert-parallel all-to-all."""
    bubble_seconds: float
    """Pipeline fill and drain: (p - 1) / v of the slowest rank's micro-batch."""
    pp_seconds: float
    """Pipeline point-to-point messages on the fill and drain."""
    dp_seconds: float
    """Exposed data-parallel gradient reduction and parameter gathers."""
    optimizer_seconds: float
    """The optimizer step: its HBM traffic over the rank's shard of the states."""
    step_seconds: float
    """The whole step: the sum of the parts above."""
    links: dict[str, str]
    """The link each kind of traffic crosses: nvlink or scale-out."""


class MemoryBreakdown(Documented):
    """Memory one GPU holds, GiB (2^30 bytes); the parts sum to total_gib."""

    weights_gib: float
    """Weights one GPU holds, GiB."""
    gradients_gib: float
    """Gradients one GPU holds, GiB."""
    optimizer_gib: float
    """Optimizer states one GPU holds, GiB."""
    model_states_gib: float
    """weights + gradients + optimizer states, sharded over every GPU."""
    activations_gib: float
    """Activations one GPU holds for the backward pass, GiB."""
    total_gib: float
    """The sum of the parts, GiB."""
    usable_gib: float
    """What a plan may fill, GiB: the memory the driver reports (the catalog's visible_memory_gib)
    under a framework, which then sets reserve_gib aside; 90% of the GPU's memory under the
    reference arithmetic."""
    gpu_memory_gib: float
    """The GPU's planning capacity (catalog memory_gib)."""
    model_states_total_gib: float
    """Model states of the whole model before sharding."""
    logits_gib: float = 0.0
    """The output layer's activations and fp32 logits on the last stage (0 under reference)."""
    reserve_gib: float = 0.0
    """CUDA context, NCCL buffers and fragmentation (0 under reference, whose usable_gib is 90%)."""
    peak_stage: int = 0
    """The pipeline stage whose memory this is: the most loaded one."""
    stages_gib: list[float] = []
    """Memory of every pipeline stage, first to last, GiB (empty under reference)."""


class ServingPlan(Documented):
    """GPUs to hold the model for inference: weights plus a KV cache, at 90% of memory."""

    gpu: str
    """The GPU type (a catalog name)."""
    gpus: int
    """GPUs that hold the weights plus the KV cache in 90% of their memory."""
    precision: str
    """Precision of the weights and the KV cache: bf16, fp16 or fp8."""
    params: int = 0
    """Parameters served (without MTP blocks)."""
    model_name: str | None = None
    """The model's name, as the plan's model.name (a preset's; None for a size)."""
    weights_gib: float
    """The weights at that precision, GiB (2^30 bytes)."""
    kv_cache_gib: float
    """KV cache of batch sequences of seq tokens, GiB."""
    kv_cache_bytes_per_token: int = 0
    """KV cache one token keeps over all layers at this precision (GQA: 2 g d_h per layer; MLA: the latent)."""
    total_gib: float
    """Weights plus KV cache, GiB."""
    seq: int
    """Tokens of KV cache per sequence."""
    batch: int
    """Sequences whose KV cache is held at once."""


class SolverReport(Documented):
    """What the CP-SAT layout program said."""

    status: SolverStatus
    """OPTIMAL when proved optimal; FEASIBLE when a time limit stopped the proof."""
    seconds: float
    """CP-SAT's deterministic time summed over every solve for this plan: a reproducible measure of
    solver work in CP-SAT's seconds-equivalent units. Wall time depends on the machine and is not
    part of the plan (docs/benchmarks.md measures it)."""
    solves: int
    """CP-SAT solves behind the plan (the search and the solves that explain it); 0 when the layouts
    were walked (method enumeration) or not searched (evaluate)."""
    method: Literal["cp-sat", "enumeration"] = "cp-sat"
    """How the optimum was proved: by the CP-SAT program, or by walking every legal layout
    (framework layouts, apsi.training.frameworks.planner)."""
    mode: Literal["min_gpus", "fastest", "min_cost", "min_energy", "evaluate"]
    """min_gpus: fewest GPUs meeting the target; fastest: fastest within a GPU cap; min_cost /
    min_energy: cheapest / least energy meeting the target; evaluate: no search."""
    space: str | None = None
    """The layouts the walk proved its answer over, in words, where it is not the whole of every
    knob's range (framework layouts: which recomputations, apsi.training.frameworks.recompute)."""


class Alternative(Documented):
    """Another GPU type's best plan, for comparison."""

    gpu: str
    """The other GPU type (a catalog name)."""
    gpus: int
    """GPUs of its best plan."""
    days: float
    """Its duration, days."""
    target_met: bool
    """Whether its days <= the target."""
    cost_usd: float | None
    """Its cost, US dollars; None without a price."""
    energy_mwh: float | None
    """Its energy, MWh (board power x PUE); None without a board power."""


class GpuChoice(Documented):
    """How the GPU type was chosen when several were allowed."""

    objective: str
    """What the choice minimised: gpus, days, cost or energy."""
    considered: list[str]
    """Types the program chose among, in tie-break order."""
    skipped: list[str]
    """Types left out, each with its reason."""
    runner_up: Alternative | None
    """The best plan on any other type (None when only one type was possible, and from the API
    under a framework unless plan(explain=True): the CLI asks)."""


class Lever(Documented):
    """One change to the inputs and the plan it gives, solved again (not estimated)."""

    name: str
    """What is changed: optimizer, precision, batch, gpu, days, gpus (a cap), pins (every pin
    released, the reference arithmetic); under a framework also seq, framework, micro_batch and
    each pin released by its own name (tp, pp, dp, cp, ep, etp, vpp, zero, ...)."""
    change: dict[str, str | int | float | None]
    """The plan() keywords that were changed, with their new values (None: unpinned, the default)."""
    description: str
    """The change and its outcome in one line."""
    gpus: int | None
    """None when no layout fits with the change (the description then gives the error)."""
    days: float | None
    """The changed plan's duration, days; None when no layout fits."""
    target_met: bool | None
    """Whether the changed plan meets its target; None when no layout fits."""
    cost_usd: float | None = None
    """The changed plan's cost, US dollars; None without a price or when no layout fits."""
    gpu: str | None = None
    """The GPU type the changed plan runs on; None when no layout fits."""
    energy_mwh: float | None = None
    """The changed plan's energy, MWh (board power x PUE); None when unknown or no layout fits."""


class Plan(Shown, Deferring, Documented):
    """A training plan: layout, memory, duration and serving for one run.

    Its serving plan (`serve`) may be deferred (defer()): worked out when first read, as an
    attribute, in model_dump or in the JSON, so that a training plan does not pay for the serving
    walk until someone asks for it. Read or not, the plan's data and its JSON are the same."""

    gpu: str
    """The GPU type the plan runs on (a catalog name)."""
    gpus: int
    """GPUs in the run: tp x pp x cp x dp."""
    nodes: int
    """Nodes: the GPUs over the GPU's gpus_per_node, rounded up."""
    gpus_per_node: int | None = Field(default=None, ge=1)
    """GPUs of a full node: the GPU's gpus_per_node in the catalog the plan was made with (a
    catalog file may change a shipped GPU's), which made `nodes` and which the launch exports
    start on each full node; None in a plan saved before apsi recorded it."""
    layout: Layout
    """How the GPUs are split (degrees, split, micro-batches, sharding)."""
    memory_per_gpu_gib: float
    """Memory one GPU holds on the most loaded pipeline stage, GiB (2^30 bytes)."""
    memory: MemoryBreakdown
    """That memory by part, GiB."""
    fits: bool
    """Whether the layout fits in usable memory (always true for a solved plan)."""
    days: float
    """Duration of the run, days of 86,400 s (failures included under the step-time model)."""
    target_days: float
    """The target duration asked for, days."""
    target_met: bool
    """Whether days <= target_days."""
    total_flops: float
    """Training FLOPs including recomputation."""
    model_flops_per_token: int = 0
    """Model FLOPs of one training token at seq (forward and backward, no recomputation) under
    model.flops_convention: the numerator of MFU per token."""
    steps: int
    """Optimizer steps: the tokens over the batch, rounded up."""
    batch_tokens: int
    """Tokens per step (batch_sequences x seq)."""
    batch_sequences: int
    """Sequences per step (the layout's batch, within the batch tolerance of the one asked)."""
    tokens: int
    """Training tokens."""
    data_gib: float
    """Training tokens stored as 32-bit ids."""
    precision: str
    """Training precision: bf16, fp16 or fp8."""
    optimizer: str
    """Optimizer: adamw, adam8bit or sgd."""
    mfu: float
    """Model FLOPs utilisation over the precision's dense peak, 0-1: given (flat MFU) or achieved (step-time model)."""
    seq: int
    """Sequence length, tokens."""
    peak_tflops: float
    """Dense peak per GPU used for the duration."""
    model: ModelShape
    """The model planned: sizes, architecture and parameter counts."""
    serving: ServingPlan
    """GPUs to hold the trained model at the plan's precision: the reference's quotient (weights
    plus one sequence's KV cache over memory)."""
    serve: ServePlan | None = None
    """The serving plan for the trained model (apsi.serving: vLLM on the plan's GPU type, fp8
    weights when the plan trains in fp8, for 10 requests/s of 1,000 in / 1,000 out); None under the
    reference arithmetic, or when no replica fits."""
    serve_refused: str | None = None
    """Why `serve` is None under a framework: `apsi serve`'s one line on the same question (the
    GPU serves neither precision, the request is longer than the model's context, no replica
    fits). None when there is a serving plan, and under the reference arithmetic."""
    solver: SolverReport
    """How the layout was chosen and whether it is proved optimal."""
    binding: Binding
    """The constraint that decided the answer."""
    objective: str = "gpus"
    """What the program minimised: gpus, days, cost or energy."""
    gpu_hours: float
    """GPUs x hours of the run."""
    price_usd_per_gpu_hour: float | None
    """From the catalog, or the price option; None if unknown."""
    cost_usd: float | None
    """gpu_hours x price; None without a price."""
    power_w_per_gpu: float | None
    """Board power (catalog tdp_w)."""
    pue: float
    """Facility power over IT power, applied to the energy."""
    energy_mwh: float | None
    """GPUs x board power x hours x PUE, MWh (10^6 Wh); GPUs only, hosts and network excluded."""
    gpu_choice: GpuChoice | None = None
    """Set when several GPU types were allowed."""
    framework: str = "reference"
    """Whose memory model and layout rules judged the plan: megatron, torchtitan, deepspeed or reference."""
    why: str = ""
    """What decided the plan, in one sentence with its numbers."""
    levers: list[Lever] = []
    """Nearby changes worth trying, each solved again."""
    notes: list[str] = []
    """Assumptions and caveats, one sentence each."""
    caveats: list[str] = []
    """The figures that rest on constants no validation row covers for the plan's framework, one
    sentence each naming the framework and what is unvalidated (its timing, its memory), e.g.
    "DeepSpeed: no validated timing row ..." (docs/validation.md; apsi.training.frameworks.timing.caveats).
    Empty where every figure has its framework's validation rows."""
    framework_knobs: dict[str, str | bool] = {}
    """The framework's own settings the plan used beyond the layout (grad_dtype, moments_dtype,
    fp8_param_gather, tp_overlap, ep_overlap, dispatcher), as given; what a launch configuration needs (apsi.outputs.export)."""
    step_seconds: float | None = None
    """Seconds per optimizer step: the modelled step (time.step_seconds), or at a flat MFU the days
    over the steps. The days are the steps times it plus failure_days."""
    tokens_per_gpu_second: float | None = None
    """Training throughput per GPU, tokens/s, over the run's wall time: the tokens trained over days x
    GPUs, the interruptions' lost time included (mfu and hfu likewise), so below batch_tokens /
    (step_seconds x gpus) by failure_days' share of the days."""
    model_tflops_per_gpu: float | None = None
    """Model FLOP/s per GPU, 10^12 (model_flops_per_token x tokens/s per GPU)."""
    hfu: float | None = None
    """Hardware FLOPs utilisation: FLOPs including recomputation over GPUs x peak x time."""
    time: TimeBreakdown | None = None
    """The step by part, under the step-time model (None at a given flat MFU)."""
    interruptions: float | None = None
    """Interruptions expected over the run (apsi.model.goodput); None without the failure term."""
    failure_days: float | None = None
    """Days of the duration they cost: restarts and the work lost since the last checkpoint."""
    days_low: float | None = None
    """The duration at the calibration's smallest step-time error, days (None at a flat MFU)."""
    days_high: float | None = None
    """The duration across the calibration's residual spread (apsi.model.steptime): the fitted
    efficiencies' smallest and largest errors on the calibration set applied to the time."""


class ModelRow(Documented):
    """One shipped preset, as `apsi models` lists it."""

    key: str
    """The name to give as PARAMS."""
    name: str
    family: str | None
    """Its config's model_type."""
    params: int
    """Parameters counted from the architecture (without MTP blocks)."""
    active_params: int
    mtp_params: int
    layers: int
    width: int
    published: dict[str, str | None]
    """The published total (and active) size, with where it is stated."""
    source: str
    """Where the architecture's figures come from (its config.json's address, or the paper)."""


class FrontierPoint(Documented):
    """The fastest layout on exactly `gpus` GPUs, where it beats every layout on fewer."""

    gpus: int
    """GPUs: tp x pp x cp x dp."""
    nodes: int
    """GPUs over the GPU's per-node count, rounded up."""
    days: float
    """Duration in days, computed as apsi.evaluate() does; strictly falls along the frontier."""
    layout: Layout
    """The fastest layout on that many GPUs."""
    memory_per_gpu_gib: float
    """Model states over all GPUs plus activations over TP, GiB (2^30 bytes)."""
    target_met: bool
    """days <= the target (the `days` option)."""

