"""The largest model that trains on N GPUs in D days on T tokens: largest() (apsi.largest).

Owns the search over model sizes: the sizes tried (a grid of bare sizes under the reference
shape rule, or the members of a preset family), deciding each as apsi.api.plan.plan() does (a size
trains when its plan, the fastest layout on at most `gpus` GPUs, meets `days`: target_met; the
scan asks plan()'s own walk, stopped once it knows), and the answer's summary lines. It computes
no plan of its own and changes no formula. The module is apsi.api.largest so that apsi.largest stays
the function (PEP 562 exports: a submodule of that name would shadow it once imported).

Feasibility need not be monotone in the size (the shape rule's layers and width jump, and with
them the layouts that are legal), so nothing is bisected:
  - a family: every member is planned, and the answer is the member with the most parameters
    that trains (docs/method.md, "The largest model that trains").
  - the shape rule: sizes of two significant figures (..., 9.9B, 10B, 11B, ..., 99B, 100B, 110B,
    ...: steps of 1% to 10% of the size) are planned from the top down, and the first that trains
    is the answer. The top is the first grid size above a bound no size can pass: training takes
    at least 6 N T FLOPs (Kaplan et al. 2020, Sec. 2.1: C = 6 N per token; the attention core and
    recomputation only add to it), and N GPUs do at most their dense peak, so a size above
    gpus x peak x days / (6 T) cannot meet `days` at any layout. Every grid size from there down to
    the answer is planned, so the answer is the largest on the grid that trains. Each size is
    planned as `apsi plan SIZE` plans it: under a framework its shape-rule architecture, whose FFN
    is sized to count the size where the rule's steps count more than 5% from it
    (apsi.inputs.modelspec.placed); the top is the first whose count passes the bound.
"""

from __future__ import annotations

import math
import re
from typing import Any

from pydantic import BaseModel, ConfigDict

from apsi.errors import InputError, LayoutError, brief, unknown
from apsi.model.schema import Plan
from apsi.units import SECONDS_PER_DAY

__all__ = ["largest", "families", "Largest", "Tried"]

DIGITS = 2
"""Significant figures of the shape rule's grid of sizes."""
SMALLEST = 10_000_000
"""The grid's floor, 10M parameters: below it the shape rule gives under four layers."""
GRID_WORDS = "sizes of two significant figures (steps of 1% to 10% of the size)"
"""The shape rule's grid in words, for the output."""
_SIZE_PART = re.compile(r"^(\d+x)?\d+(\.\d+)?[bmt]$")
"""A preset key's size part: 8b, 405b, 8x7b (the family is the key before it)."""


class Tried(BaseModel):
    """One size the search planned on at most `gpus` GPUs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    size: str
    """The size as planned (95B) or the preset's key."""
    params: int
    """Its total parameters (all experts for a mixture of experts)."""
    meets: bool
    """Whether its plan meets the target duration."""
    days: float | None
    """Its plan's days (the fastest on at most `gpus` GPUs); None when no layout fits (`why`), or
    when it was not planned in full: the shape rule's scan asks only whether a size meets the
    target (plan()'s walk, stopped once it knows); the next size up is planned in full."""
    gpus: int | None
    """Its plan's GPU count; None as `days`."""
    why: str | None = None
    """Why no layout fits (the planner's one line), when none does."""


class Largest(BaseModel):
    """The largest model that trains on `gpus` GPUs in `days`, with the sizes tried."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    size: str
    """The answer: the size (95B) or the preset's key."""
    plan: Plan
    """Its plan, as plan() gives it (the fastest on at most `gpus` GPUs)."""
    family: str | None
    """The preset family searched; None for the shape rule."""
    grid: str
    """The sizes tried, in words."""
    bound: int | None
    """The shape rule: the most parameters `gpus` GPUs at their dense peak could train in `days`."""
    tried: list[Tried]
    """Every size planned, largest first; the answer is the first that meets the target."""
    next_up: Tried | None
    """The next size up from the answer (it does not train); None when the answer is the family's largest."""
    next_up_gpus: int | None = None
    """The fewest GPUs on which the next size up meets `days` (within max_gpus); None when none does."""


