"""The time estimate against the seed's measurements (its calibration bands): speedups within 15%,
per-call attention times within 20%. The rates are fitted at 720p only (its dense and aggressive
loops, the kernel table); 1080p and 1440p are out of sample."""

import pytest

from evalharness.bench.seed_calibration import predict
from evalharness.estimates import SEED_RESOLUTIONS, seed_row
from evalharness.estimates.seed_comparison import CALL_BAND, SPEEDUP_BAND
from evalharness.estimates.seed_measurements import (
    SEED_DENSE_LOOP_S,
    SEED_KERNEL_MS,
    SEED_SPARSE_LOOP_S,
    SEED_SPEEDUP,
)


@pytest.mark.parametrize("resolution", ["720p", "1080p", "1440p"])
def test_the_speedup_is_within_the_band_of_the_seeds(resolution):
    ours = predict(resolution)
    assert ours["speedup"] == pytest.approx(SEED_SPEEDUP[resolution], rel=SPEEDUP_BAND), ours
    # The loops themselves: the fitted resolution closely, the others within a fifth.
    band = 0.02 if resolution == "720p" else 0.20
    assert ours["dense_s"] == pytest.approx(SEED_DENSE_LOOP_S[resolution], rel=band)
    assert ours["sparse_s"] == pytest.approx(SEED_SPARSE_LOOP_S[resolution], rel=band)


def test_the_attention_calls_are_within_the_band_of_the_kernel_table():
    ours = predict("720p")
    assert ours["dense_call_ms"] == pytest.approx(SEED_KERNEL_MS["b0"], rel=CALL_BAND)
    assert ours["b3_call_ms"] == pytest.approx(SEED_KERNEL_MS["b3"], rel=CALL_BAND)
    # Attention grows as N^2, the rest as N: its share of a dense step grows with resolution.
    shares = [predict(r)["share"] for r in ("720p", "1080p", "1440p")]
    assert shares == sorted(shares) and 0.5 < shares[0] < shares[-1] < 1.0


def test_the_table_puts_each_seed_figure_beside_ours():
    table = [seed_row(res, predict(res)) for res in SEED_RESOLUTIONS]
    assert [row["res"] for row in table] == ["720p", "1080p", "1440p"]
    assert table[0]["dense_call_ms"].startswith("78.70 / ")
    assert table[2]["speedup"].startswith("1.69 / ")
