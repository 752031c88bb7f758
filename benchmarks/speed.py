"""Benchmark: every row of the speed table (docs/benchmarks.md, "Speed table"), now and, with
--against REV, at an earlier commit in the same run, in CPU time.

Each in-process row runs in a fresh process of its own (imports done, one call thrown away so the
process is warm), then `--calls` calls of the same question, timed by time.process_time (the fastest
walks apsi.training.frameworks.kept keeps forgotten before each: the walk is timed, not its reuse): the
median is the process's figure, and with --rounds N (default 3) the least of N such processes'
(load on a shared machine only adds time). With --against, the two trees take turns, round by
round and row by row, so that a burst of load falls on both alike. A plan is the call as the API makes it (what it defers, its serving plan
and without explain its Why line, unread); one row reads the Serving line too. The process rows time whole commands (user + system CPU of the child,
median of `--runs`) against the bare `python -c "from ortools.sat.python import cp_model"` in the
same rounds, as a ratio. A question refused by the work budget reads "refused" and a crash the
error's first line: nothing escapes the script. With --grid, the 1,000-run scenario grid of
benchmarks/scenario_grid.py under Megatron (its MFU column left out: the step-time model) as one
`apsi run` process, CPU seconds.

    python benchmarks/speed.py [--calls 5] [--rounds 3] [--runs 5] [--against REV] [--grid] [--write]

--write puts the table into docs/benchmarks.md between its speed-table markers. A row more than
1.5 times slower than its "before" in the same run is marked REGRESSION, and so is one more than
1.5 times slower than the figure the file holds, where the file's figures were taken on the same
machine (its table's "machine" line): across machines only the same run's ratios compare.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import machine

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- speed-table -->", "<!-- /speed-table -->"

ROWS: list[tuple[str, str, dict, float]] = [
    # (row, the call: plan, evaluate or frontier, its keywords, goal in ms)
    ("evaluate() of one 70B layout", "evaluate",
     dict(params="llama-3.1-70b", tokens="15T", tp=8, pp=5, dp=65), 1),
    ('plan("llama-3.1-70b", tokens="15T")', "plan", dict(params="llama-3.1-70b", tokens="15T"), 15),
    ('the same, its Serving line read (plan.serve)', "plan",
     dict(params="llama-3.1-70b", tokens="15T", read_serve=True), None),
    ('plan("deepseek-v3", tokens="14.8T", precision="fp8")', "plan",
     dict(params="deepseek-v3", tokens="14.8T", precision="fp8"), 30),
    ('plan("deepseek-v3") (bf16, no options)', "plan", dict(params="deepseek-v3"), 100),
    ('70B with gpu="any"', "plan", dict(params="llama-3.1-70b", tokens="15T", gpu="any"), 100),
    ('DeepSeek-V3 fp8 with gpu="any"', "plan", dict(params="deepseek-v3", tokens="14.8T", precision="fp8", gpu="any"),
     100),
    ('DeepSeek-V3 fp8 with gpu="any", explain', "plan",
     dict(params="deepseek-v3", tokens="14.8T", precision="fp8", gpu="any", explain=True), None),
    ("levers on the README's 1T", "plan",
     dict(params="1T", active="32B", tokens="15T", precision="fp8", levers=True), 300),
    ('DeepSeek-V3 objective="days"', "plan", dict(params="deepseek-v3", objective="days"), 1000),
    ('DeepSeek-V3 gpu="any"', "plan", dict(params="deepseek-v3", gpu="any"), 1000),
    ('DeepSeek-V3 objective="days", gpu="any", micro_batch="any"', "plan",
     dict(params="deepseek-v3", objective="days", gpu="any", micro_batch="any"), 1000),
    ("DeepSeek-V3 frontier", "frontier", dict(params="deepseek-v3"), 3000),
    ("Qwen3-235B-A22B frontier", "frontier", dict(params="qwen3-235b-a22b"), 3000),
]

PROCESSES: list[tuple[str, list[str], float]] = [
    ("apsi plan 1T --active 32B --tokens 15T --precision fp8", [], 0.8),
    ("the same, --objective days", ["--objective", "days"], None),
    ("the same, --levers", ["--levers"], None),
]
PLAN_1T = ["plan", "1T", "--active", "32B", "--tokens", "15T", "--precision", "fp8"]

_CHILD = """
import json, sys, time
import apsi
from apsi.errors import ApsiError
call, options, calls = json.loads(sys.argv[1])
params = options.pop("params")
fn = getattr(apsi, call)
read_serve = options.pop("read_serve", False)
try:  # the fastest walks kept for questions that differ only in their target: the walk is timed
    from apsi.training.frameworks.kept import forget
except ImportError:  # a tree from before them
    forget = lambda: None
def once():
    forget()
    out = fn(params, **options)
    if read_serve:
        out.serve  # the Serving line, as the CLI text reads it
    return out
