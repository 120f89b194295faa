"""No other installed distribution claims this project's top-level import names.

``kernels``, ``models`` and ``reports`` are common names: Hugging Face's ``kernels`` distribution
(a hard requirement of transformers 5.25 and newer) installs a top-level ``kernels`` too, and then
whichever comes first on ``sys.path`` wins, so transformers imports this project's package and
diffusers fails on import with an unrelated-looking ``ImportError``. This test names the clash.
"""

from __future__ import annotations

import importlib.metadata
import tomllib

from tests.helpers.paths import REPO_ROOT


def _packages() -> list[str]:
    """The top-level packages the project installs (pyproject.toml's package list)."""
    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    include = pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    return [pattern.rstrip("*") for pattern in include]


def test_only_this_project_provides_its_top_level_packages() -> None:
    providers = importlib.metadata.packages_distributions()
    assert "kernels" in _packages()
    clashes = {
        name: sorted(set(providers.get(name, [])) - {"evalharness"})
        for name in _packages()
        if set(providers.get(name, [])) - {"evalharness"}
    }
    assert not clashes, (
        f"installed distributions also provide these import names: {clashes}; uninstall them "
        "(`pip uninstall <distribution>`) or pin the package that pulled them in (pyproject.toml's "
        "test extra pins transformers below 5.25, which requires Hugging Face's `kernels`)"
    )
