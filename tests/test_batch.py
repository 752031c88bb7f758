"""The dp listings of the framework search (apsi.training.frameworks.batch.batch_dps): the inlined
listing against micro_batches() dp by dp, and the listings kept within their bound."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from apsi.training.frameworks import batch


def one_by_one(b: int, mb: int, group: int, tolerance: float, most: int,
               pinned: int | None, rounds: int = 0, least: int = 1) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The listing as its rule reads: every dp (or the pinned one) whose micro_batches() is not None."""
    dps, ms = [], []
    candidates = [pinned] if pinned is not None else list(range(1, most + 1))
    for d in candidates:
        if d > most:
            continue
        m = batch.micro_batches(b, mb, d, group, tolerance, rounds, least)
        if m is not None:
            dps.append(d)
            ms.append(m)
    return tuple(dps), tuple(ms)


@settings(max_examples=400, deadline=None, derandomize=True, database=None)
@given(b=st.integers(1, 50_000), mb=st.sampled_from([1, 2, 4]), group=st.sampled_from([1, 2, 3, 4, 8, 16]),
       tolerance=st.sampled_from([0.0, 0.001, 0.05, 0.2, 0.5]), most=st.integers(1, 3000),
       pinned=st.none() | st.integers(1, 4000))
def test_the_inlined_listing_is_micro_batches_dp_by_dp(b, mb, group, tolerance, most, pinned) -> None:
    # The listing weighs every dp up to the cap inline (a seq of 1 token lists millions), where it
    # called micro_batches() for each: the same dps and micro-batches, ties kept the larger.
    assert batch.batch_dps(b, mb, group, tolerance, most, pinned) == one_by_one(b, mb, group, tolerance, most, pinned)


@settings(max_examples=250, deadline=None, derandomize=True, database=None)
@given(b=st.integers(1, 5_000), mb=st.sampled_from([1, 2, 4]), group=st.sampled_from([1, 1, 2, 3]),
       rounds=st.sampled_from([2, 3, 4, 8, 9, 16]), tolerance=st.sampled_from([0.0, 0.001, 0.05, 0.2, 0.5]),
       most=st.integers(1, 2000), pinned=st.none() | st.integers(1, 2500))
def test_listings_under_torch_rounds_are_micro_batches_dp_by_dp(b, mb, group, rounds, tolerance, most,
                                                                 pinned) -> None:
    # Under torchtitan's interleaved schedule the count must also be a multiple of its rounds,
    # n % max(1, n // pp) == 0 (TORCH-PIPE, written out here). micro_batches() takes the accepted
    # count nearest the batch (ties: the larger), as a plain search over every count finds it; the
    # listing, made from the group's own, is micro_batches() dp by dp.
    runs = [m for m in range(group, 2 * b + 2 * group * rounds, group) if m % max(1, m // rounds) == 0]
    for d in range(1, 40):
        near = min(runs, key=lambda m: (abs(m * mb * d - b), -m))
        want = near if abs(near * mb * d - b) <= tolerance * b else None
        assert batch.micro_batches(b, mb, d, group, tolerance, rounds) == want
    assert (batch.batch_dps(b, mb, group, tolerance, most, pinned, rounds)
            == one_by_one(b, mb, group, tolerance, most, pinned, rounds))


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(b=st.integers(1, 5_000), mb=st.sampled_from([1, 2, 4]), group=st.sampled_from([1, 1, 2, 3]),
       rounds=st.sampled_from([0, 0, 3, 8]), least=st.sampled_from([2, 3, 8, 9, 16, 33, 64, 128]),
       tolerance=st.sampled_from([0.0, 0.001, 0.05, 0.2, 0.5]), most=st.integers(1, 2000),
       pinned=st.none() | st.integers(1, 2500))
def test_listings_with_a_least_count_are_micro_batches_dp_by_dp(b, mb, group, rounds, least, tolerance, most,
                                                                 pinned) -> None:
    # Under torchtitan's 1F1B the count must also be at least pp: torch's Schedule1F1B.__init__
    # raises ValueError when n_microbatches < num_stages (TORCH-PIPE, written out here as m >= least).
    # micro_batches() takes the accepted count nearest the batch (ties: the larger), as a plain
    # search over every count finds it; the listing, made from the rule's own without the least
    # count, is micro_batches() dp by dp.
    runs = [m for m in range(group, 2 * b + 2 * group * max(rounds, 1) + least, group)
            if (not rounds or m % max(1, m // rounds) == 0) and m >= least]
    for d in range(1, 40):
        near = min(runs, key=lambda m: (abs(m * mb * d - b), -m))
        want = near if abs(near * mb * d - b) <= tolerance * b else None
        assert batch.micro_batches(b, mb, d, group, tolerance, rounds, least) == want
    assert (batch.batch_dps(b, mb, group, tolerance, most, pinned, rounds, least)
            == one_by_one(b, mb, group, tolerance, most, pinned, rounds, least))


def test_wide_listings_are_kept_within_their_bound(monkeypatch) -> None:
    # A listing of 200,000 dps was made anew by each of the 138 searches that asked it (Mixtral at
    # an 8-token seq, 17 s); now kept, the least recently used dropped past LISTED_MOST dps.
    monkeypatch.setattr(batch, "LISTED_MOST", 1000)
    kept = batch._Kept()
    for n in range(10):
        kept.keep((n,), (tuple(range(300)), tuple(range(300))))
        assert kept.held == sum(len(v[0]) for v in kept.values()) <= 1000
    assert list(kept) == [(7,), (8,), (9,)]  # the three most recent of 300 dps each
    assert kept.take((8,)) is not None and kept.held == 600
    kept.keep((99,), (tuple(range(2000)), tuple(range(2000))))  # wider than the bound: not kept
    assert (99,) not in kept and kept.held == 600


def test_the_default_batch_rounded_to_whole_sequences_is_said() -> None:
    # 2^22 = 4,194,304 tokens at a 900,000-token sequence is 4.66 sequences: the plan runs 4
    # (3,600,000 tokens, -14.17%), which it did without a word while the same batch given was
    # refused past the tolerance. The default is said, not refused; a seq dividing it says nothing.
    from apsi import plan

    p = plan("7B", tokens="140B", seq=900_000)
    assert p.batch_tokens == 3_600_000
    assert ("the default batch of 4,194,304 tokens is 4 whole sequences of 900,000: 3,600,000 tokens (-14.17%); "
            "give batch for another") in p.notes
    assert not any("default batch" in n for n in plan("7B", tokens="140B").notes)
