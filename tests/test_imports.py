"""The shape of the code: the import graph of apsi/ has no cycle, and no module is over 500 lines.

No cycle: no module imports, at module level or inside a function,
a module that imports it back (imports under `if TYPE_CHECKING:` are annotations only and are left
out), so each layer (the model, the frameworks' space, bounds and walk, the planner, the API, the
CLI) sits on the ones below it."""

from __future__ import annotations

import ast
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "apsi"


def _modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _runtime_imports(tree: ast.AST) -> list[ast.stmt]:
    """Every import statement, skipping the bodies of `if TYPE_CHECKING:` blocks."""
    found: list[ast.stmt] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def graph() -> dict[str, set[str]]:
    modules = _modules()
    edges: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in _runtime_imports(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    target = full if full in modules else node.module
                    if target in modules and target != name:
                        edges[name].add(target)
            elif isinstance(node, ast.Import):
                edges[name] |= {a.name for a in node.names if a.name in modules and a.name != name}
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                on.discard(w)
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                out.append(sorted(part))

    for v in sorted(edges):
        if v not in index:
            connect(v)
    return out


def test_the_import_graph_has_no_cycle() -> None:
    assert cycles(graph()) == []


def test_a_cycle_is_found() -> None:
    # The check itself: two modules importing each other (as apsi.api.frontier and
    # apsi.training.frameworks.frontier once did) form a component.
    assert cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import x\ndef f():\n    import y\n")
    assert [n.names[0].name for n in _runtime_imports(tree)] == ["TYPE_CHECKING", "y"]


def test_no_module_is_over_500_lines() -> None:
    # Small files, each owning one thing: a module past 500 lines is doing several jobs.
    long = {name: n for name, path in _modules().items() if (n := len(path.read_text().splitlines())) > 500}
    assert long == {}


def test_the_package_names_its_license_and_authors() -> None:
    # pyproject.toml declares Apache-2.0; the LICENSE file beside it holds that license's text,
    # and the installed metadata (what `pip show apsi-planner` prints) names the license and authors.
    from importlib.metadata import metadata
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    meta = metadata("apsi-planner")
    assert meta["License"] == "Apache-2.0"
    assert meta["Author"], "the metadata names no author"


@pytest.mark.slow
def test_the_public_names_type_check_in_a_users_script(tmp_path) -> None:
    # `from apsi import Plan, plan` went through the lazy __getattr__, so a type checker saw
    # `object`: "Plan is not valid as a type". The TYPE_CHECKING block of apsi/__init__.py names
    # each export; mypy --strict on a user's script (apsi read as an installed package is: its own
    # modules' errors silent) must pass, and a wrong use must fail.
    import ast
    import shutil
    from pathlib import Path

    import apsi

    root = Path(apsi.__file__).resolve().parents[1]
    tree = ast.parse((root / "apsi" / "__init__.py").read_text(encoding="utf-8"))
    block = next(n for n in tree.body if isinstance(n, ast.If) and getattr(n.test, "id", "") == "TYPE_CHECKING")
    typed = {a.asname: node.module for node in block.body if isinstance(node, ast.ImportFrom) for a in node.names}
    assert typed == apsi._EXPORTS  # the same names from the same modules as the lazy table
    if shutil.which("mypy") is None and importlib.util.find_spec("mypy") is None:
        pytest.skip("no mypy")
    good = tmp_path / "script.py"
    good.write_text('from apsi import Plan, ServePlan, plan, serve\n\np: Plan = plan("llama-3.1-70b", tokens="15T")\n'
                    's: ServePlan = serve("llama-3.1-8b")\nprint(p.gpus + s.gpus)\n')
    bad = tmp_path / "bad.py"
    bad.write_text('from apsi import plan\n\nn: int = plan("70B").layout\n')
    env = {**os.environ, "MYPYPATH": str(root)}
    for script, ok in ((good, True), (bad, False)):
        run = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent", "--no-incremental",
                              str(script)], capture_output=True, text=True, env=env, timeout=600)
        assert (run.returncode == 0) == ok, run.stdout + run.stderr


def test_the_plan_builder_names_the_reference_objectives_as_the_program_does():
    # apsi.training.reference.planning keeps the reference objectives' names without importing the CP-SAT program
    # (a plan under a framework never loads it): the two lists must agree.
    from typing import get_args

    from apsi.training.reference import planning
    from apsi.training.reference.problem import Objective

    assert set(planning._OBJECTIVES) == set(get_args(Objective))


def test_a_framework_plan_does_not_load_the_reference_program():
    # The CP-SAT program of the reference arithmetic (apsi.training.reference.program) is imported where a reference
    # plan is made, not by every plan.
    import subprocess
    import sys

    code = ("import sys, apsi; apsi.plan('7B', tokens='1T'); "
            "print('apsi.training.reference.program' in sys.modules, 'apsi.outputs.tables' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["False", "False"], out.stderr
