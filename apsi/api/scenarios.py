"""Scenario files: many plan() runs (and serve() runs, `kind: serve`) described in one YAML file (or
mapping), solved in parallel.

Owns reading a scenario, checking its keys and value types, layering defaults under runs,
expanding list values into one run per combination, and solving every run through
apsi.api.plan.plan in a process pool. It does no planning arithmetic and no formatting
(apsi.outputs.tables renders results). A file:

    catalog: my-gpus.yaml          # optional, relative to this file
    defaults: {tokens: 1.4T, days: 30}
    runs:
      - name: 70B
        params: 70B
        gpu: [H100, B200]          # two runs: "70B gpu=H100" and "70B gpu=B200"

A problem with the file as a whole (unreadable, not YAML, empty, wrong shape, bad defaults)
raises ScenarioError. A problem with one run (unknown key, wrong type, a value plan() rejects)
is kept in that run's Result, and every other run is still solved.
"""

from __future__ import annotations

import importlib
import itertools
import math
import multiprocessing
import os
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict

from apsi.inputs import knobs
from apsi.errors import ApsiError, InputError, brief, unknown
from apsi.lineyaml import item_lines, line_of, load_yaml, plain, yaml_message
from apsi.model.schema import Plan
from apsi.serving.schema import ServePlan
from apsi.inputs.modelspec import ARCHITECTURE_OPTIONS
from apsi.units import looks_like_size
from apsi.api.plan import plan

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
MAX_JOBS = 1024
MAX_FILE_BYTES = 2 * 2**20
"""The largest scenario file apsi reads (2 MiB: some 40,000 one-line runs; lists expand them to
MAX_RUNS), checked before it is read: the line-remembering YAML loader (apsi.lineyaml) reads about
0.4 MiB a second on a loaded machine, so a larger file would take minutes to refuse."""
PARALLEL_MIN_RUNS = 8
"""Up to this many runs are solved in this process: starting workers would cost more than it saves."""

_SCALAR_HINT = "a number or a string (such as 70B, H100 or fp8), or a list of them to expand"
MAX_TEXT = 4096
"""The longest string a run's value may be (a path's limit on Linux, PATH_MAX): a longer one is no
size, name or path, and is refused before any message would repeat it."""


class ScenarioError(InputError):
    """The scenario as a whole cannot be used; the message names the file and the problem."""


class Result(BaseModel):
    """One run of a scenario: its name and inputs, and either its Plan or the error that stopped it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    """Distinct within the scenario; expanded runs carry their list values, e.g. "70B gpu=H100"."""
    line: int | None
    """Line of the run in the scenario file; None when the scenario was a Python mapping."""
    inputs: dict[str, Any]
    """plan() keywords after defaults and expansion, as written (sizes stay strings like "70B")."""
    catalog: str | None = None
    """GPU catalog file for this run (absolute), from the scenario's `catalog:` key."""
    plan: Plan | None = None
    """The training plan of a `kind: train` run (the default)."""
    serve: ServePlan | None = None
    """The serving plan of a `kind: serve` run."""
    error: str | None = None
    """One line saying why the run has no plan; None when it has one."""

    kind: str = "train"
    """What the run plans: train (plan()) or serve (serve())."""

    @property
    def ok(self) -> bool:
        return self.plan is not None or self.serve is not None


def _read(source: str | os.PathLike | Mapping) -> tuple[Any, Path, str]:
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


def parse_text(text: str, origin: str) -> Any:
    """A scenario's YAML text as data (lines remembered), or one line saying why it is not YAML."""
    try:
        return load_yaml(text)
    except yaml.YAMLError as err:
        raise ScenarioError(yaml_message(origin, err)) from None
    except RecursionError:
        raise ScenarioError(f"{origin} nests too deeply: a scenario is 'runs:' with one mapping per run") from None


# -- checking and expansion ----------------------------------------------------------------------


def _kind(value: Any) -> str:
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


def _scalar(value: Any) -> bool:
    return isinstance(value, (str, int, float)) and not isinstance(value, bool)


