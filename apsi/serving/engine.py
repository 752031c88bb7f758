"""The typed interface a serving engine meets: its memory rule, its defaults, its nine timing
constants and the names of its launch arguments.

Each engine (apsi.serving.vllm, .sglang, .trtllm) is one Engine value in its own module, with
the source of every default in a comment there. The serving arithmetic (apsi.serving.replica)
reads only these fields, so an engine is data, not code.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from apsi.catalog import GPU


class Calibration(BaseModel):
    """The nine constants of a step's time (apsi.serving.replica.step_seconds), fitted per engine
    on the calibration rows of benchmarks/serving (benchmarks/serving_validation.py --fit), never on a
    validation row."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    prefill_efficiency: float = Field(gt=0, le=1)
    """Share of the GPU's dense peak a step's matrix products reach."""
    bandwidth_efficiency: float = Field(gt=0, le=1)
    """Share of the HBM bandwidth a decode step's reads of weights and KV cache reach."""
    layer_us: float = Field(ge=0)
    """Fixed cost of one layer in one step, microseconds (kernel launches and small kernels: norms,
    rotary, sampling; paid once per layer per step whatever the batch)."""
    collective_us: float = Field(ge=0)
    """Fixed cost of one tensor-parallel all-reduce per doubling of the group (log2 tp hops),
    microseconds, on top of its bytes at the link's bandwidth."""
    expert_efficiency: float = Field(gt=0, le=1)
    """Share of the dense matrices' efficiency (bandwidth and compute alike) that a MoE's routed
    experts reach: grouped-GEMM kernels over many small expert matrices (vLLM's fused_moe, SGLang's
    and TensorRT-LLM's MoE kernels) run below the dense GEMMs at the same bytes."""
    request_ms: float = Field(ge=0)
    """Fixed latency of a request to its first token outside the GPU's steps, milliseconds: the API
    server's tokenization and HTTP handling, the scheduler's admission of the request, the first
    token's detokenization and streaming (apsi.serving.operating.operating_point adds it to TTFT)."""
    stream_us: float = Field(ge=0)
    """The front end's time per output token it streams, microseconds (detokenizing and sending each
    token of every request): at b requests of TPOT t it is busy b / t x stream_us of each second, and a
    new request's request_ms waits behind that work (apsi.serving.queues.front_end)."""
    sequence_us: float = Field(ge=0)
    """Cost of one decoding sequence in one step, microseconds, whatever its context: the
    scheduler's bookkeeping of each running request (its pages, its next input), its sampling and
    its output token's handling, paid by the step (apsi.serving.replica.step_seconds), beside the
    reads of its KV cache, which grow with its context."""
    overlap: float = Field(default=1.0, ge=0, le=1)
    """Share of the shorter of a step's two parts (its HBM reads, its FLOPs) hidden under the longer
    (apsi.serving.replica.step_seconds): 1, the roofline's max of the two; 0, one after the other.
    Kernels overlap them within themselves but not across the layer's back-to-back kernels
    (../shared/reference/serving.md 2: attention and GEMMs run one after another on one stream),
    so a step sits between the max and the sum."""
    rows: str = ""
    """Which benchmark rows the constants were fitted on."""
    makers: tuple[str, ...] = ()
    """The GPU makers (maker()) of the GPUs those rows measured: on another maker's GPU the
    constants are applied uncalibrated (calibrated_on)."""


def maker(gpu: GPU) -> str:
    """A GPU's maker as the catalog's description names it first, lower case (nvidia, amd); empty
    for a GPU a catalog file describes without one."""
    words = gpu.description.split()
    return words[0].lower() if words else ""


def calibrated_on(cal: Calibration, gpu: GPU) -> bool:
    """Whether the constants were fitted on rows measured on this GPU's maker's GPUs (a GPU of no
    named maker counts as calibrated: a catalog file's own part is the user's call)."""
    return not maker(gpu) or maker(gpu) in cal.makers


