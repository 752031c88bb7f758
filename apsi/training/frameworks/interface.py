"""What a framework module provides: the Framework protocol, and a check that a module meets it.

Owns the contract between a framework module (apsi.training.frameworks.megatron, .torchtitan, .deepspeed,
.reference) and what reads it: the search (apsi.training.frameworks.planner), evaluate()
(apsi.training.frameworks.evaluate), the stage memory (apsi.training.frameworks.stages), the step time
(apsi.training.frameworks.timing), the frontier and the knob checks (apsi.inputs.question). A module meets it by
having every member below at module level (mypy checks a module against a Protocol; `problems`
checks one at run time). No arithmetic and no rule lives here; nothing here imports a framework.

Worked example: `framework_module("deepspeed")` is a Framework whose KNOBS are tp, pp, dp,
micro_batch, recompute, recompute_modules and zero, whose `zero_choices(1)` is (0, 1, 2, 3) and
`zero_choices(8)` (0, 1) (ZeRO-2 and -3 do not run under its pipeline engine), whose `splits(30, 4,
1)` is ((8, 8, 7, 7),), and whose `layer_bytes` and `recompute_flops` are None (the stage memory
and the step time use apsi.model.memory's and apsi.model.arithmetic's figures).
"""

from __future__ import annotations

import inspect
import typing
from typing import TYPE_CHECKING, Any, Callable, Protocol, TypedDict, runtime_checkable

if TYPE_CHECKING:
    from apsi.training.frameworks.stages import Counts
    from apsi.inputs.question import Setup
    from apsi.model.architecture import Architecture
    from apsi.model.schema import Plan
    from apsi.model.collectives import DpTraffic


class _RequiredDefaults(TypedDict):
    pp: int
    vpp: int
    cp: int
    ep: int
    micro_batch: int
    recompute: str
    zero: int


class Defaults(_RequiredDefaults, total=False):
    """A framework's DEFAULTS: what a layout knob not given takes in evaluate() (pp, vpp, cp, ep
    and micro_batch 1 everywhere; recompute "none", or torchtitan's "selective"; zero the
    framework's ZeRO stage: Megatron 1, torchtitan and the reference 3, DeepSpeed 0)."""

    dp_replicate: int
    """torchtitan's HSDP replicas (data_parallel_replicate_degree 1)."""


class KernelRates(TypedDict):
    """A framework's KERNEL_EFFICIENCY: its compute rate relative to Megatron's kernels, by the
    precision the linear layers run in (fp16 as bf16), as apsi.model.steptime.GEMM_EFFICIENCY, and
    `eager`, the share of it a model not under torch.compile keeps (1.0 where the framework has no
    compile knob, apsi.inputs.knobs)."""

    bf16: float
    fp8: float
    eager: float


class Degrees(Protocol):
    """The parallel degrees of a layout without its dp (apsi.training.frameworks.space.Config has them)."""

    @property
    def tp(self) -> int: ...
    @property
    def pp(self) -> int: ...
    @property
    def cp(self) -> int: ...
    @property
    def vpp(self) -> int: ...
    @property
    def ep(self) -> int: ...
    @property
    def etp(self) -> int: ...


class LayerBytes(Protocol):
    """A framework's own activation bytes of one layer per micro-batch (torchtitan's per-op
    selective checkpointing), in place of apsi.model.memory.layer_activation_bytes."""

    def __call__(self, a: Architecture, moe: bool, *, seq: int, micro_batch: int, tp: int, etp: int,
                 recompute: str, sequence_parallel: bool = True) -> float: ...


class RecomputeFlops(Protocol):
    """A framework's own extra FLOPs per token under selective recomputation, given the matrix
    FLOPs' layers (torchtitan's per-op policy), in place of Megatron's recomputed modules."""

    def __call__(self, a: Architecture, matmul_layers: int, recompute: str) -> int: ...