def _check_value(key: str, value: Any) -> str | None:
    """Why `value` cannot be given for `key`, or None; plan() judges the value itself later."""
    if key in BOOL_KEYS:
        items = value if isinstance(value, list) else [value]
        if value is None or (items and all(isinstance(v, bool) for v in items)):
            return None
        return f"{key} must be true or false (or a list of them to expand); got {brief(value)} ({_kind(value)})"
    for item in value if isinstance(value, list) else [value]:
        if isinstance(item, str) and len(item) > MAX_TEXT:
            return f"{key} is a string of {len(item):,} characters: give at most {MAX_TEXT:,}"
    if _scalar(value) or value is None:
        return None
    if isinstance(value, list):
        if not value:
            return f"{key} is an empty list: a list expands to one run per value, so give at least one"
        for item in value:
            if not _scalar(item):
                return f"{key} lists {brief(item)} ({_kind(item)}): each listed value must be a number or a string"
        return None
    return f"{key} must be {_SCALAR_HINT}; got {brief(value)} ({_kind(value)})"


def _where(name: str, line: int | None) -> str:
    return f"run {name!r}" + (f" (line {line})" if line is not None else "")


def _defaults(data: Mapping, origin: str) -> dict:
    defaults = data.get("defaults")
    if defaults is None:
        return {}
    if not isinstance(defaults, Mapping):
        raise ScenarioError(f"{origin}: 'defaults' must be a mapping of plan() keywords, got {_kind(defaults)}")
    for key, value in defaults.items():
        at = f"{origin}, defaults" + (f" (line {line_of(defaults, key)})" if line_of(defaults, key) else "")
        if key not in RUN_KEYS and key not in SERVE_KEYS and key != "kind":
            raise ScenarioError(f"{at}: {unknown('key', key, RUN_KEYS + tuple(k for k in SERVE_KEYS if k not in RUN_KEYS))}")
        if key == "kind" and value not in KINDS:
            raise ScenarioError(f"{at}: {unknown('kind', value, KINDS)}")
        if problem := _check_value(key, value):
            raise ScenarioError(f"{at}: {problem}")
    return {k: v for k, v in plain(defaults).items() if v is not None}


def _label(value: Any) -> str:
    """A value as a run's name shows it: floats as written (two values never share a label; a
    whole float without its .0), control characters escaped so that a name cannot drive the
    terminal."""
    if isinstance(value, float):
        text = str(int(value)) if value.is_integer() and abs(value) < 1e16 else repr(value)
    else:
        text = str(value)
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)


def _expand(index: int, run: Any, line: int | None, defaults: dict) -> list[tuple[str, int | None, dict, str | None]]:
    """(name, line, inputs, error) for every run `run` stands for: one per combination of its lists."""
    if not isinstance(run, Mapping):
        name = f"run {index}"
        return [(name, line, {}, f"{_where(name, line)} is {_kind(run)}, not a mapping of plan() "
                                 "keywords such as 'params: 70B'")]
    raw_name = run.get("name", name := f"run {index}")

    def fail(key: Any, problem: str) -> list:
        # Only checked values are ever copied (a YAML alias bomb in a value, a key or a name is
        # refused before it is expanded, and keys may not be strings): of the run's inputs, the
        # known keys' single values that pass their check, so that a bad run's CSV row keeps them.
        at = line_of(run, key) if isinstance(key, (str, int, float, bool)) or key is None else line
        kept = {k: v for k, v in run.items() if isinstance(k, str) and k != key and k in KNOWN_KEYS
                and (_scalar(v) or isinstance(v, bool)) and _check_value(k, v) is None}
        return [(name, line, kept, f"{_where(name, at)}: {problem}")]

    if not _scalar(raw_name) or not str(raw_name).strip() or len(str(raw_name).splitlines()) > 1:
        return fail("name", f"name must be a one-line string, got {brief(raw_name)}")
    name = _label(raw_name)
    kind = run.get("kind", defaults.get("kind", "train"))
    if kind not in KINDS:
        return fail("kind", str(unknown("kind", kind, KINDS)))
    keys = RUN_KEYS if kind == "train" else SERVE_KEYS
    what = "plan()" if kind == "train" else "serve()"
    for key, value in run.items():
        if not isinstance(key, str):
            return fail(None, f"keys are {what} keywords (strings); got {brief(key)} ({_kind(key)})")
        if key in ("name", "kind"):
            continue
        if key not in keys:
            if key in RUN_KEYS or key in SERVE_KEYS:
                other = "serve" if kind == "train" else "train"
                return fail(key, f"{key} is a key of a {other} run (kind: {other}), not of a {kind} run; a {kind} run "
                                 f"takes: {', '.join(('name', 'kind') + keys)}")
            return fail(key, str(unknown("key", key, ("name", "kind") + keys)))  # kind: train or serve, in both
        if problem := _check_value(key, value):
            return fail(key, problem)
    given = plain({k: v for k, v in run.items() if k not in ("name", "kind")})
    # Defaults apply to the runs whose kind takes them (a training default such as tokens is not a
    # serving run's).
    merged = {**{k: v for k, v in defaults.items() if k in keys}, **given}
    merged = {k: merged[k] for k in keys if merged.get(k) is not None}  # null: the function's default
    if kind == "serve":
        merged["kind"] = "serve"
    if "params" not in merged:
        return fail(None, "params is missing: give the model size, such as 'params: 70B'")
    listed = [k for k, v in merged.items() if isinstance(v, list)]
    out: list[tuple[str, int | None, dict, str | None]] = []
    for combo in itertools.product(*(merged[k] for k in listed)):
        label = " ".join(f"{k}={_label(v)}" for k, v in zip(listed, combo))
        out.append((f"{name} {label}" if label else name, line, {**merged, **dict(zip(listed, combo))}, None))
    return out


