"""Every third-party module the product imports is a core dependency, or named here with the
extra that brings it, and that extra's code path refuses cleanly without it.

`pip install -e .` installs `[project].dependencies` and nothing else, so a module that only came
along with the test extra (`tokenizers` through transformers) passes every test in the checkout's
venv and fails a newcomer's first run. This test reads the import statements of `evalharness`,
`models`, `kernels` and `reports` (the syntax tree, imports inside functions included) and the
modules named to `importlib.util.find_spec` / `importlib.import_module`, maps each top-level name
to the distributions that install it (`importlib.metadata.packages_distributions`), and checks
one of them against pyproject's core list. Two tables name the exceptions, and each entry is
checked too: `PROVIDED_BY` (a module a declared dependency requires unconditionally) and
`EXTRA_ONLY` (a module only an extra installs, whose code path is tested below without it).
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import re
import sys
import tomllib
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tests.helpers.paths import REPO_ROOT

FIRST_PARTY = ("evalharness", "models", "kernels", "reports")
# Modules imported by name that a declared dependency requires unconditionally: jax's own
# compiled half and its dtypes, versions pinned by jax itself (declaring them again would be a
# second pin to keep in step with jax's).
PROVIDED_BY = {"jaxlib": "jax", "ml_dtypes": "jax"}
# Modules only an extra installs, with that extra; test_extra_only_paths_refuse_without_them
# shows each path without its module.
EXTRA_ONLY = {
    "torch": "test",  # the CPU kernel benchmark's PyTorch rows (evalharness/bench/dense_cpu.py)
    "libtpu": "tpu",  # compiling for a TPU topology that is not attached (dry runs)
    "jax_plugins": "gpu-compile",  # compiling for an H200 that is not attached (dry runs)
    "psycopg": "postgres",  # the shared MLflow server on PostgreSQL
    "flask_wtf": "postgres",  # that server's --auth (MLflow's basic-auth app) and add-user
    "hydra_plugins": "launchers",  # hydra/launcher=submitit_local|submitit_slurm
}
# Distributions installed on their own, without their requirements (which conflict with ours and
# are not needed: only a data file of theirs is read, never imported), so no extra can bring
# them; each path refuses with the install command without them (tested below).
INSTALLED_ALONE = {"vbench": "pip install --no-deps vbench==0.1.5"}  # VBench's prompt file
_LOOKUPS = ("find_spec", "import_module")


def _normalised(name: str) -> str:
    """A distribution name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _pyproject() -> dict:
    return tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())


def _core() -> set[str]:
    """The normalised names of pyproject's `[project].dependencies`."""
    return {_normalised(Requirement(r).name) for r in _pyproject()["project"]["dependencies"]}