class Engine(BaseModel):
    """One serving engine's planning figures and launch argument names."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    """Its name, one of apsi.serving.engines.ENGINES (the module it is the ENGINE of)."""
    title: str
    version: str
    """The release whose defaults and argument names these are."""
    memory_rule: Literal["total", "free", "static"]
    """How the KV cache is sized: `total`, memory_fraction of the GPU's memory holds weights,
    activations and the cache (vLLM); `free`, memory_fraction of what is free after weights and
    activations (TensorRT-LLM); `static`, memory_fraction of the GPU's memory holds weights and the
    cache, activations and graphs living outside it (SGLang)."""
    memory_fraction: float = Field(gt=0, le=1)
    """The rule's fraction; under `auto_fraction`, the one used when the GPU's memory is unknown."""
    auto_fraction: bool = False
    """The engine chooses the fraction from the GPU's memory and the layout (SGLang's
    mem_fraction_static when unset: apsi.serving.sglang.static_fraction)."""
    overhead_gib: float = Field(ge=0)
    """Memory outside the rule's accounting, GiB: the CUDA context, NCCL buffers and CUDA graphs."""
    max_sequences: int = Field(ge=1)
    """The most sequences a replica runs at once by default (its max batch)."""
    chunk_tokens: int = Field(ge=1)
    """Tokens one step processes at most by default (the prefill chunk budget): its activations
    are the step's peak."""
    block_tokens: int = Field(ge=1)
    """Tokens per KV-cache page: a sequence holds whole pages."""
    small_gpu_defaults: tuple[int, int] | None = None
    """(max_sequences, chunk_tokens) the engine takes by default on a GPU it counts as small: less
    memory than large_gpu_gib, or a name holding one of small_gpu_names (Engine.on); None where its
    defaults are the same on every GPU."""
    large_gpu_gib: float = Field(default=0.0, ge=0)
    small_gpu_names: tuple[str, ...] = ()
    """Lower-case parts of a GPU name the engine counts as small whatever its memory."""
    fp8_kv_cache: bool
    """Whether the KV cache is FP8 by default under FP8 (or NVFP4) weights: TensorRT-LLM reads the
    checkpoint's kv_cache_quant_algo and sets it; vLLM's and SGLang's --kv-cache-dtype auto keeps
    the model's 16-bit dtype unless asked."""
    admission: Literal["reserve", "paged", "estimated"] = "reserve"
    """What a request's place in the batch costs in KV cache (apsi.serving.admission.held_tokens):
    `reserve`, its whole length, input + output, from its admission (TensorRT-LLM's default
    capacity policy GUARANTEED_NO_EVICT); `paged`, the pages its tokens fill so far, a new request
    admitted while this step's chunk fits and the latest preempted when the cache runs out (vLLM
    V1's allocate_slots, recompute preemption); `estimated`, its tokens so far plus
    new_token_ratio of its remaining output (SGLang's admission, retracting when the pool fills)."""
    new_token_ratio: float = Field(default=0.0, ge=0, le=1)
    """Under `estimated` admission: the share of each running request's remaining output (at most
    4,096 tokens of it) reserved for its growth, in the steady state."""
    vendors: tuple[str, ...] = ()
    """The GPU makers the engine runs on, as a catalog description's first word says them (NVIDIA,
    AMD); empty: any."""
    calibration: Calibration
    arguments: dict[str, str]
    """Launch argument names by what they set: tp, pp, ep, max_batch, max_len, kv_dtype,
    memory_fraction, chunk."""

    def on(self, gpu: GPU) -> Engine:
        """The engine as it runs on `gpu`: its small-GPU max batch and chunk budget there
        (small_gpu_defaults), else itself."""
        if self.small_gpu_defaults is None:
            return self
        memory = gpu.visible_memory_gib or gpu.memory_gib
        if memory >= self.large_gpu_gib and not any(n in gpu.name.lower() for n in self.small_gpu_names):
            return self
        sequences, chunk = self.small_gpu_defaults
        return self.model_copy(update={"max_sequences": sequences, "chunk_tokens": chunk, "small_gpu_defaults": None})
