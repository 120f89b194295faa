"""The suite's bootstrap interval against an independent computation on the same draws."""

import numpy as np
import pytest

from evalharness.evidence.statistics import BOOTSTRAP_RESAMPLES, CONFIDENCE, summarize

# One pair far from the rest: an interval that never resampled it would sit far lower.
VALUES = [30.17, 31.52, 29.08, 33.41, 28.63, 32.29, 30.86, 29.77, 31.05, 60.0]


def _draws(size: int, seed: int) -> np.ndarray:
    """The resampling ``summarize`` documents: ``BOOTSTRAP_RESAMPLES`` rows of ``size`` pair
    indices drawn with replacement from NumPy's default generator seeded with ``seed``."""
    return np.random.default_rng(seed).integers(0, size, size=(BOOTSTRAP_RESAMPLES, size))


@pytest.mark.parametrize("seed", [0, 7])
def test_the_interval_is_the_percentile_interval_of_means_over_the_same_draws(seed):
    size = len(VALUES)
    draws = _draws(size, seed)
    assert set(np.unique(draws)) == set(range(size))  # every pair can be drawn
    # Each resample's mean in plain Python, then NumPy's percentiles without interpolation (the
    # interval's bounds are resampled means themselves, so that an infinite PSNR stays inf).
    means = [sum(VALUES[i] for i in row) / size for row in draws.tolist()]
    tail = 100 * (1 - CONFIDENCE) / 2
    low = float(np.percentile(means, tail, method="lower"))
    high = float(np.percentile(means, 100 - tail, method="higher"))
    s = summarize(VALUES, seed=seed)
    assert s.lcb == pytest.approx(low, rel=1e-12)
    assert s.ucb == pytest.approx(high, rel=1e-12)
    assert low < s.mean < high


def test_the_far_pair_moves_the_upper_bound():
    # Without the far pair in any resample the upper bound could not pass the others' maximum.
    s = summarize(VALUES)
    assert s.ucb > max(VALUES[:-1])
