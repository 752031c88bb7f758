"""Model presets shipped with apsi: well-known architectures by name.

Owns apsi/inputs/presets.json (package data) and looking a name up in it. Each preset is the subset of
its public Hugging Face config.json that apsi reads, with the config's address as its source, so
a preset goes through the same reader as a user's config.json (apsi.inputs.hf_config) and the two plan
alike. GPT-3 175B has no config.json; its entry writes the paper's Table 2.1 as a GPT-2 config.
"""

from __future__ import annotations

import functools
import json
import re
from importlib import resources
from typing import Any

from pydantic import BaseModel, ConfigDict

from apsi.model.architecture import Architecture


class Preset(BaseModel):
    """One shipped model."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    key: str
    """The name to type: llama-3.1-405b."""
    name: str
    """The model's own name: Llama 3.1 405B."""
    repo: str | None
    """Its Hugging Face repository, when it has one."""
    source: str
    """Where its figures come from: the config.json's address, or the paper."""
    config: dict[str, Any]
    published: dict[str, str | None]
    """The published size: total, active (MoE) and where it is stated."""


@functools.cache
def presets() -> dict[str, Preset]:
    """Every preset by key, in file order."""
    data = json.loads(resources.files("apsi.inputs").joinpath("presets.json").read_text(encoding="utf-8"))
    return {key: Preset(key=key, **entry) for key, entry in data.items()}


def _normal(name: str) -> str:
    """A name as typed, reduced for lookup to its letters and digits: case, spaces, dashes,
    underscores and dots do not matter ("Llama 3.1 405B", "llama3.1-405b", "llama_3_1_405b" all
    name llama-3.1-405b)."""
    return re.sub(r"[^0-9a-z]+", "", name.strip().lower())


def find_preset(name: str) -> Preset | None:
    """The preset `name` names (its key, its model name or its Hugging Face repository), or None."""
    wanted = _normal(name)
    for p in presets().values():
        names = [p.key, p.name] + ([p.repo, p.repo.split("/")[1]] if p.repo else [])
        if wanted in {_normal(n) for n in names}:
            return p
    return None


def preset_architecture(p: Preset) -> Architecture:
    from apsi.inputs.hf_config import architecture_from_config

    return architecture_from_config(p.config, where=f"preset {p.key}")
