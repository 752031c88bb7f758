"""The GPU catalog: the `GPU` model, the shipped gpus.yaml, and user catalog files.

Owns reading and validating GPU figures and looking a GPU up by name. It does no planning
arithmetic. A user file given with `catalog=` adds GPUs or overrides fields of shipped ones.
"""

from __future__ import annotations

import functools
import os
from importlib import resources
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from apsi.errors import InputError, unknown

Precision = Literal["bf16", "fp16", "fp8"]
PRECISIONS: tuple[str, ...] = ("bf16", "fp16", "fp8")


class GPU(BaseModel):
    """One accelerator's planning figures. TFLOPS are dense peaks (no 2:4 sparsity)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    description: str = ""
    memory_gib: float = Field(gt=0)
    """Planning capacity in GiB (2^30 bytes); apsi plans on 90% of it."""
    visible_memory_gib: float | None = None
    """What the driver reports as total, GiB; informational."""
    bf16_tflops: float | None = Field(default=None, gt=0)
    """Dense BF16 tensor peak with FP32 accumulation, 10^12 FLOP/s; None if unsupported."""
    fp16_tflops: float | None = Field(default=None, gt=0)
    """Dense FP16 peak with FP32 accumulation, 10^12 FLOP/s; None if unsupported."""
    fp8_tflops: float | None = Field(default=None, gt=0)
    """Dense FP8 tensor peak, 10^12 FLOP/s; None if unsupported."""
    hbm_tbps: float | None = Field(default=None, gt=0)
    """Memory bandwidth, 10^12 bytes/s."""
    scaleup_domain: int = Field(default=1, ge=1)
    """GPUs in one NVLink (or Infinity Fabric) domain; tensor parallelism stays inside it."""
    scaleup_gbps: float | None = Field(default=None, gt=0)
    """Scale-up bandwidth per GPU, 10^9 bytes/s, bidirectional headline."""
    scaleout_gbps: float | None = Field(default=None, gt=0)
    """Scale-out bandwidth per GPU, one direction, 10^9 bytes/s: its share of the node's NICs
    (400 Gb/s InfiniBand NDR per GPU = 50). None: apsi.model.steptime assumes a 100 Gb/s link."""
    scaleup_efficiency: float | None = Field(default=None, gt=0, le=1)
    """Largest share of the one-way scale-up bandwidth a large collective reaches (bus bandwidth);
    None: apsi.model.steptime.SCALEUP_EFFICIENCY."""
    scaleout_efficiency: float | None = Field(default=None, gt=0, le=1)
    """The same for the scale-out network; None: apsi.model.steptime.SCALEOUT_EFFICIENCY."""
    gpus_per_node: int = Field(default=8, ge=1)
    tdp_w: float | None = Field(default=None, gt=0)
    """Board power, watts."""
    price_usd_per_hour: float | None = Field(default=None, gt=0)
    """Typical on-demand cloud price per GPU-hour, USD; None if no reliable figure."""
    sources: dict[str, str] = Field(default_factory=dict)
    """Source of each figure, by field name."""

    def peak_tflops(self, precision: str) -> float:
        """Dense peak for `precision`, or an error naming the precisions this GPU can do."""
        value = getattr(self, f"{precision}_tflops", None) if precision in PRECISIONS else None
        if value is None:
            can = self.precisions()
            offer = f"it supports {', '.join(can)}" if can else "it supports none of bf16, fp16, fp8"
            raise InputError(f"{self.name} cannot run {precision}: {offer}")
        return value

    def precisions(self) -> list[str]:
        return [p for p in PRECISIONS if getattr(self, f"{p}_tflops") is not None]


_SHIPPED = "gpus.yaml"


def _parse(data: object, origin: str) -> dict[str, dict]:
    if not isinstance(data, dict) or not isinstance(data.get("gpus"), dict):
        raise InputError(f"{origin}: a GPU catalog must be a mapping with a 'gpus:' mapping of name -> figures")
    entries: dict[str, dict] = {}
    for name, fields in data["gpus"].items():
        if not isinstance(fields, dict):
            raise InputError(f"{origin}: GPU {name!r} must be a mapping of figures, got {type(fields).__name__}")
        entries[str(name)] = dict(fields)
    return entries


def _build(name: str, fields: dict, origin: str) -> GPU:
    try:
        gpu = GPU(name=name, **{k: v for k, v in fields.items() if k != "name"})
        if not gpu.precisions():
            raise InputError(f"{origin}: GPU {name!r} gives no peak: set at least one of bf16_tflops, "
                             "fp16_tflops, fp8_tflops (dense TFLOPS)")
        return gpu
    except ValidationError as err:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'entry'}: {e['msg']}" for e in err.errors()
        )
        raise InputError(f"{origin}: GPU {name!r}: {problems}") from None


@functools.lru_cache(maxsize=1)
def _shipped_entries() -> dict[str, dict]:
    text = resources.files("apsi").joinpath(_SHIPPED).read_text(encoding="utf-8")
    # Every process that plans or lists GPUs parses this file: libyaml's safe loader, where
    # PyYAML has it, does so about 8x faster than the pure-Python one (about 50 ms of each
    # `apsi gpus`; benchmarks/process_time.py) and gives the same data for this file.
    return _parse(yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)), _SHIPPED)


@functools.lru_cache(maxsize=32)
def _load(path: str | None, stamp: tuple[int, int] | None = None) -> dict[str, GPU]:
    """The catalog with `path`'s entries; `stamp` (mtime, size) only keys the cache, so an
    edited file is read again."""
    entries = {k: dict(v) for k, v in _shipped_entries().items()}
    if path is not None:
        file = Path(path)
        try:
            text = file.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise InputError(f"catalog file {path} does not exist") from None
        except (OSError, UnicodeDecodeError) as err:
            raise InputError(f"catalog file {path} cannot be read: {err}") from None
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as err:
            mark = getattr(err, "problem_mark", None)
            where = f" at line {mark.line + 1}" if mark is not None else ""
            raise InputError(f"catalog file {path} is not valid YAML{where}") from None
        for name, fields in _parse(data, f"catalog file {path}").items():
            # A known name (in any case, as lookups are) overrides only the fields it gives; a new
            # name must give all required ones.
            known = next((key for key in entries if key.lower() == name.lower()), name)
            entries[known] = {**entries.get(known, {}), **fields}
    origin = f"catalog file {path}" if path else _SHIPPED
    return {name: _build(name, fields, origin) for name, fields in entries.items()}


def catalog(path: str | Path | None = None) -> dict[str, GPU]:
    """All GPUs by name: the shipped catalog, with `path`'s entries added or overriding."""
    if path is None:
        return _load(None)
    if not isinstance(path, (str, os.PathLike)):
        raise InputError(f"catalog must be a path to a YAML file, got {path!r}")
    file = Path(path).resolve()
    try:
        info = file.stat()
        stamp = (info.st_mtime_ns, info.st_size)
    except OSError:
        stamp = None  # _load reports the missing or unreadable file
    return _load(str(file), stamp)


def find_gpu(name: str, path: str | Path | None = None) -> GPU:
    """The GPU called `name` (case-insensitive), or an error suggesting the nearest name."""
    gpus = catalog(path)
    if not isinstance(name, str):
        raise InputError(f"GPU name must be a string, got {name!r}")
    for key, gpu in gpus.items():
        if key.lower() == name.strip().lower():
            return gpu
    raise unknown("GPU", name, gpus)
