"""Temporal heads: permute -> band -> un-permute versus the strided mask evaluated in place."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from evalharness.bench.backends import XLA, Backend
from evalharness.bench.inputs import random_qkv
from evalharness.bench.kernel_table import plan_row
from evalharness.bench.timing import time_interleaved
from kernels.masks.band import band_for_density, strided_temporal_mask
from kernels.masks.geometry import TokenGeometry
from kernels.masks.layouts import from_head_layouts, to_head_layouts
from kernels.plans.block_sizes import BlockSizes
from kernels.plans.tiles import build_plan


def temporal_comparison(
    geometry: TokenGeometry,
    density: float,
    block_sizes: BlockSizes,
    *,
    heads: int,
    head_dim: int,
    dtype,
    runs: int,
    variant: str = "b2",
    backend: Backend = XLA,
) -> list[dict]:
    """Both ways of running every head as a temporal head with the exact mask.

    The permuted path includes the gathers into and out of the temporal layout (selected per head
    with the routing flags, all True here). Both paths compute the same pairs, so their outputs
    must agree; the largest difference is reported. Both run on ``backend``, timed round-robin
    (``time_interleaved``).

    Returns:
        Two dicts ("permute_band_unpermute", "strided_in_place") with timing and tile stats.
    """
    q, k, v = random_qkv(geometry.tokens, heads, head_dim, dtype)
    flags = jnp.ones((heads,), bool)
    band = build_plan(band_for_density(geometry, density), block_sizes, variant)
    strided = build_plan(strided_temporal_mask(geometry, density), block_sizes, variant)

    @jax.jit
    def permuted(q, k, v):
        q, k, v = (to_head_layouts(x, geometry, flags) for x in (q, k, v))
        return from_head_layouts(backend.attend(q, k, v, band), geometry, flags)

    @jax.jit
    def in_place(q, k, v):
        return backend.attend(q, k, v, strided)

    difference = float(jnp.max(jnp.abs(permuted(q, k, v).astype(jnp.float32) - in_place(q, k, v))))
    paths = {"permute_band_unpermute": (permuted, band), "strided_in_place": (in_place, strided)}
    timings = time_interleaved(
        {name: (lambda fn=fn: fn(q, k, v)) for name, (fn, _) in paths.items()}, runs
    )
    rows = []
    for name, (_, plan) in paths.items():
        row = {"path": name, "variant": variant, **plan_row(plan, backend.name)}
        row.update(timings[name])
        row["max_abs_difference_between_paths"] = difference
        rows.append(row)
    return rows
