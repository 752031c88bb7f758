"""Scenario files: many plan() runs (and serve() runs, `kind: serve`) described in one YAML file (or
mapping), solved in parallel.

Owns reading a scenario, checking its keys and value types, layering defaults under runs,
expanding list values into one run per combination, and solving every run through
apsi.api.plan.plan in a process pool: each question once (question_key), runs alike in what their
search builds in one worker's batch (affinity_batches). It does no planning arithmetic and no formatting
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

import json
import multiprocessing
import os
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from pydantic import BaseModel, ConfigDict

from apsi.errors import ApsiError, InputError, brief, unknown
from apsi.lineyaml import item_lines, line_of
from apsi.model.schema import Plan
from apsi.model.serve_schema import ServePlan
from apsi.api.plan import plan
from apsi.api.scenario_file import (
    EXAMPLE, FILE_KEYS, MAX_RUNS, ScenarioError, beside, catalog_path, count_runs, defaults_of, expand, kind_of,
    located, read_source, top_level,
)

MAX_JOBS = 1024
PARALLEL_MIN_RUNS = 8
"""Up to this many runs are solved in this process: starting workers would cost more than it saves."""


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


# -- checking and expansion ----------------------------------------------------------------------


def load(source: str | os.PathLike | Mapping) -> list[Result]:
    """Every run of the scenario, checked and expanded, none solved yet (plan is None).

    Runs with a problem already carry their error; a problem with the whole file raises
    ScenarioError. A mapping's `catalog:` path is relative to the working directory.
    """
    data, base, origin = read_source(source)
    data = top_level(data, origin)
    for key in data:
        if key not in FILE_KEYS:
            where = f" (line {line_of(data, key)})" if line_of(data, key) else ""
            raise ScenarioError(f"{origin}{where}: {unknown('top-level key', key, FILE_KEYS)}")
    if "fleet" in data:
        raise ScenarioError(f"{origin} has a fleet: block: its runs share one GPU inventory and are planned "
                            "together (apsi fleet FILE, or apsi.fleet() in Python)")
    runs = data.get("runs")
    if not isinstance(runs, list) or not runs:
        got = "is missing" if runs is None else ("is empty" if runs == [] else f"is {kind_of(runs)}")
        raise ScenarioError(f"{origin}: 'runs' {got}: give a list of plan() keyword mappings, {EXAMPLE}")
    defaults = defaults_of(data, origin)
    catalog = catalog_path(data.get("catalog"), base, origin)
    total = sum(count_runs(r, defaults) for r in runs)
    if total > MAX_RUNS:
        raise ScenarioError(f"{origin} expands to {total:,} runs; at most {MAX_RUNS:,} per file: shorten its lists")
    results: list[Result] = []
    used: dict[str, tuple[int | None, bool]] = {}
    """By name, the line of the run first given it and whether it was the name of an unnamed run."""
    for index, (run, line) in enumerate(zip(runs, item_lines(runs)), start=1):
        for name, at, inputs, error in expand(index, run, line, defaults):
            if "params" in inputs:
                inputs = {**inputs, "params": beside(inputs["params"], base)}
            if error is None and name in used:
                taken, automatic = used[name]
                parts = ([f"line {taken}"] if taken else []) + (["the name given to an unnamed run"] if automatic else [])
                first = f" ({', '.join(parts)})" if parts else ""
                error = f"{located(name, at)}: the name {name!r} is already used{first}: give each run its own name"
            used.setdefault(name, (at, isinstance(run, Mapping) and "name" not in run))
            kind = ("serve" if isinstance(run, Mapping) and (run["kind"] if "kind" in run else defaults.get("kind")) == "serve"
                    else "train")
            results.append(Result(name=name, line=at, inputs=inputs, catalog=catalog, error=error, kind=kind))
    return results


# -- solving -------------------------------------------------------------------------------------


def jobs_of(jobs: Any) -> int:
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
    not depend on it. `progress(done, total)` is called as runs finish (with several workers, as each
    worker's batch of them does). Raises ScenarioError when the file itself cannot be used; a run's
    own problem is its Result's `error`.

    >>> [r.name for r in run_scenarios({"runs": [{"params": "7B", "gpu": ["H100", "B200"]}]}, jobs=1)]
    ['run 1 gpu=H100', 'run 1 gpu=B200']
    """
    return solve(load(source), jobs=jobs, progress=progress)


