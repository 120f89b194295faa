"""Sparsity schedules: when attention stays dense and how sparse it is otherwise (SVG's knobs).

A schedule keeps attention dense for the first ``floor(first_times_fp * steps)`` denoising steps
(the layout of the video is decided early and is fragile) and for the first
``floor(first_layers_fp * layers)`` transformer blocks; everywhere else each head attends through a
band-plus-sink mask keeping ``density`` of the query-key pairs, executed by ``variant``. A schedule
can instead name its band as Sparse VideoGen does (``svg_sparsity``: the band's kept fraction without
the sink, its width rounded up to 128 tokens); ``band`` is the one place that turns either into the
mask.

A schedule's ``method`` can instead name a static mask (``kernels.policy.static_methods``: Sliding
Tile Attention ``sta``, Radial Attention ``radial``): one fixed mask for every head, no routing,
with the same dense steps and layers and the same executors.

``SparsitySchedule`` is also the schema of the harness's ``conf/schedule/*.yaml`` files (the
harness registers it as a structured config), so its fields and defaults are documented once, here.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import warnings
from collections.abc import Mapping
from typing import Any

from kernels.masks.band import BandMask, band_for_density, band_for_svg_sparsity, svg_half_width
from kernels.masks.geometry import TokenGeometry
from kernels.masks.protocols import Mask
from kernels.masks.sta import STA_WAN_TILE, TileOrder
from kernels.plans.block_sizes import BlockSizes
from kernels.plans.tiles import TilePlan, build_plan
from kernels.policy.static_methods import METHODS, static_layout, static_mask
from kernels.registry import executor_names

# Executor variant of the sparse masks (b0, the dense tiled loop, is not one of them), from the
# registry. Members are the strings the executors take (``SparseVariant.b3 == "b3"``); their names
# equal their values so a config file or command line can name them.
SparseVariant = enum.StrEnum(
    "SparseVariant",
    [(name, name) for name in executor_names(tiled=True, dense=False)],
    module=__name__,
)


SPARSE_VARIANTS = tuple(v.value for v in SparseVariant)

# floor(0.29 * 100) would be 28 in binary floating point; a tolerance far below one step/layer keeps
# the documented floor(fraction * count) exact for fractions written with a few decimals.
_FLOOR_EPS = 1e-9


def _floor_count(fraction: float, count: int) -> int:
    return min(count, math.floor(fraction * count + _FLOOR_EPS))


def _check_count(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}={value!r}: expected a positive int")
    return value


@dataclasses.dataclass(frozen=True)
class SparsitySchedule:
    """One sparsity schedule.

    Attributes:
        name: schedule name, for reports.
        first_times_fp: the fraction of the denoising steps, counted from the first, whose
            attention stays fully dense (Sparse VideoGen's name for the knob, kept so its
            settings read the same here; SVG2 counts it in steps as we do): dense while
            ``step < floor(first_times_fp * steps)``; in [0, 1].
        first_layers_fp: the fraction of the transformer blocks, counted from the first, whose
            attention stays fully dense (Sparse VideoGen's name): dense while
            ``layer < floor(first_layers_fp * layers)``; in [0, 1].
        density: kept fraction of query-key pairs of the sparse masks (sink counted); in (0, 1].
            Not used when ``svg_sparsity`` is set.
        variant: sparse executor variant (tile-aligned b3 by default); a plain string such as
            ``"b2"`` is accepted and stored as its ``SparseVariant``.
        routing_samples: query rows sampled per (step, layer) to route heads; >= 1.
        sparse: False for the dense control (every step and layer dense, the others ignored).
        svg_sparsity: Sparse VideoGen's ``sparsity`` in (0, 1), or None: when set it decides the
            band instead of ``density`` (half-width ``N (1 - sqrt(1 - s))`` rounded up to 128
            tokens, ``kernels.masks.band.svg_half_width``), so SVG's published numbers can be typed
            as they are; the exact kept fraction it gives is ``target_density(geometry)``.
        method: ``svg`` (the routed band), or a static mask: ``sta`` or ``radial``
            (``kernels.policy.static_methods``).
        sta_window: STA's window in tiles (frames, rows, columns), e.g. (3, 3, 3); None: the
            window whose kept fraction is closest to ``density``.
        sta_tile: STA's tile in tokens (frames, rows, columns); FastVideo's Wan tile by default.
        radial_decay_factor: Radial's ``decay_factor`` (its Wan script: 0.2); None: the factor
            whose kept fraction is closest to ``density``.
    """

    name: str
    first_times_fp: float = 1.0
    first_layers_fp: float = 0.0
    density: float = 1.0
    variant: SparseVariant = SparseVariant.b3
    routing_samples: int = 64
    sparse: bool = True
    svg_sparsity: float | None = None
    method: str = "svg"
    sta_window: tuple[int, int, int] | None = None
    sta_tile: tuple[int, int, int] = STA_WAN_TILE
    radial_decay_factor: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"name={self.name!r}: expected a non-empty string")
        if not isinstance(self.sparse, bool):
            raise ValueError(f"sparse={self.sparse!r}: expected True or False")
        for field in ("first_times_fp", "first_layers_fp"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"{field}={value!r}: expected a fraction in [0, 1], e.g. 0.2")
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{field}={value}: expected a fraction in [0, 1], e.g. 0.2")
        if isinstance(self.density, bool) or not isinstance(self.density, int | float):
            raise ValueError(f"density={self.density!r}: expected a kept fraction in (0, 1]")
        if not 0.0 < self.density <= 1.0:
            raise ValueError(
                f"density={self.density}: expected a kept fraction in (0, 1], e.g. 0.35"
            )
        if self.variant not in SPARSE_VARIANTS:
            raise ValueError(f"variant={self.variant!r}: use one of {SPARSE_VARIANTS}")
        object.__setattr__(self, "variant", SparseVariant(self.variant))
        _check_count("routing_samples", self.routing_samples)
        if self.svg_sparsity is not None:
            svg_half_width(1, self.svg_sparsity)  # validates the value alone
            object.__setattr__(self, "svg_sparsity", float(self.svg_sparsity))
        self._check_method()
        if self.sparse and (self.first_times_fp >= 1.0 or self.first_layers_fp >= 1.0):
            field = "first_times_fp" if self.first_times_fp >= 1.0 else "first_layers_fp"
            warnings.warn(
                f"schedule {self.name!r}: {field}=1 keeps every step dense, so the sparse part "
                "never runs and the run is dense",
                UserWarning,
                stacklevel=3,
            )

    def _check_method(self) -> None:
        """Validates ``method`` and its parameters; stores the triples as tuples."""
        if self.method not in METHODS:
            raise ValueError(f"method={self.method!r}: use one of {METHODS}")
        object.__setattr__(self, "method", str(self.method))
        for field in ("sta_window", "sta_tile"):
            value = getattr(self, field)
            if value is not None:
                triple = tuple(value) if isinstance(value, list | tuple) else ()
                if len(triple) != 3 or any(
                    isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in triple
                ):
                    raise ValueError(
                        f"{field}={value!r}: expected three positive ints (frames, rows, "
                        "columns), e.g. [3, 3, 3]"
                    )
                object.__setattr__(self, field, triple)
        decay = self.radial_decay_factor
        if decay is not None:
            if isinstance(decay, bool) or not isinstance(decay, int | float) or not decay > 0:
                raise ValueError(f"radial_decay_factor={decay!r}: expected a number > 0, e.g. 0.2")
            object.__setattr__(self, "radial_decay_factor", float(decay))

    @property
    def routes(self) -> bool:
        """Whether sparse cells route heads between layouts (``svg``); static masks do not."""
        return self.method == "svg"

    def mask(self, geometry: TokenGeometry) -> Mask:
        """The mask a sparse (step, layer) applies: ``band`` for ``svg``, else the static mask
        in its own layout (``layout``)."""
        if self.routes:
            return self.band(geometry)
        return static_mask(
            self.method,
            geometry,
            float(self.density),
            sta_window=self.sta_window,
            sta_tile=self.sta_tile,
            radial_decay_factor=self.radial_decay_factor,
        )

    def layout(self, geometry: TokenGeometry) -> TileOrder | None:
        """A static mask's token layout (STA's tile order), or None: frame-major (or routed)."""
        return None if self.routes else static_layout(self.mask(geometry))

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any] | Any) -> SparsitySchedule:
        """Builds a schedule from a mapping or an object with the same attributes.

        Reads the plain dict of a ``conf/schedule`` file without Hydra; keys other than the
        dataclass fields (e.g. Hydra's ``defaults``) are ignored. Unlike the structured config,
        it requires the knobs below: a schedule file states them rather than relying on
        defaults.

        Args:
            values: mapping or attribute object with at least ``name``, ``first_times_fp``,
                ``first_layers_fp`` and ``density`` (or ``svg_sparsity``).

        Returns:
            The validated schedule.
        """
        names = [f.name for f in dataclasses.fields(cls)]
        if isinstance(values, Mapping):
            given = {n: values[n] for n in names if n in values}
        else:
            given = {n: getattr(values, n) for n in names if hasattr(values, n)}
        missing = [n for n in ("name", "first_times_fp", "first_layers_fp") if n not in given]
        own = {"svg": "svg_sparsity", "sta": "sta_window", "radial": "radial_decay_factor"}
        if "density" not in given and given.get(own.get(given.get("method", "svg"), "")) is None:
            missing.append("density (or the method's own knob: svg_sparsity, sta_window, ...)")
        if missing:
            raise ValueError(f"schedule is missing {missing}; expected fields {names}")
        for n in ("first_times_fp", "first_layers_fp", "density"):
            if n in given and isinstance(given[n], int) and not isinstance(given[n], bool):
                given[n] = float(given[n])
        return cls(**given)

    def band(self, geometry: TokenGeometry) -> BandMask:
        """The band-plus-sink mask a sparse (step, layer) applies in each head's own layout.

        Args:
            geometry: token geometry of the run.

        Returns:
            SVG's band for ``svg_sparsity`` when it is set, else the band whose exact kept
            fraction is closest to ``density``.
        """
        if self.svg_sparsity is not None:
            return band_for_svg_sparsity(geometry, self.svg_sparsity)
        return band_for_density(geometry, self.density)

    def tile_plan(
        self,
        geometry: TokenGeometry,
        block_sizes: BlockSizes,
        rounding_tolerance: float | None = None,
    ) -> TilePlan | None:
        """The sparse cells' tile plan: ``mask(geometry)`` on ``block_sizes`` for ``variant``,
        after ``validate``; None for a dense schedule.

        Args:
            geometry: token geometry of the run.
            block_sizes: the run's tiles.
            rounding_tolerance: b3's rounding tolerance (``kernels.plans.rounding``).
        """
        if not self.sparse:
            return None
        self.validate(geometry, block_sizes)
        return build_plan(self.mask(geometry), block_sizes, self.variant, rounding_tolerance)

    def target_density(self, geometry: TokenGeometry) -> float:
        """Exact kept fraction of ``band(geometry)`` before any tile rounding: ``density`` itself
        when ``svg_sparsity`` is not set (the nominal value a preflight plans with); a static
        mask's exact kept fraction."""
        if not self.routes:
            return float(self.mask(geometry).density)
        if self.svg_sparsity is None:
            return float(self.density)
        return float(self.band(geometry).density)

    def dense_steps(self, steps: int) -> int:
        """Leading dense steps: ``floor(first_times_fp * steps)`` (all of them if not sparse)."""
        _check_count("steps", steps)
        return steps if not self.sparse else _floor_count(self.first_times_fp, steps)

    def dense_layers(self, layers: int) -> int:
        """Leading dense layers: ``floor(first_layers_fp * layers)`` (all if not sparse)."""
        _check_count("layers", layers)
        return layers if not self.sparse else _floor_count(self.first_layers_fp, layers)

    def is_dense(self, step: int, layer: int, *, steps: int, layers: int) -> bool:
        """Whether (step, layer) runs dense attention.

        Args:
            step: denoising step index in [0, steps).
            layer: block index in [0, layers).
            steps: denoising steps of the run.
            layers: transformer blocks.

        Returns:
            True while ``step < floor(first_times_fp * steps)`` or
            ``layer < floor(first_layers_fp * layers)``, and always for a non-sparse schedule.
        """
        if not 0 <= step < steps:
            raise ValueError(f"step={step}: expected an index in [0, {steps})")
        if not 0 <= layer < layers:
            raise ValueError(f"layer={layer}: expected an index in [0, {layers})")
        return step < self.dense_steps(steps) or layer < self.dense_layers(layers)

    def runs_sparse(self, steps: int, layers: int) -> bool:
        """Whether at least one (step, layer) of a run is sparse."""
        return self.dense_steps(steps) < steps and self.dense_layers(layers) < layers

    def warn_if_dense(self, steps: int, layers: int) -> None:
        """Warns (does not fail) when a sparse schedule never runs sparse for this run's size."""
        if self.sparse and not self.runs_sparse(steps, layers):
            warnings.warn(
                f"schedule {self.name!r}: with {steps} steps and {layers} layers "
                f"(first_times_fp={self.first_times_fp}, first_layers_fp={self.first_layers_fp}) "
                "no step is sparse, so the run is dense",
                UserWarning,
                stacklevel=3,
            )

    def validate(self, geometry: TokenGeometry, block_sizes: BlockSizes) -> None:
        """Checks the schedule against one video geometry and tile size.

        Args:
            geometry: token geometry of the run.
            block_sizes: tiles of the sparse executor.

        Raises:
            ValueError: when ``routing_samples`` exceeds the tokens, or the band ``band`` gives
                is narrower than one tile (its full width 2w + 1 is below
                ``min(block_q, block_kv)``, so tile skipping cannot follow it).
        """
        if self.routing_samples > geometry.tokens:
            raise ValueError(
                f"routing_samples={self.routing_samples} exceeds the {geometry.tokens} tokens of "
                f"{geometry}; use at most {geometry.tokens}"
            )
        if not self.sparse or not self.routes:
            return
        band = self.band(geometry)
        width = 2 * band.half_width + 1
        tile = min(block_sizes.block_q, block_sizes.block_kv)
        if width < tile:
            knob = (
                f"density={self.density}"
                if self.svg_sparsity is None
                else f"svg_sparsity={self.svg_sparsity}"
            )
            raise ValueError(
                f"{knob}: at {geometry.tokens} tokens its band is {width} tokens "
                f"wide, narrower than one {tile}-token tile of {block_sizes}; raise it or "
                f"use tiles of at most {width} tokens"
            )

    def sparse_density(self, geometry: TokenGeometry, block_sizes: BlockSizes) -> float:
        """Exact kept fraction of the masks a sparse (step, layer) executes.

        The spatial and the temporal mask are the same band in different layouts, so they keep the
        same pairs count. For ``b3`` it is the density after tile rounding.

        Args:
            geometry: token geometry of the run.
            block_sizes: tiles of the sparse executor.

        Returns:
            Kept fraction in (0, 1].
        """
        band = self.mask(geometry)
        if self.variant != "b3":
            return float(band.density)
        from kernels.plans.tiles import build_plan  # plan building is cached per (mask, tiles)

        return float(build_plan(band, block_sizes, "b3", None).density)

    def overall_kept_fraction(
        self, steps: int, layers: int, geometry: TokenGeometry, block_sizes: BlockSizes
    ) -> float:
        """Kept fraction of all attention pairs over a whole run, dense cells counted as 1.0.

        Every (step, layer) computes the same N^2 pairs when dense, so the overall fraction is the
        mean over the steps x layers grid of 1.0 (dense) and ``sparse_density`` (sparse).

        Args:
            steps: denoising steps.
            layers: transformer blocks.
            geometry: token geometry.
            block_sizes: tiles of the sparse executor (matter for b3).

        Returns:
            Kept fraction in (0, 1].
        """
        if not self.runs_sparse(steps, layers):
            return 1.0
        return self.kept_fraction_at(steps, layers, self.sparse_density(geometry, block_sizes))

    def kept_fraction_at(self, steps: int, layers: int, density: float) -> float:
        """Run-wide kept fraction if every sparse cell keeps ``density`` (dense cells count 1.0).

        ``overall_kept_fraction`` passes the executed masks' exact density; a caller without a
        mask at hand (e.g. a preflight estimate) can pass the schedule's nominal ``density``.

        Args:
            steps: denoising steps.
            layers: transformer blocks.
            density: kept fraction of a sparse cell, in (0, 1].

        Returns:
            Kept fraction in (0, 1].
        """
        sparse_cells = (steps - self.dense_steps(steps)) * (layers - self.dense_layers(layers))
        total = steps * layers
        return ((total - sparse_cells) + sparse_cells * density) / total
