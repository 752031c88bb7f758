"""Training frameworks as data plus small functions, one module each.

A framework decides which layout knobs exist, how model states are sharded, which layouts are
legal (its own divisibility rules: MLM-ARGS, MLM-TC, TT-PD, DS; docs/sources.md) and its
defaults; what a framework module provides is the Framework protocol (apsi.training.frameworks.interface).
`megatron` is Megatron-Core as Megatron-LM, NeMo and Megatron-Bridge run it
(apsi.training.frameworks.megatron); `torchtitan` and `deepspeed` are theirs; `reference` is the reference
arithmetic, unchanged (apsi.model.arithmetic, as a module: apsi.training.frameworks.reference). A new
framework is a new module listed in FRAMEWORKS.

evaluate() and plan() take `framework`; under a framework other than `reference` plan() searches
every legal layout (apsi.training.frameworks.planner), while the reference runs the CP-SAT program
(apsi.training.reference.planning, docs/method.md 3.4). The default is `megatron` (DEFAULT).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, cast

from apsi.errors import unknown

if TYPE_CHECKING:
    from apsi.training.frameworks import deepspeed, megatron, reference, torchtitan
    from apsi.training.frameworks.interface import Framework

    # mypy checks each module against the protocol here (a module may implement a Protocol).
    _MEGATRON: Framework = megatron
    _TORCHTITAN: Framework = torchtitan
    _DEEPSPEED: Framework = deepspeed
    _REFERENCE: Framework = reference

FRAMEWORKS: tuple[str, ...] = ("megatron", "torchtitan", "deepspeed", "reference")
"""Frameworks apsi models, by the name `--framework` takes."""
DEFAULT = "megatron"
"""The framework a question without one is planned under."""


def framework_module(name: str) -> Framework:
    """The module of framework `name` (one of FRAMEWORKS): its knobs, rules, splits, memory and
    plan hook, as the Framework protocol lists them."""
    return cast("Framework", importlib.import_module(f"apsi.training.frameworks.{check_framework(name)}"))


def check_framework(name: object) -> str:
    """`name` if it is a framework, else an error suggesting the nearest."""
    if not isinstance(name, str) or name.strip().lower() not in FRAMEWORKS:
        raise unknown("framework", name, FRAMEWORKS)
    return name.strip().lower()
