"""`python -m apsi.web SETTINGS`: the server `apsi web` starts (SETTINGS: its options as a JSON
object: host, port, seconds, processes), uvicorn serving apsi.web.app."""

from __future__ import annotations

import json
import sys


def main(settings: dict) -> None:  # type: ignore[type-arg]
    import uvicorn

    from apsi.web.app import create_app
    from apsi.web.jobs import Limits

    limits = Limits(seconds=settings["seconds"], **({"processes": settings["processes"]} if settings.get("processes") else {}))
    uvicorn.run(create_app(limits), host=settings["host"], port=settings["port"], log_level="warning")


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
