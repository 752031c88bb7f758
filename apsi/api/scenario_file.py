"""A scenario file: reading it, its keys and value types, defaults under runs, and list values
expanded into one run per combination.

Owns what a file of runs (apsi.api.scenarios) and a fleet's runs (apsi.fleets.spec) share: the
run keys each kind takes (RUN_KEYS for `kind: train`, SERVE_KEYS for `kind: serve`) and the
file's own (FILE_KEYS), reading a file or mapping (read_source, parse_text: lines remembered for
messages), the `defaults:` block (defaults_of), one run's expansion into its combinations with
each value's type checked (expand, count_runs), a run's config.json path beside the file (beside)
and the file's GPU catalog (catalog_path). A problem with the file as a whole raises
ScenarioError; a run's own is returned with it. No planning.
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from apsi.errors import ApsiError, InputError, brief, unknown
from apsi.inputs import knobs
from apsi.inputs.modelspec import ARCHITECTURE_OPTIONS
from apsi.lineyaml import line_of, load_yaml, plain, yaml_message
from apsi.units import looks_like_size


RUN_KEYS: tuple[str, ...] = (
    "params", "active", "tokens", "gpu", "gpus", "days", "precision", "optimizer", "seq", "batch", "mfu",
    "max_gpus", *knobs.REFERENCE_KNOBS, "objective", "price", "pue", "flops_convention", "levers",
    "framework", "batch_tolerance", *knobs.FRAMEWORK_KNOBS, "failures", "checkpoint_minutes", "include_consumer",
    "node_granularity", *ARCHITECTURE_OPTIONS)
"""plan()'s keywords that a run may set (the catalog is set once per file, with `catalog:`); the
architecture keys (layers, width, heads, kv_heads, ...) override a preset's or config's fields.
A YAML list always expands into runs; to let plan() choose the GPU type, give gpu as a
comma-separated string ("H100,B200") or "any"."""


SERVE_KEYS: tuple[str, ...] = ("params", "engine", "gpu", "precision", "kv_precision", "isl", "osl", "prefix",
                               "ttft", "tpot", "rate", "concurrency", "inventory", "objective", "tp", "pp",
                               "active", "price", "pue", *ARCHITECTURE_OPTIONS)
"""serve()'s keywords that a run with `kind: serve` may set (apsi.serving.plan.SERVE_OPTIONS, less
the catalog, which is the file's)."""


KNOWN_KEYS = frozenset(("params",) + RUN_KEYS + SERVE_KEYS)
"""Every key a run may give, of either kind (a failed run's row keeps those it gave)."""


KINDS = ("train", "serve")
"""What a run plans: `kind: train` (the default) is plan(), `kind: serve` is serve()."""


BOOL_KEYS: tuple[str, ...] = ("levers", "tied", "failures", *knobs.FLAGS, "include_consumer")
"""Keys that take true/false; every other value is a number or a string."""


FILE_KEYS: tuple[str, ...] = ("catalog", "defaults", "runs", "fleet")
"""A file's top-level keys; one with `fleet:` is a fleet plan (apsi.fleets), read by apsi.fleets.spec."""


MAX_RUNS = 100_000
"""Most runs one file may expand to; a typo in a list product should not start a week of solving."""


MAX_FILE_BYTES = 2 * 2**20
"""The largest scenario file apsi reads (2 MiB: some 40,000 one-line runs; lists expand them to
MAX_RUNS), checked before it is read: the line-remembering YAML loader (apsi.lineyaml) reads about
0.4 MiB a second on a loaded machine, so a larger file would take minutes to refuse."""


_SCALAR_HINT = "a number or a string (such as 70B, H100 or fp8), or a list of them to expand"


MAX_TEXT = 4096
"""The longest string a run's value may be (a path's limit on Linux, PATH_MAX): a longer one is no
size, name or path, and is refused before any message would repeat it."""


class ScenarioError(InputError):
    """The scenario as a whole cannot be used; the message names the file and the problem."""


