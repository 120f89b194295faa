"""The Mask protocol every mask implements, and the masks layer standing alone below plans."""

import subprocess
import sys

import numpy as np
import pytest

from kernels.masks import Mask
from kernels.masks.band import BandMask, PaddingMask, StridedTemporalMask, band_for_density
from kernels.masks.geometry import TokenGeometry
from kernels.plans.block_sizes import BlockSizes
from kernels.plans.rounding import round_to_tiles
from tests.helpers.masks import brute_tile_counts
from tests.helpers.paths import REPO_ROOT

GEOMETRY = TokenGeometry(3, 2, 3)  # 18 tokens: tiles of 4 and 8 leave padding on both axes


def _masks():
    band = band_for_density(GEOMETRY, 0.4)
    return {
        "band": band,
        "band_sink_only": BandMask(GEOMETRY.tokens, 0, 5),
        "strided": StridedTemporalMask(GEOMETRY, band.half_width),
        "padding": PaddingMask(GEOMETRY.tokens),
        "tile": round_to_tiles(band, BlockSizes(4, 4), tolerance=None),
    }


@pytest.mark.parametrize("name", sorted(_masks()))
def test_every_mask_is_a_mask_and_counts_its_tiles_like_its_dense_matrix(name):
    mask = _masks()[name]
    assert isinstance(mask, Mask)
    dense = mask.dense()
    assert dense.shape == (mask.tokens, mask.tokens)
    assert mask.kept_pairs == int(dense.sum())
    assert mask.density == pytest.approx(dense.sum() / mask.tokens**2)
    q, k = np.arange(mask.tokens)[:, None], np.arange(mask.tokens)[None, :]
    np.testing.assert_array_equal(mask.allowed(q, k), dense)
    sizes = [BlockSizes(4, 4)] if name == "tile" else [BlockSizes(4, 4), BlockSizes(8, 4)]
    for bs in sizes:
        counts = mask.tile_counts(bs)
        assert counts.dtype == np.int64
        np.testing.assert_array_equal(counts, brute_tile_counts(mask, bs))


def test_a_non_mask_is_not_a_mask():
    assert not isinstance(object(), Mask)
    assert not isinstance(BlockSizes(4, 4), Mask)


def test_importing_masks_loads_no_higher_layer():
    code = (
        "import sys, kernels.masks; "
        "print(sorted(m for m in sys.modules if m.startswith('kernels.') "
        "and not m.startswith('kernels.masks')))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]", result.stdout