def solve(loaded: list[Result], *, jobs: Any = None,
          progress: Callable[[int, int], None] | None = None) -> list[Result]:
    """run_scenarios() for runs load() has read: each Result without an error, solved (a new
    list; `loaded` is left as it was). Runs that ask the same question (question_key) are solved
    once and share its answer: the same question gives the same answer, byte for byte (a sweep
    written out run by run may ask one question under several names)."""
    workers = jobs_of(jobs)
    if progress is not None and not callable(progress):
        raise InputError(f"progress must be a function of (done, total), got {brief(progress)}")
    results = list(loaded)
    todo = [i for i, r in enumerate(results) if r.error is None]
    sharing: dict[str, list[int]] = {}
    for i in todo:
        sharing.setdefault(question_key(results[i]) or f"#{i}", []).append(i)
    groups = list(sharing.values())  # in file order of each question's first run
    tasks = [(results[group[0]].inputs, results[group[0]].catalog) for group in groups]
    total = len(todo)
    if progress:
        progress(0, total)
    workers = min(workers, len(tasks))
    parallel = workers > 1 and len(tasks) > PARALLEL_MIN_RUNS
    keys = [affinity_key(results[group[0]]) or f"#{t}" for t, group in enumerate(groups)]
    batches = affinity_batches(keys, workers if parallel else 1)
    outcomes: Iterator[list[tuple[Plan | ServePlan | None, str | None]]]
    if not parallel:  # one by one, for progress as each run finishes, in the batches' order
        batches = [[t] for batch in batches for t in batch]
        outcomes = map(_solve_batch, ([tasks[t] for t in batch] for batch in batches))
        pool = None
    else:
        # A run that needs OR-Tools (the reference arithmetic, a serving mix under an inventory)
        # imports it in its worker; a framework plan never does, so none is imported here.
        methods = multiprocessing.get_all_start_methods()
        context = multiprocessing.get_context("fork" if "fork" in methods else None)
        pool = ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=worker_start)
        # One batch at a time per worker, so that every worker stays busy when a few batches
        # (fastest-layout searches) take far longer than the rest; map() returns them in order.
        outcomes = pool.map(_solve_batch, [[tasks[t] for t in batch] for batch in batches], chunksize=1)
    try:
        done = 0
        for batch, solved_batch in zip(batches, outcomes):
            for t, (solved, error) in zip(batch, solved_batch):
                key = "serve" if isinstance(solved, ServePlan) else "plan"
                for i in groups[t]:
                    prefix = located(results[i].name, results[i].line)
                    results[i] = results[i].model_copy(
                        update={key: solved, "error": None if error is None else f"{prefix}: {error}"})
                done += len(groups[t])
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


AFFINITY_INPUTS = ("params", "active", "gpu", "framework", "precision", "optimizer")
"""The inputs that decide what a plan's search builds and keeps (the model's counts, its layout
table, the memory answers, the fastest walk of apsi.training.frameworks.kept): runs alike in these
share a batch, and so a worker's warm state; the others (days, tokens, objective, price, ...) move
the target the search walks to."""

BATCHES_PER_WORKER = 4
"""The fewest batches each worker gets (when the runs allow it): an affinity group larger than
total / (workers x this) is split, so that a file of one model on one GPU still runs in parallel."""


def affinity_key(result: Result) -> str | None:
    """What a run shares with others in its search's warm state (AFFINITY_INPUTS), as text (None
    where those inputs have none: question_key's rule)."""
    return _as_text(result.kind, result.catalog, {k: result.inputs.get(k) for k in AFFINITY_INPUTS})


def affinity_batches(keys: list[str], workers: int) -> list[list[int]]:
    """The tasks (indices into `keys`) in batches of one affinity each, in order of each
    affinity's first task, each batch at most total / (workers x BATCHES_PER_WORKER) tasks (rounded
    up) when there are several workers: a worker then warms a model on a GPU once for all its runs
    rather than every worker warming every one. Which worker solves a run never changes its answer
    (the same question gives the same plan, byte for byte, cold or warm)."""
    by_key: dict[str, list[int]] = {}
    for t, key in enumerate(keys):
        by_key.setdefault(key, []).append(t)
    most = len(keys) if workers <= 1 else max(1, -(-len(keys) // (workers * BATCHES_PER_WORKER)))
    return [tasks[at:at + most] for tasks in by_key.values() for at in range(0, len(tasks), most)]


def _solve_batch(batch: list[tuple[dict, str | None]]) -> list[tuple[Plan | ServePlan | None, str | None]]:
    """_solve() for each task of a batch, in order (one worker's turn)."""
    return [_solve(task) for task in batch]


def question_key(result: Result) -> str | None:
    """What a run asks, as text: its kind, inputs (after defaults and expansion, as written) and
    catalog, without its name and line. Two runs with the same key are the same call of plan() or
    serve(); values that differ only in how they are written (1 and 1.0, "70B" and "70b") give
    different keys, and are solved apart. None where the inputs have no such text (keys of mixed
    types, an integer past str()'s digits): the run is then solved on its own."""
    return _as_text(result.kind, result.catalog, result.inputs)


def _as_text(kind: str, catalog: str | None, inputs: Mapping[str, Any]) -> str | None:
    """A run's kind, catalog and inputs as one JSON text, or None where they have none."""
    try:
        return json.dumps([kind, catalog, inputs], sort_keys=True, default=repr)
    except (TypeError, ValueError):
        return None


def worker_start() -> None:
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
