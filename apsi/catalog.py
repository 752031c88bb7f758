"""The GPU catalog: the `GPU` model, the shipped gpus.yaml, and user catalog files.

Owns reading and validating GPU figures and looking a GPU up by name. It does no planning
arithmetic. A user file given with `catalog=` adds GPUs or overrides fields of shipped ones.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from apsi.errors import InputError, brief, unknown
from apsi.textfiles import read_text_file
from apsi.units import refuse_bool

Precision = Literal["bf16", "fp16", "fp8"]
PRECISIONS: tuple[str, ...] = ("bf16", "fp16", "fp8")


MAX_FIGURE = 1e6
"""The largest figure a catalog may give for memory (GiB), a peak (TFLOPS), a bandwidth, power or
a price: a thousand times today's largest, so a typo (1e300) is refused, not planned on."""
MIN_FIGURE = 1e-3
"""The smallest peak (TFLOPS), bandwidth or price a catalog may give."""
MIN_EFFICIENCY = 0.01
"""The smallest share of a link's bandwidth a catalog may say a collective reaches: the measured
figures apsi ships are 82% over NVLink and 95% over the network (apsi.model.collectives); a
share of 1e-300 made every step 1e296 seconds long."""
MAX_DOMAIN = 1_000_000
"""The largest NVLink domain or node a catalog may give."""


_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
"""C0 and C1 control characters, DEL and the Unicode line and paragraph separators: none belongs in a
GPU's name or text, and a newline in one would start a new line of a launch script (apsi.outputs.export)."""


def _refuse_control(text: str) -> str:
    if (found := _CONTROL.search(text)) is not None:
        raise ValueError(f"{brief(text, 60)} holds the control character U+{ord(found.group()):04X}: "
                         "give printable text on one line")
    return text


