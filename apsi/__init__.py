"""apsi: plan large-model training and serving (memory per GPU, layout, GPU count, days).

The public API lives in apsi.api.plan and is re-exported here: plan, evaluate, inference (the
reference's serving quotient), gpu_table, models; serve and serve_frontier (the serving plan and
its frontier) and ServePlan, ServeFrontierPoint from apsi.serving; serve_disagg and DisaggPlan (prefill and
decode on separate pools) from apsi.serving.disagg_plan; largest and Largest from apsi.api.largest (the largest model that trains on N GPUs
in D days); run_scenarios and Result from apsi.api.scenarios; frontier and FrontierPoint from
apsi.api.frontier (the GPU/day frontier); export_config from apsi.outputs.export (a plan as a launch configuration);
fleet, FleetResult and Fleet from apsi.fleets (many runs scheduled together on one GPU inventory);
json_schema (what `apsi schema` prints) and the output models RunRow, RunFailure, RunOutput and
FrontierOutput from apsi.outputs.schema. Errors a user can cause are ApsiError, a ValueError. Names
load on first use (PEP 562), so that `apsi --help` does not pay for pydantic and OR-Tools. In IPython
or Jupyter, results show as HTML tables (their _repr_html_, apsi.model.notebook).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

__version__ = "0.1.0"

_EXPORTS = {
    "ApsiError": "apsi.errors",
    "plan": "apsi.api.plan",
    "evaluate": "apsi.api.plan",
    "inference": "apsi.api.plan",
    "serve": "apsi.serving.plan",
    "serve_frontier": "apsi.serving.plan",
    "serve_disagg": "apsi.serving.disagg_plan",
    "DisaggPlan": "apsi.model.disagg_schema",
    "ServePlan": "apsi.model.serve_schema",
    "ServeFrontierOutput": "apsi.model.serve_schema",
    "ServeFrontierPoint": "apsi.model.serve_schema",
    "gpu_table": "apsi.api.plan",
    "models": "apsi.api.plan",
    "largest": "apsi.api.largest",
    "Largest": "apsi.api.largest",
    "run_scenarios": "apsi.api.scenarios",
    "Result": "apsi.api.scenarios",
    "frontier": "apsi.api.frontier",
    "FrontierPoint": "apsi.model.schema",
    "export_config": "apsi.outputs.export",
    "fleet": "apsi.fleets.api",
    "FleetResult": "apsi.fleets.result",
    "Fleet": "apsi.fleets.spec",
    "Plan": "apsi.model.schema",
    "Layout": "apsi.model.schema",
    "ServingPlan": "apsi.model.schema",
    "json_schema": "apsi.outputs.schema",
    "RunRow": "apsi.outputs.schema",
    "RunFailure": "apsi.outputs.schema",
    "RunOutput": "apsi.outputs.schema",
    "FrontierOutput": "apsi.outputs.schema",
    "InputError": "apsi.errors",
    "LayoutError": "apsi.errors",
    "UnknownNameError": "apsi.errors",
}
__all__ = sorted(_EXPORTS) + ["__version__"]

if TYPE_CHECKING:  # the names as a type checker sees them: `from apsi import Plan, plan` type-checks
    from apsi.errors import (
        ApsiError as ApsiError, InputError as InputError, LayoutError as LayoutError,
        UnknownNameError as UnknownNameError,
    )
    from apsi.outputs.export import export_config as export_config
    from apsi.fleets.api import fleet as fleet
    from apsi.fleets.result import FleetResult as FleetResult
    from apsi.fleets.spec import Fleet as Fleet
    from apsi.outputs.schema import (
        FrontierOutput as FrontierOutput, RunFailure as RunFailure, RunOutput as RunOutput, RunRow as RunRow,
        json_schema as json_schema,
    )
    from apsi.model.schema import (
        FrontierPoint as FrontierPoint, Layout as Layout, Plan as Plan, ServingPlan as ServingPlan,
    )
    from apsi.api.plan import (
        evaluate as evaluate, gpu_table as gpu_table, inference as inference, models as models, plan as plan,
    )
    from apsi.api.scenarios import Result as Result, run_scenarios as run_scenarios
    from apsi.serving.plan import serve as serve, serve_frontier as serve_frontier
    from apsi.serving.disagg_plan import serve_disagg as serve_disagg
    from apsi.model.disagg_schema import DisaggPlan as DisaggPlan
    from apsi.model.serve_schema import (
        ServeFrontierOutput as ServeFrontierOutput, ServeFrontierPoint as ServeFrontierPoint, ServePlan as ServePlan)
    from apsi.api.largest import Largest as Largest, largest as largest
    from apsi.api.frontier import frontier as frontier


def __getattr__(name: str) -> object:
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'apsi' has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__
