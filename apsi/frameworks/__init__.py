"""Training frameworks as data plus small functions, one module each.

A framework decides which layout knobs exist, how model states are sharded, which layouts are
legal (its own divisibility rules: MLM-ARGS, MLM-TC, TT-PD, DS; docs/sources.md) and its
defaults. `reference` is the reference arithmetic, unchanged (apsi.model.arithmetic);
`megatron` is Megatron-Core as Megatron-LM, NeMo and Megatron-Bridge run it
(apsi.frameworks.megatron). A new framework is a new module listed in FRAMEWORKS.

evaluate() and plan() take `framework`; under `megatron` plan() searches every legal layout
(apsi.frameworks.search) rather than running the CP-SAT program, which still works on the
reference arithmetic (docs/method.md 3.4). The default is `reference`.
"""

from __future__ import annotations

from apsi.errors import unknown

FRAMEWORKS: tuple[str, ...] = ("megatron", "torchtitan", "deepspeed", "reference")
"""Frameworks apsi models, by the name `--framework` takes."""
DEFAULT = "megatron"
"""The framework a question without one is planned under."""


def framework_module(name: str):
    """The module of a framework other than the reference (its rules, splits and memory)."""
    import importlib

    return importlib.import_module(f"apsi.frameworks.{name}")


def check_framework(name: object) -> str:
    """`name` if it is a framework, else an error suggesting the nearest."""
    text = name.strip().lower() if isinstance(name, str) else name
    if text not in FRAMEWORKS:
        raise unknown("framework", name, FRAMEWORKS)
    return text
