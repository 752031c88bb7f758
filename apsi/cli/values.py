"""What each command-line value looks like: its placeholder in --help and its shell completions.

Owns VALUES, the kind of value each option takes (a size, a count, days, a file, true or false,
one of a list), and dress(app), which gives every option of every command that has no placeholder
of its own the one of its kind (typer's default reads `<str>`), and every option whose values
form a list its completions. The lists are their owners': the knobs' choices (apsi.inputs.knobs), the
precisions (apsi.catalog.PRECISIONS), the catalog's GPUs, the presets, the frameworks
(apsi.training.frameworks.FRAMEWORKS), the launch formats (apsi.outputs.export.FORMATS, apsi.outputs.export.engines.EXPORTS),
the MLP kinds and FLOP conventions (apsi.inputs.modelspec), the serving engines and their weight and KV
precisions (apsi.serving.engines, apsi.serving.replica); each is read only when a shell asks for
completions, so `apsi --help` loads none of them.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

import typer

from apsi.inputs import knobs

SIZE, COUNT, FILE, FLAG = "SIZE", "N", "FILE", "[true|false]"

VALUES: dict[str, str] = {
    # sizes and counts, read by apsi.units.parse_size (16K, 2^13, 1.5e12)
    "params": SIZE, "active": SIZE, "tokens": SIZE, "batch": SIZE, "seq": COUNT, "max_gpus": COUNT,
    "isl": COUNT, "osl": COUNT, "prefix": COUNT, "concurrency": COUNT, "tp": COUNT, "pp": COUNT,
    "micro_batch": "N|any", "layers": COUNT, "width": COUNT, "heads": COUNT, "kv_heads": COUNT, "head_dim": COUNT,
    "ffn": COUNT, "vocab": COUNT, "experts": COUNT, "top_k": COUNT, "shared_experts": COUNT, "expert_ffn": COUNT,
    "dense_layers": COUNT, "q_lora_rank": COUNT, "kv_lora_rank": COUNT, "qk_nope_dim": COUNT, "qk_rope_dim": COUNT,
    "v_head_dim": COUNT, "mtp_layers": COUNT, "gpus": COUNT, "node_granularity": COUNT,
    **{k.name: COUNT for k in knobs.KNOBS if k.kind == "degree" and k.name != "micro_batch"},
    # figures with their units
    "days": "DAYS", "mfu": "0-1", "price": "USD/GPU-HOUR", "pue": "RATIO", "checkpoint_minutes": "MINUTES",
    "batch_tolerance": "SHARE", "ttft": "MS", "tpot": "MS", "rate": "REQUESTS/S", "inventory": "GPU=N,...",
    "recompute_modules": "MODULE,...",
    # names and files
    "jobs": COUNT, "time_limit": "SECONDS", "to": "FORMAT", "since": "DATE", "answer": FILE,
    "gpu": "GPU", "catalog": FILE, "plot": FILE, "output": FILE, "export": "FORMAT", "export_dir": "FOLDER",
    # one of a list
    "mlp": "[swiglu|gelu]", "flops_convention": "[causal|full]", "tied": FLAG,
    **{k.name: FLAG for k in knobs.KNOBS if k.kind == "flag"},
    **{k.name: "[" + "|".join(k.choices) + "]" for k in knobs.KNOBS if k.kind == "choice"},
}
"""Each option's placeholder in --help, by its keyword: the kind of value it takes."""


def _gpus() -> list[str]:
    from apsi.catalog import catalog

    return [*catalog(None), "any"]


def _presets() -> list[str]:
    from apsi.inputs.presets import presets

    return list(presets())


def _frameworks() -> list[str]:
    from apsi.training.frameworks import FRAMEWORKS

    return list(FRAMEWORKS)


def _precisions() -> list[str]:
    from apsi.catalog import PRECISIONS

    return list(PRECISIONS)


def _exports() -> list[str]:
    from apsi.outputs.export import FORMATS

    return list(FORMATS)


def _weights() -> list[str]:
    from apsi.serving.replica import WEIGHT_BYTES

    return list(WEIGHT_BYTES)


def _kv() -> list[str]:
    from apsi.serving.replica import KV_BYTES

    return list(KV_BYTES)


def _engines() -> list[str]:
    from apsi.serving.engines import engines

    return list(engines())


def _engine_exports() -> list[str]:
    from apsi.outputs.export.engines import EXPORTS

    return list(EXPORTS)


def _mlps() -> list[str]:
    from apsi.inputs.modelspec import MLP_KINDS

    return list(MLP_KINDS)


def _conventions() -> list[str]:
    from apsi.inputs.modelspec import FLOPS_CONVENTIONS

    return list(FLOPS_CONVENTIONS)


def _flag() -> list[str]:
    return ["true", "false"]


def _choices(knob: knobs.Knob) -> Callable[[], list[str]]:
    return lambda: list(knob.choices)


COMPLETIONS: dict[str, Callable[[], list[str]]] = {
    "gpu": _gpus, "params": _presets, "framework": _frameworks, "precision": _precisions, "export": _exports,
    "to": _exports, "mlp": _mlps, "flops_convention": _conventions, "tied": _flag,
    **{k.name: _flag for k in knobs.KNOBS if k.kind == "flag"},
    **{k.name: _choices(k) for k in knobs.KNOBS if k.kind == "choice"},
}
"""The values a shell completes for each option with a list of them, by its keyword (the list
read from its owner only when asked)."""

SERVING: dict[str, Callable[[], list[str]]] = {"export": _engine_exports, "precision": _weights, "kv_precision": _kv,
                                               "engine": _engines}
"""The completions that differ under `apsi serve`: its --export is an engine's launch script, its
--precision the weights' (fp4 too)."""


def _completer(values: Callable[[], list[str]]) -> Callable[[str], list[str]]:
    def complete(incomplete: str) -> list[str]:
        return [v for v in values() if v.lower().startswith(incomplete.lower())]

    return complete


def dress(app: typer.Typer) -> None:
    """Give every option of `app`'s commands the placeholder of VALUES where it has none of its
    own, and every option and argument the completions of COMPLETIONS where it has none (an
    argument keeps its name: typer shows its type beside it whatever its placeholder)."""
    for command in app.registered_commands:
        if command.callback is None:
            continue
        own = SERVING if command.name == "serve" else {}
        for parameter in inspect.signature(command.callback).parameters.values():
            info: Any = parameter.default
            if not isinstance(info, typer.models.ParameterInfo):
                continue
            if isinstance(info, typer.models.OptionInfo) and info.metavar is None and parameter.name in VALUES:
                info.metavar = VALUES[parameter.name]
            values = own.get(parameter.name) or COMPLETIONS.get(parameter.name)
            if values is not None and info.autocompletion is None and info.shell_complete is None:
                info.autocompletion = _completer(values)