class GPU(BaseModel):
    """One accelerator's planning figures. TFLOPS are dense peaks (no 2:4 sparsity)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    _no_bools = field_validator("memory_gib", "visible_memory_gib", "bf16_tflops", "fp16_tflops", "fp8_tflops",
                                "fp4_tflops", "hbm_tbps", "scaleup_domain", "scaleup_gbps", "scaleout_gbps", "scaleup_efficiency",
                                "scaleout_efficiency", "gpus_per_node", "tdp_w", "price_usd_per_hour",
                                mode="before")(refuse_bool)

    name: str
    description: str = ""
    memory_gib: float = Field(ge=MIN_FIGURE, le=MAX_FIGURE)
    """Planning capacity in GiB (2^30 bytes); apsi plans on 90% of it."""
    visible_memory_gib: float | None = Field(default=None, ge=MIN_FIGURE, le=MAX_FIGURE)
    """What the driver reports as total, GiB; informational."""
    bf16_tflops: float | None = Field(default=None, ge=MIN_FIGURE, le=MAX_FIGURE)
    """Dense BF16 tensor peak with FP32 accumulation, 10^12 FLOP/s; None if unsupported."""
    fp16_tflops: float | None = Field(default=None, ge=MIN_FIGURE, le=MAX_FIGURE)
    """Dense FP16 peak with FP32 accumulation, 10^12 FLOP/s; None if unsupported."""
    fp8_tflops: float | None = Field(default=None, ge=MIN_FIGURE, le=MAX_FIGURE)
    """Dense FP8 tensor peak, 10^12 FLOP/s; None if unsupported."""
    fp4_tflops: float | None = Field(default=None, ge=MIN_FIGURE, le=MAX_FIGURE)
    """Dense FP4 (NVFP4) tensor peak, 10^12 FLOP/s, for serving 4-bit weights; None if unsupported
    (every part before Blackwell)."""
    hbm_tbps: float | None = Field(default=None, ge=MIN_FIGURE, le=MAX_FIGURE)
    """Memory bandwidth, 10^12 bytes/s."""
    scaleup_domain: int = Field(default=1, ge=1, le=MAX_DOMAIN)
    """GPUs in one NVLink (or Infinity Fabric) domain; tensor parallelism stays inside it."""
    scaleup_gbps: float | None = Field(default=None, ge=MIN_FIGURE, le=MAX_FIGURE)
    """Scale-up bandwidth per GPU, 10^9 bytes/s, bidirectional headline."""
    scaleout_gbps: float | None = Field(default=None, ge=MIN_FIGURE, le=MAX_FIGURE)
    """Scale-out bandwidth per GPU, one direction, 10^9 bytes/s: its share of the node's NICs
    (400 Gb/s InfiniBand NDR per GPU = 50). None: apsi.model.collectives assumes a 100 Gb/s link."""
    scaleup_efficiency: float | None = Field(default=None, ge=MIN_EFFICIENCY, le=1)
    """Largest share of the one-way scale-up bandwidth a large collective reaches (bus bandwidth);
    None: apsi.model.collectives.SCALEUP_EFFICIENCY."""
    scaleout_efficiency: float | None = Field(default=None, ge=MIN_EFFICIENCY, le=1)
    """The same for the scale-out network; None: apsi.model.collectives.SCALEOUT_EFFICIENCY."""
    gpus_per_node: int = Field(default=8, ge=1, le=MAX_DOMAIN)
    architecture: str | None = Field(default=None, max_length=40)
    """The GPU's architecture (generation), lower case: "ampere", "hopper", "blackwell". It keys the
    step-time model's GEMM efficiency (apsi.model.steptime.gemm_efficiency): an architecture with
    benchmark rows of its own has its own; None, or one without, takes the default."""
    consumer: bool = False
    """A consumer part (GeForce): `gpu="any"` under a framework leaves it out unless
    include_consumer is given."""
    tdp_w: float | None = Field(default=None, ge=MIN_FIGURE, le=MAX_FIGURE)
    """Board power, watts."""
    price_usd_per_hour: float | None = Field(default=None, ge=MIN_FIGURE, le=MAX_FIGURE)
    """Typical on-demand cloud price per GPU-hour, USD; None if no reliable figure."""
    sources: dict[str, str] = Field(default_factory=dict)
    """Source of each figure, by field name."""

    @field_validator("name", "description", mode="after")
    @classmethod
    def _printable(cls, value: str) -> str:
        return _refuse_control(value)

    @field_validator("architecture", mode="after")
    @classmethod
    def _printable_architecture(cls, value: str | None) -> str | None:
        return None if value is None else _refuse_control(value).lower()

    @field_validator("sources", mode="after")
    @classmethod
    def _printable_sources(cls, value: dict[str, str]) -> dict[str, str]:
        for key, text in value.items():
            _refuse_control(key)
            _refuse_control(text)
        return value

    @model_validator(mode="after")
    def _visible_within_capacity(self) -> "GPU":
        # The driver reports at most the memory there is (visible_memory_gib is what a framework
        # plans on, apsi.training.frameworks.evaluate.capacity_gib).
        if self.visible_memory_gib is not None and self.visible_memory_gib > self.memory_gib:
            raise ValueError(f"visible_memory_gib {self.visible_memory_gib:g} is over memory_gib {self.memory_gib:g}: "
                             "the driver reports at most the memory there is")
        return self

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
_FILE_KEYS = ("gpus", "sources")
"""A catalog's top-level keys: the GPUs, and the sources their `sources:` tags cite."""


def _parse(data: object, origin: str) -> dict[str, dict]:
    if not isinstance(data, dict) or not isinstance(data.get("gpus"), dict):
        raise InputError(f"{origin}: a GPU catalog must be a mapping with a 'gpus:' mapping of name -> figures")
    for key in data:
        if key not in _FILE_KEYS:
            raise InputError(f"{origin}: {unknown('top-level key', key, _FILE_KEYS)}")
    entries: dict[str, dict] = {}
    table = data.get("sources") if isinstance(data.get("sources"), dict) else {}
    for name, fields in data["gpus"].items():
        if not isinstance(fields, dict):
            raise InputError(f"{origin}: GPU {brief(name)} must be a mapping of figures, got {type(fields).__name__}")
        if "name" in fields and fields["name"] != name:
            raise InputError(f"{origin}: GPU {brief(name)} gives name {brief(fields['name'])}: a GPU's name is its "
                             "key under gpus:, so leave name out")
        entries[str(name)] = dict(fields)
        if table and isinstance(fields.get("sources"), dict):
            entries[str(name)]["sources"] = {k: _cited(v, table) for k, v in fields["sources"].items()}
    return entries


