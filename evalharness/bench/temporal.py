"""Temporal heads: the run's own permute -> band -> un-permute against the strided mask in place.

The permuted path is ``kernels.policy.AttentionPolicy.sparse_attention``, the function a run's
sparse cells execute (routing aside): every head flagged temporal, its tokens gathered into the
temporal layout, the band run by the schedule's executor, the outputs gathered back. The
alternative SVG's layout change avoids is the strided temporal mask evaluated in frame-major
order, whose kept pairs scatter over every tile.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from evalharness.bench.backends import XLA, Backend
from evalharness.bench.kernel_table import plan_row, random_qkv
from evalharness.bench.timing import time_warm_ms
from kernels.masks.band import strided_temporal_mask
from kernels.masks.geometry import TokenGeometry
from kernels.plans.block_sizes import BlockSizes
from kernels.plans.tiles import build_plan
from kernels.policy import AttentionPolicy, SparsitySchedule


def temporal_comparison(
    geometry: TokenGeometry,
    density: float,
    block_sizes: BlockSizes,
    *,
    heads: int,
    batch: int = 1,
    head_dim: int,
    dtype,
    runs: int,
    variant: str = "b2",
    backend: Backend = XLA,
) -> list[dict]:
    """Both ways of running every head as a temporal head with the exact mask, on ``backend``
    with ``variant`` ("b1"-"b3"), timed round-robin (``time_warm_ms``). Both compute the same
    pairs, so the largest difference of their outputs is reported; q, k, v as in
    ``kernel_table``.

    Returns:
        Two rows ("permute_band_unpermute", "strided_in_place") with timing and tile stats.
    """
    q, k, v = random_qkv(geometry.tokens, heads, head_dim, dtype, batch=batch)
    schedule = SparsitySchedule(
        "temporal-bench", first_times_fp=0.0, density=density, variant=variant
    )
    policy = AttentionPolicy(
        schedule, geometry, num_steps=1, num_layers=1, backend=backend.name,
        block_sizes=block_sizes, options=backend.kernel_options(block_sizes.block_q, head_dim),
    )  # fmt: skip
    every_head = jnp.ones((batch, heads), bool)
    strided = build_plan(strided_temporal_mask(geometry, density), block_sizes, variant)

    @jax.jit
    def permuted(q, k, v):
        return policy.sparse_attention(q, k, v, every_head)

    @jax.jit
    def in_place(q, k, v):
        return backend.attend(q, k, v, strided)

    difference = float(jnp.max(jnp.abs(permuted(q, k, v).astype(jnp.float32) - in_place(q, k, v))))
    paths = {
        "permute_band_unpermute": (permuted, policy.plan),
        "strided_in_place": (in_place, strided),
    }
    timings = time_warm_ms(
        {name: (lambda fn=fn: fn(q, k, v)) for name, (fn, _) in paths.items()}, runs
    )
    rows = []
    for name, (_, plan) in paths.items():
        row = {"path": name, "variant": variant, **plan_row(plan, backend.name)}
        row.update(timings[name])
        row["max_abs_difference_between_paths"] = difference
        rows.append(row)
    return rows
