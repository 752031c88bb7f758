"""Take docs/web.md's screenshots: `apsi web`'s page in headless Chromium, one per tab, each the
answer to the question docs/web.md names (python docs/web_screenshots.py; needs the web extra,
Playwright and a Chromium: Debian's `chromium` package or Playwright's download)."""

from __future__ import annotations

import os
import sys
from urllib.parse import urlencode

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from tests.web_server import launch, served  # noqa: E402

SHOTS = (
    ("web-train.png", {"tab": "plan", "params": "llama-3.1-70b", "tokens": "15T"},
     'svg[aria-label="days against GPUs"]'),
    ("web-serve.png", {"tab": "serve", "params": "llama-3.1-70b", "precision": "fp8", "gpu": "H100", "rate": "20"},
     'svg[aria-label="tokens per second per GPU against per user"]'),
    ("web-fleet.png", {"tab": "fleet", "time_limit": "20"}, 'svg[aria-label="fleet schedule"]'),
)
"""(file, the page's question as its permalink, what to wait for before the picture)."""


def main() -> None:
    from urllib.parse import quote

    from playwright.sync_api import sync_playwright

    with open(os.path.join(HERE, "..", "examples", "fleet.yaml")) as f:
        fleet = f.read()
    with served() as url, sync_playwright() as p:
        browser = launch(p)
        page = browser.new_page(viewport={"width": 1100, "height": 900})
        for name, question, ready in SHOTS:
            address = url + "?" + urlencode(question) + ("#fleet=" + quote(fleet) if question["tab"] == "fleet" else "")
            page.goto(address)
            page.wait_for_selector(ready, timeout=120_000)
            page.wait_for_selector("#status", state="hidden")
            page.screenshot(path=os.path.join(HERE, name), full_page=True)
            print(f"{name} written", file=sys.stderr)
        browser.close()


if __name__ == "__main__":
    main()
