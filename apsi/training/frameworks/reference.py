"""The reference arithmetic (apsi.model.arithmetic) as a framework module: the Framework protocol's
members mapped onto it, and its plan, which stays the CP-SAT program (apsi.training.reference.planning.solve).

Owns what the reference allows and holds, in the protocol's terms (docs/method.md 3.1 to 3.3):
its knobs tp, pp, dp and recompute (the program chooses each one not pinned); its rules, those
the program is built on (apsi.training.reference.planning.problem): tp splits the heads and the KV heads (Setup's
tp_choices; Shoeybi et al. 2019 Sec. 3, MLM-TC), pp divides the layers (Setup's pp_choices), every
replica gets a micro-batch (dp x micro-batch <= the batch, apsi.training.reference.program's batch rule); its memory
per GPU, every model-state byte over every GPU (ZeRO-3) plus one GPU's activations:
S / G + A_r / tp (arithmetic.state_bytes, arithmetic.activation_bytes; Rajbhandari et al. 2020,
Korthikanti et al. 2022 Table 2, KOR); and its duration, a flat MFU (arithmetic.duration_seconds).

What the reference does not have takes its trivial value, said at each member: cp, ep, etp,
vpp and micro_batch are 1, the only pipeline split is L / pp layers per stage, no communication is
priced (the MFU holds it), no logits or reserve are counted (its headroom is the usable fraction
of memory, arithmetic.USABLE_FRACTION), no format exports its plans. This module must not change
a reference plan: plan() is apsi.training.reference.planning.solve, unchanged (tests/test_golden.py).

Worked example (tests/golden/reference.json, its first plan): 1T parameters, 32B active, 15T
tokens in fp8 on H100s: the program takes TP 8 x PP 1 x DP 65 = 520 GPUs; 16 bytes of adamw
states per parameter over 520 GPUs are 28.7 GiB, and 56 layers of activations over TP 8 (56 x 4,096
x (34 x 7,168 + 5 x 56 x 4,096) bytes / 8) 37.1 GiB: 65.8 GiB per GPU.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, cast

from apsi.inputs import knobs
from apsi.errors import LayoutError
from apsi.training.frameworks.stages import rank_layers as rank_layers  # the Framework member
from apsi.model import arithmetic as ar
from apsi.model import memory as mem
from apsi.model.arithmetic import divisors
from apsi.model.architecture import Architecture
from apsi.model.counting import count_parameters
from apsi.model.steptime import DpTraffic
# The Protocol's defaults it keeps (apsi.training.frameworks.base), re-exported as its own.
from apsi.training.frameworks.base import (
    BUILDS_MTP as BUILDS_MTP, FP8_ACTIVATIONS as FP8_ACTIVATIONS, GRID_DOMINANCE as GRID_DOMINANCE,
    KEEPS_STAGE_OUTPUTS as KEEPS_STAGE_OUTPUTS, KERNEL_EFFICIENCY as KERNEL_EFFICIENCY, cp_ok as cp_ok,
    default_etp as default_etp, dp_key as dp_key, dp_step as dp_step, ep_choices as ep_choices,
    ep_overlap_allowed as ep_overlap_allowed, micro_group as micro_group, micro_least as micro_least,
    micro_rounds as micro_rounds, recompute_flops as recompute_flops, vpp_ok as vpp_ok,
)

if TYPE_CHECKING:
    from apsi.training.frameworks.interface import Defaults, Framework
    from apsi.training.frameworks.stages import Counts
    from apsi.inputs.question import Setup
    from apsi.model.schema import Plan

NAME = "reference"
"""The name --framework takes."""
TITLE = "reference arithmetic"
"""The reference in messages ("tp 3 is not a reference arithmetic knob...")."""
KNOBS: tuple[str, ...] = knobs.REFERENCE_KNOBS
"""The layout knobs the reference takes (Setup's pins; the program chooses each one not given)."""
DEFAULTS: Defaults = {"pp": 1, "vpp": 1, "cp": 1, "ep": 1, "micro_batch": 1, "recompute": "none", "zero": 3}
"""What a knob not given takes where the program does not choose it: one sequence per micro-batch
(apsi.inputs.question.resolve), no context, expert or interleaved parallelism, every state over every GPU
(zero 3, Layout.zero); pp 1 and recompute none are the program's lightest choices (its tie-break)."""
MEMORY_KNOBS: tuple[str, ...] = ()
"""No knob of its own goes to memory()."""
DP_RULES = "the batch (dp x micro-batch <= the batch's sequences; dp need not divide it)"
"""The reference's rule on dp: a replica needs a micro-batch (apsi.training.reference.program); a dp that does not
divide the batch runs the exact ratio of micro-batches (apsi.training.reference.planning.assemble's note)."""
LOGIT_BYTES = 0
"""No logits are counted (Korthikanti et al. 2022 Table 2 counts the layers only)."""


def _this() -> Framework:
    return cast("Framework", sys.modules[__name__])


def tp_ok(a: Architecture, tp: int) -> bool:
    """tp divides the heads, and the KV heads split over it or each is shared by a group of its
    ranks (Setup.tp_choices, which also keeps tp inside the GPU's NVLink domain)."""
    return a.heads % tp == 0 and (a.kv_heads % tp == 0 or tp % a.kv_heads == 0)


def etp_choices(a: Architecture, tp: int) -> list[int]:
    """No expert grid: etp 1."""
    return [1]


def zero_choices(pp: int, optimizer: str = "adamw", moe: bool = False) -> tuple[int, ...]:
    """Every state over every GPU (ZeRO-3, Rajbhandari et al. 2020): zero 3 only."""
    return (3,)


def zero_ok(pp: int, zero: int, optimizer: str = "adamw", moe: bool = False) -> bool:
    """ZeRO-3 only."""
    return zero == 3


def check_training(precision: str, optimizer: str, knobs: dict[str, Any]) -> None:
    """Every precision the GPU has a peak for; the optimizers arithmetic.OPTIMIZER_BYTES counts."""
    if optimizer not in ar.OPTIMIZER_BYTES:
        raise LayoutError(f"optimizer {optimizer} is not one the reference arithmetic counts; valid: "
                          f"{', '.join(ar.OPTIMIZER_BYTES)}")


def check_pins(a: Architecture, seq: int, pins: dict[str, Any]) -> None:
    """The rules of the knobs in `pins` on their own, each naming the valid values (the messages
    of apsi.inputs.question' pin check; the NVLink domain's rule on tp is the GPU's, checked there)."""
    tp, pp, zero = pins.get("tp"), pins.get("pp"), pins.get("zero")
    if tp is not None and a.heads % tp:
        raise LayoutError(f"tp {tp} does not divide the {a.heads} attention heads; valid: "
                          f"{', '.join(map(str, divisors(a.heads)[:12]))}")
    if tp is not None and a.kv_heads % tp and tp % a.kv_heads:
        valid = [t for t in divisors(a.heads) if a.kv_heads % t == 0 or t % a.kv_heads == 0]
        raise LayoutError(f"tp {tp} does not divide the {a.kv_heads} KV heads, nor do they divide it; valid: "
                          f"{', '.join(map(str, valid[:12]))}")
    if pp is not None:
        split_layers(a.layers, pp, 1)
    for key in ("cp", "ep", "etp", "vpp", "micro_batch"):
        value = pins.get(key)
        if value is not None and value != 1:
            raise LayoutError(f"{key} {value} is not a knob of the reference arithmetic (no context, expert or "
                              "interleaved parallelism, one sequence per micro-batch); valid: 1")
    if zero is not None and zero != 3:
        raise LayoutError(f"zero {zero} is not a reference choice: it keeps every model state over every GPU "
                          "(zero 3); valid: 3")


def check_layout(a: Architecture, *, tp: int, pp: int, cp: int, ep: int, etp: int, dp: int, vpp: int,
                 micro_batch: int, seq: int, batch_sequences: int, zero: int = 3) -> None:
    """The reference's layout rules (check_pins, and every replica gets a micro-batch: apsi.training.reference.program's
    batch rule); the first broken one raises LayoutError."""
    check_pins(a, seq, dict(tp=tp, pp=pp, cp=cp, ep=ep, etp=etp, vpp=vpp, micro_batch=micro_batch, zero=zero))
    if dp * micro_batch > batch_sequences:
        raise LayoutError(f"dp {dp:,} exceeds the batch of {batch_sequences:,} sequences: every replica needs a "
                          f"micro-batch; valid: dp <= {batch_sequences // micro_batch:,}")


def splits(layers: int, pp: int, vpp: int, mtp: int = 0) -> tuple[tuple[int, ...], ...]:
    """The one split: L / pp layers on each stage, pp dividing the layers (Setup.pp_choices);
    empty for any other pp, and for vpp > 1 (no interleaving)."""
    if vpp != 1 or not 1 <= pp <= layers or layers % pp:
        return ()
    return ((layers // pp,) * pp,)


def split_layers(layers: int, pp: int, vpp: int, mtp: int = 0) -> tuple[int, ...]:
    """The split of `splits`; LayoutError naming the rule when there is none."""
    options = splits(layers, pp, vpp, mtp)
    if options:
        return options[0]
    if vpp != 1:
        raise LayoutError(f"vpp {vpp} is not a knob of the reference arithmetic (a 1F1B pipeline); valid: 1")
    if pp > layers:
        raise LayoutError(f"pp {pp} exceeds the {layers} layers: a pipeline stage needs at least one layer")
    raise LayoutError(f"pp {pp} does not divide the {layers} layers; valid: {', '.join(map(str, divisors(layers)))}")


def vocab_rows(vocab: int, tp: int) -> int:
    """The vocabulary as given (no padding)."""
    return vocab


def layer_bytes(a: Architecture, moe: bool, *, seq: int, micro_batch: int, tp: int, etp: int,
                recompute: str, sequence_parallel: bool = True) -> float:
    """One layer's activations per micro-batch on one GPU: Korthikanti et al. 2022 Table 2 over tp
    (arithmetic.activation_bytes_per_layer); an MoE layer holds the same. The reference divides
    all of it by tp whatever sequence_parallel says (its arithmetic, docs/method.md 3.1)."""
    return ar.activation_bytes_per_layer(seq, micro_batch, a.width, a.heads, recompute) / tp


def states(c: Counts, *, tp: int, pp: int, cp: int, ep: int, etp: int, dp: int, precision: str,
           micro_batches: int, optimizer: str, zero: int = 3) -> dict[str, float]:
    """Bytes of weights, gradients and optimizer state one GPU of a stage holds: the stage's
    parameters on one GPU (already over tp) over its dp replicas, every byte sharded
    (arithmetic.OPTIMIZER_BYTES)."""
    weights, gradients, optimizer_bytes = ar.OPTIMIZER_BYTES[optimizer]
    share = (c.dense + c.experts) / dp
    return dict(weights=weights * share, gradients=gradients * share, optimizer=optimizer_bytes * share)


def state_bytes_per_param(precision: str, optimizer: str, knobs: dict[str, Any]) -> float:
    """Weights, gradients and optimizer state per parameter (arithmetic.OPTIMIZER_BYTES: 16 for adamw)."""
    return float(sum(ar.OPTIMIZER_BYTES[optimizer]))


def state_floor(pp: int, zero: int, precision: str, optimizer: str, knobs: dict[str, Any]) -> float:
    """Nothing: dp shards every state byte."""
    return 0.0


def sharded_floor(zero: int, precision: str, optimizer: str, knobs: dict[str, Any], *, tp: int, cp: int, ep: int,
                  etp: int) -> tuple[float, float]:
    """Every state byte, dp sharding all of it (states())."""
    each = state_bytes_per_param(precision, optimizer, knobs)
    return each, each


def sharding(zero: int, dp: int, cp: int, pp: int, dp_replicate: int = 1) -> str:
    """Empty, as a reference plan's Layout.sharding is: its Layout line says ZeRO-3 itself."""
    return ""


def trained_params(a: Architecture) -> int:
    """Parameters with model states for a model built from `a`: its count and its MTP blocks'
    (ModelSpec.trained_params of a preset, config or shape; a bare size's are the size)."""
    counts = count_parameters(a)
    return counts.total.total + counts.mtp


def memory(a: Architecture, *, tp: int, pp: int, cp: int, ep: int, etp: int, dp: int, vpp: int, micro_batch: int,
           seq: int, batch_sequences: int, recompute: str, optimizer: str, precision: str,
           split: tuple[int, ...] | None = None, peak_only: bool = False,
           modules: tuple[str, ...] = mem.DEFAULT_MODULES, stop_above: float | None = None, zero: int = 3,
           params: int | None = None) -> list[dict[str, float] | None]:
    """Every pipeline stage's memory per GPU, bytes by part with its total, first to last: the
    reference's S / G + A_r / tp on each (apsi.training.reference.planning.assemble; with 1F1B the first stage holds
    pp micro-batches of L / pp layers, L layers' worth, and the reference counts that for every
    stage). `params` is the trained parameters (Setup.model.trained_params; default
    trained_params(a)). With peak_only the stages after the first, the same, are None."""
    if split is not None and tuple(split) not in splits(a.layers, pp, vpp):
        raise LayoutError(f"the reference splits {a.layers} layers into {pp} stages of {a.layers // max(1, pp)}, "
                          f"not {tuple(split)}")
    split_layers(a.layers, pp, vpp)
    gpus = tp * pp * dp
    weights, gradients, optimizer_bytes = (b / gpus for b in ar.state_bytes(params or trained_params(a), optimizer))
    parts = dict(weights=weights, gradients=gradients, optimizer=optimizer_bytes,
                 activations=ar.activation_bytes(a.layers, seq, micro_batch, a.width, a.heads, recompute) / tp,
                 logits=0.0, reserve=0.0)
    parts["total"] = sum(parts.values())
    return [parts] + [None if peak_only else dict(parts) for _ in range(pp - 1)]


def peak_bytes(a: Architecture, **layout: Any) -> float:
    """The most loaded stage's total bytes (memory(..., peak_only=True)): every stage's."""
    return max(p["total"] for p in memory(a, peak_only=True, **layout) if p is not None)


def dp_traffic(pp: int, zero: int, precision: str, knobs: dict[str, Any]) -> DpTraffic:
    """None priced: the reference's flat MFU holds every collective (arithmetic.duration_seconds)."""
    return DpTraffic(grad_bytes=0, gather_bytes=0)


def plan(s: Setup, pins: dict[str, Any], tolerance: float, explain: bool = False) -> Plan:
    """The reference plan for `s`: the CP-SAT program (apsi.training.reference.planning.solve), which always explains
    its answer (explain changes nothing). `pins` (tp, pp, dp, recompute) join the Setup's and are
    checked as apsi.inputs.question.resolve checks them; the batch stays exact, so `tolerance` must be 0."""
    from apsi.training.reference import planning
    from apsi.errors import InputError
    from apsi.inputs.question import _check_pins, check_knobs

    if tolerance:
        raise InputError("batch_tolerance is a framework option: the reference arithmetic keeps the batch exact "
                         "(give framework='megatron' to use it)")
    checked = check_knobs({k: v for k, v in pins.items() if v is not None}, _this())
    # cp, ep, etp and vpp of 1 pass check_knobs under any framework; the Setup has no field for them.
    given = {k: v for k, v in checked.items() if k in KNOBS}
    if given:
        s = _check_pins(s.model_copy(update=given))
    return planning.solve(s)
