"""Sparsity schedules: conf files, dense/sparse cells, exact kept fractions, bad input."""

from __future__ import annotations

import math
import types
import warnings

import numpy as np
import pytest

from kernels.masks.band import band_for_density
from kernels.masks.geometry import TokenGeometry
from kernels.plans.block_sizes import BlockSizes
from kernels.plans.rounding import round_to_tiles
from kernels.policy.schedule import SparseVariant, SparsitySchedule
from tests.helpers.geometry import preset_tokens
from tests.helpers.schedules import SCHEDULE_NAMES, load_schedule


@pytest.mark.parametrize("name", SCHEDULE_NAMES)
def test_conf_schedules_load_without_warnings(name):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        schedule = load_schedule(name)
    assert schedule.name == name
    assert schedule.sparse == (name != "dense")
    assert schedule.variant == "b3"


def test_sparse_schedules_keep_progressively_fewer_pairs_at_720p():
    geometry = preset_tokens("720p")
    tiles = BlockSizes(3328, 1536)
    kept = [
        load_schedule(name).overall_kept_fraction(50, 40, geometry, tiles)
        for name in ("dense", "conservative", "balanced", "aggressive")
    ]
    assert kept[0] == 1.0
    assert kept[0] > kept[1] > kept[2] > kept[3] > 0.0


def test_is_dense_follows_the_floor_rule():
    schedule = SparsitySchedule("s", first_times_fp=0.25, first_layers_fp=0.1, density=0.3)
    steps, layers = 10, 25  # floor(2.5) = 2 dense steps, floor(2.5) = 2 dense layers
    grid = np.array(
        [
            [schedule.is_dense(s, layer, steps=steps, layers=layers) for layer in range(layers)]
            for s in range(steps)
        ]
    )
    expected = np.zeros((steps, layers), dtype=bool)
    expected[:2, :] = True
    expected[:, :2] = True
    np.testing.assert_array_equal(grid, expected)
    assert schedule.runs_sparse(steps, layers)


def test_floor_is_exact_for_decimal_fractions():
    # 0.29 * 100 is 28.999999999999996 in binary floating point; the documented floor gives 29.
    assert SparsitySchedule("s", 0.29, 0.0, 0.3).dense_steps(100) == 29
    assert SparsitySchedule("s", 0.0, 0.03, 0.3).dense_layers(40) == 1
    assert SparsitySchedule("s", 0.1, 0.0, 0.3).dense_steps(50) == 5


def test_dense_schedule_is_dense_everywhere():
    schedule = SparsitySchedule("d", 0.0, 0.0, 0.5, sparse=False)
    assert all(
        schedule.is_dense(s, layer, steps=3, layers=2) for s in range(3) for layer in range(2)
    )
    assert schedule.overall_kept_fraction(3, 2, TokenGeometry(5, 4, 8), BlockSizes(8, 8)) == 1.0
    assert not schedule.runs_sparse(3, 2)


@pytest.mark.parametrize("variant", ["b2", "b3"])
def test_overall_kept_fraction_counts_the_executed_masks(variant):
    geometry, tiles = TokenGeometry(5, 4, 8), BlockSizes(16, 16)
    schedule = SparsitySchedule("s", 0.4, 0.5, 0.35, variant=variant)
    steps, layers = 5, 4  # 2 dense steps, 2 dense layers -> 3 x 2 sparse cells of 20
    band = band_for_density(geometry, 0.35)
    executed = round_to_tiles(band, tiles, tolerance=None) if variant == "b3" else band
    density = executed.dense().sum() / geometry.tokens**2  # counted from the materialised mask
    cells = [
        1.0 if schedule.is_dense(s, layer, steps=steps, layers=layers) else density
        for s in range(steps)
        for layer in range(layers)
    ]
    assert math.isclose(
        schedule.overall_kept_fraction(steps, layers, geometry, tiles),
        np.mean(cells),
        rel_tol=1e-12,
    )
    assert math.isclose(schedule.sparse_density(geometry, tiles), density, rel_tol=1e-12)