def families() -> dict[str, list[str]]:
    """Preset families by name, each its members' keys: the key before its size part
    (llama-3.1-8b, -70b, -405b: llama-3.1; qwen3-30b-a3b: qwen3), or, for a key without one
    (deepseek-v3), before its last part; and every shorter prefix shared by two families or more
    at a dash (llama: llama-3.1 and llama-3.2)."""
    from apsi.inputs.presets import presets

    out: dict[str, list[str]] = {}
    for key in presets():
        parts = key.split("-")
        cut = next((i for i, p in enumerate(parts) if i and _SIZE_PART.match(p)), len(parts) - 1)
        name = "-".join(parts[:max(cut, 1)])
        out.setdefault(name, []).append(key)
    for name in list(out):
        head = name.split("-")
        for n in range(1, len(head)):
            prefix = "-".join(head[:n])
            members = [k for f, keys in out.items() if f.startswith(prefix + "-") for k in keys]
            if prefix not in out and len({f for f in out if f.startswith(prefix + "-")}) > 1:
                out[prefix] = members
    return dict(sorted(out.items()))


def largest(family: Any = None, *, gpus: Any = None, days: Any = None, tokens: Any = None, **options: Any) -> Largest:
    """The largest model whose plan (plan()'s, the fastest on at most `gpus` GPUs) trains on
    `tokens` tokens in `days` days: the members of a preset `family` (see families()), or, with
    none, bare sizes under the reference shape rule (module docstring: the grid, and why every
    size above the answer is tried). gpus, days and tokens are required; every other keyword is
    plan()'s, for each size tried (levers and explain for the answer's plan only). The answer
    comes with every size tried and the next size up: its plan on `gpus` GPUs and the fewest GPUs
    on which it meets `days`.

    >>> r = largest(gpus=1024, days=30, tokens="2T", framework="reference")
    >>> r.size, r.plan.target_met, r.next_up.size, r.next_up.meets
    ('82B', True, '83B', False)
    """
    for key, value in (("gpus", gpus), ("days", days), ("tokens", tokens)):
        if value is None:
            raise InputError(f"the largest model needs {key}: give gpus, days and tokens (--gpus, --days, --tokens), "
                             "the GPUs, the days and the training tokens it must fit")
    if "params" in options:
        raise InputError("the largest model is searched, not given: give a preset family (" + ", ".join(families())
                         + ") or none (bare sizes under the shape rule), not params")
    if options.get("active") is not None:
        raise InputError("active is a size's own: largest() searches the size (give a family of MoE presets, "
                         "e.g. qwen3, for mixtures of experts)")
    final: dict[str, Any] = {k: options.pop(k) for k in ("levers", "explain") if k in options}
    question = {**{k: v for k, v in options.items() if v is not None}, "gpus": gpus, "days": days, "tokens": tokens}
    bound: int | None
    name: str | None
    if family is None:
        bound, tried, index = _scan(question)
        grid = f"{GRID_WORDS}, from the first above the bound of {_billions(bound)} down"
        name = None
    else:
        name = _family(family)
        bound, grid = None, f"every member of {name}"
        tried = sorted((_try(key, question) for key in families()[name]), key=lambda t: (-t.params, t.size))
        first = next((i for i, t in enumerate(tried) if t.meets), None)
        if first is None:
            raise LayoutError(f"no member of {name} trains on {_gpus(gpus)} in {days} day{'' if str(days).strip() in ('1', '1.0') else 's'} on {tokens} tokens: "
                              f"the smallest, {_words(tried[-1])}")
        index = first
    return _answer(tried, index, question, final, name, grid, bound)


