"""Test plumbing for the browser tests and docs/web_screenshots.py: `apsi web`'s app served by
uvicorn on a free local port in a thread, and the Chromium that Playwright drives (Debian's
`chromium` package, or Playwright's own download), or None where there is neither.

Owns no expected values."""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
from contextlib import contextmanager
from typing import Iterator

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def chromium() -> str | None:
    """The path of a Chromium to drive: $APSI_CHROMIUM, else one on PATH, else None (Playwright's
    own download, where installed, is found by Playwright itself: see browser_args)."""
    given = os.environ.get("APSI_CHROMIUM")
    if given:
        return given if os.path.exists(given) else None
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


def launch(playwright):  # type: ignore[no-untyped-def]
    """A headless Chromium: the system's where there is one, else Playwright's download."""
    path = chromium()
    return playwright.chromium.launch(executable_path=path, args=["--no-sandbox"]) if path else \
        playwright.chromium.launch()


@contextmanager
def served(limits=None) -> Iterator[str]:  # type: ignore[no-untyped-def]
    """The app on http://127.0.0.1:PORT/ for the body's length; yields its address."""
    import uvicorn

    from apsi.web.app import create_app

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(limits), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the web app did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