def _cited(source: object, table: dict) -> object:
    """A figure's source with its tag resolved against the file's `sources:` list ("S3" ->
    "S3: NVIDIA/nccl issue #1264 ..."), so that a catalog's JSON names each source in full."""
    tag = re.match(r"(S\d+[a-z]?)\b", source) if isinstance(source, str) else None
    if tag is None or tag.group(1) not in table:
        return source
    return f"{source}: {table[tag.group(1)]}"


def _build(name: str, fields: dict, origin: str) -> GPU:
    try:
        gpu = GPU(name=name, **{k: v for k, v in fields.items() if k != "name"})
        if not gpu.precisions():
            raise InputError(f"{origin}: GPU {brief(name)} gives no peak: set at least one of bf16_tflops, "
                             "fp16_tflops, fp8_tflops (dense TFLOPS)")
        return gpu
    except ValidationError as err:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'entry'}: {e['msg'].removeprefix('Value error, ')}"
            for e in err.errors()
        )
        raise InputError(f"{origin}: GPU {brief(name)}: {problems}") from None


SHIPPED_CACHE = "gpus.json"
"""The shipped gpus.yaml as parsed, beside the SHA-256 of the text it was parsed from (written by
`python -m apsi.catalog`; tests/test_catalog.py fails when it is stale). Every process that plans
or lists GPUs reads the shipped catalog: while the hash matches, it reads this instead, and a plan
imports no PyYAML (about 9 ms of each `apsi plan` process of 0.31 s, docs/benchmarks.md); a
gpus.yaml edited since no longer matches, and is parsed itself."""


