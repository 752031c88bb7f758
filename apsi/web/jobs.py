"""Asking a question without letting it stall the server: each web question runs the CLI's command
in a process of its own, forked from apsi.web.worker (started once, the CLI and the solver already
imported), so a question costs a fork and its own work. A question that runs past its time limit,
or whose visitor went away (the page's Cancel, a closed tab), is ended by killing its process; at
most `Limits.processes` questions run at once and the others wait their turn.

Owns `Limits`, `Worker` and `Worker.ask()`, an async iterator of events: ("progress", line) while
the question runs, then ("done", exit code, output, error text). Nothing here knows what the
question is.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Awaitable, Callable

from apsi.errors import ApsiError

_LINE_BYTES = 1 << 28
"""The longest message a question's process sends (its whole --json output is one line): 256 MiB."""


@dataclass(frozen=True)
class Limits:
    """What one visitor may take of the server. `seconds`: the wall time of one question (the CLI's
    own work budget refuses most unreasonable questions within seconds; this ends the rest);
    `processes`: questions answered at once (default: the cores); `body_bytes`: an uploaded
    config.json or fleet file, or any one parameter (1 MiB)."""

    seconds: float = 120.0
    processes: int = field(default_factory=lambda: max(1, os.cpu_count() or 1))
    body_bytes: int = 1 << 20


class TimeLimit(Exception):
    """The question ran past Limits.seconds and was ended."""


class Worker:
    """The forking process (apsi.web.worker), started on the first question, ended with the server."""

    def __init__(self, limits: Limits):
        self.limits = limits
        self._folder = tempfile.mkdtemp(prefix="apsi-web-")
        self.path = os.path.join(self._folder, "worker.sock")
        self._process: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        self._slots: dict[int, asyncio.Semaphore] = {}

    def _start(self) -> None:
        """Start the worker and wait for its "ready" (blocking: run in a thread)."""
        with self._lock:
            if self._process is not None and self._process.poll() is None:
                return
            if not hasattr(os, "fork"):
                raise ApsiError("apsi web answers each question in a forked process: it needs Linux or macOS")
            if os.path.exists(self.path):
                os.unlink(self.path)
            self._process = subprocess.Popen([sys.executable, "-m", "apsi.web.worker", self.path],
                                             stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
            assert self._process.stdout is not None
            if self._process.stdout.readline().strip() != b"ready":
                raise RuntimeError("the web app's worker process did not start")
            atexit.register(self.close)

    def close(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            self._process.wait(timeout=5)
        shutil.rmtree(self._folder, ignore_errors=True)

    def _semaphore(self) -> asyncio.Semaphore:
        """One semaphore per event loop (a test client may run several loops)."""
        key = id(asyncio.get_running_loop())
        if key not in self._slots:
            self._slots[key] = asyncio.Semaphore(self.limits.processes)
        return self._slots[key]

    async def ask(self, argv: list[str],
                  gone: Callable[[], Awaitable[bool]] | None = None) -> AsyncIterator[tuple[Any, ...]]:
        """Run `apsi <argv>` in a process of its own and yield its events. `gone()` says whether
        the visitor has gone (the process is then killed and the iterator ends without "done");
        past Limits.seconds the process is killed and TimeLimit raised."""
        deadline = time.monotonic() + self.limits.seconds  # the wait for a free process counts too
        slots = self._semaphore()
        while True:
            try:
                await asyncio.wait_for(slots.acquire(), timeout=0.25)
                break
            except asyncio.TimeoutError:
                if gone is not None and await gone():
                    return
                if time.monotonic() > deadline:
                    raise TimeLimit(f"the question waited more than {self.limits.seconds:g} s for a free process, "
                                    "the server's limit (apsi web --time-limit)") from None
        try:
            if self._process is None or self._process.poll() is not None:
                await asyncio.to_thread(self._start)
            reader, writer = await asyncio.open_unix_connection(self.path, limit=_LINE_BYTES)
            pid = None
            try:
                writer.write(json.dumps({"argv": argv}).encode() + b"\n")
                await writer.drain()
                while True:
                    try:
                        line = await asyncio.wait_for(reader.readline(), timeout=0.25)
                    except asyncio.TimeoutError:
                        line = None
                    if line == b"":
                        pid = None  # gone already: its pid may be another process's by now
                        yield ("done", 1, "", "error: the question's process ended without an answer\n")
                        return
                    if line:
                        message = json.loads(line)
                        if "pid" in message:
                            pid = message["pid"]
                        elif "progress" in message:
                            yield ("progress", message["progress"])
                        elif "done" in message:
                            pid = None
                            yield ("done", message["done"], message["out"], message["err"])
                            return
                    if gone is not None and await gone():
                        return
                    if time.monotonic() > deadline:
                        raise TimeLimit(f"the question took more than {self.limits.seconds:g} s, the server's "
                                        "limit (apsi web --time-limit)")
            finally:
                writer.close()
                if pid is not None:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
        finally:
            slots.release()
