"""The fastest layout of a question, kept for the questions that differ from it only in the target.

Owns fastest(searches): walk.fastest() over the searches, or its earlier answer on the same ones.
The fastest layout within the cap does not depend on the target (the days): a sweep over
deadlines that none of its layouts meets (a scenario file's rows, the levers, `--objective days`
at several deadlines) asks the same walk again and again, and gets it once.

The answer is kept with what the walk left behind, so that a question answered from it is the
same, byte for byte, as one that walks: its memory evaluations (the plan's Note counts them, and
the explanation's what-if walks reuse them), the micro-batch rules whose dps it listed, and the
work it charged to the budget (apsi.training.frameworks.budget), charged again, so that a
question the walk would have refused is refused. That holds where the walk starts from the same
state: none of the searches has made a memory evaluation (the walk's look at memory then depends
on nothing the question did before), and, for a walk to be kept, none has listed any dps either
(each rule is then listed, and charged, by the walk itself; given back, it is listed again where
the question has not yet). Elsewhere the walk runs as it would. A walk that is refused keeps
nothing.

The key is each search's own (_question_key: every input its layouts, memory and durations
depend on, the target aside). Only the last KEPT walks are kept, and none whose memory answers
pass KEPT_ANSWERS (the walks of huge spaces, which a sweep repeats least).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING, NamedTuple, cast

from apsi.training.frameworks.walk import fastest as walk_fastest

if TYPE_CHECKING:
    from apsi.training.frameworks.batch import MicroRule
    from apsi.training.frameworks.bounds import Search
    from apsi.training.frameworks.budget import BudgetedSearch
    from apsi.training.frameworks.found import Found

KEPT = 16
"""Walks kept (the least recently used dropped first)."""

KEPT_ANSWERS = 50_000
"""The most memory answers (entries of a search's memory tables, over its searches) a kept walk
holds: about 10 MiB of tuples."""


class _Walked(NamedTuple):
    answer: tuple[int, Found] | None
    groups: tuple[tuple[MicroRule, ...], ...]
    """Per search, the micro-batch rules whose legal dps the walk listed."""
    units: int
    """The work the walk charged beyond the listing of those groups."""
    evaluations: tuple[int, ...]
    """Per search, the memory evaluations the walk made."""
    memory: tuple[tuple[dict, ...], ...]
    """Per search, its memory answers after the walk (Layouts.memory_answers)."""


_WALKS: OrderedDict[tuple, _Walked] = OrderedDict()


def _question_key(search: Search) -> tuple:
    """Every input the search's layouts, memory answers and durations depend on, the target aside:
    the framework, the setup on its GPU type but its days and what only weighs layouts (objective,
    price, PUE), the pins, the batch tolerance and the cap, and whether its shapes came from a
    higher cap's (Layouts' capped())."""
    setup = search.s.model_dump_json(exclude={"days", "objective", "price", "pue"})
    pins = tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in search.pins.items()))
    return (search.fw.NAME, setup, pins, search.tolerance, search.cap, search._capped)


def forget() -> None:
    """Drops every walk kept (the speed benchmarks time the walk itself)."""
    _WALKS.clear()


def fastest(searches: list[Search]) -> tuple[int, Found] | None:
    """walk.fastest(searches), or the answer of the same walk kept from an earlier question on the
    same searches (module docstring)."""
    budget = getattr(searches[0], "budget", None) if searches else None
    if budget is None or any(getattr(x, "budget", None) is not budget or x.evaluations for x in searches):
        return walk_fastest(searches)
    key = tuple(_question_key(x) for x in searches)
    kept = _WALKS.get(key)
    if kept is not None:
        _WALKS.move_to_end(key)
        for search, groups, evaluations, answers in zip(searches, kept.groups, kept.evaluations, kept.memory):
            for group in groups:
                search._batch_dps(group)  # listed, and charged, where this question has not yet
            search.take_memory(answers, evaluations)
        budget.charge(kept.units)
        return kept.answer
    if any(x._batch for x in searches):
        return walk_fastest(searches)  # some dps listed before: the walk's own listing is not known
    used = budget.used
    answer = walk_fastest(searches)
    listing = sum(x.listing_units(group) for x in cast("list[BudgetedSearch]", searches) for group in x._batch)
    memory = tuple(x.memory_answers() for x in searches)
    if sum(len(table) for tables in memory for table in tables) <= KEPT_ANSWERS:
        if len(_WALKS) >= KEPT:
            _WALKS.popitem(last=False)
        _WALKS[key] = _Walked(answer, tuple(tuple(x._batch) for x in searches), budget.used - used - listing,
                              tuple(x.evaluations for x in searches), memory)
    return answer
