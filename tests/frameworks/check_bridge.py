"""Checks the megatron-bridge export against Megatron-Bridge's source without running it: every
name it imports must be defined where it imports it from, every method it calls must exist on the
class the call returns (by the source's return annotations), every `cfg.PART.FIELD = ...` must be a
field of a class ConfigContainer's annotation for PART allows (with base classes, Megatron-Core's
TransformerConfig among them), every keyword of a config class it builds must be one of its
fields, and a mixed-precision recipe it names must be registered in training/mixed_precision.py.

Megatron-Bridge 0.6 needs Transformer Engine and a GPU to import, and no 0.6 wheel is on the
package registry, so this is an ast walk of the source trees in $APSI_MEGATRON_BRIDGE (its src/)
and $APSI_MEGATRON_LM (Megatron-Core and megatron.training, whose classes Bridge's derive from).
Run by tests/frameworks/harness.py: stdin {case id: {"text": ...}}, the last stdout line
{case id: {"values": {...}, "errors": [...]}}.
"""

from __future__ import annotations

import ast
import functools
import json
import os
import sys
from pathlib import Path
from typing import Any

_BRIDGE = Path(os.environ["APSI_MEGATRON_BRIDGE"])
TREES = [_BRIDGE / "src" if (_BRIDGE / "src").is_dir() else _BRIDGE, Path(os.environ["APSI_MEGATRON_LM"])]
EXTERNAL = ("torch",)
"""Packages outside both trees, not checked."""


@functools.cache
def _module_file(name: str) -> Path | None:
    parts = name.split(".")
    for root in TREES:
        base = root.joinpath(*parts)
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate
    return None


@functools.cache
def _tree(name: str) -> ast.Module | None:
    path = _module_file(name)
    return None if path is None else ast.parse(path.read_text(), str(path))


def _package(name: str) -> str:
    path = _module_file(name)
    return name if path is not None and path.name == "__init__.py" else name.rpartition(".")[0]


@functools.cache
def _lookup(module: str, name: str, depth: int = 0):
    """(module, node) of the class or function `name` as `module` defines or imports it, or None."""
    tree = _tree(module)
    if tree is None or depth > 12:
        return None
    found: Any = None
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            found = (module, node)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                found = (module, node)
        elif isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    source = node.module or ""
                    if node.level:
                        base = _package(module).split(".")
                        source = ".".join(base[: len(base) - node.level + 1] + ([source] if source else []))
                    target = _lookup(source, alias.name, depth + 1)
                    if target is None and _module_file(f"{source}.{alias.name}"):
                        target = (f"{source}.{alias.name}", None)
                    found = target or found
        elif isinstance(node, ast.Try):  # optional imports
            for sub in node.body:
                if isinstance(sub, ast.ImportFrom) and any((a.asname or a.name) == name for a in sub.names):
                    found = found or _lookup(sub.module or "", name, depth + 1)
    if found is None and _module_file(f"{module}.{name}"):
        return (f"{module}.{name}", None)
    return found


def _annotation_names(node) -> list[str]:
    """Class names in an annotation: X, X | Y, Optional[X], Union[X, Y], "X"."""
    if node is None:
        return []
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return _annotation_names(ast.parse(node.value, mode="eval").body)
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Attribute):
        return [node.attr]
    if isinstance(node, ast.BinOp):
        return _annotation_names(node.left) + _annotation_names(node.right)
    if isinstance(node, ast.Subscript):
        inner = node.slice
        items = inner.elts if isinstance(inner, ast.Tuple) else [inner]
        return [n for item in items for n in _annotation_names(item)]
    return []


@functools.cache
def _members(module: str, cls: str) -> dict[str, Any]:
    """Fields, methods and class attributes of a class, its bases' included: name -> annotation or node."""
    found = _lookup(module, cls)
    if found is None or not isinstance(found[1], ast.ClassDef):
        return {}
    where, node = found
    out: dict[str, Any] = {}
    for base in node.bases:
        for name in _annotation_names(base.value if isinstance(base, ast.Subscript) else base):
            out.update(_members(where, name))
    for item in node.body:
        if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            out[item.target.id] = ("field", where, item.annotation)
        elif isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out[item.name] = ("method", where, item.returns)
        elif isinstance(item, ast.Assign):
            for t in item.targets:
                if isinstance(t, ast.Name):
                    out[t.id] = ("attr", where, None)
    return out


