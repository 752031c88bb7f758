"""Reading an argument list with a framework's parser when some arguments are not its own: each
argument the parser rejects (unrecognized, or a value outside its choices) is reported as the
parser worded it, taken out with its values, and the rest read again, so that every other value
can still be compared. Shared by check_megatron.py and check_mds.py."""

from __future__ import annotations

import contextlib
import io
import os
import re
import sys
import traceback
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


def record(errors: list, where: str, exc: BaseException) -> None:
    """An exception as one error line; a bare assert as its file, line and source."""
    message = f"{type(exc).__name__}: {exc}".strip()
    if isinstance(exc, AssertionError) and not str(exc):
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        message = f"AssertionError at {os.path.basename(frame.filename)}:{frame.lineno}: {frame.line}"
    errors.append({"where": where, "message": message.splitlines()[0][:500]})


def megatron_args(parse_args: Callable[..., Any], validate_args: Callable[..., Any], defaults: dict,
                  launch: dict, errors: list) -> Any:
    """Megatron's (or its fork Megatron-DeepSpeed's) own parse_args and validate_args on the
    launch's argv, the world size and ranks set as torchrun sets them; the args, or None where
    parsing failed (the error recorded)."""
    os.environ.update(launch.get("env", {}))
    os.environ.update(WORLD_SIZE=str(launch["world_size"]), RANK="0", LOCAL_RANK="0", APSI_GPU=launch["gpu"],
                      LOCAL_WORLD_SIZE=str(launch["per_node"]))
    args = parse(lambda: parse_args(ignore_unknown_args=False), launch["argv"], errors)
    if args is None:
        return None
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            validate_args(args, dict(defaults))
    except BaseException as exc:  # noqa: BLE001 - Megatron reports bad arguments by assert
        record(errors, "validate_args", exc)
    return args
