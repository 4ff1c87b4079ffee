"""Configuration documents read from any fsspec URL: JSON, else YAML, bounded in size, nesting
and values (chakra_core.limits), each error one line naming the file and the key.

Shared by the simulator's configs (sim/config.py), a job's communicator groups
(format/job.py), a conversion's side files (convert/pytorch/job.py) and sweep files (pipeline/sweep/file.py).

YAML aliases repeat a node without repeating its text: a few hundred bytes of nested aliases
stand for 10^9 values, which every walk of the document (this module's checks, the readers
that use it, a JSON dump) would visit. The document is composed first, and the values it
stands for are counted once per node (aliases count as what they repeat) before anything is
built from it: beyond the `config_values` limit, or an alias inside the node it repeats, it is
refused. Numbers that are not finite (NaN, infinity) are refused by key wherever they appear.
"""

from __future__ import annotations

import json
import math
from typing import Any

import yaml

from chakra_core import limits
from chakra_core.errors import ChakraError
from chakra_core.inputs import read_bounded


class ConfigError(ChakraError):
    """A configuration file that cannot be used: names the file, the key (when there is one) and why."""

    def __init__(self, path: str, key: str | None, message: str):
        self.path = path
        self.key = key
        self.message = message
        where = path if key is None else f"{path}: {key}"
        super().__init__(f"{where}: {message}")


def read_document(url: Any) -> tuple[str, Any]:
    """(the path as text, the parsed mapping): JSON, else YAML (which also takes comments).
    Files beyond `config_bytes`, documents nested beyond `json_depth` or standing for more than
    `config_values` values, and numbers that are not finite are refused."""
    path = str(url)
    try:
        text = read_bounded(path, "config_bytes", "file").decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(path, None, f"cannot read: {exc}") from None
    try:
        data = _parse(text, path)
    except RecursionError:  # deeper than Python's stack: far beyond the limit
        raise limits.LimitExceeded(path, "json_depth", "nested too deeply to parse") from None
    _check_values(data, path)
    if not isinstance(data, dict):
        what = "empty" if data is None else f"a {type(data).__name__}"
        raise ConfigError(path, None, f"expected a mapping of keys to values, got {what}")
    return path, data


def _parse(text: str, path: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        try:
            return _load_yaml(text, path)
        except yaml.YAMLError as exc:
            message = " ".join(str(exc).split())
            raise ConfigError(path, None, f"neither valid JSON nor valid YAML: {message}") from None


def _load_yaml(text: str, path: str) -> Any:
    """Safe YAML, composed and counted (`_count_values`) before it is built."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _count_values(node, path)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return node.value
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _count_values(root: yaml.Node, path: str) -> None:
    """Refuses a composed YAML document that stands for more than `config_values` values (each
    node counted as often as aliases repeat it) or whose aliases form a cycle; one visit per
    distinct node, without recursion."""
    most = limits.value("config_values")
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()  # nodes whose children are being counted: an alias to one is a cycle
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if children_done:
            open_nodes.discard(key)
            sizes[key] = 1 + sum(sizes[id(child)] for child in _children(node))
            if sizes[key] > most:
                raise limits.LimitExceeded(path, "config_values", f"YAML aliases expand to more than {most:,} "
                                           f"values (line {node.start_mark.line + 1})")
        elif key in open_nodes:
            raise ConfigError(path, None, f"line {node.start_mark.line + 1}: a YAML alias inside the node it "
                              "repeats (a cycle)")
        elif key not in sizes:
            open_nodes.add(key)
            stack.append((node, True))
            stack.extend((child, False) for child in _children(node))


def _check_values(document: Any, path: str) -> None:
    """Refuses nesting beyond the `json_depth` limit and numbers that are not finite, naming the
    key (walked without recursion, so the check itself cannot overflow the stack)."""
    most = limits.value("json_depth")
    stack: list[tuple[Any, int, str]] = [(document, 1, "")]
    while stack:
        item, depth, where = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            raise ConfigError(path, where or None, f"{item} is not a finite number")
        if not isinstance(item, (dict, list)):
            continue
        if depth > most:
            raise limits.LimitExceeded(path, "json_depth", f"nested more than {most} levels deep")
        pairs = item.items() if isinstance(item, dict) else enumerate(item)
        stack.extend((child, depth + 1, f"{where}.{k}" if where and isinstance(item, dict) else
                      f"{where}[{k}]" if isinstance(item, list) else str(k)) for k, child in pairs)
