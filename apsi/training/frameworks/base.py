"""The Framework protocol's defaults: what a framework module without its own takes.

Owns the members a framework often has nothing of its own for (apsi.training.frameworks.interface
says what each means): no MTP blocks built, no FP8 activation copies, no expert-grid dominance, no
kept stage outputs, Megatron's kernel efficiency, the stage memory's own activations and
recomputation FLOPs (None), no context, expert or interleaved parallelism, any whole number of
micro-batches, and a dp that any count may take. A framework module imports the ones it keeps
(`from apsi.training.frameworks.base import ...`) and defines the rest: one place to change a
default, and a new framework writes only what is its own (docs/architecture.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from apsi.model.architecture import Architecture
    from apsi.training.frameworks.interface import Degrees, KernelRates, LayerBytes, RecomputeFlops

BUILDS_MTP = False
"""It builds no multi-token-prediction blocks."""
FP8_ACTIVATIONS = False
"""FP8 training keeps no 1-byte copies of the linear inputs."""
GRID_DOMINANCE = False
"""Every expert grid is kept (no grid is dominated by another at a flat MFU)."""
KEEPS_STAGE_OUTPUTS = False
"""Its pipeline frees each stage's output after sending it."""
KERNEL_EFFICIENCY: KernelRates = {"bf16": 1.0, "fp8": 1.0, "eager": 1.0}
"""Its kernels run at Megatron's calibrated rates (apsi.model.steptime), in each precision."""
layer_bytes: LayerBytes | None = None
"""apsi.model.memory's activations per layer."""
recompute_flops: RecomputeFlops | None = None
"""Megatron's recomputed modules' FLOPs (apsi.model.arithmetic)."""


def cp_ok(seq: int, cp: int, tp: int) -> bool:
    """No context parallelism: cp 1 only (and no rule of the sequence over tp)."""
    return cp == 1


def ep_choices(a: Architecture) -> list[int]:
    """No expert parallelism: ep 1 only."""
    return [1]


def default_etp(a: Architecture, tp: int) -> int:
    """Experts split over no TP ranks of their own: etp 1."""
    return 1


def vpp_ok(pp: int, vpp: int) -> bool:
    """No interleaved schedule: vpp 1 only."""
    return vpp == 1


def micro_group(c: Degrees) -> int:
    """Any whole number of micro-batches per replica runs."""
    return 1


def micro_rounds(c: Degrees) -> int:
    """No schedule that rounds the micro-batches over the pipeline (torchtitan's interleaved one does): 0."""
    return 0


def micro_least(c: Degrees) -> int:
    """No schedule that needs a least number of micro-batches (torchtitan's 1F1B needs pp): 1."""
    return 1


def dp_key(c: Degrees) -> tuple[int, ...]:
    """dp_step depends on no degree."""
    return ()


def dp_step(c: Degrees, knobs: dict[str, Any] | None = None) -> int:
    """Any dp: only the batch ties it (the framework's check_layout)."""
    return 1


def ep_overlap_allowed(layout: dict[str, Any]) -> bool:
    """No EP all-to-all overlap (ep_overlap is Megatron's knob)."""
    return False
