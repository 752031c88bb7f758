"""The batch rules of the framework search: micro-batch sizes, the batch tolerance, whole sequences.

Owns how many micro-batches a replica runs for a dp (a layout runs m micro-batches of b sequences
on each of dp replicas, so the batch it trains is m b dp), how far that batch may be from the one
asked for (batch_tolerance, default 5%: no framework needs the batch to be a given number, only a
whole number of micro-batches per replica), which micro-batch sizes plan() walks, the Note or
refusal for a batch asked in tokens that is not a whole number of sequences, and the legal dps of a
micro-batch rule (MicroRule: batch_dps, stepped), kept across the searches and questions that ask them.
"""

from __future__ import annotations

import bisect
from typing import TYPE_CHECKING, NamedTuple

from apsi.errors import InputError
from apsi.inputs.question import Setup

if TYPE_CHECKING:
    from apsi.training.frameworks.interface import Degrees, Framework

MICRO_BATCH = 1
MICRO_BATCHES = (1, 2, 4)
"""Sequences per micro-batch plan() tries with micro_batch "any": what Megatron-Bridge's recipes
use (MB-RECIPE: micro_batch_size 1 in most, 2 and 4 in the rest). Each is a Search of its own,
walked together with the GPU types'. Without it the micro-batch is MICRO_BATCH, the frameworks'
default (Megatron's --micro-batch-size, MLM-ARGS), or the one pinned: each size costs a search,
and a first plan() in a process three of them."""


def micro_batch_sizes(pins: dict) -> tuple[dict, list[int]]:
    """The pins without a micro_batch of "any", and the sizes to search: MICRO_BATCHES for "any",
    else the one pinned or MICRO_BATCH."""
    if pins.get("micro_batch") == "any":
        return {k: v for k, v in pins.items() if k != "micro_batch"}, list(MICRO_BATCHES)
    return pins, [pins.get("micro_batch", MICRO_BATCH)]


def sized(pins: dict, mb: int) -> dict:
    """The pins of the search of micro-batch size mb (the default size's are the pins as they are)."""
    return pins if mb == MICRO_BATCH or "micro_batch" in pins else {**pins, "micro_batch": mb}
MAX_TOLERANCE = 0.5
"""The widest batch_tolerance apsi.inputs.question.check_tolerance accepts."""
BATCH_TOLERANCE = 0.05
"""How far the batch a layout trains may be from the one asked for, as a fraction (the issue's
default 5%): m b dp need not equal it exactly, as no framework needs the batch to be a given
number, only a whole number of micro-batches per replica."""


