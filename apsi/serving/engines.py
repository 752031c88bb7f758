"""The serving engines by name (vllm, sglang, trtllm), and the choice of one."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from apsi.serving.engine import Engine

ENGINES: tuple[str, ...] = ("vllm", "sglang", "trtllm")
"""Every serving engine, declared once, by the name `engine` takes: each is a module of
apsi.serving of that name whose ENGINE is its Engine (its figures, defaults and launch argument
names). A new engine is an entry here and its module; the CLI's choices, the export targets
(apsi.outputs.export.engines) and the validation tables follow from it."""
DEFAULT_ENGINE = "vllm"


def engines() -> dict[str, Engine]:
    """Each engine by name, in ENGINES' order."""
    out: dict[str, Engine] = {}
    for name in ENGINES:
        engine: Engine = importlib.import_module(f"apsi.serving.{name}").ENGINE
        out[engine.name] = engine
    return out


def engine(name: Any) -> Engine:
    """The engine `name` (case and spaces ignored), or an error naming the engines."""
    from apsi.errors import unknown

    table = engines()
    key = name.strip().lower().replace("-", "").replace("_", "") if isinstance(name, str) else None
    if key == "tensorrtllm":
        key = "trtllm"
    if key not in table:
        raise unknown("engine", name, list(table))
    return table[key]
