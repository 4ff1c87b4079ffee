"""The shape docs/architecture.md promises: imports point one way (flows -> pipeline ->
chakra_core), the core never imports the fleet's runtimes, no two modules import each other
(directly or round a longer circle, lazily or not), no module takes another's private name, and
no function or module grows past what one reader can hold (generated code aside)."""

from __future__ import annotations

import ast

import pytest
from datapaths import REPO

PACKAGES = ("chakra_core", "pipeline", "flows", "tools")
GENERATED = {"chakra_core/format/schema/et_def_pb2.py"}
MAX_FUNCTION_LINES = 80
MAX_MODULE_LINES = 600
# what each top-level package may not import (at any level: a lazy import points the same way)
FORBIDDEN = {
    "chakra_core": ("pipeline", "flows", "tools", "ray", "prefect"),
    "pipeline": ("flows", "tools"),
    "flows": ("tools",),
    "tools": ("pipeline", "flows", "ray", "prefect"),  # scripts that make data, with the library alone
}


# the simulator's layer folders, top to bottom (docs/architecture.md, 'The simulator's layers')
SIM_LAYERS = ("workload", "system", "network", "memory")
# the C extensions' package: its modules are private to the library by name, and imported by it
NATIVE = "chakra_core._native"


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


def _dotted(path: str) -> str:
    name = path[:-len(".py")].replace("/", ".")
    return name[:-len(".__init__")] if name.endswith(".__init__") else name


NAMES = {_dotted(path) for path, _, _ in MODULES}


def _resolved(module: str, path: str, node: ast.ImportFrom) -> str:
    """The absolute name an `from X import ...` takes from (relative imports resolved)."""
    if not node.level:
        return node.module
    parts = module.split(".")[:None if path.endswith("__init__.py") else -1]
    parts = parts[:len(parts) - node.level + 1]
    return ".".join(parts + ([node.module] if node.module else []))


def _edges(module: str, path: str, tree: ast.Module) -> list[tuple[str, str]]:
    """(module imported, name taken from it or "") for every import of the project's modules."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, "") for alias in node.names if alias.name in NAMES]
        elif isinstance(node, ast.ImportFrom):
            source = _resolved(module, path, node)
            for alias in node.names:
                if f"{source}.{alias.name}" in NAMES:
                    found.append((f"{source}.{alias.name}", ""))  # a module of a package
                elif source in NAMES:
                    found.append((source, alias.name))
    return found


GRAPH = {_dotted(path): _edges(_dotted(path), path, tree) for path, tree, _ in MODULES}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_walk_finds_every_package():
    assert {path.split("/")[0] for path, _, _ in MODULES} == set(PACKAGES)


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_imports_point_one_way(package):
    wrong = [f"{path} imports {name}" for path, tree, _ in MODULES if path.startswith(package + "/")
             for name in sorted(_imported(tree) & set(FORBIDDEN[package]))]
    assert not wrong, "\n".join(wrong)


def test_no_import_circle():
    graph = {module: {target for target, _ in edges if target != module} for module, edges in GRAPH.items()}
    circles = _cycles(graph)
    assert not circles, "\n".join(" <-> ".join(circle) for circle in circles)


def _package(module: str) -> str:
    return ".".join(module.split(".")[:2])


def test_no_circle_between_the_cores_packages():
    """format, sim, analysis, ... in layers: no package leans on one that leans back on it."""
    graph: dict[str, set[str]] = {}
    for module, edges in GRAPH.items():
        for target, _ in edges:
            if module.startswith("chakra_core.") and _package(target) != _package(module):
                graph.setdefault(_package(module), set()).add(_package(target))
    circles = _cycles(graph)
    assert not circles, "\n".join(" <-> ".join(circle) for circle in circles)


def _sim_layer(module: str) -> int | None:
    parts = module.split(".")
    return SIM_LAYERS.index(parts[2]) if parts[:2] == ["chakra_core", "sim"] and len(parts) > 3 \
        and parts[2] in SIM_LAYERS else None


def _sim_paths(module: str) -> dict[str, list[str]]:
    """Every simulator module `module` reaches through the simulator's imports, with the path there."""
    paths, queue = {module: [module]}, [module]
    while queue:
        current = queue.pop(0)
        for target, _ in GRAPH.get(current, ()):
            if target.startswith("chakra_core.sim.") and target not in paths:
                paths[target] = paths[current] + [target]
                queue.append(target)
    return paths


