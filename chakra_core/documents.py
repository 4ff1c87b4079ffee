"""Configuration documents read from any fsspec URL: JSON, else YAML, bounded in size and
nesting (chakra_core.limits), each error one line naming the file and the key.

Shared by the simulator's configs (sim/config.py), a job's communicator groups
(format/job.py) and sweep files (pipeline/grid.py).
"""

from __future__ import annotations

import json
from typing import Any

import fsspec
import yaml

from chakra_core import limits
from chakra_core.errors import ChakraError


class ConfigError(ChakraError):
    """A configuration file that cannot be used: names the file, the key (when there is one) and why."""

    def __init__(self, path: str, key: str | None, message: str):
        self.path = path
        self.key = key
        self.message = message
        where = path if key is None else f"{path}: {key}"
        super().__init__(f"{where}: {message}")


def read_document(url: Any) -> tuple[str, Any]:
    """(the path as text, the parsed document): JSON, else YAML (which also takes comments).
    Files beyond the `config_bytes` limit and documents nested beyond `json_depth` are refused."""
    path = str(url)
    try:
        with fsspec.open(path, "rb") as f:
            raw = f.read(limits.value("config_bytes") + 1)
        if len(raw) > limits.value("config_bytes"):
            raise limits.LimitExceeded(path, "config_bytes", "file too large")
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(path, None, f"cannot read: {exc}") from None
    try:
        data = _parse(text, path)
    except RecursionError:  # deeper than Python's stack: far beyond the limit
        raise limits.LimitExceeded(path, "json_depth", "nested too deeply to parse") from None
    limits.check_depth(data, path)
    if not isinstance(data, dict):
        what = "empty" if data is None else f"a {type(data).__name__}"
        raise ConfigError(path, None, f"expected a mapping of keys to values, got {what}")
    return path, data


def _parse(text: str, path: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError(path, None, f"neither valid JSON nor valid YAML: {exc}") from None
