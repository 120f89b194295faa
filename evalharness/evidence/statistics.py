"""A metric across a run's (prompt, seed) pairs: mean, standard deviation, worst pair and a 95%
percentile-bootstrap interval of the mean; the gate reads one of them (``gate.on``).

Every summarized metric is larger-is-better except LPIPS (a distance): its worst pair is the
largest, and the pessimistic end of its interval, which ``gate.on=lcb`` reads, is ``lpips_ucb``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from evalharness.metric_names import Metric

# Statistics of a metric across pairs, in metric-name suffix order; ``gate.on`` names one.
STATISTICS = ("mean", "std", "worst", "lcb", "ucb")
# Metrics summarized across pairs; larger is better for each but those of LOWER_IS_BETTER.
SUMMARIZED = (
    Metric.PSNR_DB,
    Metric.PSNR_WORST_FRAME_DB,
    Metric.PSNR_FRAMES_DB,
    Metric.SSIM_FRAMES,
    Metric.LPIPS,
    Metric.SPEEDUP,
)
LOWER_IS_BETTER = (Metric.LPIPS,)
CONFIDENCE = 0.95
BOOTSTRAP_RESAMPLES = 2000


@dataclass(frozen=True)
class Summary:
    """A metric across pairs: its ``values`` in pair order, their ``mean``, sample ``std`` (0 for
    one pair), ``worst`` (the smallest, or the largest for a lower-is-better metric), and the 95%
    bootstrap interval of the mean from ``lcb`` to ``ucb`` (the mean for one pair)."""

    values: tuple[float, ...]
    mean: float
    std: float
    worst: float
    lcb: float
    ucb: float

    def metrics(self, name: str) -> dict[str, float]:
        """``<name>_<statistic>`` for every statistic of :data:`STATISTICS`."""
        return {f"{name}_{stat}": getattr(self, stat) for stat in STATISTICS}


def summarize(values: Sequence[float], *, seed: int = 0, lower_is_better: bool = False) -> Summary:
    """The :class:`Summary` of ``values``, one finite-or-infinite float per pair; infinite
    values (identical frames) make the mean and bounds infinite where they dominate, the
    standard deviation NaN.

    Args:
        values: one float per pair (at least one).
        seed: seed of the bootstrap's resampling, so a report can be reproduced.
        lower_is_better: the worst value is the largest (a distance such as LPIPS).

    Raises:
        ValueError: no values, or a NaN among them (a metric that was not measured).
    """
    data = np.asarray(values, dtype=np.float64)
    if data.size == 0:
        raise ValueError("nothing to summarize: no pair was measured")
    if np.isnan(data).any():
        raise ValueError(f"a pair's value is NaN in {data.tolist()}: it was not measured")
    mean = float(np.mean(data))
    worst = float(np.max(data) if lower_is_better else np.min(data))
    if data.size == 1:
        return Summary((float(data[0]),), mean, 0.0, worst, mean, mean)
    with np.errstate(invalid="ignore"):
        std = float(np.std(data, ddof=1))
    lcb, ucb = _bootstrap_interval(data, seed)
    return Summary(tuple(data.tolist()), mean, std, worst, lcb, ucb)


def _bootstrap_interval(data: np.ndarray, seed: int) -> tuple[float, float]:
    """The percentile bootstrap interval of the mean: the ranked resampled means at the 2.5th and
    97.5th percentiles, not interpolated (an infinite value then gives inf, not NaN)."""
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, data.size, size=(BOOTSTRAP_RESAMPLES, data.size))
    means = np.sort(np.mean(data[draws], axis=1))
    tail = (1.0 - CONFIDENCE) / 2.0
    low = means[int(np.floor(tail * (BOOTSTRAP_RESAMPLES - 1)))]
    high = means[int(np.ceil((1.0 - tail) * (BOOTSTRAP_RESAMPLES - 1)))]
    return float(low), float(high)


def suite_metrics(per_pair: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """The summarized metrics of a run's pairs: ``<metric>_<statistic>`` for each metric of
    :data:`SUMMARIZED` every pair measured, plus ``pairs``.

    Raises:
        ValueError: no pairs.
    """
    if not per_pair:
        raise ValueError("no pair was measured")
    out: dict[str, float] = {"pairs": len(per_pair)}
    for name in SUMMARIZED:
        if all(name in m for m in per_pair):
            values = [float(m[name]) for m in per_pair]
            lower = name in LOWER_IS_BETTER
            out.update(summarize(values, lower_is_better=lower).metrics(name))
    return out


def statistic_name(metric: str, on: str) -> str:
    """The summarized metric the gate reads for ``metric`` under ``gate.on=on``: for ``lcb``, the
    pessimistic end of the interval (``<metric>_ucb`` for a lower-is-better metric)."""
    if on not in ("mean", "lcb", "worst"):
        raise ValueError(f"gate.on={on!r}: use mean, lcb or worst")
    if on == "lcb" and metric in LOWER_IS_BETTER:
        return f"{metric}_ucb"
    return f"{metric}_{on}"