try:
    once()
    times = []
    for _ in range(calls):
        t = time.process_time()
        once()
        times.append(time.process_time() - t)
    times.sort()
    print(json.dumps({"ms": times[len(times) // 2] * 1e3}))
except ApsiError as e:
    print(json.dumps({"error": "refused" if "work budget" in str(e) else str(e).splitlines()[0][:80]}))
except Exception as e:
    print(json.dumps({"error": f"{type(e).__name__}: {str(e).splitlines()[0][:80] if str(e) else ''}"}))
"""


def _env(tree: Path | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update({"COLUMNS": "100", "NO_COLOR": "1"})
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    return env


def in_process(call: str, options: dict, calls: int, tree: Path | None) -> dict:
    done = subprocess.run([sys.executable, "-c", _CHILD, json.dumps([call, options, calls])], capture_output=True,
                          text=True, env=_env(tree), cwd=tree or ROOT, timeout=900)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        return {"error": (done.stderr.strip().splitlines() or ["no output"])[-1][:80]}
    return json.loads(lines[-1])


def process_cpu(argv: list[str], tree: Path | None) -> float:
    """User + system CPU seconds of one child process."""
    before = os.times()
    subprocess.run(argv, capture_output=True, env=_env(tree), cwd=tree or ROOT, timeout=900)
    after = os.times()
    return (after.children_user - before.children_user) + (after.children_system - before.children_system)


def processes(runs: int, trees: list[Path | None]) -> tuple[list[float], list[list[float]]]:
    """Per tree, the bare import's median CPU seconds and each process row's, the trees (and the
    bare import before each) taking turns round by round."""
    bare = [sys.executable, "-c", "from ortools.sat.python import cp_model"]
    timed: list[list[list[float]]] = [[[] for _ in range(1 + len(PROCESSES))] for _ in trees]
    for _ in range(runs):
        for t, tree in enumerate(trees):
            timed[t][0].append(process_cpu(bare, tree))
            for i, (_, extra, _) in enumerate(PROCESSES, start=1):
                timed[t][i].append(process_cpu([sys.executable, "-m", "apsi", *PLAN_1T, *extra], tree))
    medians = [[machine.median(x) for x in per] for per in timed]
    return [m[0] for m in medians], [m[1:] for m in medians]


def grid_cpu(tree: Path | None) -> float:
    """CPU seconds of `apsi run` over the 1,000-run grid under Megatron (no flat MFU)."""
    import scenario_grid

    with tempfile.TemporaryDirectory() as where:
        path = Path(where) / "grid.yaml"
        scenario_grid.write_grid(path)
        text = re.sub(r", mfu: [0-9.]+\}", "}", path.read_text(encoding="utf-8"))
        path.write_text(text, encoding="utf-8")
        return process_cpu([sys.executable, "-m", "apsi", "run", str(path), "--format", "csv",
                            "--output", str(Path(where) / "out.csv")], tree)


def compiled(tree: Path | None) -> None:
    """Byte-compile the tree's apsi package, as `pip install` does for the files it installs (pip's
    default --compile): a process row then charges the question, not the compiling of 130 source
    files, which a fresh tree, an editable install or PYTHONDONTWRITEBYTECODE=1 would add to every
    run (about 45 ms of the 1T plan's process; the bare OR-Tools import it is compared with reads
    the bytecode pip wrote)."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", str((tree or ROOT) / "apsi")], check=True,
                   capture_output=True)


def measure(args: argparse.Namespace, trees: list[Path | None]) -> list[dict[str, str]]:
    """Every row's figure as text (ms, a ratio, seconds, or what stopped it), per tree, the trees
    taking turns (module docstring)."""
    out: list[dict[str, str]] = [{} for _ in trees]
    for tree in trees:
        compiled(tree)
    labels = ["before", "now"][-len(trees):]
    for name, call, options, _ in ROWS:
        got: list[list[dict]] = [[] for _ in trees]
        for _ in range(args.rounds):
            for t, tree in enumerate(trees):
                got[t].append(in_process(call, dict(options), args.calls, tree))
        for t in range(len(trees)):
            errors = [g["error"] for g in got[t] if "error" in g]
            out[t][name] = errors[0] if errors else f"{min(g['ms'] for g in got[t]):,.1f} ms"
        print(f"  {name}: " + ", ".join(f"{label} {o[name]}" for label, o in zip(labels, out)), file=sys.stderr,
              flush=True)
    bares, rows = processes(args.runs, trees)
    for t in range(len(trees)):
        for (name, _, _), cpu in zip(PROCESSES, rows[t]):
            out[t][name] = f"{cpu / bares[t]:.2f}x ({cpu:.2f} s against {bares[t]:.2f} s)"
    for (name, _, _) in PROCESSES:
        print(f"  {name}: " + ", ".join(f"{label} {o[name]}" for label, o in zip(labels, out)), file=sys.stderr,
              flush=True)
    if args.grid:
        for t, tree in enumerate(trees):
            out[t]["a grid of 1,000 Megatron runs (apsi run)"] = f"{grid_cpu(tree):,.1f} s"
    return out


def _number(text: str) -> float | None:
    """A figure's leading number (ms, a ratio or s), or None for a refusal or an error."""
    found = re.match(r"([\d,.]+)", text or "")
    return float(found.group(1).replace(",", "")) if found else None


def previous() -> tuple[str, dict[str, str]]:
    """The machine line and the figures docs/benchmarks.md's speed table holds now ("now"
    column), by row."""
    text = DOC.read_text(encoding="utf-8")
    if BEGIN not in text:
        return "", {}
    block = text.split(BEGIN, 1)[1].split(END, 1)[0]
    rows: dict[str, str] = {}
    column = None
    where = ""
    for line in block.splitlines():
        if line.startswith("machine "):
            where = line.split(None, 1)[1].strip()
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] == "question":
            column = cells.index("now")
        elif column is not None and not cells[0].startswith("---"):
            rows[cells[0].strip("`")] = cells[column]
    return where, rows


