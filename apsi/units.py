"""Human quantities and byte units, parsed in one place.

`parse_size` turns "1T", "32B", "16M", "1.5e12" or a number into a positive integer count; the
CLI, scenario files and the Python API all go through it (apsi.inputs.question.resolve calls it for every
size).
Suffixes are decimal (K=10^3, M=10^6, B=G=10^9, T=10^12), case-insensitive: "16M" tokens is
16,000,000 tokens, not 2^24.

GiB means 2^30 bytes everywhere in apsi; GB means 10^9 bytes.
"""

from __future__ import annotations

import math
import re

from apsi.errors import InputError, brief

GIB = 2**30
"""Bytes in one GiB (binary gigabyte)."""
GB = 10**9
"""Bytes in one GB (decimal gigabyte)."""
SECONDS_PER_DAY = 86_400

_SUFFIX = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9, "g": 10**9, "t": 10**12}
_PATTERN = re.compile(r"^\s*([+-]?[0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([kmbgt]?)\s*$", re.IGNORECASE)

# Sizes above this are refused: 10^17 is far past any model or corpus (10^15 parameters and
# 10^17 tokens), and past it float arithmetic on FLOP counts loses the precision the plan
# reports. The limit is a sanity bound, not physics.
MAX_SIZE = 10**17


def refuse_bool(value: object) -> object:
    """A pydantic before-validator: lax mode reads True as 1 and 1.0, but a flag where a number
    belongs is a mistake."""
    if isinstance(value, bool):
        raise ValueError("a number is needed, not a boolean")
    return value


def parse_flag(value: object, what: str, meaning: str = "") -> bool:
    """True or False from a boolean or the words "true" / "false" (any case), as the CLI and YAML
    give them; anything else is an InputError naming `what` (and what the flag means)."""
    text = value.strip().lower() if isinstance(value, str) else value
    if isinstance(text, bool):
        return text
    if text in ("true", "false"):
        return text == "true"
    about = f" ({meaning})" if meaning else ""
    raise InputError(f"{what} must be true or false{about}, got {value!r:.60}")


def looks_like_size(text: str) -> bool:
    """Whether `text` is written as a size (a number with an optional suffix), right or wrong in value."""
    return _PATTERN.match(text) is not None


_POWER = re.compile(r"^\s*(\d{1,4})\s*\^\s*(\d{1,3})\s*$")
"""A power written as 2^24: the suffixes are decimal (16M is 16,000,000), so 2^24 is how to
write 16,777,216."""


def parse_size(value: object, what: str = "size", whole: bool = False) -> int:
    """A positive count from "1T", "32B", "1.5e12", "2^24", 7e10 or 70_000_000_000; `whole`: a count
    of things (tokens in a batch) refuses a fraction rather than rounding it away.

    >>> parse_size("1.5T"), parse_size("16M"), parse_size(2e9)
    (1500000000000, 16000000, 2000000000)
    """
    if isinstance(value, bool):
        raise InputError(f"{what} {value!r} is not a size: give a number such as 70B, 1.5T or 7e10")
    number: int | float
    if isinstance(value, int):
        number = value  # kept exact: float() raises OverflowError past ~1.8e308
        text = brief(value)  # repr() fails past 4,300 digits (sys.get_int_max_str_digits)
    elif isinstance(value, float):
        number = value
        text = repr(value)
    elif isinstance(value, str) and (power := _POWER.match(value)) is not None:
        text = value
        base, exponent = (int(x) for x in power.groups())
        number = base ** exponent if exponent <= 64 else math.inf
    elif isinstance(value, str):
        text = value if len(value) <= 80 else value[:77] + "..."  # a message never repeats a huge input
        match = _PATTERN.match(value)
        if not match:
            raise InputError(
                f"{what} {brief(value)} is not a size: give a number with an optional K/M/B/T suffix "
                "(decimal: 16M is 16,000,000), such as 70B, 1.5T, 16M, 7e10 or 2^24"
            )
        try:
            number = float(match.group(1)) * _SUFFIX[match.group(2).lower()]
        except OverflowError:  # pragma: no cover - float() gives inf rather than raising
            number = math.inf
    else:
        raise InputError(f"{what} {brief(value)} is not a size: give a number such as 70B or 7e10")
    if isinstance(number, float) and not math.isfinite(number):
        raise InputError(f"{what} {text!r} is not a finite size: give a number such as 70B or 7e10")
    if number <= 0:
        raise InputError(f"{what} must be positive, got {text!r}")
    if number > MAX_SIZE:
        raise InputError(f"{what} {text!r} is beyond what apsi plans for (at most 1e17)")
    count = round(number)
    if whole and abs(count - number) > 1e-9 * number:  # (4.1M is 4099999.9999999995 in floats)
        raise InputError(f"{what} {text!r} is not a whole number of tokens: give one, such as {max(count, 1):,}")
    if count < 1:
        raise InputError(f"{what} {text!r} rounds to zero: give at least 1")
    return count


def human(count: float) -> str:
    """The short form of a count: 1e12 -> "1T", 3.2e10 -> "32B", 4194304 -> "4.19M"."""
    for suffix, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        # From where three figures round up to the unit: 999.6B is "1T" (":.3g" of 999.6 wrote "1e+03B").
        if abs(count) >= scale * 0.9995:
            value = count / scale
            text = f"{value:.3g}" if abs(value) < 999.5 else f"{value:,.0f}"
            return f"{text}{suffix}"
    return f"{count:.3g}"
