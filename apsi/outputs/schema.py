"""Pydantic models for what the `apsi` commands print as JSON, and their JSON schemas.

Owns the output of each command's --json (or --format json) as one model, so that the printed
JSON and `apsi schema COMMAND` come from the same definition: a plan is apsi.model.schema.Plan, a
serving estimate ServingPlan, a scenario's runs RunOutput (a RunRow or a RunFailure each), a
frontier FrontierOutput. Data only: nothing here computes.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, RootModel, SerializerFunctionWrapHandler, model_serializer

from apsi.errors import unknown
from apsi.model.schema import FrontierPoint, Plan, ServingPlan
from apsi.model.serve_schema import ServeFrontierOutput, ServePlan
from apsi.model.notebook import Shown
from apsi.model.documented import Documented


class RunRow(Plan):
    """One solved run of `apsi run --format json`: the run's name, then the Plan's fields."""

    name: str
    """The run's name, distinct within the scenario (an expanded run carries its list values, e.g.
    "70B gpu=H100")."""

    @model_serializer(mode="wrap")
    def _name_first(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        return {"name": data.pop("name"), **data}


class ServeRow(ServePlan):
    """One solved serving run (`kind: serve`) of `apsi run --format json`: its name, then the
    ServePlan's fields."""

    name: str
    """The run's name, distinct within the scenario."""

    @model_serializer(mode="wrap")
    def _name_first(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        return {"name": data.pop("name"), **data}


class RunFailure(Documented):
    """One run of `apsi run --format json` that has no plan: its name, why, and its inputs."""

    name: str
    """The run's name, distinct within the scenario."""
    error: str
    """One line naming what stopped the run and what would be valid."""
    inputs: dict[str, Any]
    """The run's plan() keywords after defaults and expansion, as written (sizes stay strings like "70B")."""


class RunOutput(RootModel[list[RunRow | ServeRow | RunFailure]]):
    """What `apsi run FILE --format json` prints: one object per run in file order, a RunRow for a
    solved training run, a ServeRow for a solved serving run (`kind: serve`) and a RunFailure for
    one without a plan."""

    model_config = ConfigDict(frozen=True)


class FrontierOutput(Shown, RootModel[list[FrontierPoint]]):
    """What `apsi frontier ... --json` prints: every FrontierPoint, by GPUs, days strictly falling."""

    model_config = ConfigDict(frozen=True)


SCHEMAS: dict[str, type[BaseModel] | str] = {"plan": Plan, "run": RunOutput, "frontier": FrontierOutput,
                                              "serve": ServePlan, "serve-frontier": ServeFrontierOutput,
                                              "serve-reference": ServingPlan,
                                              "serve-disagg": "apsi.model.disagg_schema:DisaggPlan",
                                              "fleet": "apsi.fleets.result:FleetResult"}
"""The model behind each command's JSON: `apsi plan --json` (what `apsi export` and `apsi compare`
read back), `apsi run --format json`, `apsi frontier --json`, `apsi serve --json` (the serving
plan), `apsi serve --frontier --json`, `apsi serve --framework reference --json` (the
reference's quotient), `apsi serve --disagg --json` (the disaggregated plan) and `apsi fleet
--json` (also `apsi run` on a file with a fleet: block); a model named as "module:Name" is
imported when asked (the fleets wing sits above this one)."""
JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
"""The JSON Schema version pydantic's model_json_schema writes (pydantic's JSON Schema docs)."""


def json_schema(command: str = "plan") -> dict[str, Any]:
    """The JSON schema of what `apsi COMMAND --json` prints (COMMAND one of SCHEMAS), each field
    with its description and unit; any other command is an error naming the valid ones."""
    model = SCHEMAS.get(command) if isinstance(command, str) else None
    if model is None:
        raise unknown("schema", command, SCHEMAS)
    if isinstance(model, str):
        import importlib

        where, name = model.split(":")
        model = getattr(importlib.import_module(where), name)
        assert isinstance(model, type) and issubclass(model, BaseModel)
    return {"$schema": JSON_SCHEMA_DIALECT, **model.model_json_schema()}
