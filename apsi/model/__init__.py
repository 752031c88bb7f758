"""Data models (schema) and the planning arithmetic (arithmetic), kept apart from search and I/O."""

from apsi.model.schema import (
    Layout,
    MemoryBreakdown,
    ModelShape,
    Plan,
    ServingPlan,
    SolverReport,
)

__all__ = ["Layout", "MemoryBreakdown", "ModelShape", "Plan", "ServingPlan", "SolverReport"]