def read_source(source: str | os.PathLike | Mapping) -> tuple[Any, Path, str]:
    """The scenario's data, the folder its catalog path is relative to, and its name for messages."""
    if isinstance(source, Mapping):
        return source, Path.cwd(), "scenario"
    if not isinstance(source, (str, os.PathLike)):
        raise ScenarioError(f"a scenario is a YAML file's path or a mapping, got {brief(source)}")
    origin = f"scenario file {source}"
    from apsi.textfiles import read_text_file

    try:
        text = read_text_file(source, "scenario file", MAX_FILE_BYTES)
    except InputError as err:
        message = str(err)
        if message.endswith("does not exist"):
            message += ": give the path of a YAML file with a 'runs:' list"
        raise ScenarioError(message) from None
    return parse_text(text, origin), Path(source).resolve().parent, origin


EXAMPLE = "such as 'runs: [{params: 70B}]'"
"""The smallest scenario, for the messages that ask for one."""


def top_level(data: Any, origin: str) -> Mapping:
    """A scenario's parsed text as its top-level mapping, or one line saying what it is instead."""
    if data is None or data == "":
        raise ScenarioError(f"{origin} is empty: a scenario needs a 'runs:' list of plan() keyword mappings, {EXAMPLE}")
    if not isinstance(data, Mapping):
        raise ScenarioError(f"{origin} must be a mapping with a 'runs:' list, got {kind_of(data)}: {EXAMPLE}")
    return data


def parse_standard_input(text: str) -> Mapping:
    """The scenario given on standard input (`apsi run -`, `apsi fleet -`) as its top-level mapping,
    or one line saying why it is not one."""
    origin = "the scenario on standard input"
    return top_level(parse_text(text, origin), origin)


def parse_text(text: str, origin: str) -> Any:
    """A scenario's YAML text as data (lines remembered), or one line saying why it is not YAML."""
    try:
        return load_yaml(text)
    except yaml.YAMLError as err:
        raise ScenarioError(yaml_message(origin, err)) from None
    except RecursionError:
        raise ScenarioError(f"{origin} nests too deeply: a scenario is 'runs:' with one mapping per run") from None


def kind_of(value: Any) -> str:
    if isinstance(value, bool):
        return "true/false"
    if value is None:
        return "null"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, Mapping):
        return "a mapping"
    return "a list" if isinstance(value, list) else f"a {type(value).__name__} value"


def scalar(value: Any) -> bool:
    return isinstance(value, (str, int, float)) and not isinstance(value, bool)


SET_KEYS = ("recompute_modules",)
"""Keys whose one value is a set of names (Megatron's --recompute-modules core_attn mlp): a YAML
list of strings is that one value, and a list of such lists expands into one run per set."""


def _one_set(key: str, value: Any) -> Any:
    """A SET_KEYS value as plan() takes it: a list of names joined ("core_attn,mlp"), a list of
    lists as one such string per run; a serving run's inventory mapping as its K=V text
    ("H100=16", as serve() and the CLI take it); anything else as it is."""
    if key == "inventory" and isinstance(value, Mapping) and value and all(
            isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) for k, v in value.items()):
        return ",".join(f"{k}={v}" for k, v in value.items())
    if key not in SET_KEYS or not isinstance(value, list) or not value:
        return value
    if all(isinstance(v, str) for v in value):
        return ",".join(value)
    if all(isinstance(v, list) and v and all(isinstance(x, str) for x in v) for v in value):
        return [",".join(v) for v in value]
    return value


