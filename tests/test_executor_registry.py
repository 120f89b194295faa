"""The executor registry (``kernels.registry``) is the only list of attention executors: every
other collection of their names is derived from it."""

from __future__ import annotations

import ast

import pytest

from kernels.registry import (
    DENSE_EXECUTORS,
    EXECUTORS,
    TILED_VARIANTS,
    executor_names,
    get_executor,
)
from tests.helpers.paths import REPO_ROOT

# A literal naming this many executors is a list of them; two are a choice (a platform's pair of
# dense controls, a comparison of two).
_LIST_SIZE = 3


def _executor_lists(source: str) -> list[int]:
    """The line of every tuple, list or set literal of at least ``_LIST_SIZE`` executor names and
    nothing else (a benchmark's rows that mix executors with other programs are a selection)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            names = [e.value if isinstance(e, ast.Constant) else None for e in node.elts]
            if len(names) >= _LIST_SIZE and all(name in EXECUTORS for name in names):
                found.append(node.lineno)
    return found


def test_no_list_of_executors_outside_the_registry():
    lists = [
        where
        for package in ("evalharness", "kernels", "models", "reports")
        for path in sorted((REPO_ROOT / package).rglob("*.py"))
        if path != REPO_ROOT / "kernels" / "registry.py"
        for line in _executor_lists(path.read_text())
        if (where := f"{path.relative_to(REPO_ROOT)}:{line}")
    ]
    assert not lists, "lists of executors outside kernels/registry.py:\n" + "\n".join(lists)


def test_the_list_finder_finds_the_registry_table():
    # The rule would pass vacuously if the finder missed literals.
    source = "TABLE = ('b0', 'b1', 'b2', 'b3')\nPAIR = ('splash', 'b0')\nROWS = ['b0', 'b3', 'xla_flash', 'torch_sdpa']\n"
    assert _executor_lists(source) == [1]


def test_derived_lists_match_the_table():
    assert TILED_VARIANTS == ("b0", "b1", "b2", "b3")
    assert executor_names(tiled=True, dense=False) == ("b1", "b2", "b3")
    assert DENSE_EXECUTORS == (
        "auto",
        "b0",
        "splash",
        "cudnn",
        "dot_product_attention",
        "reference",
        "xla_flash",
    )
    assert executor_names(memory="quadratic") == ("dot_product_attention", "reference")
    assert executor_names(ours=False) == ("splash", "cudnn", "dot_product_attention")


def test_an_unknown_executor_is_named_with_the_choices():
    assert get_executor("b3").tiled
    with pytest.raises(ValueError, match="executor='flash3'; use one of .*'xla_flash'"):
        get_executor("flash3")


def test_the_platform_table_decides_backend_controls_and_export():
    from evalharness.admission import EXPORT_PLATFORMS
    from evalharness.assembly import backend_for
    from kernels.policy import dense_controls
    from kernels.registry import PLATFORMS, get_platform

    for name, platform in PLATFORMS.items():
        assert backend_for("auto", name) == platform.backend
        assert dense_controls(name) == (platform.dense_control, platform.noise_floor_control)
        assert EXPORT_PLATFORMS.get(name) == platform.export_platform
        assert {platform.dense_control, platform.noise_floor_control} <= set(DENSE_EXECUTORS)
        for control in (platform.dense_control, platform.noise_floor_control):
            assert get_executor(control).only_on in (None, name), (name, control)
    # The vendors' dense executors run on their own platform only.
    assert {e.name: e.only_on for e in EXECUTORS.values() if e.only_on} == {
        "splash": "tpu",
        "cudnn": "gpu",
    }
    assert get_platform("cuda") is PLATFORMS["gpu"]
    with pytest.raises(ValueError, match="platform='rocm'; use one of"):
        get_platform("rocm")