def goal_of(name: str) -> str:
    for row, _, _, goal in ROWS:
        if row == name:
            return "-" if goal is None else f"< {goal:,g} ms"
    for row, _, goal in PROCESSES:
        if row == name:
            return "-" if goal is None else f"<= {goal:g}x"
    return "< 15 s" if name.startswith("a grid") else "-"


def verdict(name: str, now: str) -> str:
    goal, value = goal_of(name), _number(now)
    if goal == "-" or value is None:
        return "-" if value is not None else "not answered"
    limit = _number(goal.lstrip("<= "))
    assert limit is not None
    return "met" if value < limit or (goal.startswith("<=") and value <= limit) else "missed"


def table(now: dict[str, str], before: dict[str, str] | None, old: dict[str, str]) -> str:
    head = "| question | " + ("before | " if before is not None else "") + "now | goal | |"
    lines = [head, "|---|" + ("---|" if before is not None else "") + "---|---|---|"]
    for name, value in now.items():
        mark = verdict(name, value)
        cur = _number(value)
        then = _number(before.get(name, "")) if before is not None else None
        if then is not None and cur is not None and cur > 1.5 * then:
            mark += f"; REGRESSION: {cur / then:.1f}x its before"
        was = _number(old.get(name, ""))
        if was is not None and cur is not None and cur > 1.5 * was:
            mark += f"; REGRESSION: {cur / was:.1f}x the previous {old[name]}"
        cells = [f"`{name}`" if name.startswith(("plan(", "apsi ")) else name]
        if before is not None:
            cells.append(before.get(name, "-"))
        cells += [value, goal_of(name), mark]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=5, help="warm calls per in-process row (median)")
    parser.add_argument("--runs", type=int, default=5, help="rounds of the process rows (median)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="processes per in-process row and tree (the least of their medians)")
    parser.add_argument("--against", help="a commit to measure in the same run (a git worktree of it)")
    parser.add_argument("--grid", action="store_true", help="also the 1,000-run scenario grid (minutes)")
    parser.add_argument("--write", action="store_true", help="put the table into docs/benchmarks.md")
    args = parser.parse_args()
    header = machine.header()
    print(header)
    with tempfile.TemporaryDirectory() as where:
        trees: list[Path | None] = [None]
        if args.against:
            tree = Path(where) / "tree"
            subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), args.against],
                           check=True, capture_output=True)
            trees.insert(0, tree)
            print(f"before: {args.against}; now: the work tree", file=sys.stderr)
        try:
            figures = measure(args, trees)
        finally:
            if args.against:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(trees[0])],
                               capture_output=True)
    before, now = (figures[0], figures[1]) if args.against else (None, figures[0])
    here = next(line.split(None, 1)[1].strip() for line in header.splitlines() if line.startswith("machine "))
    there, old = previous()
    if there != here:
        print(f"(the file's figures were taken on another machine, {there or 'not named'}: not compared)",
              file=sys.stderr)
        old = {}
    text = table(now, before, old)
    print(text)
    if args.write:
        doc = DOC.read_text(encoding="utf-8")
        block = f"{BEGIN}\n```text\n{header}\n```\n\n{text}\n{END}"
        if BEGIN in doc:
            doc = doc.split(BEGIN, 1)[0] + block + doc.split(END, 1)[1]
        else:
            marker = "\n## "
            at = doc.index(marker)
            doc = doc[:at] + "\n\n## Speed table\n\n" + block + "\n" + doc[at:]
        DOC.write_text(doc, encoding="utf-8")


if __name__ == "__main__":
    main()
