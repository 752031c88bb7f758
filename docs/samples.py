"""Writes the command samples in README.md and the docs: each ```text block whose first line is
`$ apsi ARGS` (optionally `| head -N`) holds exactly what that command prints, run from this
work tree (python -m apsi with the tree first on the path, whatever is installed), at 100
columns with no colour, from the repository's root.

    python docs/samples.py           # rewrite every stale sample
    python docs/samples.py --check   # exit 1 naming the stale ones, writing nothing (tests/test_cli.py checks the same)
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FILES = [ROOT / "README.md", *(ROOT / "docs" / f"{name}.md" for name in ("training", "serving", "scenarios", "fleets"))]
BLOCK = re.compile(r"^```text\n(\$ apsi [^\n]*)\n(.*?)^```$", re.S | re.M)


def output(line: str) -> str:
    """What the sample's command prints (its first N lines under `| head -N`)."""
    command, _, tail = line[2:].partition(" | ")
    argv = shlex.split(command)[1:]
    env = {**os.environ, "COLUMNS": "100", "NO_COLOR": "1", "APSI_COLUMNS": "0",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    done = subprocess.run([sys.executable, "-m", "apsi", *argv], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=600)
    text = done.stdout + done.stderr
    if tail:
        head = re.fullmatch(r"head -(\d+)", tail.strip())
        if head is None:
            raise SystemExit(f"{line}: a sample may pipe only into head -N")
        text = "".join(text.splitlines(keepends=True)[:int(head.group(1))])
    return text


def main() -> None:
    check = "--check" in sys.argv[1:]
    stale = []
    for path in FILES:
        source = path.read_text(encoding="utf-8")

        def fresh(match: re.Match[str]) -> str:
            now = output(match.group(1))
            if now != match.group(2):
                stale.append(f"{path.relative_to(ROOT)}: {match.group(1)}")
            return f"```text\n{match.group(1)}\n{now}```"

        updated = BLOCK.sub(fresh, source)
        if not check and updated != source:
            path.write_text(updated, encoding="utf-8")
    if check and stale:
        sys.exit("stale samples (run python docs/samples.py):\n  " + "\n  ".join(stale))
    print(f"{len(stale)} sample(s) {'stale' if check else 'rewritten'}")


if __name__ == "__main__":
    main()
