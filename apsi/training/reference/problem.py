"""The layout program's question and answer as data: Hardware, LayoutProblem, LayoutSolution.

Owns the plain-number problem the reference arithmetic's CP-SAT program solves (apsi.training.reference.program) and
the solution it returns, with the limits the program's integer scaling is sized for. Pydantic
models only; no solving here, and no OR-Tools import.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from apsi.inputs.question import MAX_BATCH_SEQUENCES


MAX_GPUS = 2**20
"""Largest GPU cap the integer scaling is sized for."""

Objective = Literal["gpus", "days", "cost", "energy"]
Status = Literal["OPTIMAL", "FEASIBLE", "INFEASIBLE", "UNKNOWN", "MODEL_INVALID"]


class Hardware(BaseModel):
    """What the program needs to know about one GPU type."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    tp_choices: tuple[int, ...] = Field(min_length=1)
    usable_bytes: float = Field(gt=0)
    """cap_g: bytes one GPU may fill."""
    gpu_seconds: dict[str, float]
    """K_gr: training FLOPs at level r over (this GPU's peak x MFU)."""
    price_per_gpu_second: float | None = Field(default=None, gt=0)
    watts: float | None = Field(default=None, gt=0)


class LayoutProblem(BaseModel):
    """Plain numbers for one layout search; built by apsi.training.reference.planning.problem from the user's inputs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    hardware: tuple[Hardware, ...] = Field(min_length=1)
    """GPU types to choose from, in tie-break order."""
    pp_choices: tuple[int, ...] = Field(min_length=1)
    recompute_choices: tuple[str, ...] = Field(min_length=1)
    dp_min: int = Field(default=1, ge=1)
    dp_max: int = Field(ge=1)
    max_gpus: int = Field(ge=1, le=MAX_GPUS)
    state_bytes: int = Field(ge=0)
    """S: weights + gradients + optimizer states of the whole model, bytes."""
    activation_bytes: dict[str, int]
    """A_r: activation bytes one GPU holds at TP 1, per recompute level."""
    batch_sequences: int = Field(ge=1, le=MAX_BATCH_SEQUENCES)
    micro_batch: int = Field(ge=1)
    target_seconds: float | None = Field(default=None, gt=0)
    """The deadline; ignored by the days objective."""
    objective: Objective = "gpus"
    time_limit_seconds: float = Field(default=10.0, gt=0)
    """Budget of CP-SAT deterministic time for all solves of this problem."""
    tie_break: bool = True
    """False: stop at the optimal objective without ordering ties; for what-if solves."""


class SolvedLayout(NamedTuple):
    """The layout of a solution that has one (LayoutSolution.layout)."""

    gpu: str
    tp: int
    pp: int
    dp: int
    recompute: str

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp


class LayoutSolution(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    status: Status
    """OPTIMAL only when every solve proved its optimum; FEASIBLE when a time limit cut one short."""
    gpu: str | None = None
    tp: int | None = None
    pp: int | None = None
    dp: int | None = None
    recompute: str | None = None
    seconds: float
    """CP-SAT's deterministic time summed over the solves: reproducible solver work, in CP-SAT's
    seconds-equivalent units (wall time varies by machine; benchmarks/ measures it)."""
    solves: int

    @property
    def layout(self) -> SolvedLayout | None:
        """The layout, or None when no layout was found (INFEASIBLE, UNKNOWN, MODEL_INVALID)."""
        if self.gpu is None or self.tp is None or self.pp is None or self.dp is None or self.recompute is None:
            return None
        return SolvedLayout(self.gpu, self.tp, self.pp, self.dp, self.recompute)

    @property
    def gpus(self) -> int:
        layout = self.layout
        assert layout is not None, f"a {self.status} solution has no layout"
        return layout.gpus
