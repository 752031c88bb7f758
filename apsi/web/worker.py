"""The process that answers web questions: started once by the server (`python -m apsi.web.worker
SOCKET`), it imports the CLI and the solver, then waits on a Unix socket; each question that
connects is answered by a fork of it, so a question costs a fork and its own work, never the
imports, and the server can end one question by killing its process.

A question is one JSON line, {"argv": [...]}; its process answers with JSON lines: {"pid": N} first
(the server kills that process on a time limit or when the visitor goes away), {"progress": line}
while it runs (standard error is a terminal here, so the frontier's "37 points so far" and the
scenario progress bar are drawn, one line sent at most every PROGRESS_EVERY_S), then {"done": exit
code, "out": standard output, "err": standard error}: the CLI's own `main(argv)`, untouched.

The forking process is single-threaded (fork is safe), ends when its parent ends, and leaves its
children to the kernel to reap.
"""

from __future__ import annotations

import io
import json
import os
import re
import signal
import socket
import sys
from typing import Any, Callable

PROGRESS_EVERY_S = 0.2
"""The shortest time between two progress messages: a progress line rewritten in place many
times a second is sent at most five times a second."""

_ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class _Progress(io.TextIOBase):
    """Standard error in the question's process: a terminal (so progress is drawn), each finished
    line or carriage-return rewrite sent as progress at most every PROGRESS_EVERY_S, the whole text
    also kept (a refused question's message is its last "error:" line)."""

    def __init__(self, send: Callable[[dict[str, Any]], None]):
        import time

        self.send, self.kept, self._clock, self._sent = send, io.StringIO(), time.monotonic, 0.0

    def isatty(self) -> bool:
        return True

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self.kept.write(text)
        parts = [part.strip() for part in re.split(r"[\r\n]", _ESCAPES.sub("", text)) if part.strip()]
        now = self._clock()
        if parts and now - self._sent >= PROGRESS_EVERY_S:
            self._sent = now
            self.send({"progress": parts[-1]})
        return len(text)


def answer(argv: list[str], send: Callable[[dict[str, Any]], None]) -> None:
    """Run `apsi <argv>`, its output kept, its progress sent, and send the "done" message."""
    from apsi.cli.app import main

    out, err = io.StringIO(), _Progress(send)
    sys.stdout, sys.stderr = out, err
    try:
        code = main(argv)
    except BaseException as exc:  # the CLI turns input errors into exit 2; anything else is a bug
        code = 1
        err.kept.write(f"error: {type(exc).__name__}: {exc}\n")
    send({"done": code, "out": out.getvalue(), "err": _ESCAPES.sub("", err.kept.getvalue())})


def _question(conn: socket.socket) -> None:
    """In the forked process: read the question, answer it on the same connection, exit."""
    stream = conn.makefile("rwb")

    def send(message: dict[str, Any]) -> None:
        stream.write(json.dumps(message).encode() + b"\n")
        stream.flush()

    code = 0
    try:
        question = json.loads(stream.readline())
        send({"pid": os.getpid()})
        answer([str(a) for a in question["argv"]], send)
    except (OSError, ValueError, KeyError):
        code = 1  # the server went away or sent nothing readable: nothing to answer
    finally:
        try:
            stream.close()
            conn.close()
        finally:
            os._exit(code)


WARM_UP = (["plan", "llama-3.1-70b", "--tokens", "15T", "--json"], ["serve", "llama-3.1-70b", "--rate", "10", "--json"])
"""Questions the worker answers once before the first visitor's, output dropped: what a plan and a
serving plan import on first use (the serving walk, OR-Tools, the presets) and the caches they
fill are then the worker's, inherited by every fork (a 70B plan: 0.13 s cold in a fork, 0.03 s warm)."""


def _warm_up() -> None:
    import contextlib

    import apsi.api.frontier  # noqa: F401  (what the other commands import on their first line)
    import apsi.fleets.api  # noqa: F401
    from apsi.cli.app import main

    with open(os.devnull, "w") as dropped, contextlib.redirect_stdout(dropped), contextlib.redirect_stderr(dropped):
        for argv in WARM_UP:
            main(list(argv))


def serve(path: str) -> None:
    """Listen on the Unix socket `path` and fork one process per connection, until the parent
    (the server) ends."""
    _warm_up()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps the finished questions
    parent = os.getppid()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    listener.settimeout(1.0)
    print("ready", flush=True)
    while os.getppid() == parent:
        try:
            conn, _ = listener.accept()
        except socket.timeout:
            continue
        if os.fork() == 0:
            listener.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the question's own children (fleet --jobs) are waited for
            conn.settimeout(None)
            _question(conn)
        conn.close()


if __name__ == "__main__":
    serve(sys.argv[1])
