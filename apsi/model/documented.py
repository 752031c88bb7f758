"""The frozen base of apsi's result models, whose fields are described by their docstrings.

A field's description (its text in the JSON schema `apsi schema` prints, and in the web API's
OpenAPI) is the string literal under it, as pydantic's `use_attribute_docstrings` reads it. That
option reads each class's source on its own (on Python < 3.13 by walking the frames and parsing
the class's block again for every class): about 55 ms of the 0.12 s that importing the planning
path takes (benchmarks/process_time.py). Here each module's source is parsed once, when its first
model is made, and the descriptions are set on the fields before their schema is built: the
models are built on first use (`defer_build`), so a model that a command never validates (a
fleet's, a disaggregated plan's, in a training plan) costs nothing to build either.
"""

from __future__ import annotations

import ast
import functools
import inspect
import sys
from typing import Any

from pydantic import BaseModel, ConfigDict


@functools.lru_cache(maxsize=None)
def _module_docstrings(module: str) -> dict[str, dict[str, str]]:
    """{class qualname: {attribute: its docstring}} of every class in a module's source."""
    path = getattr(sys.modules.get(module), "__file__", None)
    if path is None:
        return {}
    try:
        with open(path, encoding="utf-8") as handle:
            tree = ast.parse(handle.read())
    except (OSError, SyntaxError):
        return {}
    found: dict[str, dict[str, str]] = {}

    def visit(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef):
                found[prefix + node.name] = _class_docstrings(node)
                visit(node.body, f"{prefix}{node.name}.")

    visit(tree.body, "")
    return found


def _class_docstrings(node: ast.ClassDef) -> dict[str, str]:
    """An attribute's docstring is a string statement right after its annotated assignment, as
    pydantic's use_attribute_docstrings reads it (pydantic/_internal/_docs_extraction.py)."""
    docs: dict[str, str] = {}
    for before, statement in zip(node.body, node.body[1:]):
        if (
            isinstance(before, ast.AnnAssign)
            and isinstance(before.target, ast.Name)
            and isinstance(statement, ast.Expr)
            and isinstance(statement.value, ast.Constant)
            and isinstance(statement.value.value, str)
        ):
            docs[before.target.id] = inspect.cleandoc(statement.value.value)
    return docs


class Documented(BaseModel):
    """Frozen, no extra fields; each field's docstring is its description."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        docs = _module_docstrings(cls.__module__).get(cls.__qualname__, {})
        for name, field in cls.__pydantic_fields__.items():
            if field.description is None and name in docs:
                field.description = docs[name]
