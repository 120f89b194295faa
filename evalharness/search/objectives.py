"""What a trial's metrics mean to the study, read exactly as the gate reads them
(``evalharness.gate``): two objectives to maximize, the headline ``speedup`` and the PSNR at the
search's statistic (``psnr_db_mean``, ``psnr_db_lcb`` or ``psnr_db_worst``), and one constraint
per gate threshold in Optuna's convention (``threshold - value``, feasible when ``<= 0``; for
``gate.max_lpips``, an upper bound, ``value - threshold`` on ``lpips`` at the statistic).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from evalharness.config import GateConfig
from evalharness.evidence import LOWER_IS_BETTER, statistic_name
from evalharness.metric_names import Metric

# A constraint that could not be read (a missing or NaN metric): far beyond any real violation,
# finite so that every storage keeps it.
UNMET = 1e6


@dataclass(frozen=True)
class Reading:
    """One gate threshold against a trial's metric.

    Attributes:
        metric: the metric read, e.g. ``psnr_db_lcb``.
        threshold: the gate's threshold.
        value: the trial's value (NaN when missing).
        upper: the threshold is an upper bound (LPIPS), not a lower one.
    """

    metric: str
    threshold: float
    value: float
    upper: bool = False

    @property
    def constraint(self) -> float:
        """Optuna's constraint value: ``<= 0`` when the threshold is met."""
        if math.isnan(self.value):
            return UNMET
        if math.isinf(self.value):
            return -UNMET if (self.value > 0) != self.upper else UNMET
        return self.value - self.threshold if self.upper else self.threshold - self.value

    @property
    def met(self) -> bool:
        """Whether the value meets the threshold."""
        return self.constraint <= 0


def thresholds(gate: GateConfig) -> dict[str, float]:
    """The gate's thresholds that are set, by metric name before the statistic (``min_psnr_db``
    on the PSNR ``gate.psnr`` names: ``psnr_db``, or ``psnr_frames_db`` for ``frames``)."""
    psnr = Metric.PSNR_FRAMES_DB if gate.psnr == "frames" else Metric.PSNR_DB
    pairs = {
        psnr: gate.min_psnr_db,
        Metric.PSNR_WORST_FRAME_DB: gate.min_worst_frame_psnr_db,
        Metric.LPIPS: gate.max_lpips,
        Metric.SPEEDUP: gate.min_speedup,
    }
    return {name: float(value) for name, value in pairs.items() if value is not None}


def read_metric(metrics: Mapping[str, Any], metric: str, statistic: str) -> tuple[str, float]:
    """A metric at a statistic, named as the gate names it (``<metric>_<statistic>``; for
    ``mean`` a run without it is read at ``<metric>``); NaN when it is missing.

    Returns:
        (the name read, its value).
    """
    name = statistic_name(metric, statistic)
    if name not in metrics and statistic == "mean":
        name = metric
    value = metrics.get(name)
    try:
        return name, float("nan") if value is None else float(value)
    except (TypeError, ValueError):
        return name, float("nan")


def readings(
    metrics: Mapping[str, Any], limits: Mapping[str, float], statistic: str
) -> list[Reading]:
    """Every set threshold against the trial's metric at ``statistic``."""
    out = []
    for metric, threshold in limits.items():
        name, value = read_metric(metrics, metric, statistic)
        out.append(Reading(name, threshold, value, upper=metric in LOWER_IS_BETTER))
    return out


def objective_values(metrics: Mapping[str, Any], statistic: str) -> tuple[float, float]:
    """(speedup, PSNR at ``statistic``): both to maximize.

    Raises:
        ValueError: the trial measured neither (it cannot be placed on the front).
    """
    speedup = read_metric(metrics, Metric.SPEEDUP, "mean")[1]
    psnr_name, psnr = read_metric(metrics, Metric.PSNR_DB, statistic)
    if math.isnan(speedup) or math.isnan(psnr):
        raise ValueError(
            f"the trial's metrics lack speedup or {psnr_name} (speedup={speedup}, "
            f"{psnr_name}={psnr}): it cannot be placed on the front"
        )
    return speedup, psnr