def check_value(key: str, value: Any) -> str | None:
    """Why `value` cannot be given for `key`, or None; plan() judges the value itself later."""
    value = _one_set(key, value)
    if key in BOOL_KEYS:
        items = value if isinstance(value, list) else [value]
        if value is None or (items and all(isinstance(v, bool) for v in items)):
            return None
        return f"{key} must be true or false (or a list of them to expand); got {brief(value)} ({kind_of(value)})"
    for item in value if isinstance(value, list) else [value]:
        if isinstance(item, str) and len(item) > MAX_TEXT:
            return f"{key} is a string of {len(item):,} characters: give at most {MAX_TEXT:,}"
    if scalar(value) or value is None:
        return None
    if isinstance(value, list):
        if not value:
            if key in SET_KEYS:
                return f"{key} is an empty list: give the modules it names (such as [core_attn, mlp])"
            return f"{key} is an empty list: a list expands to one run per value, so give at least one"
        for item in value:
            if key == "inventory" and isinstance(item, Mapping):
                # A list expands to one run per value: a list of one-type mappings reads as one
                # inventory to its writer but would be several runs, so neither is guessed.
                return ("inventory lists a mapping: give one inventory as one mapping ({H100: 8, H200: 4}), "
                        "or several to compare as a list of NAME=COUNT strings ([H100=8, 'H100=8,H200=4'])")
            if item is not None and not scalar(item):  # null: that run at the function's default
                return f"{key} lists {brief(item)} ({kind_of(item)}): each listed value must be a number or a string"
        seen: set[str] = set()
        for label in (value_label(v) if v is not None else "null" for v in value):
            if label in seen:  # two runs of one name (the second refused as 'already used')
                return f"{key} lists {label} twice: give each value once"
            seen.add(label)
        return None
    return f"{key} must be {_SCALAR_HINT}; got {brief(value)} ({kind_of(value)})"


def located(name: str, line: int | None) -> str:
    return f"run {name!r}" + (f" (line {line})" if line is not None else "")


def defaults_of(data: Mapping, origin: str) -> dict:
    defaults = data.get("defaults")
    if defaults is None:
        return {}
    if not isinstance(defaults, Mapping):
        raise ScenarioError(f"{origin}: 'defaults' must be a mapping of plan() keywords, got {kind_of(defaults)}")
    for key, value in defaults.items():
        at = f"{origin}, defaults" + (f" (line {line_of(defaults, key)})" if line_of(defaults, key) else "")
        if key not in RUN_KEYS and key not in SERVE_KEYS and key != "kind":
            raise ScenarioError(f"{at}: {unknown('key', key, RUN_KEYS + tuple(k for k in SERVE_KEYS if k not in RUN_KEYS))}")
        if key == "kind" and value is not None and value not in KINDS:
            raise ScenarioError(f"{at}: {unknown('kind', value, KINDS)}")
        if problem := check_value(key, value):
            raise ScenarioError(f"{at}: {problem}")
    return {k: v for k, v in plain(defaults).items() if v is not None}


def value_label(value: Any) -> str:
    """A value as a run's name shows it: floats as written (two values never share a label; a
    whole float without its .0), control characters escaped so that a name cannot drive the
    terminal."""
    if isinstance(value, float):
        text = str(int(value)) if value.is_integer() and abs(value) < 1e16 else repr(value)
    else:
        text = str(value)
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)


