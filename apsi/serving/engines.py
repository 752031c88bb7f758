"""The serving engines by name (vllm, sglang, trtllm), and the choice of one."""

from __future__ import annotations

from typing import Any

from apsi.serving.engine import Engine

DEFAULT_ENGINE = "vllm"


def engines() -> dict[str, Engine]:
    from apsi.serving import sglang, trtllm, vllm

    return {e.name: e for e in (vllm.ENGINE, sglang.ENGINE, trtllm.ENGINE)}


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