def _scan(question: dict[str, Any]) -> tuple[int, list[Tried], int]:
    """The shape rule's scan: (the bound, the sizes tried largest first, the answer's index)."""
    import inspect

    from apsi.inputs.question import resolve
    from apsi.inputs.modelspec import ARCHITECTURE_OPTIONS

    own = inspect.signature(resolve).parameters
    probe = resolve("1B", **{k: v for k, v in question.items() if k in own and k not in ARCHITECTURE_OPTIONS})
    peak = max(g.peak_tflops(probe.precision) for g in probe.candidates) * 1e12
    gpus = probe.gpus
    assert gpus is not None  # given: largest() requires it
    # 6 N T FLOPs at no more than the dense peak of every GPU (module docstring).
    bound = int(gpus * peak * probe.days * SECONDS_PER_DAY / (6 * probe.tokens))
    if bound < SMALLEST:
        raise LayoutError(f"no size from {_label(SMALLEST)} up trains on {_gpus(gpus)} in {probe.days:,g} day{'' if probe.days == 1 else 's'} "
                          f"on {_tokens(probe.tokens)} tokens: even at the GPUs' full peak {_gpus(gpus)} train{'s' if gpus == 1 else ''} at "
                          f"most {_billions(bound)} parameters; give more GPUs or days, or fewer tokens")
    tried: list[Tried] = []
    sizes = _grid(bound)
    # A size within the shape rule's rounding counts up to 5% more or less than itself (70B counts
    # 73.38B): the scan starts from a size whose count is above the bound.
    while _params(_label(sizes[0]), question) <= bound:
        sizes = _grid(sizes[0])
    for size in sizes:
        label = _label(size)
        params = _params(label, question)
        if tried and params == tried[-1].params:
            continue  # the same architecture as the size above (a framework plans them alike): one try
        tried.append(Tried(size=label, params=params, meets=_meets(label, question), days=None, gpus=None))
        if tried[-1].meets:
            # The first size is above the bound: no layout can train it (module docstring).
            assert len(tried) > 1, f"{tried[0].size} trains, above the bound of {_billions(bound)}: the bound is wrong"
            return bound, tried, len(tried) - 1
    smallest = _try(tried[-1].size, question)  # in full, for its days or why it fits no layout
    raise LayoutError(f"no size from {_label(SMALLEST)} to {_billions(bound)} trains on {_gpus(gpus)} in "
                      f"{probe.days:,g} days on {_tokens(probe.tokens)} tokens: the smallest, {_words(smallest)}")


def _grid(bound: int) -> list[int]:
    """The grid's sizes from the first above `bound` down to SMALLEST, largest first: m x 10^e
    for m of 10 to 99 (DIGITS figures)."""
    low = 10 ** (DIGITS - 1)
    top_exponent = max(int(math.log10(bound)) - DIGITS + 2, 0)  # its decade and the next
    sizes = sorted((m * 10**e for e in range(top_exponent + 1) for m in range(low, 10 * low)), reverse=True)
    first = min(n for n in sizes if n > bound)
    return [n for n in sizes if SMALLEST <= n <= first]


def _label(n: int) -> str:
    """A grid size as planned: 95B, 9.5B, 950M, 1.2T."""
    for scale, suffix in ((10**12, "T"), (10**9, "B"), (10**6, "M")):
        if n >= scale:
            return f"{n / scale:g}{suffix}"
    return f"{n:,}"


def _gpus(value: Any) -> str:
    """A GPU count in words: 1 GPU, 1,024 GPUs (a string such as 16K as typed)."""
    return f"{_count(value)} GPU{'' if value == 1 else 's'}"


def _tokens(n: float) -> str:
    """Tokens as a size: 1T, 2.5T (apsi.units.human)."""
    from apsi.units import human

    return human(n)


def _count(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) else str(value)


