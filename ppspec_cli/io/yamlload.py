"""The one way ppspec parses YAML (profiles, adapter-pack manifests): JSON-shaped data within a budget.

- **Budget on what aliases expand to.** YAML anchors let a small file stand for a huge document: a
  1 KB string aliased 20,000 times is 20 MB that every later consumer (a dry run, an export) would
  print. Before anything is constructed, the composed node graph is walked as its consumers would
  walk it (an alias counted each time it is used) and refused past `max_nodes` nodes or
  `max_bytes` bytes of scalar text (keys included).
- **JSON values only.** YAML's timestamps (an unquoted `2024-01-01`), `!!binary`, `!!set`,
  `!!omap`/`!!pairs` and non-finite floats (`.nan`, `.inf`) are not JSON: a date reaching the
  engine's options crashed the dry run and the exports. They are refused with their line and the
  fix (quote the value).

Syntax errors stay `yaml.YAMLError` (re-exported as `YAMLError`), so a caller keeps its own
message with the line of the problem.
"""

from __future__ import annotations

import math
from typing import Any

import yaml

from ppspec_cli.errors import PpspecError

YAMLError = yaml.YAMLError
#: YAML tags whose values are not JSON values, and how a message names them.
NOT_JSON = {
    "tag:yaml.org,2002:timestamp": "a YAML date/time",
    "tag:yaml.org,2002:binary": "YAML binary data",
    "tag:yaml.org,2002:set": "a YAML set",
    "tag:yaml.org,2002:omap": "a YAML ordered map",
    "tag:yaml.org,2002:pairs": "a YAML list of pairs",
}


class _NotJson(Exception):
    def __init__(self, what: str, mark: Any, value: str):
        super().__init__(what)
        self.what, self.mark, self.value = what, mark, value


class _SafeJsonLoader(yaml.SafeLoader):
    """SafeLoader that constructs JSON values only."""


def _refuse(tag: str) -> Any:
    def construct(loader: Any, node: Any) -> Any:
        raise _NotJson(NOT_JSON[tag], node.start_mark, node.value if isinstance(node.value, str) else "")

    return construct


def _finite_float(loader: Any, node: Any) -> float:
    f = yaml.SafeLoader.construct_yaml_float(loader, node)
    if not math.isfinite(f):
        raise _NotJson("a non-finite number", node.start_mark, str(node.value))
    return f


#: The most characters an integer may be written with. Past 4,300 digits Python refuses to convert
#: one at all (a ValueError deep in the YAML loader, exit 3); up to this bound, the schema names the
#: field an out-of-range integer is in (`topology.tensor_parallel` less than or equal to 1024), and
#: no float overflows (10**100 is 1e100).
MAX_INT_CHARS = 100


def _bounded_int(loader: Any, node: Any) -> int:
    text = str(node.value)
    if len(text) > MAX_INT_CHARS:  # never converted: a 5,000-digit integer is refused before int() sees it
        raise _NotJson(f"an integer of more than {MAX_INT_CHARS} digits", node.start_mark, text)
    return yaml.SafeLoader.construct_yaml_int(loader, node)


for _tag in NOT_JSON:
    _SafeJsonLoader.add_constructor(_tag, _refuse(_tag))
_SafeJsonLoader.add_constructor("tag:yaml.org,2002:float", _finite_float)
_SafeJsonLoader.add_constructor("tag:yaml.org,2002:int", _bounded_int)


def expanded_size(node: Any, max_nodes: int, max_bytes: int) -> tuple[int, int] | None:
    """(nodes, bytes) the node graph expands to, walking each alias where it is used; None as soon
    as either passes its budget (a recursive alias too). No recursion: a deep document is fine."""
    nodes = size = 0
    stack = [node]
    while stack:
        n = stack.pop()
        nodes += 1
        if isinstance(n, yaml.ScalarNode):
            size += len(n.value.encode("utf-8", "replace")) + 1
        elif isinstance(n, yaml.SequenceNode):
            stack.extend(n.value)
        elif isinstance(n, yaml.MappingNode):
            for k, v in n.value:
                stack.append(k)
                stack.append(v)
        if nodes > max_nodes or size > max_bytes:
            return None
    return nodes, size


def _where(path: tuple) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "(the document)"


def _first_not_json(node: Any) -> tuple[str, Any, str, str] | None:
    """(key path, mark, what, value) of the first scalar that is not a JSON value (the graph is
    already within its budget: this walk is bounded)."""
    stack: list[tuple[Any, tuple]] = [(node, ())]
    while stack:
        n, path = stack.pop()
        if isinstance(n, yaml.ScalarNode):
            what = NOT_JSON.get(n.tag)
            if what is None and n.tag == "tag:yaml.org,2002:float" and n.value.lower().lstrip("+-") in (".nan", ".inf"):
                what = "a non-finite number"
            if what:
                return _where(path), n.start_mark, what, n.value
        elif isinstance(n, yaml.SequenceNode):
            if n.tag in NOT_JSON:
                return _where(path), n.start_mark, NOT_JSON[n.tag], ""
            stack.extend((v, (*path, i)) for i, v in reversed(list(enumerate(n.value))))
        elif isinstance(n, yaml.MappingNode):
            if n.tag in NOT_JSON:
                return _where(path), n.start_mark, NOT_JSON[n.tag], ""
            for k, v in reversed(n.value):
                key = k.value if isinstance(k, yaml.ScalarNode) else "?"
                stack.append((v, (*path, key)))
                stack.append((k, (*path, key)))
    return None


def load(
    text: str,
    *,
    what: str,
    source: str,
    max_nodes: int,
    max_bytes: int,
    fix: str = "write the values out; no YAML anchors/aliases are needed",
) -> Any:
    """The YAML document `text` as JSON values, refused (one PpspecError naming `source`) past the
    budget or on a non-JSON value; a syntax error stays yaml.YAMLError."""
    node = yaml.compose(text, Loader=_SafeJsonLoader)
    if node is None:
        return None
    if expanded_size(node, max_nodes, max_bytes) is None:
        raise PpspecError(
            f"{what} expands to more than {max_nodes} values or {max_bytes >> 10} KiB of text (YAML "
            "anchors/aliases?); ppspec does not read it",
            where=source,
            fix=fix,
        )
    bad = _first_not_json(node)
    if bad is not None:
        at, mark, kind, value = bad
        raise PpspecError(
            f"`{at}` in {what} is {kind} ({value[:40]!r}), not a JSON value",
            where=f"{source}:{mark.line + 1}",
            fix='quote it ("...") so it stays a string, or write a plain number',
        )
    loader = _SafeJsonLoader("")
    try:
        return loader.construct_document(node)
    except _NotJson as e:
        line = f":{e.mark.line + 1}" if e.mark is not None else ""
        raise PpspecError(
            f"{what} holds {e.what} ({e.value[:40]!r}), which is not a JSON value",
            where=f"{source}{line}",
            fix='quote it ("...") so it stays a string, or write a plain number',
        ) from None
    finally:
        loader.dispose()


def compose(text: str) -> Any:
    """The node graph of `text` (for line numbers), without constructing anything."""
    return yaml.compose(text, Loader=_SafeJsonLoader)