def _upward(module: str) -> list[str]:
    """The paths from a layer's module to a layer above it, directly or through modules outside the layers."""
    layer = _sim_layer(module)
    if layer is None:
        return []
    return [" -> ".join(path) for target, path in _sim_paths(module).items()
            if _sim_layer(target) is not None and _sim_layer(target) < layer]


def test_the_simulators_layers_import_downward():
    upward = [path for module in GRAPH for path in _upward(module)]
    assert not upward, "\n".join(upward)


def test_no_module_takes_another_modules_private_name():
    taken = [f"{module} takes {source}.{name}" for module, edges in GRAPH.items() for source, name in edges
             if name.startswith("_") and source != module and source != NATIVE]
    assert not taken, "\n".join(taken)


def test_no_function_is_longer_than_a_reader_can_hold():
    long = [f"{path}:{node.lineno} {node.name}: {node.end_lineno - node.lineno + 1} lines"
            for path, tree, _ in MODULES for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]
    assert not long, "\n".join(long)


def test_no_module_is_longer_than_a_reader_can_hold():
    long = [f"{path}: {lines} lines" for path, _, lines in MODULES if lines > MAX_MODULE_LINES]
    assert not long, "\n".join(long)


def _back_end_leaks(path: str, tree: ast.Module, modes: tuple[str, ...], fabrics: set[str]) -> list[str]:
    """In a simulator module: a mode's name as a string, or isinstance on a network back-end's class."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and node.value in modes:
            found.append(f"{path}:{node.lineno} names the mode {node.value!r}")
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "isinstance" and len(node.args) == 2:
            kinds = node.args[1].elts if isinstance(node.args[1], ast.Tuple) else [node.args[1]]
            named = [ast.unparse(kind).split(".")[-1] for kind in kinds]
            found += [f"{path}:{node.lineno} asks whether a network is a {name}" for name in named if name in fabrics]
    return found


def test_the_simulator_meets_its_network_back_ends_through_their_table():
    """Mode names live in sim/backends.py's table only; no module asks which class a network is
    (docs/architecture.md, 'The simulator's layers'): a new back-end is one entry there."""
    from chakra_core.sim.backends import MODES

    fabrics = {node.name for path, tree, _ in MODULES if path.startswith("chakra_core/sim/network/")
               for node in ast.walk(tree) if isinstance(node, ast.ClassDef)}
    leaks = [leak for path, tree, _ in MODULES if path.startswith("chakra_core/sim/") and path !=
             "chakra_core/sim/backends.py" for leak in _back_end_leaks(path, tree, MODES, fabrics)]
    assert not leaks, "\n".join(leaks)


def test_the_checks_catch_what_they_must():
    tree = ast.parse("def f():\n" + "    x = 1\n" * MAX_FUNCTION_LINES + "    import ray\n")
    function = tree.body[0]
    assert function.end_lineno - function.lineno + 1 > MAX_FUNCTION_LINES
    assert "ray" in _imported(tree)
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert not _cycles({"a": {"b"}, "b": set()})
    module = "chakra_core.format.etfile"
    taken = _edges("x", "x.py", ast.parse(f"from {module} import _private, read_frame\nfrom . import y"))
    assert (module, "_private") in taken and (module, "read_frame") in taken
    leaky = ast.parse("if mode == 'aware' and isinstance(net, aware.WatchedFabric): pass")
    assert len(_back_end_leaks("x.py", leaky, ("aware",), {"WatchedFabric"})) == 2
