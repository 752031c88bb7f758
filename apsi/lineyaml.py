"""Safe YAML loading that remembers line numbers, so that messages about a file can cite them.

Owns one SafeLoader subclass whose mappings and sequences record the (1-based) line of the
mapping, of each key and of each list item, and which refuses a key given twice in one mapping
(plain PyYAML silently keeps the last), a whole number of more than apsi.textfiles.MAX_DIGITS
digits (before int(), which refuses past 4,300) and a document whose aliases expand past
MAX_EXPANDED items (a "billion laughs" bomb: a few lines that stand for 10^9 items). It builds
only plain data: no Python objects, ever.

>>> data = load_yaml("runs:\\n  - params: 70B\\n    gpu: H100\\n")
>>> line_of(data["runs"][0], "gpu"), item_lines(data["runs"])
(3, [2])
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import yaml

from apsi.textfiles import digits_problem, too_many_digits

_MERGE = "tag:yaml.org,2002:merge"
_INT = "tag:yaml.org,2002:int"
MAX_EXPANDED = 100_000_000
"""The most items (mappings, lists, keys and values) a document may stand for with its aliases
expanded, unless the caller gives less: a scenario or catalog file within its size cap holds about
1,000,000 at most without aliases, while an alias bomb of a few lines stands for billions, which
nothing can walk. A scenario's checks never expand an aliased value (a bomb of 10^7 items in one
run is that run's error, apsi.api.scenarios); past this the whole file is refused at once."""


class Refused(yaml.constructor.ConstructorError):
    """YAML that parses but that apsi refuses (a key given twice, a number too long, an alias
    bomb); its `problem` is the one-line reason."""

if TYPE_CHECKING:
    # CSafeLoader (libyaml's) exists only where PyYAML was built with it; it has SafeLoader's API.
    _SafeLoader = yaml.SafeLoader
else:
    _SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Map(dict):
    """A YAML mapping that knows its line and the line of each key."""

    line: int | None = None
    key_lines: dict = {}


class _List(list):
    """A YAML sequence that knows the line of each item."""

    item_lines: list = []


class _LineLoader(_SafeLoader):
    """The safe loader (libyaml's when PyYAML has it: about 10x faster on a 1,000-run file),
    building _Map and _List instead of dict and list."""


def _construct_map(loader: _LineLoader, node: yaml.MappingNode):
    data = _Map()
    data.line = node.start_mark.line + 1
    yield data  # as PyYAML's own constructors do, so that anchors and aliases resolve
    first: dict[tuple[str, str], int] = {}
    for key_node, value_node in node.value:
        if isinstance(key_node, yaml.ScalarNode) and key_node.tag != _MERGE:
            ident, line = (key_node.tag, key_node.value), key_node.start_mark.line + 1
            if ident in first:
                raise Refused(None, None, f"key {key_node.value[:80]!r} appears twice (first on line {first[ident]})",
                              key_node.start_mark)
            first[ident] = line
            if isinstance(value_node, yaml.ScalarNode) and value_node.tag == _INT and \
                    (digits := too_many_digits(value_node.value)) is not None:
                raise Refused(None, None, digits_problem(key_node.value[:80], digits), value_node.start_mark)
    data.update(loader.construct_mapping(node))  # SafeLoader's: applies merge keys ("<<")
    data.key_lines = {loader.construct_object(k): k.start_mark.line + 1 for k, _ in node.value}


def _construct_list(loader: _LineLoader, node: yaml.SequenceNode):
    data = _List()
    yield data
    data.extend(loader.construct_sequence(node))
    data.item_lines = [item.start_mark.line + 1 for item in node.value]


def _construct_int(loader: _LineLoader, node: yaml.ScalarNode):
    # A key, a list item or a top-level number (a mapping's values are named by _construct_map).
    if (digits := too_many_digits(str(node.value))) is not None:
        raise Refused(None, None, digits_problem("a whole number", digits), node.start_mark)
    return yaml.constructor.SafeConstructor.construct_yaml_int(loader, node)