def test_from_mapping_accepts_attribute_objects_and_ignores_extra_keys():
    config = types.SimpleNamespace(
        name="x", first_times_fp=0.2, first_layers_fp=0, density=1, variant="b2", extra=3
    )
    schedule = SparsitySchedule.from_mapping(config)
    assert schedule == SparsitySchedule("x", 0.2, 0.0, 1.0, variant="b2")
    with pytest.raises(ValueError, match="density"):
        SparsitySchedule.from_mapping({"name": "x", "first_times_fp": 0.1, "first_layers_fp": 0})


def test_variant_is_stored_as_its_enum_and_compares_as_the_string():
    schedule = SparsitySchedule("s", 0.2, 0.0, 0.3, variant="b2")
    assert schedule.variant is SparseVariant.b2
    assert schedule.variant == "b2" and f"{schedule.variant}" == "b2"
    assert schedule == SparsitySchedule("s", 0.2, 0.0, 0.3, variant=SparseVariant.b2)
    with pytest.raises(ValueError, match=r"variant='b0'.*'b1', 'b2', 'b3'"):
        SparsitySchedule("s", 0.2, 0.0, 0.3, variant="b0")


def test_defaults_are_the_config_schema_defaults():
    # The harness composes conf/schedule files over these defaults; a file that leaves a knob
    # out gets the dense-leaning value, so an incomplete schedule never silently prunes more.
    with pytest.warns(UserWarning, match="run is dense"):
        schedule = SparsitySchedule("s")
    assert (schedule.first_times_fp, schedule.first_layers_fp, schedule.density) == (1.0, 0.0, 1.0)
    assert (schedule.variant, schedule.routing_samples, schedule.sparse) == ("b3", 64, True)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"first_times_fp": -0.1}, "first_times_fp"),
        ({"first_times_fp": 1.5}, "first_times_fp"),
        ({"first_layers_fp": 2.0}, "first_layers_fp"),
        ({"first_layers_fp": "0.1"}, "first_layers_fp"),
        ({"density": 0.0}, "density"),
        ({"density": 1.2}, "density"),
        ({"variant": "b0"}, "variant"),
        ({"routing_samples": 0}, "routing_samples"),
        ({"routing_samples": 8.0}, "routing_samples"),
        ({"name": ""}, "name"),
    ],
)
def test_bad_fields_name_themselves(kwargs, field):
    values = {"name": "s", "first_times_fp": 0.2, "first_layers_fp": 0.0, "density": 0.3}
    values.update(kwargs)
    with pytest.raises(ValueError, match=field):
        SparsitySchedule(**values)


def test_validate_rejects_a_band_narrower_than_a_tile_and_too_many_samples():
    geometry = TokenGeometry(5, 4, 8)  # 160 tokens; density 0.25 gives an 11-token band
    schedule = SparsitySchedule("s", 0.0, 0.0, 0.25)
    schedule.validate(geometry, BlockSizes(8, 8))
    with pytest.raises(ValueError, match=r"density=0.25.*narrower than one 16-token tile"):
        schedule.validate(geometry, BlockSizes(16, 16))
    with pytest.raises(ValueError, match="routing_samples=200"):
        SparsitySchedule("s", 0.0, 0.0, 0.5, routing_samples=200).validate(
            geometry, BlockSizes(8, 8)
        )


def test_a_schedule_that_never_runs_sparse_warns_but_is_allowed():
    with pytest.warns(UserWarning, match="run is dense"):
        schedule = SparsitySchedule("s", first_times_fp=1.0, first_layers_fp=0.0, density=0.3)
    assert not schedule.runs_sparse(10, 4)
    assert schedule.overall_kept_fraction(10, 4, TokenGeometry(5, 4, 8), BlockSizes(8, 8)) == 1.0
    with pytest.warns(UserWarning, match="run is dense"):
        schedule.warn_if_dense(10, 4)
