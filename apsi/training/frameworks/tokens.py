"""Identity keys for the caches the search keeps on shared objects.

Owns token(): one small object per key (a tuple of a setup's parts, the GPU's JSON among them),
hashed by identity, so that the hot lookups of the bounds kept on families and groups
(apsi.training.frameworks.bounds: their K and first dps) hash at once where the tuple would be
hashed anew every time. Equal keys give the same token while anything holds it.
"""

from __future__ import annotations

import weakref


class Token:
    """One object per key (token()): hashed by identity, at once."""

    __slots__ = ("__weakref__",)


_TOKENS: "weakref.WeakValueDictionary[tuple, Token]" = weakref.WeakValueDictionary()


def token(key: tuple) -> Token:
    """The one Token for `key` while anything holds it: a key for the caches kept on families and
    groups (their bounds and starts) that the hot paths hash at once, where the tuple of a setup's
    parts (the GPU's JSON among them) is hashed anew on every lookup. Equal keys give the same
    token, so a later question on the same setup finds what an earlier one kept."""
    known = _TOKENS.get(key)
    if known is None:
        known = _TOKENS[key] = Token()
    return known
