"""The shape docs/architecture.md promises: imports point one way (flows -> pipeline ->
chakra_core), the core never imports the fleet's runtimes, and no function or module grows
past what one reader can hold (generated code aside)."""

from __future__ import annotations

import ast

import pytest
from datapaths import REPO

PACKAGES = ("chakra_core", "pipeline", "flows", "tools")
GENERATED = {"chakra_core/format/schema/et_def_pb2.py"}
MAX_FUNCTION_LINES = 100
MAX_MODULE_LINES = 700
# what each top-level package may not import (at any level: a lazy import points the same way)
FORBIDDEN = {
    "chakra_core": ("pipeline", "flows", "tools", "ray", "prefect"),
    "pipeline": ("flows", "tools"),
    "flows": ("tools",),
}


def _modules() -> list[tuple[str, ast.Module, int]]:
    found = []
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            relative = path.relative_to(REPO).as_posix()
            if relative not in GENERATED:
                text = path.read_text()
                found.append((relative, ast.parse(text, relative), text.count("\n")))
    return found


MODULES = _modules()


def _imported(tree: ast.Module) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


def test_the_walk_finds_every_package():
    assert {path.split("/")[0] for path, _, _ in MODULES} == set(PACKAGES)


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_imports_point_one_way(package):
    wrong = [f"{path} imports {name}" for path, tree, _ in MODULES if path.startswith(package + "/")
             for name in sorted(_imported(tree) & set(FORBIDDEN[package]))]
    assert not wrong, "\n".join(wrong)


def test_no_function_is_longer_than_a_reader_can_hold():
    long = [f"{path}:{node.lineno} {node.name}: {node.end_lineno - node.lineno + 1} lines"
            for path, tree, _ in MODULES for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]
    assert not long, "\n".join(long)


def test_no_module_is_longer_than_a_reader_can_hold():
    long = [f"{path}: {lines} lines" for path, _, lines in MODULES if lines > MAX_MODULE_LINES]
    assert not long, "\n".join(long)


def test_the_checks_catch_what_they_must():
    tree = ast.parse("def f():\n" + "    x = 1\n" * MAX_FUNCTION_LINES + "    import ray\n")
    function = tree.body[0]
    assert function.end_lineno - function.lineno + 1 > MAX_FUNCTION_LINES
    assert "ray" in _imported(tree)
