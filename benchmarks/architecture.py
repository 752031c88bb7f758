"""Benchmark of the package's shape: its wings, their modules, and the imports between them.

Reads apsi/ (no import of it) and prints, per wing (a top-level folder of apsi/, or the ground's
single modules), its modules and lines; the modules at apsi's top level; the run-time import
graph between modules (imports at a module's top level, TYPE_CHECKING blocks left out) and any
cycle in it; the imports made inside functions (lazy) apart; and the imports that run against
the wings' order (LAYERS: a wing imports only from wings before it), eager and lazy. The figures
are docs/architecture.md's.

    python benchmarks/architecture.py [--check] [--tree DIR]

--check exits 1 when a module-level import cycle exists, a module passes 500 lines, more than 8
modules sit at apsi's top level, or an eager import runs against the wings' order.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "apsi"
LAYERS = ["ground", "model", "inputs", "serving", "training", "api", "outputs", "fleets", "cli", "web"]
"""The wings, lower first: a wing's modules import from its own wing and the ones before it."""
MAX_LINES = 500
MAX_TOP = 8


def modules() -> dict[str, Path]:
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def wing(name: str) -> str:
    if name == "apsi.__main__":
        return "cli"  # `python -m apsi`: the command's entry
    parts = name.split(".")
    if len(parts) == 1 or (len(parts) == 2 and (ROOT / f"{parts[1]}.py").exists()):
        return "ground"
    return parts[1]


def _resolve(target: str, known: dict[str, Path]) -> str | None:
    while target and target not in known:
        target = target.rpartition(".")[0]
    return target or None


def imports(known: dict[str, Path]) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(eager, lazy): for each module, the apsi modules it imports at its top level (outside
    TYPE_CHECKING) and inside functions."""
    eager: dict[str, set[str]] = defaultdict(set)
    lazy: dict[str, set[str]] = defaultdict(set)

    def visit(node: ast.AST, name: str, inside: bool, typing_only: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                visit(child, name, inside, True)
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)) and not typing_only:
                targets = []
                if isinstance(child, ast.Import):
                    targets = [a.name for a in child.names]
                elif child.module and child.level == 0:
                    targets = [f"{child.module}.{a.name}" for a in child.names]
                for t in targets:
                    if t.startswith("apsi"):
                        got = _resolve(t, known)
                        if got and got != name:
                            (lazy if inside else eager)[name].add(got)
            deeper = inside or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            visit(child, name, deeper, typing_only)

    for name, path in known.items():
        visit(ast.parse(path.read_text(encoding="utf-8")), name, False, False)
    return eager, lazy


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def strong(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10_000)
    for v in sorted(graph):
        if v not in index:
            strong(v)
    return out


def against(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Imports from a wing to a later one (LAYERS), by module."""
    rank = {w: i for i, w in enumerate(LAYERS)}
    return sorted((a, b) for a, targets in graph.items() for b in targets
                  if wing(a) in rank and wing(b) in rank and rank[wing(b)] > rank[wing(a)])


def report() -> tuple[str, list[str]]:
    known = modules()
    eager, lazy = imports(known)
    lines = {name: len(path.read_text(encoding="utf-8").splitlines()) for name, path in known.items()}
    by_wing: dict[str, list[str]] = defaultdict(list)
    for name in known:
        if name != "apsi":
            by_wing[wing(name)].append(name)
    top = [n for n in known if n.count(".") == 1 and (ROOT / f"{n.split('.')[1]}.py").exists()
           and n not in ("apsi.__main__",)]
    out = [f"{'wing':<10} {'modules':>7} {'lines':>6}"]
    for w in LAYERS + sorted(set(by_wing) - set(LAYERS)):
        names = by_wing.get(w, [])
        out.append(f"{w:<10} {len(names):>7} {sum(lines[n] for n in names):>6,}")
    loops = cycles(eager)
    up_eager, up_lazy = against(eager), against(lazy)
    out += ["", f"modules at apsi's top level: {len(top)} ({', '.join(sorted(n.split('.')[1] for n in top))})",
            f"largest module: {max(lines, key=lines.get)} ({max(lines.values())} lines)",
            f"module-level imports between apsi modules: {sum(len(v) for v in eager.values())}; "
            f"inside functions: {sum(len(v) for v in lazy.values())}",
            f"module-level import cycles: {len(loops)}" + "".join(f"\n  {' -> '.join(c)}" for c in loops),
            f"imports against the wings' order: {len(up_eager)} at module level, {len(up_lazy)} inside functions"]
    out += [f"  {a} -> {b} (lazy)" for a, b in up_lazy]
    out += [f"  {a} -> {b}" for a, b in up_eager]
    problems = []
    if loops:
        problems.append(f"{len(loops)} module-level import cycle(s)")
    if max(lines.values()) > MAX_LINES:
        problems.append(f"{max(lines, key=lines.get)} has {max(lines.values())} lines (at most {MAX_LINES})")
    if len(top) > MAX_TOP:
        problems.append(f"{len(top)} modules at apsi's top level (at most {MAX_TOP})")
    if up_eager:
        problems.append(f"{len(up_eager)} module-level import(s) against the wings' order")
    return "\n".join(out), problems


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 on a cycle, a long module or an upward import")
    parser.add_argument("--tree", help="a checkout to read instead of this one (its apsi/), e.g. a git worktree")
    args = parser.parse_args()
    if args.tree:
        global ROOT
        ROOT = Path(args.tree).resolve() / "apsi"
    text, problems = report()
    print(text)
    if args.check and problems:
        print("\n".join(f"error: {p}" for p in problems), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