def _yaml_data(text: str) -> Any:
    import yaml

    # libyaml's safe loader, where PyYAML has it, parses about 8x faster than the pure-Python one
    # (about 50 ms of each `apsi gpus` before the cache; benchmarks/process_time.py), the same data.
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _cached_data(text: str) -> Any:
    """SHIPPED_CACHE's data where it was parsed from `text` (the shipped gpus.yaml), else None."""
    try:
        cache = json.loads(resources.files("apsi").joinpath(SHIPPED_CACHE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(cache, dict) or cache.get("gpus_yaml_sha256") != _digest(text):
        return None
    return cache.get("data")


def shipped_cache_text() -> str:
    """SHIPPED_CACHE's content for the shipped gpus.yaml as it is now."""
    text = resources.files("apsi").joinpath(_SHIPPED).read_text(encoding="utf-8")
    # In gpus.yaml's order (the catalog's order is the GPU types' order, which breaks ties).
    return json.dumps({"gpus_yaml_sha256": _digest(text), "data": _yaml_data(text)}, indent=1) + "\n"


@functools.lru_cache(maxsize=1)
def _shipped_entries() -> dict[str, dict]:
    text = resources.files("apsi").joinpath(_SHIPPED).read_text(encoding="utf-8")
    data = _cached_data(text)
    return _parse(_yaml_data(text) if data is None else data, _SHIPPED)


@functools.lru_cache(maxsize=32)
def _load(path: str | None, stamp: tuple[int, int] | None = None) -> dict[str, GPU]:
    """The catalog with `path`'s entries; `stamp` (mtime, size) only keys the cache, so an
    edited file is read again."""
    entries = {k: dict(v) for k, v in _shipped_entries().items()}
    if path is not None:
        import yaml

        from apsi.lineyaml import load_yaml, yaml_message

        text = read_text_file(path, "catalog file", MAX_CATALOG_BYTES)
        try:
            # libyaml where PyYAML has it; a key given twice is refused with its line
            data = load_yaml(text, max_items=MAX_CATALOG_ITEMS)
        except yaml.YAMLError as err:
            raise InputError(yaml_message(f"catalog file {path}", err)) from None
        except RecursionError:
            raise InputError(f"catalog file {path} nests too deeply: a catalog is 'gpus:' with one mapping of "
                             "figures per GPU") from None
        by_lower = {key.lower(): key for key in entries}
        for name, fields in _parse(data, f"catalog file {path}").items():
            # A known name (in any case, as lookups are) overrides only the fields it gives; a new
            # name must give all required ones. Two entries differing only in case are one GPU.
            known = by_lower.setdefault(name.lower(), name)
            shipped = dict(entries.get(known, {}))
            if "memory_gib" in fields and "visible_memory_gib" not in fields:
                # The driver's figure was the shipped capacity's: a new capacity stands alone
                # (what a framework plans on, apsi.training.frameworks.evaluate.capacity_gib).
                shipped.pop("visible_memory_gib", None)
            entries[known] = {**shipped, **fields}
    origin = f"catalog file {path}" if path else _SHIPPED
    return {name: _build(name, fields, origin) for name, fields in entries.items()}


MAX_CATALOG_ITEMS = 1_000_000
"""The most items a catalog may stand for with its YAML aliases expanded (apsi.lineyaml.expanded_size):
20,000 GPUs of 20 figures each hold some 800,000."""
MAX_CATALOG_BYTES = 2 * 2**20
"""The largest catalog file apsi reads (2 MiB: some 20,000 GPU entries), checked before it is read:
the line-remembering YAML loader reads about 0.4 MiB a second on a loaded machine."""


def catalog(path: str | Path | None = None) -> dict[str, GPU]:
    """All GPUs by name: the shipped catalog, with `path`'s entries added or overriding."""
    return _load(*_resolve(path))


@functools.lru_cache(maxsize=32)
def _index(path: str | None, stamp: tuple[int, int] | None = None) -> dict[str, GPU]:
    """_load's catalog by lower-case name (lookups in O(1), so a large catalog loads in O(n))."""
    return {name.lower(): gpu for name, gpu in _load(path, stamp).items()}


def _resolve(path: str | Path | None) -> tuple[str | None, tuple[int, int] | None]:
    """The catalog file's absolute path and (mtime, size), the key of the loaded catalogs."""
    if path is None:
        return None, None
    if not isinstance(path, (str, os.PathLike)):
        raise InputError(f"catalog must be a path to a YAML file, got {brief(path)}")
    try:
        file = Path(path).resolve()
        info = file.stat()
        stamp = (info.st_mtime_ns, info.st_size)
    except (OSError, RuntimeError, ValueError) as err:
        if isinstance(err, FileNotFoundError):
            raise InputError(f"catalog file {path} does not exist") from None
        why = "a symbolic link loop" if isinstance(err, RuntimeError) else getattr(err, "strerror", None) or err
        raise InputError(f"catalog file {str(path)[:200]!r} cannot be used: {why}") from None
    return str(file), stamp


def find_gpu(name: str, path: str | Path | None = None) -> GPU:
    """The GPU called `name` (case-insensitive), or an error suggesting the nearest name."""
    gpus = catalog(path)
    if not isinstance(name, str):
        raise InputError(f"GPU name must be a string, got {brief(name)}")
    found = _index(*_resolve(path)).get(name.strip().lower())
    if found is not None:
        return found
    raise unknown("GPU", name, gpus)


if __name__ == "__main__":
    # python -m apsi.catalog: rewrite SHIPPED_CACHE from gpus.yaml (after editing it).
    target = Path(__file__).with_name(SHIPPED_CACHE)
    target.write_text(shipped_cache_text(), encoding="utf-8")
    print(f"wrote {target}")