def _count(run: Any, defaults: dict) -> int:
    """How many runs `run` expands to, before expanding it."""
    merged = {**defaults, **run} if isinstance(run, Mapping) else {}
    return math.prod(len(v) for k, v in merged.items() if (k in RUN_KEYS or k in SERVE_KEYS) and isinstance(v, list))


def load(source: str | os.PathLike | Mapping) -> list[Result]:
    """Every run of the scenario, checked and expanded, none solved yet (plan is None).

    Runs with a problem already carry their error; a problem with the whole file raises
    ScenarioError. A mapping's `catalog:` path is relative to the working directory.
    """
    data, base, origin = _read(source)
    example = "such as 'runs: [{params: 70B}]'"
    if data is None or data == "":
        raise ScenarioError(f"{origin} is empty: a scenario needs a 'runs:' list of plan() keyword mappings, {example}")
    if not isinstance(data, Mapping):
        raise ScenarioError(f"{origin} must be a mapping with a 'runs:' list, got {_kind(data)}: {example}")
    for key in data:
        if key not in FILE_KEYS:
            where = f" (line {line_of(data, key)})" if line_of(data, key) else ""
            raise ScenarioError(f"{origin}{where}: {unknown('top-level key', key, FILE_KEYS)}")
    if "fleet" in data:
        raise ScenarioError(f"{origin} has a fleet: block: its runs share one GPU inventory and are planned "
                            "together (apsi fleet FILE, or apsi.fleet() in Python)")
    runs = data.get("runs")
    if not isinstance(runs, list) or not runs:
        got = "is missing" if runs is None else ("is empty" if runs == [] else f"is {_kind(runs)}")
        raise ScenarioError(f"{origin}: 'runs' {got}: give a list of plan() keyword mappings, {example}")
    defaults = _defaults(data, origin)
    catalog = _catalog(data.get("catalog"), base, origin)
    total = sum(_count(r, defaults) for r in runs)
    if total > MAX_RUNS:
        raise ScenarioError(f"{origin} expands to {total:,} runs; at most {MAX_RUNS:,} per file: shorten its lists")
    results: list[Result] = []
    used: dict[str, int | None] = {}
    for index, (run, line) in enumerate(zip(runs, item_lines(runs)), start=1):
        for name, at, inputs, error in _expand(index, run, line, defaults):
            if "params" in inputs:
                inputs = {**inputs, "params": _beside(inputs["params"], base)}
            if error is None and name in used:
                first = f" (line {used[name]})" if used[name] else ""
                error = f"{_where(name, at)}: the name {name!r} is already used{first}: give each run its own name"
            used.setdefault(name, at)
            kind = "serve" if isinstance(run, Mapping) and run.get("kind", defaults.get("kind")) == "serve" else "train"
            results.append(Result(name=name, line=at, inputs=inputs, catalog=catalog, error=error, kind=kind))
    return results


def _beside(params: Any, base: Path) -> Any:
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


