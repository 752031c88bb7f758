"""Reading an argument list with a framework's parser when some arguments are not its own: each
argument the parser rejects (unrecognized, or a value outside its choices) is reported as the
parser worded it, taken out with its values, and the rest read again, so that every other value
can still be compared. Shared by check_megatron.py and check_mds.py."""

from __future__ import annotations

import contextlib
import io
import re
import sys
from typing import Any, Callable


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _without(argv: list[str], flag: str) -> list[str]:
    """argv less `flag` and the words after it up to the next option."""
    if flag not in argv:
        return argv
    i = argv.index(flag)
    j = i + 1
    while j < len(argv) and not argv[j].startswith("--"):
        j += 1
    return argv[:i] + argv[j:]


def parse(parse_args: Callable[[], Any], argv: list[str], errors: list[dict[str, str]],
          script: str = "pretrain_gpt.py", tries: int = 40) -> Any:
    """The parser's namespace for argv, every rejection appended to errors; None if it never parses."""
    for _ in range(tries):
        sys.argv = [script, *argv]
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            try:
                return parse_args()
            except SystemExit:
                message = _last_line(err.getvalue())
        errors.append({"where": "parse_args", "message": message})
        unknown = re.search(r"unrecognized arguments: (.*)$", message)
        bad = re.search(r"argument (--[\w-]+)", message)
        if unknown:
            flags = [w for w in unknown.group(1).split() if w.startswith("--")]
            before = argv
            for flag in flags:
                argv = _without(argv, flag)
            if argv == before:
                return None
        elif bad and bad.group(1) in argv:
            argv = _without(argv, bad.group(1))
        else:
            return None
    return None