def rounds_ok(n: int, pp: int) -> bool:
    """Whether torch's interleaved schedules run n micro-batches over pp pipeline ranks: they split
    them into max(1, n // pp) rounds and raise ValueError unless n is a multiple of that
    (TORCH-PIPE: ScheduleInterleaved1F1B.__init__ and ScheduleInterleavedZeroBubble.__init__,
    number_of_rounds). Any n below 2 pp runs (one round), and so does every multiple of pp."""
    return n % max(1, n // pp) == 0


class MicroRule(NamedTuple):
    """The micro-batch counts per replica a configuration's schedule runs: the positive multiples of
    `group` (Framework.micro_group: Megatron's interleaved schedule, pp) that, where `rounds` is not
    0, torch's interleaved schedules accept over a pipeline of that size (Framework.micro_rounds:
    torchtitan's Interleaved1F1B, pp; rounds_ok), and that are at least `least`
    (Framework.micro_least: torchtitan's 1F1B, pp; torch's Schedule1F1B refuses fewer micro-batches
    than stages). The search lists the legal dps by it."""

    group: int
    rounds: int = 0
    least: int = 1


def micro_rule(fw: Framework, c: Degrees) -> MicroRule:
    """The micro-batch rule of configuration c under framework fw."""
    return MicroRule(fw.micro_group(c), fw.micro_rounds(c), fw.micro_least(c))


def rounds_around(n: int, group: int, rounds: int) -> tuple[int, int]:
    """The counts of `group` micro-batches that rounds_ok accepts over `rounds` nearest n (n >= 1):
    the last at or below n (the first above where none is) and the first above it (every multiple
    of `rounds` is accepted, so neither search goes past `rounds` groups)."""
    above = n + 1
    while not rounds_ok(above * group, rounds):
        above += 1
    below = n
    while below > 1 and not rounds_ok(below * group, rounds):
        below -= 1
    return (below if rounds_ok(below * group, rounds) else above), above


def _fewest(group: int, rounds: int, least: int) -> int:
    """The fewest micro-batches per replica the rule (group, rounds, least) accepts: the first
    multiple of `group` at or above `least` that rounds_ok accepts where `rounds` is not 0 (every
    multiple of `rounds` is accepted, so the search ends)."""
    m = -(-least // group) * group
    while rounds and not rounds_ok(m, rounds):
        m += group
    return m


def micro_batches(batch: int, micro_batch: int, dp: int, group: int, tolerance: float,
                  rounds: int = 0, least: int = 1) -> int | None:
    """The micro-batches per replica whose batch m b dp is nearest `batch` (m a positive multiple
    of `group` that, where `rounds` is not 0, rounds_ok accepts over that pipeline, and at least
    `least`; ties keep the larger), or None when that batch is off by more than `tolerance`."""
    unit = micro_batch * dp * group
    low = max(1, batch // unit)
    if rounds:
        low, above = rounds_around(low, group, rounds)
        m = above if abs(above * unit - batch) <= abs(low * unit - batch) else low
    else:
        m = low + 1 if abs((low + 1) * unit - batch) <= abs(low * unit - batch) else low
    if least > 1 and m * group < least:
        # The nearest accepted count is below `least`, so the batch per replica, batch / (b dp), is
        # below F, the fewest accepted count at or above `least` (were it at or above F, F would be
        # nearer): of the counts from F up, F is the nearest.
        m = _fewest(group, rounds, least) // group
    return m * group if abs(m * unit - batch) <= tolerance * batch else None


def whole_sequences(s: Setup, tolerance: float) -> list[str]:
    """The Note for a batch asked in tokens that is not a whole number of sequences (the batch is
    its whole sequences, rounded down); beyond the batch tolerance, an InputError naming the
    batches that are whole. The default batch (2^22 tokens) is rounded down alike, with a Note."""
    asked, kept = s.batch_tokens_asked, s.batch_sequences * s.seq
    if asked is None:
        from apsi.inputs.question import DEFAULT_BATCH_TOKENS

        if kept == DEFAULT_BATCH_TOKENS:
            return []
        # The default batch, not asked for: said, not refused (at seq 900,000 it is 4 sequences, -14%).
        return [f"the default batch of {DEFAULT_BATCH_TOKENS:,} tokens is {s.batch_sequences:,} whole sequence"
                f"{'s' if s.batch_sequences != 1 else ''} of {s.seq:,}: {kept:,} tokens "
                f"({(kept - DEFAULT_BATCH_TOKENS) / DEFAULT_BATCH_TOKENS:+.2%}); give batch for another"]
    if asked == kept:
        return []
    change = (kept - asked) / asked
    if -change > tolerance:
        raise InputError(f"a batch of {asked:,} tokens is {s.batch_sequences:,} whole sequence"
                         f"{'s' if s.batch_sequences != 1 else ''} of {s.seq:,} ({kept:,} tokens, {change:+.2%}), beyond "
                         f"the batch tolerance of {tolerance:.0%}: give a multiple of {s.seq:,} tokens ({kept:,} or "
                         f"{kept + s.seq:,}) or a wider batch_tolerance")
    return [f"the batch of {asked:,} tokens asked is {s.batch_sequences:,} whole sequence"
            f"{'s' if s.batch_sequences != 1 else ''} of {s.seq:,}: "
            f"{kept:,} tokens ({change:+.2%})"]


class _Kept(dict):
    """Answers kept, least recently used first, with the dps they hold in all (`held`)."""

    held = 0

    def keep(self, key: tuple, known: tuple) -> None:
        """`known` kept under `key` as the most recently used (its key popped first by the caller),
        the least recently used dropped while more than LISTED_KEPT entries or LISTED_MOST dps are
        held; one wider than LISTED_MOST alone is not kept."""
        size = len(known[0])
        if size > LISTED_MOST:
            return
        self[key] = known
        self.held += size
        while len(self) > LISTED_KEPT or self.held > LISTED_MOST:
            oldest = next(iter(self))
            self.held -= len(self.pop(oldest)[0])

    def take(self, key: tuple) -> tuple | None:
        """The answer kept under `key`, taken out (keep() puts it back as the most recent)."""
        known = self.pop(key, None)
        if known is not None:
            self.held -= len(known[0])
        return known


_LISTED = _Kept()
"""batch_dps' listings kept."""

LISTED_KEPT = 256
"""Listings batch_dps keeps (a plan lists one per micro-batch group, some twenty)."""

LISTED_MOST = 1_000_000
"""The most dps the kept listings (and stepped()'s, apart) hold together, the least recently used
dropped first: a listing of a huge batch or cap (up to apsi.training.frameworks.budget.MAX_DP_RANGE
dps) is kept while it fits, so the searches of one question list it once (Mixtral at an 8-token
seq asked 5 listings of up to 200,000 dps 138 times, 17 s of its 17.5), and about 70 MB at most."""


def _listed(batch: int, micro_batch: int, group: int, tolerance: float, most: int) -> tuple[list[int], list[int]]:
    """Every dp up to `most` whose micro_batches() are within the tolerance, and those counts:
    micro_batches() inlined (the same integers, compared the same way; tests/test_batch.py checks
    them against it), as a listing may weigh millions of dps."""
    dps: list[int] = []
    ms: list[int] = []
    step = micro_batch * group
    limit = tolerance * batch
    unit = 0
    for d in range(1, most + 1):
        unit += step  # micro_batch x d x group
        low = batch // unit
        if low < 1:
            low = 1
        above = (low + 1) * unit - batch  # >= 0: (low + 1) units pass the batch
        below = batch - low * unit
        if below < 0:
            below = -below
        if above <= below:  # ties keep the larger
            low, below = low + 1, above
        if below <= limit:
            dps.append(d)
            ms.append(low * group)
    return dps, ms


def batch_dps(batch: int, micro_batch: int, group: int, tolerance: float, most: int,
              pinned: int | None, rounds: int = 0, least: int = 1) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Every dp up to `most` (the pinned one, if any) at which whole groups of micro-batches (that
    torch's rounds accept, where `rounds` is not 0, and at least `least`: micro_batches) run the
    batch within the tolerance, with its micro-batches per replica (apsi.training.frameworks.batch):
    a pure function of its arguments, kept (LISTED_MOST) for every search and question that asks
    it again, a grid of runs sharing its batch; the work budget charges a question's listing once
    (apsi.training.frameworks.budget.BudgetedSearch._batch_dps)."""
    key = (batch, micro_batch, group, tolerance, most, pinned, rounds, least)
    known = _LISTED.take(key)
    if known is None:
        if least > 1:
            # The counts at least `least` are some of the rule's, so each dp they leave within the
            # tolerance is in its listing without `least`, with the same count where that one is at
            # least `least`: the listing's first dps, as the count falls while dp grows. Past them
            # each count moves up to the fewest accepted F, a batch F b dp above the one asked that
            # grows with dp: they stay from the cut to the first out of the tolerance.
            listed = batch_dps(batch, micro_batch, group, tolerance, most, pinned, rounds)
            cut = bisect.bisect_left(listed[1], -least + 1, key=lambda m: -m)  # the first m < least
            dps, ms = list(listed[0][:cut]), list(listed[1][:cut])
            for d in listed[0][cut:]:
                m = micro_batches(batch, micro_batch, d, group, tolerance, rounds, least)
                if m is None:
                    break
                dps.append(d)
                ms.append(m)
            known = (tuple(dps), tuple(ms))
        elif rounds:
            # The counts the rounds accept are some of the group's, so each dp they leave within the
            # tolerance is in the group's own listing, and its count moves only where that one is
            # refused: m >= 2 rounds (one round accepts any count), the listing's first dps, as m
            # falls while dp grows (the nearest count to a falling batch per replica).
            listed = batch_dps(batch, micro_batch, group, tolerance, most, pinned)
            cut = next((i for i, m in enumerate(listed[1]) if m < 2 * rounds), len(listed[1]))
            moved = [(d, m if rounds_ok(m, rounds) else micro_batches(batch, micro_batch, d, group, tolerance, rounds))
                     for d, m in zip(listed[0][:cut], listed[1][:cut])]
            kept = [(d, m) for d, m in moved if m is not None]
            known = (tuple(d for d, _ in kept) + listed[0][cut:], tuple(m for _, m in kept) + listed[1][cut:])
        elif pinned is not None:
            m = micro_batches(batch, micro_batch, pinned, group, tolerance) if pinned <= most else None
            known = ((pinned,), (m,)) if m is not None else ((), ())
        else:
            dps, ms = _listed(batch, micro_batch, group, tolerance, most)
            known = (tuple(dps), tuple(ms))
    _LISTED.keep(key, known)
    return known


_STEPPED = _Kept()
"""stepped()'s answers kept, as batch_dps keeps its listings."""


def stepped(batch: int, micro_batch: int, group: int, tolerance: float, most: int, pinned: int | None,
            rounds: int, least: int, step: int) -> tuple[list[int], list[int]]:
    """Of batch_dps' dps for these arguments, the multiples of `step`, with their micro-batches,
    kept as batch_dps keeps its listings (the lists are read, never changed)."""
    key = (batch, micro_batch, group, tolerance, most, pinned, rounds, least, step)
    known = _STEPPED.take(key)
    if known is None:
        dps, ms = batch_dps(batch, micro_batch, group, tolerance, most, pinned, rounds, least)
        keep = [i for i, d in enumerate(dps) if d % step == 0]
        known = ([dps[i] for i in keep], [ms[i] for i in keep])
    _STEPPED.keep(key, known)
    return known