@runtime_checkable
class Framework(Protocol):
    """A training framework as a module: its knobs, rules, splits, state sharding and hooks.

    Every member is read as `fw.NAME` by the search, evaluate(), the stage memory and the step
    time; a member a framework has no use for still exists, at its neutral value (None, False,
    1.0, the trivial domain (1,))."""

    def __hash__(self) -> int:
        """A module is hashable: the step time caches its answers per framework (functools.lru_cache)."""
        ...

    # -- names and knobs ------------------------------------------------------------------------
    NAME: str
    """The name `--framework` takes (apsi.training.frameworks.FRAMEWORKS)."""
    TITLE: str
    """The framework's name in messages ("Megatron", "torchtitan", "DeepSpeed")."""
    KNOBS: tuple[str, ...]
    """The layout knobs it takes as evaluate() and plan() keywords; any other is refused
    (apsi.inputs.question.check_knobs) unless it is 1 (cp, ep, etp, vpp)."""
    DEFAULTS: Defaults
    """What a knob not given takes (Defaults)."""
    MEMORY_KNOBS: tuple[str, ...]
    """Of KNOBS, those passed as they are to memory(), states(), check_layout() and dp_traffic()."""
    DP_RULES: str
    """Its rules on dp, in words, for the message when no dp is left."""

    # -- what its stages hold -------------------------------------------------------------------
    BUILDS_MTP: bool
    """Whether it builds a model's multi-token-prediction blocks (on the last stage)."""
    FP8_ACTIVATIONS: bool
    """Whether FP8 training caches linear inputs as 1-byte copies (apsi.model.memory)."""
    LOGIT_BYTES: int
    """Bytes per logit its loss keeps (apsi.model.memory.logits_bytes)."""
    KEEPS_STAGE_OUTPUTS: bool
    """Whether its pipeline keeps each stage's output until its backward (torch pipelining)."""
    GRID_DOMINANCE: bool
    """Whether expert grids of the same ep x etp dominate one another so the search keeps the one
    with the most EP (Megatron's parallel folding)."""
    KERNEL_EFFICIENCY: KernelRates
    """Its compute rate relative to Megatron's kernels, by precision (1.0: Megatron's; the step time)."""

    # -- layout domains -------------------------------------------------------------------------
    def tp_ok(self, a: Architecture, tp: int) -> bool:
        """Whether tp splits the attention and KV heads its way."""
        ...

    def cp_ok(self, seq: int, cp: int, tp: int) -> bool:
        """Whether the sequence splits over cp and `tp`, the TP ranks that split it (tp under
        sequence parallelism, 1 without), its way; cp 1 only where it has no context parallelism."""
        ...

    def ep_choices(self, a: Architecture) -> list[int]:
        """The expert-parallel degrees it allows for the model ([1] without experts or EP)."""
        ...

    def etp_choices(self, a: Architecture, tp: int) -> list[int]:
        """The expert-TP degrees it allows at tp ([1] without experts)."""
        ...

    def default_etp(self, a: Architecture, tp: int) -> int:
        """The expert TP a layout not giving etp takes."""
        ...

    def vpp_ok(self, pp: int, vpp: int) -> bool:
        """Whether vpp virtual stages per rank run at pp (vpp 1 only where it does not interleave)."""
        ...

    def zero_choices(self, pp: int, optimizer: str = "adamw", moe: bool = False) -> tuple[int, ...]:
        """The ZeRO stages the search tries at pp with this optimizer (for a MoE model: `moe`)."""
        ...

    def zero_ok(self, pp: int, zero: int, optimizer: str = "adamw", moe: bool = False) -> bool:
        """Whether a pinned ZeRO stage is one it runs at pp with this optimizer (for a MoE model: `moe`)."""
        ...

    def micro_group(self, c: Degrees) -> int:
        """The micro-batches per replica must be a multiple of this (the interleaved schedule's
        groups of pp; 1 elsewhere)."""
        ...

    def micro_rounds(self, c: Degrees) -> int:
        """Where not 0, the micro-batches per replica n must also be a multiple of max(1, n // it),
        the rounds torch's interleaved schedules run them in over a pipeline of this size
        (apsi.training.frameworks.batch.rounds_ok); 0 where no such rule holds."""
        ...

    def micro_least(self, c: Degrees) -> int:
        """The fewest micro-batches per replica the schedule runs (torch's Schedule1F1B refuses
        fewer than its stages: pp under torchtitan's 1F1B, apsi.training.frameworks.torchtitan.micro_least);
        1 where any count runs."""
        ...

    def dp_step(self, c: Degrees, knobs: dict[str, Any] | None = None) -> int:
        """dp must be a multiple of this (expert grids, HSDP replicas; 1 where nothing ties it)."""
        ...

    def dp_key(self, c: Degrees) -> tuple[int, ...]:
        """The degrees dp_step depends on (configurations with equal keys share their dp rule)."""
        ...

    # -- rules ----------------------------------------------------------------------------------
    def check_training(self, precision: str, optimizer: str, knobs: dict[str, Any]) -> None:
        """LayoutError naming the problem when it does not train at this precision with this
        optimizer, or a knob needs another."""
        ...

    def check_pins(self, a: Architecture, seq: int, pins: dict[str, Any]) -> None:
        """LayoutError naming the rule and the valid values for a pinned knob no layout allows."""
        ...

    def check_layout(self, a: Architecture, *, tp: int, pp: int, cp: int, ep: int, etp: int, dp: int, vpp: int,
                     micro_batch: int, seq: int, batch_sequences: int, zero: int = ...) -> None:
        """LayoutError naming the first legal-layout rule the layout breaks and its valid values;
        the framework's MEMORY_KNOBS come as keywords too."""
        ...

    # -- pipeline splits ------------------------------------------------------------------------
    def splits(self, layers: int, pp: int, vpp: int, mtp: int = 0) -> tuple[tuple[int, ...], ...]:
        """Its ways to lay `layers` over pp x vpp virtual stages (layers of each, schedule order),
        in its order of preference; empty when it has none."""
        ...

    def split_layers(self, layers: int, pp: int, vpp: int, mtp: int = 0) -> tuple[int, ...]:
        """The first of `splits`, or LayoutError naming the rule when there is none."""
        ...

    def rank_layers(self, chunk_sizes: tuple[int, ...], pp: int) -> tuple[int, ...]:
        """Layers on each pipeline rank of a split (virtual stage j on rank j % pp)."""
        ...

    # -- memory ---------------------------------------------------------------------------------
    def vocab_rows(self, vocab: int, tp: int) -> int:
        """The embedding rows it allocates (its vocabulary padding)."""
        ...

    def states(self, c: Counts, *, tp: int, pp: int, cp: int, ep: int, etp: int, dp: int, precision: str,
               micro_batches: int, optimizer: str, zero: int = ...) -> dict[str, float]:
        """Bytes of weights, gradients and optimizer state one GPU of a stage with counts `c`
        holds; its MEMORY_KNOBS come as keywords too."""
        ...

    def state_bytes_per_param(self, precision: str, optimizer: str, knobs: dict[str, Any]) -> float:
        """Model-state bytes per parameter before sharding."""
        ...

    def state_floor(self, pp: int, zero: int, precision: str, optimizer: str, knobs: dict[str, Any]) -> float:
        """Bytes per parameter of a GPU's shard that no data-parallel degree divides."""
        ...

    def sharded_floor(self, zero: int, precision: str, optimizer: str, knobs: dict[str, Any], *, tp: int, cp: int,
                      ep: int, etp: int) -> tuple[float, float]:
        """Bytes per parameter of a GPU's dense and expert shards that dp divides, at dp 1, the same
        at every pp: a stage holds at least state_floor x its parameters + these x its dense and
        expert ones / dp."""
        ...

    def sharding(self, zero: int, dp: int, cp: int, pp: int, dp_replicate: int = 1) -> str:
        """How its plan keeps the model states, in words for the Layout line."""
        ...

    @property
    def layer_bytes(self) -> LayerBytes | None:
        """Its own activation bytes per layer (LayerBytes), or None for apsi.model.memory's."""
        ...

    def memory(self, a: Architecture, *, tp: int, pp: int, cp: int, ep: int, etp: int, dp: int, vpp: int,
               micro_batch: int, seq: int, batch_sequences: int, recompute: str, optimizer: str, precision: str,
               split: tuple[int, ...] | None = None, peak_only: bool = False, modules: tuple[str, ...] = ...,
               stop_above: float | None = None, zero: int = ...) -> list[dict[str, float] | None]:
        """Every pipeline stage's memory per GPU, bytes by part (weights, gradients, optimizer,
        activations, logits, reserve) with its total, first to last; None for a stage peak_only
        leaves out. The split defaults to the first of `splits`; MEMORY_KNOBS come as keywords."""
        ...

    def peak_bytes(self, a: Architecture, *, tp: int, pp: int, cp: int, ep: int, etp: int, dp: int, vpp: int,
                   micro_batch: int, seq: int, batch_sequences: int, recompute: str, optimizer: str,
                   precision: str, split: tuple[int, ...] | None = None, modules: tuple[str, ...] = ...,
                   stop_above: float | None = None, zero: int = ...) -> float:
        """The most loaded stage's total bytes (memory's keywords, peak_only)."""
        ...

    # -- step time ------------------------------------------------------------------------------
    @property
    def recompute_flops(self) -> RecomputeFlops | None:
        """Its own selective-recomputation FLOPs (RecomputeFlops), or None for Megatron's modules
        (apsi.model.arithmetic.flops_per_token), whose core_attn re-runs the attention core."""
        ...

    def ep_overlap_allowed(self, layout: dict[str, Any]) -> bool:
        """Whether it hides the EP all-to-alls under the adjacent micro-batch on this layout."""
        ...

    def dp_traffic(self, pp: int, zero: int, precision: str, knobs: dict[str, Any]) -> DpTraffic:
        """Its data-parallel traffic per step (apsi.model.steptime.DpTraffic)."""
        ...

    # -- planning -------------------------------------------------------------------------------
    def plan(self, s: Setup, pins: dict[str, Any], tolerance: float, explain: bool = False) -> Plan:
        """The plan for `s` with these pinned knobs, the batch within `tolerance`: the layout
        search (apsi.training.frameworks.planner) or the reference's CP-SAT program (apsi.training.reference.planning)."""
        ...