def expand(index: int, run: Any, line: int | None, defaults: dict) -> list[tuple[str, int | None, dict, str | None]]:
    """(name, line, inputs, error) for every run `run` stands for: one per combination of its lists."""
    if not isinstance(run, Mapping):
        name = f"run {index}"
        return [(name, line, {}, f"{located(name, line)} is {kind_of(run)}, not a mapping of plan() "
                                 "keywords such as 'params: 70B'")]
    name = f"run {index}"
    raw_name = run.get("name") if run.get("name") is not None else name  # null: the default name

    def fail(key: Any, problem: str) -> list:
        # Only checked values are ever copied (a YAML alias bomb in a value, a key or a name is
        # refused before it is expanded, and keys may not be strings): of the run's inputs, the
        # known keys' single values that pass their check, so that a bad run's CSV row keeps them.
        at = line_of(run, key) if isinstance(key, (str, int, float, bool)) or key is None else line
        kept = {k: v for k, v in run.items() if isinstance(k, str) and k != key and k in KNOWN_KEYS
                and (scalar(v) or isinstance(v, bool)) and check_value(k, v) is None}
        return [(name, line, kept, f"{located(name, at)}: {problem}")]

    if not scalar(raw_name) or not str(raw_name).strip() or len(str(raw_name).splitlines()) > 1:
        return fail("name", f"name must be a one-line string, got {brief(raw_name)}")
    name = value_label(raw_name)
    # null puts a key back to the function's default (docs/scenarios.md): kind's is train.
    kind = (run["kind"] if "kind" in run else defaults.get("kind", "train")) or "train"
    if kind not in KINDS:
        return fail("kind", str(unknown("kind", kind, KINDS)))
    keys = RUN_KEYS if kind == "train" else SERVE_KEYS
    what = "plan()" if kind == "train" else "serve()"
    for key, value in run.items():
        if not isinstance(key, str):
            return fail(None, f"keys are {what} keywords (strings); got {brief(key)} ({kind_of(key)})")
        if key in ("name", "kind"):
            continue
        if key not in keys:
            if value is None and (key in RUN_KEYS or key in SERVE_KEYS):
                continue  # null: the other kind's key left out, as a default of it is (docs/scenarios.md)
            if key in RUN_KEYS or key in SERVE_KEYS:
                other = "serve" if kind == "train" else "train"
                return fail(key, f"{key} is a key of a {other} run (kind: {other}), not of a {kind} run; a {kind} run "
                                 f"takes: {', '.join(('name', 'kind') + keys)}")
            return fail(key, str(unknown("key", key, ("name", "kind") + keys)))  # kind: train or serve, in both
        if problem := check_value(key, value):
            return fail(key, problem)
    given = plain({k: _one_set(k, v) for k, v in run.items() if k not in ("name", "kind") and k in keys})
    # Defaults apply to the runs whose kind takes them (a training default such as tokens is not a
    # serving run's).
    merged = {**{k: _one_set(k, v) for k, v in defaults.items() if k in keys}, **given}
    merged = {k: merged[k] for k in keys if merged.get(k) is not None}  # null: the function's default
    if kind == "serve":
        merged["kind"] = "serve"
    if "params" not in merged:
        return fail(None, "params is missing: give the model size, such as 'params: 70B'")
    listed = [k for k, v in merged.items() if isinstance(v, list)]
    out: list[tuple[str, int | None, dict, str | None]] = []
    for combo in itertools.product(*(merged[k] for k in listed)):
        label = " ".join(f"{k}={'null' if v is None else value_label(v)}" for k, v in zip(listed, combo))
        inputs = {**merged, **dict(zip(listed, combo))}
        out.append((f"{name} {label}" if label else name, line,
                    {k: v for k, v in inputs.items() if v is not None}, None))  # null: the default
    return out


def count_runs(run: Any, defaults: dict) -> int:
    """How many runs `run` expands to, before expanding it."""
    merged = {**defaults, **run} if isinstance(run, Mapping) else {}
    return math.prod(len(v) for k, v in ((k, _one_set(k, v)) for k, v in merged.items())
                     if (k in RUN_KEYS or k in SERVE_KEYS) and isinstance(v, list))


def beside(params: Any, base: Path) -> Any:
    """A relative config.json path (or model folder) as PARAMS names the file beside the scenario,
    as `catalog:` does; a size, a preset or a path that is not there is left as written."""
    if not isinstance(params, str) or looks_like_size(params) or not params.strip() or os.path.isabs(params):
        return params
    try:
        near = base / params
        # lexists: a link beside the scenario that leads nowhere (a loop, a missing target) is
        # still that file, and plan() says what is wrong with it.
        return str(near) if os.path.lexists(near) else params
    except (OSError, ValueError):
        return params


def catalog_path(value: Any, base: Path, origin: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ScenarioError(f"{origin}: 'catalog' must be the path of a GPU catalog YAML file, got {brief(value)} "
                            f"({kind_of(value)})")
    try:
        path = str((base / value).resolve())
    except (OSError, ValueError, RuntimeError):  # a NUL byte, a symlink loop: the catalog loader names it
        path = os.path.abspath(base / value)
    from apsi.catalog import catalog as _load_catalog

    try:
        _load_catalog(path)
    except ApsiError as err:
        raise ScenarioError(f"{origin}: {err}") from None
    return path
