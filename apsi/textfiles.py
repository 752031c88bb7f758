"""Reading the files a user names, bounded: regular files only, a size cap, JSON without surprises.

Owns the one way apsi reads a user's file (a catalog, a scenario, a config.json, a saved plan):
special files (a FIFO, /dev/zero, a folder) are refused before they are opened, a file past its
size cap before it is read, and the file is opened without blocking and checked again once open.
It also owns JSON parsing with a key given twice refused and whole numbers of more than
MAX_DIGITS digits refused before int() (Python refuses to print one of more than 4,300 digits, so
any message quoting it would fail), each in one line naming the key, and json_kind(): which apsi
command's JSON a file holds, for refusals that name it. No planning arithmetic.
"""

from __future__ import annotations

import json
import os
import stat
from typing import Any

from apsi.errors import InputError

MAX_DIGITS = 100
"""The most digits a whole number in a file may have: every count apsi reads is below 10^18, and
Python will not convert one of more than 4,300 digits to text (sys.get_int_max_str_digits)."""


def kind_of(mode: int) -> str | None:
    """What a file of `mode` is when it is not a regular file ("a FIFO", "a device", ...), else None."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def read_text_file(path: str | os.PathLike, what: str, limit: int, kind: str = "YAML",
                   error: type[InputError] = InputError) -> str:
    """The UTF-8 text of a regular file of at most `limit` bytes, or one line (an `error`) saying
    why not: a device (/dev/zero), a FIFO, a socket or a directory is refused before it is opened
    (reading it would never end or would block), a larger file before it is read. `what` names the
    file in messages ("catalog file"), `kind` what to give instead ("YAML": "give a regular YAML file")."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise error(f"{what} {str(path)[:200]} does not exist") from None
    except (OSError, ValueError) as err:  # a symlink loop, a NUL byte, a name too long
        raise error(f"{what} {str(path)[:200]!r} cannot be used: {getattr(err, 'strerror', None) or err}") from None
    if (special := kind_of(info.st_mode)) is not None:
        raise error(f"{what} {str(path)[:200]} is {special}: give a regular {kind} file")
    if info.st_size > limit:
        raise error(f"{what} {str(path)[:200]} is {info.st_size:,} bytes; apsi reads at most {limit:,}")
    try:
        # Non-blocking: a FIFO put in the file's place since the check above does not hang the
        # open; it is then refused by the check of what was opened.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
                     | getattr(os, "O_CLOEXEC", 0))
    except (OSError, ValueError) as err:
        raise error(f"{what} {str(path)[:200]} cannot be read: {getattr(err, 'strerror', None) or err}") from None
    try:
        if (special := kind_of(os.fstat(fd).st_mode)) is not None:
            raise error(f"{what} {str(path)[:200]} is {special}: give a regular {kind} file")
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(limit + 1)
    except OSError as err:
        raise error(f"{what} {str(path)[:200]} cannot be read: {err.strerror or err}") from None
    finally:
        os.close(fd)
    if len(data) > limit:  # /proc files report size 0
        raise error(f"{what} {str(path)[:200]} is more than {limit:,} bytes; apsi reads at most that")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise error(f"{what} {str(path)[:200]} is not UTF-8 text: give a {kind} file") from None


def too_many_digits(text: str) -> int | None:
    """The number of digits of a whole number written as `text` when it has more than MAX_DIGITS
    (signs, underscores and a base prefix aside), else None."""
    if len(text) <= MAX_DIGITS:
        return None
    digits = sum(ch.isalnum() for ch in text)
    if text.lstrip("+-")[:2].lower() in ("0x", "0o", "0b"):
        digits -= 2
    return digits if digits > MAX_DIGITS else None


def digits_problem(where: str, digits: int) -> str:
    """The one line for a whole number of `digits` digits at `where` ("hidden_size in config.json")."""
    return f"{where} has {digits:,} digits; give a whole number of at most {MAX_DIGITS} digits"


class _Long:
    """A JSON whole number of more than MAX_DIGITS digits, held as its length until its key is known."""

    __slots__ = ("digits",)

    def __init__(self, digits: int):
        self.digits = digits


def _parse_int(text: str) -> Any:
    digits = too_many_digits(text)
    return int(text) if digits is None else _Long(digits)


def _long_in(value: Any) -> _Long | None:
    """A _Long in `value` or in a list it holds (objects are checked by their own hook)."""
    if isinstance(value, _Long):
        return value
    if isinstance(value, list):
        for item in value:
            if (found := _long_in(item)) is not None:
                return found
    return None


def load_json(text: str, where: str, error: type[InputError] = InputError) -> Any:
    """The JSON document in `text`, refusing in one line (an `error`, naming `where` and the key)
    a key given twice in one object (json.loads keeps the last silently) and a whole number of
    more than MAX_DIGITS digits; raises json.JSONDecodeError or RecursionError for text that is not
    JSON, as json.loads does."""

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in items:
            if key in out:
                raise error(f"{where}: key {key[:80]!r} appears twice in one object: give each key once")
            if (long := _long_in(value)) is not None:
                raise error(digits_problem(f"{key[:80]} in {where}", long.digits))
            out[key] = value
        return out

    data = json.loads(text, object_pairs_hook=pairs, parse_int=_parse_int)
    if (long := _long_in(data)) is not None:
        raise error(digits_problem(f"a number in {where}", long.digits))
    return data


def json_kind(text: str) -> tuple[str, str]:
    """Which apsi command's JSON `text` is, by the keys only that command's holds: ("training",
    "a training plan (apsi plan --json)"), "serving", "fleet", "frontier" or "runs"; ("", "") when none
    (not JSON, or something else). For refusals that name what a file is instead of its first
    schema complaint."""
    import json

    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return "", ""
    if isinstance(data, dict) and {"groups", "engine"} <= data.keys():
        return "serving", "a serving plan (apsi serve --json)"
    if isinstance(data, dict) and {"runs", "horizon_days"} <= data.keys():
        return "fleet", "a fleet plan (apsi fleet --json)"
    if isinstance(data, dict) and {"layout", "gpu", "framework"} <= data.keys():
        return "training", "a training plan (apsi plan --json)"
    if isinstance(data, list) and data and isinstance(data[0], dict) and {"gpus", "days", "layout"} <= data[0].keys() \
            and "gpu" not in data[0]:
        return "frontier", "a frontier (apsi frontier --json)"
    if isinstance(data, list) and data and isinstance(data[0], dict) and "name" in data[0]:
        return "runs", "a scenario file's runs (apsi run --format json)"
    return "", ""
