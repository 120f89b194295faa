"""The names of a run's headline metrics, as ``metrics.json``, MLflow, the gate, the search and the
reports spell them: one definition each, and the typed result that carries them between rooms.

``Metric`` members are strings (``Metric.SPEEDUP == "speedup"``), so they index the metrics
mappings and name MLflow metrics as they are; :class:`RunMetrics`' fields are the same names.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType


class Metric(enum.StrEnum):
    """A headline metric of a run.

    Members:
        SPEEDUP: the fastest dense control's median loop time over the sparse arm's.
        PSNR_DB: sparse vs dense PSNR on raw frames, from the mean squared error over the video.
        PSNR_WORST_FRAME_DB: the lowest per-frame PSNR.
        SSIM_FRAMES: mean per-frame SSIM.
        LPIPS: mean per-frame AlexNet LPIPS of sparse vs dense (frames in [-1, 1]); lower is
            better.
        PSNR_FRAMES_DB: the mean of per-frame PSNRs (Sparse VideoGen's convention).
        NOISE_FLOOR_LPIPS: LPIPS between the two dense controls.
        NOISE_FLOOR_PSNR_DB: PSNR between the two dense controls (the measured noise floor).
        GAP_TO_NOISE_FLOOR_DB: noise floor minus ``PSNR_DB``.
        DENSE_TIMING_REUSED: 1 when the dense timing came from another run of a sweep (then no
            speedup is gated).
        PSNR_VIDEO_DB: the name ``PSNR_DB`` had in older runs (the same figure); read, never
            written.
    """

    SPEEDUP = "speedup"
    PSNR_DB = "psnr_db"
    PSNR_WORST_FRAME_DB = "psnr_worst_frame_db"
    SSIM_FRAMES = "ssim_frames"
    LPIPS = "lpips"
    PSNR_FRAMES_DB = "psnr_frames_db"
    NOISE_FLOOR_LPIPS = "noise_floor_lpips"
    NOISE_FLOOR_PSNR_DB = "noise_floor_psnr_db"
    GAP_TO_NOISE_FLOOR_DB = "gap_to_noise_floor_db"
    DENSE_TIMING_REUSED = "dense_timing_reused"
    PSNR_VIDEO_DB = "psnr_video_db"


MetricValue = float | int | str | None

# A run on random weights (``model.checkpoint=random``) says so under this key in
# ``metrics.json`` and as this MLflow tag, and its quality figures carry the note beside it.
WEIGHTS = "weights"
RANDOM_WEIGHTS = "random"
QUALITY_NOTE = "quality"
QUALITY_MEANINGLESS = (
    "meaningless on random weights (model.checkpoint=random): the speed figures are real, "
    "PSNR, SSIM, LPIPS and the noise floor compare noise videos"
)

# Programs the run took from JAX's persistent compilation cache, and programs it compiled
# (``evalharness.compile_cache``; with ``compile_cache=false`` every program is a miss).
COMPILE_CACHE_HITS = "compile_cache_hits"
COMPILE_CACHE_MISSES = "compile_cache_misses"


@dataclass(frozen=True, eq=False)
class RunMetrics(Mapping[str, MetricValue]):
    """What a run (or one pair of a suite) measured: the headline metrics as fields named as
    ``metrics.json``, MLflow, the gate, the search and the reports name them, and every other
    figure the run measured or describes itself by (timings of each arm, geometry, executors,
    statistics across pairs, the FLOP count) in ``others``.

    Frozen: a stage that adds figures makes a new value (:meth:`with_values`). As a read-only
    mapping it reads every metric by name (``metrics["psnr_db"] == metrics.psnr_db``), which is
    how the gate reads a statistic (``psnr_db_lcb``) and how files and MLflow are written; a
    headline field that is None was not measured and is not among its keys. Each headline field
    is described by the :class:`Metric` member of its name (``noise_floor_psnr_db`` is None
    without a noise floor).
    """

    speedup: float | None = None
    psnr_db: float | None = None
    psnr_worst_frame_db: float | None = None
    ssim_frames: float | None = None
    lpips: float | None = None
    psnr_frames_db: float | None = None
    noise_floor_psnr_db: float | None = None
    noise_floor_lpips: float | None = None
    gap_to_noise_floor_db: float | None = None
    dense_timing_reused: int | None = None
    others: Mapping[str, MetricValue] = field(default_factory=lambda: MappingProxyType({}))

    @classmethod
    def of(cls, values: Mapping[str, MetricValue]) -> RunMetrics:
        """The metrics named in ``values`` (a headline metric by its field, the rest as
        others)."""
        headline = {k: v for k, v in values.items() if k in _HEADLINE}
        others = {k: v for k, v in values.items() if k not in _HEADLINE}
        return cls(**headline, others=MappingProxyType(others))

    def with_values(
        self, values: Mapping[str, MetricValue] = MappingProxyType({}), **named
    ) -> RunMetrics:
        """These metrics with ``values`` and ``named`` added (a name already here is replaced)."""
        return RunMetrics.of({**self, **values, **named})

    def numeric(self) -> dict[str, float]:
        """The metrics that are numbers (booleans as 0 and 1): what MLflow logs."""
        return {k: v for k, v in self.items() if isinstance(v, int | float)}

    def __getitem__(self, name: str) -> MetricValue:
        if name in _HEADLINE:
            value = getattr(self, name)
            if value is None:
                raise KeyError(name)
            return value
        return self.others[name]

    def __iter__(self) -> Iterator[str]:
        yield from (name for name in _HEADLINE if getattr(self, name) is not None)
        yield from self.others

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __repr__(self) -> str:
        return f"RunMetrics({dict(self)!r})"


_HEADLINE = tuple(f.name for f in fields(RunMetrics) if f.name != "others")


# The command that measures the sparse arm at a real Wan shape, with no checkpoint to download.
REAL_SHAPES_COMMAND = (
    "python -m evalharness model=wan2.1-t2v-1.3b model.checkpoint=random resolution=720p steps=4"
)


def slower_note(metrics: Mapping[str, MetricValue]) -> str | None:
    """The plain words for a run whose sparse arm was slower than its dense control (None when
    it was not, or no speedup was measured), naming the command that measures at real shapes."""
    speedup = metrics.get("speedup")
    if not isinstance(speedup, int | float) or not speedup < 1.0:
        return None
    control = metrics.get("negative_control")
    if control not in (None, "none"):
        return (
            f"the sparse arm was slower than dense here ({speedup:.3g}x): it is the negative "
            f"control {control}, broken on purpose (negative_control={control})"
        )
    return (
        f"the sparse arm was slower than dense here ({speedup:.3g}x): at {metrics.get('tokens')} "
        "tokens its fixed costs (routing, the layout changes, a second kernel) outweigh the "
        "attention it skips; this says nothing of real videos. Measure at a real shape: "
        f"{REAL_SHAPES_COMMAND}"
    )


def on_random_weights(metrics: Mapping[str, MetricValue]) -> bool:
    """Whether ``metrics`` are a run's on random weights, whose quality figures mean nothing."""
    return metrics.get(WEIGHTS) == RANDOM_WEIGHTS