_HOOKS: dict[str, type] = {"layer_bytes": LayerBytes, "recompute_flops": RecomputeFlops}
"""The members that are a callable or None, and the call each callable must take."""


def members() -> dict[str, str]:
    """Every member of Framework with its kind: "method", "hook" (a callable or None) or "data"."""
    out: dict[str, str] = {}
    for name, value in vars(Framework).items():
        if name.startswith("_"):
            continue
        if isinstance(value, property):
            out[name] = "hook"
        elif inspect.isfunction(value):
            out[name] = "method"
    for name in Framework.__annotations__:
        out[name] = "data"
    return dict(sorted(out.items()))


def _signature(function: Callable[..., object], drop_self: bool) -> inspect.Signature | None:
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return None
    parameters = list(signature.parameters.values())
    return signature.replace(parameters=parameters[1:] if drop_self else parameters)


def signature_problems(wanted: inspect.Signature, given: inspect.Signature) -> list[str]:
    """Why a function of signature `given` cannot be called as `wanted` is, one line each: a
    parameter of `wanted` it lacks (a **kwargs takes any keyword, an *args any position), one
    passed by position at another place, one `wanted` may leave out that it requires, or one of
    its own without a default."""
    out: list[str] = []
    params = list(given.parameters.values())
    named = {p.name: p for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
    takes_keywords = any(p.kind is p.VAR_KEYWORD for p in params)
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    takes_positions = any(p.kind is p.VAR_POSITIONAL for p in params)
    for i, p in enumerate(wanted.parameters.values()):
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if p.kind is p.POSITIONAL_OR_KEYWORD:
            if i < len(positional):
                if positional[i].name != p.name:
                    out.append(f"parameter {i + 1} is {positional[i].name}, not {p.name}")
                    continue
            elif not takes_positions:
                out.append(f"takes no parameter {i + 1} ({p.name})")
                continue
        mine = named.get(p.name)
        if mine is None:
            # **kwargs takes it by name; *args only a parameter that cannot be passed by name.
            if not (takes_keywords or (p.kind is p.POSITIONAL_ONLY and takes_positions)):
                out.append(f"lacks parameter {p.name}")
            continue
        if p.default is not p.empty and mine.default is mine.empty:
            out.append(f"requires {p.name}, which a caller may leave out")
    for p in params:
        if p.name not in wanted.parameters and p.default is p.empty and p.kind not in (p.VAR_POSITIONAL,
                                                                                       p.VAR_KEYWORD):
            out.append(f"requires {p.name}, which no caller gives")
    return out


def _conforms(value: object, hint: object) -> bool:
    """Whether `value` is of the annotated type `hint` (the kinds Framework's data members use)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if typing.is_typeddict(hint):
        fields = typing.get_type_hints(hint)
        required: frozenset[str] = getattr(hint, "__required_keys__", frozenset())
        return (isinstance(value, dict) and required <= value.keys() and value.keys() <= fields.keys()
                and all(_conforms(v, fields[k]) for k, v in value.items()))
    if origin is tuple:
        if not isinstance(value, tuple):
            return False
        if len(args) == 2 and args[1] is Ellipsis:
            return all(_conforms(x, args[0]) for x in value)
        return len(args) == len(value) and all(_conforms(x, t) for x, t in zip(value, args))
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(hint, type):
        return isinstance(value, hint)
    raise TypeError(f"no run-time check for {hint!r}")


def problems(module: object) -> list[str]:
    """Why `module` is not a Framework, one line per member: absent, of the wrong kind, a call
    Framework's callers cannot make (signature_problems), or data not of the declared type.
    Empty when it is one."""
    out: list[str] = []
    hints = typing.get_type_hints(Framework)
    given = getattr(module, "NAME", None)
    name = given if isinstance(given, str) else str(getattr(module, "__name__", "the module"))
    for member, kind in members().items():
        if not hasattr(module, member):
            out.append(f"{name} lacks {member} ({kind})")
            continue
        value = getattr(module, member)
        if kind == "data":
            if callable(value) or not _conforms(value, hints[member]):
                out.append(f"{name}.{member} is {value!r:.60}, not a {hints[member]}")
            continue
        if kind == "hook" and value is None:
            continue
        if not callable(value):
            out.append(f"{name}.{member} is {value!r:.60}, not a function")
            continue
        call = _HOOKS[member].__call__ if kind == "hook" else getattr(Framework, member)
        wanted, given = _signature(call, True), _signature(value, False)
        if wanted is None or given is None:
            out.append(f"{name}.{member} has no signature to check")
            continue
        out.extend(f"{name}.{member} {why}" for why in signature_problems(wanted, given))
    return out
