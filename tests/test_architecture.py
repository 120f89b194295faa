"""The shape of the code: import layering, no import cycles, small modules and functions.

The import graph is read with ``ast`` (nothing is imported), counting imports inside functions too:
a lazy import is still a dependency. Importing ``a.b.c`` runs ``a/__init__.py`` and
``a/b/__init__.py`` first, so those packages count as dependencies too, except the importer's own
enclosing packages, which are already being initialised when it runs.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

from tests.helpers.paths import REPO_ROOT

PACKAGES = ("evalharness", "kernels", "models", "reports")
# kernels follows the data path; a subpackage may import only those before it.
KERNEL_LAYERS = ("masks", "plans", "executors", "policy", "parallel")
# Which top-level packages each package may import (besides itself).
ALLOWED_TOP_LEVEL = {
    "models": set(),
    "kernels": set(),
    "evalharness": {"models", "kernels"},
    "reports": {"evalharness", "models", "kernels"},
}
MAX_MODULE_LINES = 450

# evalharness: rooms along a run's stages, bottom first, and the rooms each may import (besides
# itself). Base modules (``formatting``, ``refusal``, ``exit_codes``, ``machine``, ``metric_names``,
# ``compile_cache``, ``phases``) and the thin top (``run``, ``__main__``) are rooms of one module. Every entry
# names only rooms before it, so the table has no cycle.
HARNESS_ROOMS: dict[str, set[str]] = {
    "__init__": set(),  # the package itself: models.accelerator_env's libtpu guard runs first
    "formatting": set(),
    "refusal": set(),
    "exit_codes": set(),
    "machine": set(),
    "metric_names": set(),
    "phases": set(),
    "compile_cache": {"metric_names"},
    "config": set(),
    "estimates": {"formatting", "machine", "phases"},
    "tracking": {"refusal", "exit_codes", "machine", "metric_names"},
    "assembly": {"config"},
    "admission": {"config", "estimates", "assembly", "formatting", "refusal", "exit_codes"}
    | {"compile_cache", "phases"},
    "arms": {"tracking", "metric_names"},
    "evidence": {"config", "assembly", "arms", "formatting", "machine", "metric_names"},
    "gate": {"config", "evidence", "tracking", "exit_codes", "metric_names"},
    "comparison": {"config", "tracking", "assembly", "admission", "arms", "evidence", "gate"}
    | {"formatting", "exit_codes", "metric_names", "compile_cache", "estimates", "phases"},
    "bench": {
        "config",
        "estimates",
        "tracking",
        "assembly",
        "admission",
        "arms",
        "evidence",
        "gate",
        "formatting",
        "exit_codes",
        "machine",
        "metric_names",
        "refusal",
        "compile_cache",
        "phases",
    },
    "run": {
        "config",
        "tracking",
        "assembly",
        "admission",
        "arms",
        "evidence",
        "gate",
        "comparison",
        "refusal",
        "exit_codes",
        "metric_names",
        "compile_cache",
        "phases",
    },
    "__main__": {"config", "tracking", "admission", "evidence", "comparison", "refusal"}
    | {"exit_codes", "run", "metric_names"},
    # The schedule search: each trial is a run (``run``), planned by admission.
    "search": {"config", "estimates", "tracking", "assembly", "admission", "evidence"}
    | {"formatting", "refusal", "exit_codes", "run", "metric_names", "compile_cache"},
}
# What the reports package may read of the harness (only through each room's ``__init__``).
REPORTS_READ = {"config", "estimates", "tracking", "formatting", "bench", "metric_names"}
MAX_HARNESS_TOP_LEVEL_MODULES = 12


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO_ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@cache
def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((REPO_ROOT / package).rglob("*.py")):
            found[_module_name(path)] = path
    return found


def _is_package(name: str) -> bool:
    return _modules()[name].name == "__init__.py"


def _imported_names(name: str) -> set[str]:
    """Project modules named by the import statements of module ``name``."""
    path = _modules()[name]
    tree = ast.parse(path.read_text(), filename=str(path))
    package = name if _is_package(name) else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            targets.add(base)
            targets.update(f"{base}.{alias.name}" for alias in node.names)
    return {t for t in targets if t in _modules()}


@cache
def _dependencies(name: str) -> frozenset[str]:
    """Modules whose code runs when ``name`` imports what it imports (see the module docstring)."""
    own_packages = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)}
    if _is_package(name):
        own_packages.add(name)
    deps = set()
    for target in _imported_names(name):
        parts = target.split(".")
        for i in range(1, len(parts) + 1):
            ancestor = ".".join(parts[:i])
            if ancestor in _modules() and ancestor not in own_packages and ancestor != name:
                deps.add(ancestor)
    return frozenset(deps)


def _find_cycle() -> list[str] | None:
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(_dependencies(node)):
            if state.get(dep) == 1:
                return [*stack[stack.index(dep) :], dep]
            if dep not in state and (cycle := visit(dep)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for module in sorted(_modules()):
        if module not in state and (cycle := visit(module)):
            return cycle
    return None


def test_the_walk_sees_the_project():
    # Guards the tests below against passing on an empty or misread graph.
    assert {"evalharness.run", "kernels.plans.tiles", "models.transformer"} <= set(_modules())
    assert "kernels.masks.band" in _dependencies("kernels.plans.tiles")
    assert "kernels.masks" in _dependencies("kernels.plans.tiles")


def test_no_import_cycle():
    assert _find_cycle() is None, "import cycle: " + " -> ".join(_find_cycle() or [])


def test_packages_import_only_what_their_layer_allows():
    wrong = []
    for module in _modules():
        top = module.split(".")[0]
        for dep in _dependencies(module):
            dep_top = dep.split(".")[0]
            if dep_top != top and dep_top not in ALLOWED_TOP_LEVEL[top]:
                wrong.append(f"{module} imports {dep}")
    assert not wrong, "\n".join(sorted(wrong))


def _kernel_layer(module: str) -> int | None:
    parts = module.split(".")
    if parts[0] != "kernels" or len(parts) < 2 or parts[1] not in KERNEL_LAYERS:
        return None
    return KERNEL_LAYERS.index(parts[1])


def test_kernel_subpackages_import_only_earlier_layers():
    upward = []
    for module in _modules():
        layer = _kernel_layer(module)
        for dep in _dependencies(module):
            dep_layer = _kernel_layer(dep)
            if layer is not None and dep_layer is not None and dep_layer > layer:
                upward.append(f"{module} imports {dep}")
    assert not upward, "\n".join(sorted(upward))


@pytest.mark.parametrize("layer", KERNEL_LAYERS)
def test_kernel_subpackage_has_a_public_api(layer):
    init = REPO_ROOT / "kernels" / layer / "__init__.py"
    tree = ast.parse(init.read_text())
    exported = [
        node
        for node in tree.body
        if isinstance(node, ast.Assign)
        and any(getattr(t, "id", "") == "__all__" for t in node.targets)
    ]
    assert ast.get_docstring(tree), f"{init} has no docstring"
    assert exported, f"{init} declares no __all__"


def _third_party_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_kernels_and_models_draw_nothing():
    drawing = [
        str(path.relative_to(REPO_ROOT))
        for package in ("kernels", "models")
        for path in (REPO_ROOT / package).rglob("*.py")
        if "matplotlib" in _third_party_imports(path)
    ]
    assert not drawing, f"plotting belongs to the harness or reports: {drawing}"


def test_modules_are_small():
    paths = [*_modules().values(), *sorted((REPO_ROOT / "tests").rglob("*.py"))]
    long = {
        str(p.relative_to(REPO_ROOT)): n
        for p in paths
        if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}"


def test_tests_share_helpers_not_test_files():
    borrowing = [
        f"{path.name} imports {name}"
        for path in sorted((REPO_ROOT / "tests").rglob("*.py"))
        for name in _project_imports_of_file(path)
        if name.split(".")[-1].startswith("test_")
    ]
    assert not borrowing, "share through tests/helpers or conftest.py: " + "; ".join(borrowing)


def _project_imports_of_file(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names if alias.name.startswith("tests."))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tests."):
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _room(module: str) -> str | None:
    """The harness room of a module: ``evalharness.<room>[...]``; None outside the harness."""
    parts = module.split(".")
    if parts[0] != "evalharness":
        return None
    return parts[1] if len(parts) > 1 else "__init__"


def _room_violations(edges) -> list[str]:
    """Harness and reports imports the room table forbids, from ``(module, dependency)`` pairs."""
    wrong = []
    for module, dep in edges:
        room, dep_room = _room(module), _room(dep)
        # Every import of the harness runs its package ``__init__`` (the libtpu guard) first.
        if dep_room in (None, "__init__") or dep_room == room:
            continue
        allowed = REPORTS_READ if module.split(".")[0] == "reports" else HARNESS_ROOMS[room]
        if dep_room not in allowed:
            wrong.append(f"{module} imports {dep} ({room or 'reports'} may not use {dep_room})")
    return wrong


def _project_edges():
    return [
        (m, d)
        for m in _modules()
        if m.split(".")[0] in ("evalharness", "reports")
        for d in _dependencies(m)
    ]


def test_harness_rooms_import_only_what_the_table_allows():
    assert set(HARNESS_ROOMS) >= {r for m in _modules() if (r := _room(m))}, (
        "a room the table lacks"
    )
    wrong = _room_violations(_project_edges())
    assert not wrong, "\n".join(sorted(wrong))


def test_the_room_check_catches_an_upward_import():
    # A planted upward import (config reaching for the run) and a reports import of the gate.
    assert _room_violations([("evalharness.config.schemas", "evalharness.run")])
    assert _room_violations([("reports.tables", "evalharness.gate")])
    assert not _room_violations([("evalharness.run", "evalharness.config")])


def test_the_room_table_only_looks_down():
    order = list(HARNESS_ROOMS)
    upward = [
        f"{room} -> {dep}"
        for room, allowed in HARNESS_ROOMS.items()
        for dep in allowed
        if dep not in order or order.index(dep) >= order.index(room)
    ]
    assert not upward, f"the table names a room at or after its own: {upward}"


def _rooms_with_packages() -> list[str]:
    return sorted(p.parent.name for p in (REPO_ROOT / "evalharness").glob("*/__init__.py"))


def test_other_rooms_are_entered_through_their_init():
    packages = set(_rooms_with_packages())
    deep = []
    for module, path in _modules().items():
        if module.split(".")[0] not in ("evalharness", "reports"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and not node.level and node.module:
                named = [node.module]
            elif isinstance(node, ast.Import):
                named = [alias.name for alias in node.names]
            else:
                continue
            for target in named:
                parts = target.split(".")
                if parts[0] == "evalharness" and len(parts) > 2 and parts[1] in packages:
                    if _room(module) != parts[1]:
                        deep.append(f"{module}: {target}")
    assert not deep, "import another room through its __init__:\n" + "\n".join(sorted(deep))


@pytest.mark.parametrize(
    "room",
    [
        "admission",
        "arms",
        "assembly",
        "bench",
        "comparison",
        "config",
        "estimates",
        "evidence",
        "gate",
        "tracking",
    ],
)
def test_harness_room_has_a_public_api(room):
    assert room in _rooms_with_packages()
    init = REPO_ROOT / "evalharness" / room / "__init__.py"
    tree = ast.parse(init.read_text())
    bound = {
        alias.asname or alias.name
        for node in tree.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    exported = [
        node.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        and any(getattr(t, "id", "") == "__all__" for t in node.targets)
    ]
    assert ast.get_docstring(tree), f"{init} has no docstring"
    assert exported, f"{init} declares no __all__"
    names = [elt.value for elt in exported[0].elts]
    assert names and set(names) <= bound, f"{init}: __all__ names {set(names) - bound} unbound"
    # An exported name that is both a module and a function or class of the room is the one or
    # the other depending on import order (``admit`` once exported admit.py, not ``admit()``).
    modules = {path.stem for path in init.parent.glob("*.py")}
    defined = {
        node.name
        for path in init.parent.glob("*.py")
        for node in ast.parse(path.read_text()).body
        if isinstance(node, ast.FunctionDef | ast.ClassDef)
    }
    ambiguous = sorted(set(names) & modules & defined)
    assert not ambiguous, f"{init}: {ambiguous} name both a module and a function or class"


def test_harness_top_level_stays_small():
    top = sorted(p.name for p in (REPO_ROOT / "evalharness").glob("*.py"))
    assert len(top) <= MAX_HARNESS_TOP_LEVEL_MODULES, f"evalharness/ top level: {top}"
