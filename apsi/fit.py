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
        if shown(line) <= width:
            out.append(line)
            continue
        label = _LABEL.match(line)
        indent = (shown(label.group(1)) if label and shown(label.group(1)) < width // 2
                  else len(line) - len(line.lstrip()) + 4)
        if line.isascii():  # textwrap counts characters, which is columns here
            out += textwrap.wrap(line, width, subsequent_indent=" " * indent, break_long_words=True,
                                 break_on_hyphens=False, drop_whitespace=True) or [""]
        else:
            out += _wrap_shown(line, width, " " * indent)
    return "\n".join(out)


def _wrap_shown(line: str, width: int, indent: str) -> list[str]:
    """textwrap.wrap(line, width, subsequent_indent=indent, break_long_words=True,
    break_on_hyphens=False) measuring terminal columns (shown) where textwrap counts characters: its
    chunks (words and runs of spaces), filled greedily, a word wider than a line cut to fill the
    line, the spaces at each break dropped (textwrap.TextWrapper._wrap_chunks, Python 3.10-3.13)."""
    chunks = [c for c in re.split(r"(\s+)", line.expandtabs()) if c]
    chunks = [" " * len(c) if c.isspace() else c for c in chunks]
    chunks.reverse()
    lines: list[str] = []
    while chunks:
        room = width - (len(indent) if lines else 0)
        if lines and chunks[-1].isspace():
            chunks.pop()
        current: list[str] = []
        used = 0
        while chunks and used + shown(chunks[-1]) <= room:
            used += shown(chunks[-1])
            current.append(chunks.pop())
        if chunks and shown(chunks[-1]) > room:
            # The long word fills what is left of the line (a line of its own: at least a character).
            word, cut, taken = chunks[-1], 0, used
            while cut < len(word) and taken + shown(word[cut]) <= room:
                taken += shown(word[cut])
                cut += 1
            if cut == 0 and not current:
                cut = 1  # a line of its own takes a character, whatever its width
            if cut or used == room:  # (textwrap appends an empty piece where no column is left)
                current.append(word[:cut])
            chunks[-1] = word[cut:]
            if not chunks[-1]:
                chunks.pop()
        if current and not current[-1].strip():
            current.pop()
        if current:
            lines.append((indent if lines else "") + "".join(current))
    return lines or [""]


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