def _construct_timestamp(loader: _LineLoader, node: yaml.ScalarNode):
    # PyYAML resolves 2026-13-01 as a timestamp and then fails in datetime with a ValueError,
    # which is no YAMLError: refused here in one line instead.
    try:
        return yaml.constructor.SafeConstructor.construct_yaml_timestamp(loader, node)
    except ValueError as err:
        raise Refused(None, None, f"{str(node.value)[:40]!r} is not a date ({err}): write it as 2026-07-01",
                      node.start_mark) from None


_LineLoader.add_constructor("tag:yaml.org,2002:map", _construct_map)
_LineLoader.add_constructor("tag:yaml.org,2002:timestamp", _construct_timestamp)
_LineLoader.add_constructor("tag:yaml.org,2002:seq", _construct_list)
_LineLoader.add_constructor(_INT, _construct_int)


def load_yaml(text: str, max_items: int = MAX_EXPANDED) -> Any:
    """The document in `text`, with mappings and lists that remember lines; raises yaml.YAMLError
    (Refused for what apsi refuses in YAML that parses: past `max_items` items with its aliases
    expanded, among others) or RecursionError (nesting too deep)."""
    data = yaml.load(text, Loader=_LineLoader)  # a safe loader: plain data only
    if expanded_size(data, max_items) > max_items:
        raise Refused(None, None, f"its aliases (*name) expand to more than {max_items:,} items (an alias bomb?): "
                      "write the data out, or repeat fewer aliases")
    return data


def expanded_size(data: Any, limit: int) -> int:
    """How many items `data` stands for with every shared (aliased) part counted each time it
    appears, stopping once past `limit`; time linear in the distinct containers."""
    memo: dict[int, int] = {}

    def size(value: Any) -> int:
        if not isinstance(value, (dict, list)):
            return 1
        if id(value) in memo:
            return memo[id(value)]
        memo[id(value)] = limit + 1  # until counted: a list holding itself is past any limit
        total = 1
        for item in (value.values() if isinstance(value, dict) else value):
            total += size(item)
            if total > limit:
                break
        if isinstance(value, dict):
            total += len(value)
        memo[id(value)] = total
        return total

    return size(data)


def yaml_message(origin: str, err: yaml.YAMLError) -> str:
    """The one line for YAML in `origin` (a file's name) that cannot be used: "`origin` is not
    valid YAML at line N: ..." or, for what apsi refuses, "`origin`, line N: ..."."""
    if isinstance(err, Refused):
        mark = err.problem_mark
        return f"{origin}{f', line {mark.line + 1}' if mark is not None else ''}: {err.problem}"
    return f"{origin} is not valid YAML{yaml_problem(err)}"


def yaml_problem(err: yaml.YAMLError) -> str:
    """" at line N: what is wrong", from a PyYAML error, for a one-line message."""
    mark = getattr(err, "problem_mark", None)
    where = f" at line {mark.line + 1}" if mark is not None else ""
    return f"{where}: {getattr(err, 'problem', None) or 'it cannot be parsed'}"


def line_of(data: Any, key: Any = None) -> int | None:
    """The line of `key` in a loaded mapping, else of the mapping itself; None if not known."""
    lines = getattr(data, "key_lines", {})
    if key is not None and key in lines:
        return lines[key]
    return getattr(data, "line", None)


def item_lines(data: Any) -> list[int | None]:
    """The line of each item of a loaded list (None for each when not known)."""
    return list(getattr(data, "item_lines", None) or [None] * len(data))


def plain(data: Any) -> Any:
    """The same data as built-in dicts and lists (for pickling and printing)."""
    if isinstance(data, dict):
        return {k: plain(v) for k, v in data.items()}
    if isinstance(data, list):
        return [plain(v) for v in data]
    return data