def _catalog(value: Any, base: Path, origin: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ScenarioError(f"{origin}: 'catalog' must be the path of a GPU catalog YAML file, got {brief(value)} "
                            f"({_kind(value)})")
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


# -- solving -------------------------------------------------------------------------------------


def _jobs(jobs: Any) -> int:
    if jobs is None:
        try:
            return max(1, len(os.sched_getaffinity(0)))  # the cores this process may use
        except AttributeError:  # pragma: no cover - not on Linux
            return max(1, os.cpu_count() or 1)
    if isinstance(jobs, int) and not isinstance(jobs, bool):
        text = str(jobs) if -1 < jobs <= MAX_JOBS else ""  # str() of a number past 4,300 digits fails
    else:
        text = jobs.strip() if isinstance(jobs, str) else ""
    if not (text.isascii() and text.isdigit()) or len(text) > 6 or not 1 <= int(text) <= MAX_JOBS:
        raise InputError(f"jobs must be a whole number from 1 to {MAX_JOBS:,}, got {brief(jobs)}")
    return int(text)


def _solve(task: tuple[dict, str | None]) -> tuple[Plan | ServePlan | None, str | None]:
    """One run in a worker: its Plan (or ServePlan for `kind: serve`), or the one-line message of
    the ApsiError plan() or serve() raised."""
    inputs, catalog = task
    extra = {"catalog": catalog} if catalog else {}
    try:
        if inputs.get("kind") == "serve":
            from apsi.serving.plan import serve

            return serve(**{k: v for k, v in inputs.items() if k != "kind"}, **extra), None
        return plan(**{k: v for k, v in inputs.items() if k != "kind"}, **extra), None
    except ApsiError as err:
        return None, str(err)


def run_scenarios(source: str | os.PathLike | Mapping, *, jobs: Any = None,
                  progress: Callable[[int, int], None] | None = None) -> list[Result]:
    """Solve every run of a scenario file (or mapping) and return one Result per run, in file order.

    `jobs` processes solve in parallel (default: every core this process may use); the results do
    not depend on it. `progress(done, total)` is called as runs finish. Raises ScenarioError when
    the file itself cannot be used; a run's own problem is its Result's `error`.

    >>> [r.name for r in run_scenarios({"runs": [{"params": "7B", "gpu": ["H100", "B200"]}]}, jobs=1)]
    ['run 1 gpu=H100', 'run 1 gpu=B200']
    """
    return solve(load(source), jobs=jobs, progress=progress)


def solve(loaded: list[Result], *, jobs: Any = None,
          progress: Callable[[int, int], None] | None = None) -> list[Result]:
    """run_scenarios() for runs load() has read: each Result without an error, solved (a new
    list; `loaded` is left as it was)."""
    workers = _jobs(jobs)
    results = list(loaded)
    todo = [i for i, r in enumerate(results) if r.error is None]
    tasks = [(results[i].inputs, results[i].catalog) for i in todo]
    total = len(todo)
    if progress:
        progress(0, total)
    workers = min(workers, total)
    outcomes: Iterator[tuple[Plan | ServePlan | None, str | None]]
    if workers <= 1 or total <= PARALLEL_MIN_RUNS:
        outcomes = map(_solve, tasks)
        pool = None
    else:
        # A run that needs OR-Tools (the reference arithmetic, a serving mix under an inventory)
        # imports it in its worker; a framework plan never does, so none is imported here.
        methods = multiprocessing.get_all_start_methods()
        context = multiprocessing.get_context("fork" if "fork" in methods else None)
        pool = ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=_worker_start)
        # Small chunks keep every worker busy when a few runs (fastest-layout searches) take
        # far longer than the rest; map() still returns them in order.
        outcomes = pool.map(_solve, tasks, chunksize=max(1, min(8, total // (workers * 16))))
    try:
        for done, (i, (solved, error)) in enumerate(zip(todo, outcomes), start=1):
            prefix = _where(results[i].name, results[i].line)
            key = "serve" if isinstance(solved, ServePlan) else "plan"
            results[i] = results[i].model_copy(update={key: solved,
                                                       "error": None if error is None else f"{prefix}: {error}"})
            if progress:
                progress(done, total)
    except BaseException:
        if pool is not None:  # Ctrl-C (once or many times): no worker outlives this process
            _stop(pool)
            pool = None
        raise
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    return results


def _worker_start() -> None:
    """In each worker: Ctrl-C is the parent's to handle (it stops the workers), and on Linux the
    kernel kills a worker whose parent is gone (PR_SET_PDEATHSIG), so none is ever left behind."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if os.getppid() == 1:  # the parent died before the line above
            os._exit(1)
    except (OSError, AttributeError):  # pragma: no cover - not on Linux
        pass


def _stop(pool: ProcessPoolExecutor) -> None:
    """Kill the pool's workers and drop its queue, with further Ctrl-C held off until done."""
    import signal

    try:
        old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    except (AttributeError, ValueError):  # pragma: no cover - not on POSIX, or not the main thread
        old = None
    try:
        processes = list((getattr(pool, "_processes", None) or {}).values())
        for process in processes:
            try:
                process.kill()
            except (OSError, ValueError):
                pass
        pool.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            process.join(timeout=2)
    finally:
        if old is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)
