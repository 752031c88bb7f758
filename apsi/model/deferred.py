"""Fields of a result worked out when first read: Deferring, the base a Plan takes them from.

Owns the mechanism, not what is deferred: a model's defer() leaves fields out of its __dict__ with
the one function that gives them; reading any of them (as an attribute, through model_dump or the
JSON, by iterating the model, or comparing it) works them out once, and the model then holds
them in the fields' order, so its data and JSON are the same read or not. A pickled model
(apsi run --jobs) carries a function marked `portable` unread and works out any other first.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

from pydantic import BaseModel, PrivateAttr, SerializerFunctionWrapHandler, model_serializer
from typing_extensions import Self


class _Share:
    """One deferred computation shared by the fields it gives (Plan.defer): called once."""

    __slots__ = ("names", "compute", "values")

    def __init__(self, names: tuple[str, ...], compute: Callable[[], tuple[Any, ...]]):
        self.names: tuple[str, ...] = names
        self.compute: Callable[[], tuple[Any, ...]] = compute
        self.values: tuple[Any, ...] | None = None

    def __call__(self) -> tuple[Any, ...]:
        if self.values is None:
            self.values = self.compute()
        return self.values

    def __getstate__(self) -> tuple[Any, ...]:
        return (self.names, self.compute, self.values)

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        self.names, self.compute, self.values = state



class Deferring(BaseModel):
    """A pydantic model some of whose fields may be deferred (defer())."""

    _deferred: dict[str, _Share] = PrivateAttr(default_factory=dict)
    """Fields left out of __dict__ until read, each with the function that gives it and the
    fields deferred with it (one call gives them all, in the order defer() named them)."""

    def defer(self, names: tuple[str, ...], compute: Callable[[], tuple[Any, ...]]) -> "Self":
        """This plan with fields `names` worked out by one call of `compute()` (a tuple of their
        values, in that order) when first read (a copy). A `compute` with `portable = True`
        (picklable, holding only data) travels with a pickled plan; any other is called first."""
        out = self.model_copy()
        for name in names:
            out.__dict__.pop(name, None)
        out._deferred = {**self._deferred, **{name: _Share(names, compute) for name in names}}
        return out

    def _settle(self, keep_portable: bool = False) -> None:
        """Every deferred field worked out (but a portable one, with keep_portable), and __dict__
        back in the fields' order."""
        left: dict[str, _Share] = {}
        for name, share in self._deferred.items():
            if keep_portable and getattr(share.compute, "portable", False):
                left[name] = share
            elif name not in self.__dict__:
                self.__dict__.update(zip(share.names, share()))
        if left or self._deferred:
            # A new dict, never the old one changed: a copy (model_copy) may share it.
            self._deferred = left
        if left or list(self.__dict__) == list(type(self).model_fields):
            return
        order = {name: self.__dict__[name] for name in type(self).model_fields}
        self.__dict__.clear()
        self.__dict__.update(order)

    def __getstate__(self) -> dict[Any, Any]:
        self._settle(keep_portable=True)
        return super().__getstate__()

    def __getattr__(self, name: str) -> Any:
        private = self.__pydantic_private__
        if private and name in private.get("_deferred", {}) and name in type(self).model_fields:
            share = private["_deferred"][name]
            self.__dict__.update(zip(share.names, share()))
            # A new dict, never the old one changed: a copy (model_copy) may share it.
            private["_deferred"] = {k: v for k, v in private["_deferred"].items() if k not in share.names}
            if not private["_deferred"]:
                self._settle()
            return self.__dict__[name]
        return super().__getattr__(name)  # type: ignore[misc]  # pydantic's (private attributes)

    def __eq__(self, other: object) -> bool:
        # Equal plans hold equal data, deferred or not (what was deferred is no part of it).
        if not isinstance(other, Deferring):
            return NotImplemented
        self._settle()
        other._settle()
        return type(self) is type(other) and self.__dict__ == other.__dict__

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> Any:
        self._settle()
        return handler(self)

    def __iter__(self) -> Iterator[tuple[str, Any]]:  # type: ignore[override]  # pydantic's, settled first
        self._settle()
        return super().__iter__()
