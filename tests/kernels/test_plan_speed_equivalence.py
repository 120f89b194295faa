"""The vectorised host-side plan builders equal their simple reference implementations."""

from __future__ import annotations

import numpy as np
import pytest

from kernels.executors.pallas_tpu_visits import _reference_build_visit_slots, build_visit_slots
from kernels.executors.xla_blocksparse import _group_bounds, _reference_group_bounds
from kernels.masks.band import BandMask, band_for_density, strided_temporal_mask
from kernels.masks.geometry import TokenGeometry
from kernels.masks.tile_grid import _reference_band_tile_counts, band_tile_counts
from kernels.plans.block_sizes import BlockSizes
from kernels.plans.tiles import _reference_visit_lists, _visit_lists, build_plan

GEOMETRIES = [TokenGeometry(1, 3, 4), TokenGeometry(3, 2, 5), TokenGeometry(5, 6, 7)]
TILES = [(1, 1), (2, 3), (8, 8), (7, 13), (64, 32), (200, 100)]


@pytest.mark.parametrize("geometry", GEOMETRIES, ids=str)
@pytest.mark.parametrize("density", [0.05, 0.3887, 1.0])
def test_band_tile_counts_equal_reference(geometry, density):
    for mask in (band_for_density(geometry, density), strided_temporal_mask(geometry, density)):
        for bq, bkv in TILES:
            bs = BlockSizes(bq, bkv)
            got, want = band_tile_counts(mask, bs), _reference_band_tile_counts(mask, bs)
            assert got.dtype == want.dtype and np.array_equal(got, want), (mask, bs)
            assert int(got.sum()) == mask.kept_pairs


def test_band_tile_counts_medium_with_padding():
    geometry = TokenGeometry(21, 6, 8)  # 1008 tokens: padding on both axes for these tiles
    for mask in (band_for_density(geometry, 0.2), strided_temporal_mask(geometry, 0.2)):
        for bs in (BlockSizes(48, 40), BlockSizes(128, 96), BlockSizes(3328, 1536)):
            assert np.array_equal(band_tile_counts(mask, bs), _reference_band_tile_counts(mask, bs))
    for mask in (BandMask(50, 0, 7), BandMask(50, 60, 50), BandMask(1, 0, 1), BandMask(37, 5, 0)):
        bs = BlockSizes(7, 3)
        assert np.array_equal(band_tile_counts(mask, bs), _reference_band_tile_counts(mask, bs))


@pytest.mark.parametrize("tiles", [(512, 512), (3328, 1536)])
def test_band_tile_counts_at_720p_equal_reference(tiles):
    # The real geometry: the strided temporal band's runs span 21 frames and 3,600-token rows.
    geometry = TokenGeometry(21, 45, 80)
    bs = BlockSizes(*tiles)
    for mask in (band_for_density(geometry, 0.3887), strided_temporal_mask(geometry, 0.3887)):
        assert np.array_equal(band_tile_counts(mask, bs), _reference_band_tile_counts(mask, bs))


def test_visit_lists_equal_reference():
    rng = np.random.default_rng(0)
    for shape in [(1, 1), (3, 5), (10, 1), (40, 33), (0, 4)]:
        for p in (0.0, 0.1, 0.5, 1.0):
            selected = rng.random(shape) < p
            for got, want in zip(
                _visit_lists(selected), _reference_visit_lists(selected), strict=True
            ):
                assert got.dtype == want.dtype and np.array_equal(got, want)


def test_group_bounds_equal_reference():
    rng = np.random.default_rng(1)
    for _ in range(150):
        n, high = int(rng.integers(1, 50)), int(rng.integers(1, 10))
        full, partial = rng.integers(0, high, n), rng.integers(0, high, n)
        if rng.random() < 0.3:
            full[:], partial[:] = full[0], partial[0]
        order = np.lexsort((partial, full + partial))
        for groups in (1, 3, 8):
            args = (full[order], partial[order], groups)
            assert _group_bounds(*args) == _reference_group_bounds(*args)


def _slots_or_error(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except ValueError as error:
        return str(error)


def test_visit_slots_equal_reference_on_random_lists():
    rng = np.random.default_rng(2)
    for _ in range(300):
        nq, nkv = int(rng.integers(1, 6)), int(rng.integers(1, 9))
        kind = rng.integers(0, 3, (nq, nkv))  # 0 skipped, 1 full, 2 partial
        lists = []
        for code in (1, 2):
            count = (kind == code).sum(axis=1)
            kv = rng.integers(-1, nkv, (nq, int(count.max()) + int(rng.integers(0, 2))))
            for i in range(nq):
                idx = np.flatnonzero(kind[i] == code)
                kv[i, : idx.size] = rng.permutation(idx)
            lists += [kv.astype(np.int32), count.astype(np.int32)]
        if rng.random() < 0.15 and lists[2].shape[1] and lists[3].sum():
            lists[2][int(np.argmax(lists[3])), 0] = -3  # negative index
        if rng.random() < 0.15 and lists[1].sum() and lists[2].shape[1] > lists[3].max():
            i = int(np.argmax(lists[1]))
            lists[2][i, lists[3][i]] = lists[0][i, 0]  # listed twice
            lists[3][i] += 1
        kwargs = dict(
            variant=str(rng.choice(["b0", "b1", "b2", "b3"])),
            tokens=int(rng.integers(max(1, (nkv - 1) * 8), nkv * 8 + 1)),
            block_kv=8,
        )
        got = _slots_or_error(build_visit_slots, *lists, **kwargs)
        want = _slots_or_error(_reference_build_visit_slots, *lists, **kwargs)
        if isinstance(want, str):
            assert got == want
            continue
        for name in ("kv_index", "masked", "count"):
            a, b = getattr(got, name), getattr(want, name)
            assert a.dtype == b.dtype and np.array_equal(a, b), name
        assert (got.slots, got.num_q_tiles, got.num_kv_tiles) == (
            want.slots,
            want.num_q_tiles,
            want.num_kv_tiles,
        )


def test_visit_slots_of_plans_equal_reference():
    geometry = TokenGeometry(5, 6, 7)
    for mask in (band_for_density(geometry, 0.3), strided_temporal_mask(geometry, 0.3)):
        for variant in ("b0", "b1", "b2", "b3"):
            plan = build_plan(mask, BlockSizes(16, 24), variant, None)
            args = (plan.full_kv, plan.full_count, plan.partial_kv, plan.partial_count)
            kwargs = dict(variant=variant, tokens=plan.tokens, block_kv=24)
            got = build_visit_slots(*args, **kwargs)
            want = _reference_build_visit_slots(*args, **kwargs)
            assert np.array_equal(got.packed(), want.packed())
            assert np.array_equal(got.count, want.count) and got.slots == want.slots