def _family(name: Any) -> str:
    from apsi.inputs.presets import _normal

    from apsi.inputs.presets import find_preset
    from apsi.units import looks_like_size

    known = families()
    if not isinstance(name, str) or looks_like_size(name) or find_preset(name) is not None:
        raise InputError(f"the largest model is searched, not given: {brief(name)} is a "
                         f"{'preset' if isinstance(name, str) and find_preset(name) else 'size'}; give a preset family "
                         f"({', '.join(known)}) or none (bare sizes under the shape rule)")
    if isinstance(name, str):
        for family in known:
            if _normal(family) == _normal(name):
                return family
    raise unknown("family", name, known)


def _try(size: str, question: dict[str, Any]) -> Tried:
    """`size` planned by plan() on at most `gpus` GPUs: whether it meets the target."""
    from apsi.api.plan import plan

    try:
        p = plan(size, **question)
    except LayoutError as err:
        return Tried(size=size, params=_params(size, question), meets=False, days=None, gpus=None, why=str(err))
    return Tried(size=size, params=p.model.params, meets=p.target_met, days=p.days, gpus=p.gpus)


def _meets(size: str, question: dict[str, Any]) -> bool:
    """Whether some layout of `size` within `gpus` GPUs meets `days`: plan()'s own walk
    (apsi.training.frameworks.walk.fewest over the searches apsi.training.frameworks.planner.plan builds), stopped
    once it knows; plan() decides the same (its target_met: tests/test_largest.py checks every
    size tried), but goes on to the fastest layout. A question no layout can fit (LayoutError
    from the planner's checks) does not meet it. The reference arithmetic has no walk: plan()."""
    from apsi.training.frameworks import planner
    from apsi.training.frameworks.batch import sized
    from apsi.training.frameworks.budget import Budget, BudgetedSearch, advice, check_dp_range
    from apsi.training.frameworks.bounds import Search
    from apsi.training.frameworks.walk import fewest, ranked
    from apsi.inputs.question import resolve
    from apsi.api.plan import _framework, framework_question

    options = dict(question)
    name = _framework(options)
    if name == "reference":
        return _try(size, question).meets
    fw, pins, tolerance = framework_question(name, options)
    options.setdefault("include_consumer", False)  # as plan() under a framework
    try:
        s, pins, sizes, _, _ = planner.prepare(fw, resolve(size, **options), pins, tolerance)
    except LayoutError:
        return False
    assert s.gpus is not None  # largest() requires it
    check_dp_range(s, s.gpus, pins, tolerance, min(sizes))
    budget = Budget(advice(s, pins, s.gpus, sizes, name_cap=False))  # one walk per size: each its own budget
    searches: list[Search] = [BudgetedSearch(budget, fw, s.on(gpu), gpu, s.gpus, sized(pins, mb), tolerance)
                              for gpu in s.candidates for mb in sizes]
    target = s.days * SECONDS_PER_DAY
    return fewest(searches, target, ranked(searches, target)) is not None


def _params(size: str, question: dict[str, Any]) -> int:
    """The parameters of `size` with the question's architecture options (no plan needed): under a
    framework the count of the architecture that framework plans it as (apsi.inputs.modelspec.placed);
    under the reference arithmetic the size as given."""
    from apsi.training.frameworks import DEFAULT
    from apsi.inputs.modelspec import ARCHITECTURE_OPTIONS, placed, resolve_model

    m = resolve_model(size, **{k: v for k, v in question.items() if k in ARCHITECTURE_OPTIONS})
    if question.get("framework", DEFAULT) == "reference" or m.source != "size":
        return m.params
    return placed(m, "")[0].params


