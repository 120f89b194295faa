"""The report's mask figures draw the band the run applied, in each head kind's own layout."""

import numpy as np
import pytest

from kernels.masks.band import StridedTemporalMask, band_for_density, band_for_svg_sparsity
from reports.mask_figures import _samples, mask_images, plan_choice
from reports.sources import ReportRun


def _run(**params: str) -> ReportRun:
    base = {
        "resolution.frames": "33",
        "resolution.height": "96",
        "resolution.width": "160",
        "schedule.density": "0.35",
        "kernel.block_q": "128",
        "kernel.block_kv": "128",
    }
    return ReportRun("id", "run", {**base, **params}, {}, {"schedule": "s", "resolution": "r"})


@pytest.mark.parametrize("svg", [None, "None", "0.3"])
def test_plan_choice_band_follows_the_schedule(svg):
    choice = plan_choice(_run(**({} if svg is None else {"schedule.svg_sparsity": svg})))
    if svg == "0.3":
        assert choice.band == band_for_svg_sparsity(choice.geometry, 0.3)
        assert "SVG sparsity 0.3" in choice.label
    else:
        assert choice.band == band_for_density(choice.geometry, 0.35)


def test_temporal_image_is_the_strided_temporal_mask():
    choice = plan_choice(_run())
    idx = _samples(choice.geometry.tokens)
    strided = StridedTemporalMask(choice.geometry, choice.band.half_width)
    expected = strided.allowed(idx[:, None], idx[None, :])
    np.testing.assert_array_equal(mask_images(choice)["temporal, frame-major"], expected)