def _classes(module: str, names: list[str]) -> list[tuple[str, str]]:
    out = []
    for name in names:
        found = _lookup(module, name)
        if found is not None and isinstance(found[1], ast.ClassDef):
            out.append((found[0], name))
    return out


def check(text: str) -> dict:
    errors: list = []
    values: dict = {"imports": 0, "fields": 0, "calls": 0}
    tree = ast.parse(text)
    names: dict[str, tuple[str, str]] = {}  # local name -> (module, name)

    def error(where: str, message: str) -> None:
        errors.append({"where": where, "message": message})

    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and not (node.module or "").startswith(EXTERNAL):
            for alias in node.names:
                values["imports"] += 1
                if _lookup(node.module, alias.name) is None:
                    error("import", f"from {node.module} import {alias.name}: not defined in Megatron-Bridge's source")
                names[alias.asname or alias.name] = (node.module or "", alias.name)

    def returns(module: str, fn: str, owner: str | None = None) -> list[tuple[str, str]]:
        """Classes a function (or method of owner) returns, by its annotation."""
        if owner is not None:
            member = _members(module, owner).get(fn)
            if not member or member[0] != "method":
                return []
            where, annotation = member[1], member[2]
            found_in = where
        else:
            found = _lookup(module, fn)
            if found is None:
                return []
            found_in, node = found
            if isinstance(node, ast.ClassDef):
                return [(found_in, fn)]
            annotation = getattr(node, "returns", None)
        return _classes(found_in, _annotation_names(annotation))

    def classes_of(expr) -> list[tuple[str, str]]:
        """The classes an expression evaluates to, checking every call and attribute on the way."""
        if isinstance(expr, ast.Name):
            if expr.id in names:
                module, name = names[expr.id]
                return _classes(module, [name])
            return local.get(expr.id, [])
        if isinstance(expr, ast.Call):
            values["calls"] += 1
            func = expr.func
            if isinstance(func, ast.Name) and func.id in names:
                module, name = names[func.id]
                out = returns(module, name)
                for kw in expr.keywords:
                    if out and kw.arg and not any(kw.arg in _members(m, c) for m, c in out):
                        error("call", f"{name}() has no field {kw.arg}")
                return out
            if isinstance(func, ast.Attribute):
                owners = classes_of(func.value)
                if not owners:
                    return []
                out = []
                for module, cls in owners:
                    if func.attr in _members(module, cls):
                        out += returns(module, func.attr, owner=cls)
                if not any(func.attr in _members(m, c) for m, c in owners):
                    error("call", f"{'/'.join(c for _, c in owners)} has no method {func.attr}() in Megatron-Bridge's "
                                  "source")
                return out
            return []
        if isinstance(expr, ast.Attribute):
            out = []
            for module, cls in classes_of(expr.value):
                member = _members(module, cls).get(expr.attr)
                if member and member[0] == "field":
                    out += _classes(member[1], _annotation_names(member[2]))
            return out
        return []

    local: dict[str, list[tuple[str, str]]] = {}
    for fn in [n for n in tree.body if isinstance(n, ast.FunctionDef)]:
        for stmt in fn.body:
            if not isinstance(stmt, ast.Assign) or len(stmt.targets) != 1:
                continue
            target = stmt.targets[0]
            if isinstance(target, ast.Name):
                local[target.id] = classes_of(stmt.value)
                continue
            if not isinstance(target, ast.Attribute):
                continue
            owners = classes_of(target.value)
            if not owners:
                error("field", f"{ast.unparse(target.value)}: its class is not known from the source")
                continue
            values["fields"] += 1
            if not any(target.attr in _members(m, c) for m, c in owners):
                error("field", f"{ast.unparse(target)}: no field {target.attr} on "
                               f"{'/'.join(c for _, c in owners)}")
            classes_of(stmt.value)
            call = stmt.value
            if (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
                    and names.get(call.func.id, ("", ""))[1] == "get_mixed_precision_config" and call.args
                    and isinstance(call.args[0], ast.Constant)):
                recipe = str(call.args[0].value).replace("-", "_")
                module = names[call.func.id][0]
                found = _lookup(module, recipe)
                if found is None or not isinstance(found[1], ast.FunctionDef) or not any(
                        isinstance(d, ast.Name) and d.id == "register" for d in found[1].decorator_list):
                    error("mixed precision", f"no registered mixed-precision recipe {recipe!r}")
    return {"values": values, "errors": errors}


def main() -> None:
    launches = json.load(sys.stdin)
    print(json.dumps({cid: check(launch["text"]) for cid, launch in launches.items()}))


if __name__ == "__main__":
    main()