def _answer(tried: list[Tried], index: int, question: dict[str, Any], final: dict[str, Any], family: str | None,
            grid: str, bound: int | None) -> Largest:
    """The answer's plan (with levers and explain as asked) and the next size up's fewest GPUs."""
    from apsi.api.plan import plan

    size = tried[index].size
    answer = plan(size, **question, **final)
    # The walk's verdict and plan()'s agree (the walk is plan()'s own); the record is the plan's.
    assert answer.target_met, f"{size} meets the target by the walk but not by plan()"
    tried = tried[:index] + [Tried(size=size, params=answer.model.params, meets=True, days=answer.days,
                                   gpus=answer.gpus)] + tried[index + 1:]
    up = tried[index - 1] if index else None
    if up is not None and up.days is None and up.why is None:  # the scan's: only whether it meets
        up = _try(up.size, question)
        tried = tried[:index - 1] + [up] + tried[index:]
    fewest = None
    if up is not None:
        try:
            wider = plan(up.size, **{k: v for k, v in question.items() if k != "gpus"})
            fewest = wider.gpus if wider.target_met else None
        except LayoutError:
            fewest = None
    return Largest(size=size, plan=answer, family=family, grid=grid, bound=bound, tried=tried, next_up=up,
                   next_up_gpus=fewest)


def _words(t: Tried) -> str:
    """What a size's plan does on the GPUs given, for a line."""
    from apsi.fmt import count, duration

    if t.days is None:
        return f"{t.size}, fits no layout ({(t.why or '').rstrip('.')})"
    gpus = t.gpus or 0
    return f"{t.size}, takes {duration(t.days)} on {count(gpus)} GPU{'' if gpus == 1 else 's'}"


def summary(r: Largest) -> list[str]:
    """The lines under the answer's plan: which sizes were tried, and why the next size up does not train."""
    from apsi.fmt import count, duration

    target = duration(r.plan.target_days)
    if r.family is None:
        assert r.bound is not None
        # Under a framework a size is planned as its shape-rule architecture (apsi.inputs.modelspec.counted),
        # whose count can differ from the size typed: both are named.
        typed = _typed(r.size)
        # A size whose FFN was sized counts it to a few parameters in a billion: the size alone.
        size = (r.size if typed and abs(r.plan.model.params - typed) <= 1e-3 * typed else
                f"{r.size} (its architecture has {_billions(r.plan.model.params)})")
        tried = (f"largest: {size}, the largest that trains in {target} of the {len(r.tried)} sizes tried, every size "
                 f"of two significant figures from {r.tried[0].size} down (steps of 1% to 10%); none above "
                 f"{_billions(r.bound)} can (6 N T FLOPs at the GPUs' dense peak)")
    else:
        each = ", ".join(f"{t.size} {'trains' if t.meets else 'does not'}" for t in r.tried)
        tried = (f"largest: {r.size}, the member of {r.family} with the most parameters that trains in {target} "
                 f"(all {len(r.tried)} tried: {each})")
    lines = [tried]
    up = r.next_up
    if up is None:
        lines.append(f"next size up: none, {r.size} is the largest member of {r.family}")
        return lines
    if up.days is None:
        why = f"fits no layout on at most {count(r.plan.gpus)} GPUs"
    else:
        why = f"takes {duration(up.days)} on {count(up.gpus or 0)} GPUs, over {target}"
    needs = (f"; it needs {count(r.next_up_gpus)} GPUs for {target}" if r.next_up_gpus is not None
             else "; no layout within max_gpus meets it")
    named = up.size if r.family is None and up.params == _typed(up.size) else f"{up.size} ({_billions(up.params)})"
    lines.append(f"next size up: {named} {why}{needs}")
    return lines


def _typed(size: str) -> int | None:
    """The parameters a bare size names (None for a preset)."""
    from apsi.units import parse_size

    try:
        return parse_size(size, "params")
    except (ValueError, ArithmeticError):
        return None


def _billions(n: int) -> str:
    """Parameters as fmt.billions writes them; under a million as the whole count (0.0M said none)."""
    from apsi.fmt import billions

    return billions(n) if n >= 1e6 else f"{n:,}"