def _looked_up(tree: ast.Module) -> Iterator[str]:
    """Modules named to find_spec/import_module, as a string or a module-level string constant."""
    constants = {
        target.id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        arg = node.args[0]
        if name not in _LOOKUPS:
            continue
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            yield arg.value
        elif isinstance(arg, ast.Name) and arg.id in constants:
            yield constants[arg.id]


def _imported(path: Path) -> Iterator[str]:
    """Every absolute module `path` imports or looks up, anywhere in the file."""
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module
    yield from _looked_up(tree)


def third_party_imports() -> dict[str, set[str]]:
    """Top-level third-party module name -> the product files (repository paths) that import it."""
    found: dict[str, set[str]] = {}
    for package in FIRST_PARTY:
        for path in sorted((REPO_ROOT / package).rglob("*.py")):
            for module in _imported(path):
                top = module.split(".")[0]
                if top in sys.stdlib_module_names or top in FIRST_PARTY:
                    continue
                found.setdefault(top, set()).add(str(path.relative_to(REPO_ROOT)))
    return found


def _requires(distribution: str, extras: Iterable[str] = ()) -> list[Requirement]:
    """What an installed distribution requires with `extras` on (its unconditional requirements
    when none); [] when it is not installed."""
    try:
        lines = importlib.metadata.requires(distribution) or []
    except importlib.metadata.PackageNotFoundError:
        return []
    wanted = [{"extra": e} for e in (*extras, "")]
    return [
        r
        for r in map(Requirement, lines)
        if r.marker is None or any(r.marker.evaluate(env) for env in wanted)
    ]


def _closure(requirements: Iterable[Requirement]) -> set[str]:
    """The normalised names of `requirements` and everything they require, as installed here."""
    seen: set[tuple[str, frozenset[str]]] = set()
    todo = list(requirements)
    while todo:
        req = todo.pop()
        key = (_normalised(req.name), frozenset(req.extras))
        if key not in seen:
            seen.add(key)
            todo += _requires(req.name, req.extras)
    return {name for name, _ in seen}


def test_every_third_party_import_is_declared() -> None:
    imports = third_party_imports()
    providers = importlib.metadata.packages_distributions()
    core = _core()
    problems = []
    for module, files in sorted(imports.items()):
        if module in EXTRA_ONLY or module in PROVIDED_BY or module in INSTALLED_ALONE:
            continue
        distributions = providers.get(module)
        where = ", ".join(sorted(files)[:3]) + (" ..." if len(files) > 3 else "")
        if not distributions:
            problems.append(f"{module} (imported by {where}) is not installed here")
        elif not {_normalised(d) for d in distributions} & core:
            problems.append(
                f"{module} (distribution {', '.join(distributions)}; imported by {where}) is not "
                "in pyproject's [project].dependencies: declare it, or name it in this test's "
                "EXTRA_ONLY with the extra that brings it"
            )
    assert not problems, "undeclared imports:\n" + "\n".join(problems)


def test_provided_by_is_required_by_a_declared_dependency() -> None:
    providers = importlib.metadata.packages_distributions()
    for module, provider in PROVIDED_BY.items():
        assert _normalised(provider) in _core(), f"{module}'s provider {provider} is not declared"
        required = {_normalised(r.name) for r in _requires(provider)}
        distributions = {_normalised(d) for d in providers.get(module, [])}
        assert distributions & required, (
            f"{provider} does not require {module} ({distributions or 'not installed'}) "
            "unconditionally: declare it in pyproject's [project].dependencies"
        )


def test_extra_only_modules_come_from_their_extra_and_not_the_core() -> None:
    extras = _pyproject()["project"]["optional-dependencies"]
    core = _closure(map(Requirement, _pyproject()["project"]["dependencies"]))
    providers = importlib.metadata.packages_distributions()
    for module, extra in EXTRA_ONLY.items():
        assert extra in extras, f"{module}: pyproject has no extra {extra!r}"
        distributions = {_normalised(d) for d in providers.get(module, [])}
        if not distributions:
            continue  # not installed here: nothing to compare
        assert distributions & _closure(map(Requirement, extras[extra])), (
            f"{module} ({distributions}) does not come with the {extra} extra"
        )
        assert not distributions & core, (
            f"{module} ({distributions}) comes with the core dependencies: take it out of EXTRA_ONLY"
        )


def test_the_tables_name_only_what_the_product_imports() -> None:
    imports = third_party_imports()
    stale = sorted(
        (EXTRA_ONLY.keys() | PROVIDED_BY.keys() | INSTALLED_ALONE.keys()) - imports.keys()
    )
    assert not stale, f"no product file imports {stale}: drop them from this test's tables"
    # The scan reaches imports inside functions and looked-up names.
    assert "evalharness/bench/dense_cpu.py" in imports["torch"]
    assert "models/accelerator_env.py" in imports["libtpu"]
    assert "evalharness/config/overrides.py" in imports["hydra_plugins"]


def _hide(monkeypatch: pytest.MonkeyPatch, *modules: str) -> None:
    """Makes `modules` look uninstalled: find_spec finds none of them, and importing one fails."""
    real = importlib.util.find_spec

    def find_spec(name: str, package: str | None = None):
        if name.split(".")[0] in modules:
            return None
        return real(name, package)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    for module in modules:
        monkeypatch.setitem(sys.modules, module, None)


def test_torch_rows_are_left_out_without_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    import numpy as np

    from evalharness.bench import dense_cpu
    from kernels.plans.block_sizes import BlockSizes

    _hide(monkeypatch, "torch")
    q = np.zeros((1, 8, 1, 4), np.float32)
    for row in ("torch_sdpa", "torch_matmuls"):
        assert dense_cpu._torch_row(row, q, q, q, BlockSizes(8, 8)) is None


def test_tpu_compiler_refuses_without_libtpu(monkeypatch: pytest.MonkeyPatch) -> None:
    from evalharness.estimates import tpu_compiler

    monkeypatch.setattr(tpu_compiler, "libtpu_installed", lambda: False)
    with pytest.raises(tpu_compiler.TpuCompilerUnavailable, match=r"pip install -e '\.\[tpu\]'"):
        tpu_compiler.topology_compiler("v6e:2x4")


def test_gpu_compiler_refuses_without_the_cuda_plugin(monkeypatch: pytest.MonkeyPatch) -> None:
    from models.accelerator_env import cuda_plugin_installed

    _hide(monkeypatch, "jax_plugins")
    assert not cuda_plugin_installed()
    # What the dry run then says: tests/evalharness/estimates/test_gpu_compiler.py and
    # tests/evalharness/admission/test_dry_run.py (the gpu-compile extra named, nothing compiled).


@pytest.mark.parametrize(
    ("argv", "needs"),
    [
        ([], "psycopg"),
        (["--auth"], "Flask-WTF"),
        (["add-user", "bob", "--tracking-uri", "http://127.0.0.1:1"], "Flask-WTF"),
    ],
)
def test_tracking_server_refuses_without_the_postgres_extra(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], argv, needs
) -> None:
    from evalharness.tracking import server

    _hide(monkeypatch, "psycopg", "flask_wtf")
    monkeypatch.setattr(server, "postgres_server", lambda *a, **k: pytest.fail("started"))
    assert server.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and needs in err
    assert "pip install -e '.[postgres]'" in err and "Traceback" not in err


def test_submitit_launcher_refused_without_the_launchers_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from evalharness.config import check_overrides

    _hide(monkeypatch, "hydra_plugins")
    problem = check_overrides(["-m", "hydra/launcher=submitit_local", "schedule=balanced"])
    assert problem is not None and "pip install -e '.[launchers]'" in problem
    assert check_overrides(["-m", "hydra/launcher=basic"]) is None


def test_vbench_prompts_refuse_without_vbench(monkeypatch: pytest.MonkeyPatch) -> None:
    from evalharness.config.pairs import load_prompts

    _hide(monkeypatch, "vbench")
    with pytest.raises(ValueError, match=re.escape(INSTALLED_ALONE["vbench"])):
        load_prompts("vbench")
