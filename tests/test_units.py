"""Tests for apsi.units: parsing human sizes ("1T", "32B", "16M") and the short form back.

Expected counts are the decimal meaning of the suffixes documented in apsi/units.py and used by
the reference arithmetic ("1T", "32B", "15T", "420B"): K=10^3, M=10^6, B=G=10^9,
T=10^12.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from apsi import ApsiError
from apsi.units import GB, GIB, MAX_SIZE, human, parse_size


@pytest.mark.parametrize(
    ("text", "count"),
    [
        ("1T", 10**12),  # reference plan: 1T parameters
        ("32B", 32 * 10**9),  # reference plan: 32B active
        ("420B", 420 * 10**9),  # reference table: 21B dense, 420B tokens
        ("15T", 15 * 10**12),  # reference plan: 15T tokens
        ("1.5e12", 1_500_000_000_000),
        ("1.5T", 1_500_000_000_000),
        (".5T", 500_000_000_000),
        ("16M", 16_000_000),  # decimal: 16,000,000 tokens, not 2^24 = 16,777,216
        ("4k", 4_000),
        ("7e10", 70_000_000_000),
        ("70G", 70_000_000_000),  # G is a synonym of B
        (" 2T ", 2 * 10**12),
        ("+5B", 5 * 10**9),
        ("1e17", 10**17),  # the largest size accepted (MAX_SIZE)
    ],
)
def test_parse_size_text(text: str, count: int) -> None:
    assert parse_size(text) == count


@pytest.mark.parametrize("suffix,scale", [("k", 10**3), ("m", 10**6), ("b", 10**9), ("g", 10**9), ("t", 10**12)])
def test_suffixes_are_case_insensitive(suffix: str, scale: int) -> None:
    assert parse_size(f"3{suffix}") == parse_size(f"3{suffix.upper()}") == 3 * scale


def test_sixteen_m_is_decimal() -> None:
    # --batch 16M in the reference table: 16,000,000 tokens, which is 3,906 sequences of 4,096.
    assert parse_size("16M") == 16_000_000
    assert parse_size("16M") != 2**24
    assert parse_size("16M") // 4096 == 3906


@pytest.mark.parametrize(
    ("value", "count"),
    [(7e10, 70_000_000_000), (70_000_000_000, 70_000_000_000), (2e9, 2_000_000_000), (1.5, 2), (1, 1)],
)
def test_parse_size_numbers(value: float, count: int) -> None:
    # Numbers round to the nearest whole count (1.5 -> 2, Python's round half to even).
    assert parse_size(value) == count


@pytest.mark.parametrize(
    ("value", "pattern"),
    [
        ("", r"^params '' is not a size: give a number with an optional K/M/B/T suffix"),
        ("abc", r"^params 'abc' is not a size"),
        ("1Q", r"^params '1Q' is not a size"),
        ("1BB", r"^params '1BB' is not a size"),
        ("5.T", r"^params '5\.T' is not a size"),
        ("-5B", r"^params must be positive, got '-5B'$"),
        ("0", r"^params must be positive, got '0'$"),
        ("nan", r"^params 'nan' is not a size"),
        ("inf", r"^params 'inf' is not a size"),
        ("1e400", r"^params '1e400' is not a finite size"),
        ("1e-5", r"^params '1e-5' rounds to zero: give at least 1$"),
        ("1e18", r"^params '1e18' is beyond what apsi plans for \(at most 1e17\)$"),
        (float("nan"), r"^params 'nan' is not a finite size"),
        (float("inf"), r"^params 'inf' is not a finite size"),
        (-1.0, r"^params must be positive, got '-1\.0'$"),
        (0.4, r"^params '0\.4' rounds to zero"),
        (10**400, r"^params '<a whole number of some 401 digits>' is beyond what apsi plans for"),  # exact int past float range
        (True, r"^params True is not a size"),
        (None, r"^params None is not a size"),
        ([1], r"^params \[1\] is not a size"),
    ],
)
def test_parse_size_rejects(value: object, pattern: str) -> None:
    with pytest.raises(ApsiError, match=pattern):
        parse_size(value, "params")


def test_apsi_error_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="is not a size"):
        parse_size("abc")


@settings(max_examples=200, derandomize=True, deadline=None)
@given(
    mantissa=st.integers(min_value=1, max_value=999),
    suffix=st.sampled_from(["", "K", "M", "B", "T", "k", "m", "b", "t"]),
)
def test_whole_mantissas_parse_exactly(mantissa: int, suffix: str) -> None:
    # "<n><suffix>" is n times the suffix's power of ten, exactly (n * 10^k is exact in a double
    # below 2^53).
    scale = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9, "t": 10**12}[suffix.lower()]
    assert parse_size(f"{mantissa}{suffix}") == mantissa * scale


@settings(max_examples=200, derandomize=True, deadline=None)
@given(st.one_of(st.text(max_size=12), st.floats(allow_nan=True, allow_infinity=True), st.integers()))
def test_parse_size_returns_a_positive_count_or_an_apsi_error(value: object) -> None:
    try:
        count = parse_size(value)
    except ApsiError:
        return
    assert isinstance(count, int) and 1 <= count <= MAX_SIZE


@pytest.mark.parametrize(
    ("count", "text"),
    [(1e12, "1T"), (3.2e10, "32B"), (4_194_304, "4.19M"), (15e12, "15T"), (2_500, "2.5K"), (12, "12")],
)
def test_human(count: float, text: str) -> None:
    assert human(count) == text


def test_byte_units() -> None:
    # GiB is 2^30 bytes and GB 10^9 bytes (the units of gpus.yaml's fields: memory_gib in 2^30
    # bytes, *_gbps in 10^9 B/s).
    assert GIB == 1_073_741_824
    assert GB == 1_000_000_000
    assert math.isclose(80 * GIB / GB, 85.899345920, rel_tol=1e-12)


def test_human_never_writes_an_exponent() -> None:
    # 999.6B at three figures is 1,000B, which ":.3g" wrote "1e+03B" (a 1T plan's headline).
    from apsi.units import human

    assert [human(x) for x in (999.6e9, 999.4e9, 999.96e6, 999.6, 4_194_304, 1e15)] == \
        ["1T", "999B", "1B", "1K", "4.19M", "1,000T"]


@pytest.mark.parametrize("text, count", [("4.1M", 4_100_000), ("0.27T", 270_000_000_000), ("0.067B", 67_000_000),
                                         ("4194304", 4_194_304), ("2^22", 4_194_304)])
def test_a_whole_count_takes_decimal_sizes_that_floats_miss(text: str, count: int) -> None:
    # parse_size(whole=True) compared the float product with its rounding: 4.1 x 1e6 is
    # 4099999.9999999995, so --batch 4.1M was refused as part of a token.
    assert parse_size(text, "batch", whole=True) == count


def test_a_whole_count_refuses_part_of_one() -> None:
    with pytest.raises(ApsiError, match=r"^batch '4194304.5' is not a whole number of tokens"):
        parse_size("4194304.5", "batch", whole=True)
