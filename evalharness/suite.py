"""Prompt suites and seeds: which (prompt, seed) pairs a run compares, and their statistics.

A run compares every pair of ``prompts`` (a built-in suite's name or a text file) × ``seeds``, or
the one pair ``(prompt, seed)`` when neither is set. Each pair's metrics are summarized across
pairs as mean, standard deviation, worst pair and a 95% bootstrap confidence interval of the mean
(percentile bootstrap), and the gate reads one of those statistics
(``gate.on``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# Varied on purpose: motion, a camera move, a static scene, rendered text, fine texture and a
# crowd: what makes spatial and temporal attention heads work differently.
BUILT_IN_SUITES: dict[str, tuple[str, ...]] = {
    "varied": (
        "A red fox trotting through fresh snow in a pine forest at sunrise",
        "A slow camera pan across a harbour at dusk, boats rocking, city lights coming on",
        "A still life of apples and a ceramic jug on a wooden table, soft window light",
        'A neon sign that reads "OPEN 24 HOURS" flickering above a rainy street at night',
        "Close-up of ocean waves breaking over dark volcanic rocks, spray in the wind",
        "A busy crosswalk seen from above, hundreds of people crossing in every direction",
    ),
    "smoke": (
        "A red fox trotting through fresh snow in a pine forest at sunrise",
        "A slow camera pan across a harbour at dusk, boats rocking, city lights coming on",
        'A neon sign that reads "OPEN 24 HOURS" flickering above a rainy street at night',
    ),
}

# Statistics of a metric across pairs, in metric-name suffix order; ``gate.on`` names one.
STATISTICS = ("mean", "std", "worst", "lcb", "ucb")
# Metrics summarized across pairs; larger is better for each, so "worst" is the minimum.
SUMMARIZED = ("psnr_db", "psnr_worst_frame_db", "ssim_frames", "speedup")
CONFIDENCE = 0.95
BOOTSTRAP_RESAMPLES = 2000


@dataclass(frozen=True)
class Pair:
    """One (prompt, seed) pair of a run.

    Attributes:
        index: position in the run, from 0.
        prompt: the prompt.
        prompt_index: the prompt's position in the suite (pairs sharing it share embeddings).
        seed: the noise seed.
    """

    index: int
    prompt: str
    prompt_index: int
    seed: int

    @property
    def name(self) -> str:
        """A folder- and run-name-safe label, e.g. ``p1-s42``."""
        return f"p{self.prompt_index}-s{self.seed}"


def load_prompts(spec: str) -> list[str]:
    """The prompts of a built-in suite (by name) or of a text file (one prompt per line; blank
    lines and lines starting with ``#`` are skipped).

    Raises:
        ValueError: neither a built-in suite nor an existing file, or a file without prompts.
    """
    if spec in BUILT_IN_SUITES:
        return list(BUILT_IN_SUITES[spec])
    path = Path(spec).expanduser()
    if not path.is_file():
        raise ValueError(
            f"prompts={spec!r} is neither a built-in suite ({', '.join(sorted(BUILT_IN_SUITES))}) "
            "nor an existing file; give a suite name or the path of a text file with one prompt "
            "per line"
        )
    lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
    prompts = [line for line in lines if line and not line.startswith("#")]
    if not prompts:
        raise ValueError(f"prompts={spec!r}: the file holds no prompt (one per line, # comments)")
    return prompts


def run_pairs(
    prompt: str, seed: int, prompts: str | None = None, seeds: Sequence[int] | None = None
) -> list[Pair]:
    """Every (prompt, seed) pair of a run, prompt-major.

    Args:
        prompt: the single prompt, used when ``prompts`` is None.
        seed: the single seed, used when ``seeds`` is None.
        prompts: a built-in suite's name or a prompt file (see :func:`load_prompts`).
        seeds: noise seeds (distinct ints).

    Raises:
        ValueError: an unknown suite or missing file, an empty or repeated seed list, a non-int
            seed, or repeated prompts.
    """
    texts = [prompt] if prompts is None else load_prompts(prompts)
    repeated = sorted({p for p in texts if texts.count(p) > 1})
    if repeated:
        raise ValueError(f"prompts={prompts!r} repeats {repeated}: each prompt once")
    seed_list = [seed] if seeds is None else list(seeds)
    if not seed_list:
        raise ValueError("seeds=[]: give at least one seed, e.g. seeds=[0,1], or leave it unset")
    for value in seed_list:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"seeds={list(seeds)}: {value!r} is not an int")
    if len(set(seed_list)) != len(seed_list):
        raise ValueError(f"seeds={seed_list} repeats a seed: a repeated pair adds no information")
    pairs = []
    for prompt_index, text in enumerate(texts):
        for value in seed_list:
            pairs.append(Pair(len(pairs), text, prompt_index, int(value)))
    return pairs


@dataclass(frozen=True)
class Summary:
    """A metric across pairs.

    Attributes:
        values: one value per pair, in pair order.
        mean: their mean.
        std: sample standard deviation (0 for one pair).
        worst: the smallest value (every summarized metric is larger-is-better).
        lcb: lower bound of the 95% bootstrap confidence interval of the mean (the mean for one
            pair or identical values: no spread to resample).
        ucb: its upper bound.
    """

    values: tuple[float, ...]
    mean: float
    std: float
    worst: float
    lcb: float
    ucb: float

    def metrics(self, name: str) -> dict[str, float]:
        """``<name>_<statistic>`` for every statistic of :data:`STATISTICS`."""
        return {f"{name}_{stat}": getattr(self, stat) for stat in STATISTICS}


def summarize(values: Sequence[float], *, seed: int = 0) -> Summary:
    """Mean, standard deviation, worst and the 95% bootstrap interval of the mean.

    Infinite values (identical frames give an infinite PSNR) are kept: the mean and the bounds
    become infinite where they dominate, the standard deviation NaN.

    Args:
        values: one finite-or-infinite float per pair (at least one).
        seed: seed of the bootstrap's resampling, so a report can be reproduced.

    Raises:
        ValueError: no values, or a NaN among them (a metric that was not measured).
    """
    data = np.asarray(values, dtype=np.float64)
    if data.size == 0:
        raise ValueError("nothing to summarize: no pair was measured")
    if np.isnan(data).any():
        raise ValueError(f"a pair's value is NaN in {data.tolist()}: it was not measured")
    mean = float(np.mean(data))
    worst = float(np.min(data))
    if data.size == 1:
        return Summary((float(data[0]),), mean, 0.0, worst, mean, mean)
    with np.errstate(invalid="ignore"):
        std = float(np.std(data, ddof=1))
    lcb, ucb = _bootstrap_interval(data, seed)
    return Summary(tuple(data.tolist()), mean, std, worst, lcb, ucb)


def _bootstrap_interval(data: np.ndarray, seed: int) -> tuple[float, float]:
    """The percentile bootstrap interval of the mean.

    Resampled means are ranked and the bounds taken at the ranks of the 2.5th and 97.5th
    percentiles without interpolating, so an infinite value (identical frames) gives infinite
    resampled means where it is drawn instead of NaN.
    """
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
            out.update(summarize([float(m[name]) for m in per_pair]).metrics(name))
    return out


def statistic_name(metric: str, on: str) -> str:
    """The summarized metric the gate reads for ``metric`` under ``gate.on=on``."""
    if on not in ("mean", "lcb", "worst"):
        raise ValueError(f"gate.on={on!r}: use mean, lcb or worst")
    return f"{metric}_{on}"
