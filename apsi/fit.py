"""Fitting text output to the terminal: the width to use, long lines wrapped under their own
label, and tables that fall back to one block per row when their columns do not fit.

Owns only layout of text already rendered (apsi.outputs.text, apsi.outputs.tables call it); no numbers are
formatted here. Output that is not a terminal keeps its full lines unless COLUMNS says otherwise,
so pipes and files read the same everywhere.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import textwrap
import unicodedata
from typing import IO, Sequence

MIN_WIDTH = 40
"""Narrower terminals get this width: below it labels and values no longer fit side by side."""


def terminal_width(stream: IO[str] | None = None) -> int | None:
    """The width to fit output to: APSI_COLUMNS when set (0: never wrap), else COLUMNS when set,
    else the terminal's when `stream` (stdout) is one, else None (no wrapping)."""
    own = os.environ.get("APSI_COLUMNS", "").strip()
    if own.isascii() and own.isdigit():
        return None if int(own) == 0 else max(MIN_WIDTH, int(own))
    columns = os.environ.get("COLUMNS", "").strip()
    if columns.isascii() and columns.isdigit():
        return max(MIN_WIDTH, int(columns))
    stream = sys.stdout if stream is None else stream
    try:
        if stream.isatty():
            return max(MIN_WIDTH, shutil.get_terminal_size().columns)
    except (AttributeError, ValueError, OSError):
        pass
    return None


def shown(text: str) -> int:
    """The columns `text` takes on a terminal: an East Asian wide or fullwidth character two
    (Unicode's East_Asian_Width W and F, as terminals draw them), a mark drawn on the character
    before it or a format character none (general categories Mn, Me and Cf: combining accents,
    Thai vowel signs, variation selectors, zero-width joiners), any other one."""
    if text.isascii():  # (every cell of a table of numbers: one column each, at len's speed)
        return len(text)
    return sum(0 if unicodedata.category(ch) in ("Mn", "Me", "Cf") else 2 if unicodedata.east_asian_width(ch) in "WF"
               else 1 for ch in text)


def pad(text: str, width: int, right: bool = False) -> str:
    """`text` padded with spaces to `width` terminal columns (shown): on the left when `right`."""
    fill = " " * max(0, width - shown(text))
    return fill + text if right else text + fill


_LABEL = re.compile(r"^(\s*\S(?:.*?\S)?\s{2,})\S")
"""A labelled row, "  Layout      TP 8 x ...": continuation lines start where its value does."""


def wrap(text: str, width: int | None) -> str:
    """Every line longer than `width` wrapped at spaces, continuation lines indented to the value of
    a labelled row ("  Memory/GPU  ...") or by four spaces; unchanged when width is None."""
    if width is None:
        return text
    out = []
    for line in text.split("\n"):
        if len(line) <= width:
            out.append(line)
            continue
        label = _LABEL.match(line)
        indent = len(label.group(1)) if label and len(label.group(1)) < width // 2 else len(line) - len(line.lstrip()) + 4
        out += textwrap.wrap(line, width, subsequent_indent=" " * indent, break_long_words=True,
                             break_on_hyphens=False, drop_whitespace=True) or [""]
    return "\n".join(out)


def columns(header: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[bool], width: int | None,
            indent: str = "") -> list[str]:
    """Aligned columns, or, when they are wider than `width`, one block per row: its first cell,
    then each other cell under its column's name."""
    widths = [max(shown(r[i]) for r in [header, *rows]) for i in range(len(header))]
    aligned = [(indent + "  ".join(pad(c, w, ri) for c, w, ri in zip(r, widths, right))).rstrip()
               for r in [header, *rows]]
    if width is None or max(shown(line) for line in aligned) <= width:
        return aligned
    name = max(shown(h) for h in header[1:])
    out = []
    for r in rows:
        out.append(indent + r[0])
        out += [wrap(f"{indent}  {pad(h, name)}  {c}", width) for h, c in zip(header[1:], r[1:]) if c]
    return out
