"""SVG online head routing: spatial or temporal mask per (batch, head), chosen from sampled rows.

For a sparse (step, layer), R query rows are sampled; for those rows the dense attention output and
the outputs under the spatial mask (the band in frame-major order) and the temporal mask (the same
band in the temporal layout, evaluated here in frame-major coordinates through
``kernels.masks.layouts.temporal_position``) are computed from one score matrix. Each head goes to the
mask whose output is closer to dense in mean squared error. Flags are data (a bool array), never
shapes, so a different routing never recompiles.

Rows are sampled by stratification: one uniform row in each of R equal slices of the sequence. That
covers every frame (including frame 0, whose queries behave differently because they are the sink)
with lower variance than R independent draws, and it needs no O(N) permutation.

Cost: one [R, N] score matrix and three [R, N] x [N, D] products per head, about 8 R N D FLOPs,
against 4 N^2 D density for the sparse attention it guards: a fraction of 2 R / (N density)
(``routing_flops_fraction``), 0.68% at 720p with R = 64 and density 0.25.

The three outputs are computed by ``sampled_outputs`` (XLA, the oracle) or by a backend's own
kernel with the same signature (``kernels.executors.pallas_tpu_routing``, which keeps the scores
in VMEM), as ``routing_outputs_for`` decides. Everything else here (rows, keep flags, errors, the
decision) is shared.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from kernels.executors.pallas_tpu_routing import pallas_sampled_outputs
from kernels.masks.geometry import TokenGeometry
from kernels.masks.layouts import temporal_position, to_frame_major
from kernels.plans.rounding import TileMask

ROUTING_MODES = ("sampled", "oracle")
# "oracle" scores every query against every key ([batch, heads, N, N] float32): beyond this many
# tokens that is gigabytes, which is what sampling exists to avoid.
ORACLE_MAX_TOKENS = 16_384


class Routing(NamedTuple):
    """Routing decision and its evidence for one (step, layer).

    Attributes:
        temporal: bool [batch, heads]; True routes the head to the temporal mask.
        spatial_error: float32 [batch, heads]; MSE of the spatial-mask output against dense.
        temporal_error: float32 [batch, heads]; MSE of the temporal-mask output against dense.
    """

    temporal: jax.Array
    spatial_error: jax.Array
    temporal_error: jax.Array


def routing_key(seed: int, step: jax.Array | int, layer: int) -> jax.Array:
    """The sampling key of one (step, layer): the same in every run that uses the same seed.

    Args:
        seed: base seed of the comparison.
        step: denoising step (a traced int32 scalar is fine).
        layer: block index.

    Returns:
        A PRNG key array.
    """
    key = jax.random.fold_in(jax.random.key(seed), jnp.asarray(step, jnp.uint32))
    return jax.random.fold_in(key, layer)


def sample_rows(key: jax.Array, tokens: int, samples: int) -> jax.Array:
    """R distinct query rows, one uniformly drawn from each of R equal slices of the sequence.

    Args:
        key: PRNG key.
        tokens: N.
        samples: R, in [1, N].

    Returns:
        int32 [R], strictly increasing, in [0, N).
    """
    if not 1 <= samples <= tokens:
        raise ValueError(f"samples={samples}: expected 1 <= samples <= tokens={tokens}")
    offsets = jax.random.uniform(key, (samples,), jnp.float32)
    # Slice i is [i N / R, (i + 1) N / R); integer bounds keep the rows distinct even when R = N.
    # The bounds are static: computed on the host in int64, since i * N overflows int32 once
    # R * N reaches 2**31 (28k rows at 720p), and stored as int32 (each is below N).
    index = np.arange(samples + 1, dtype=np.int64) * tokens // samples
    lo = jnp.asarray(index[:-1].astype(np.int32))
    hi = jnp.asarray(index[1:].astype(np.int32))
    rows = lo + jnp.floor(offsets * (hi - lo)).astype(jnp.int32)
    return jnp.minimum(rows, hi - 1)


def rows_keep(mask, rows: jax.Array, tokens: int) -> jax.Array:
    """``mask.allowed(rows[:, None], arange(tokens)[None, :])``: bool [R, tokens], built without
    an [R, tokens] gather.

    A tile-rounded mask (``TileMask``, b3) is a table of tiles: its rows are looked up once per
    sampled row ([R, key tiles]) and each tile's flag repeated over the tile's keys. (A gather
    per pair, [R, N] of them, cost 100 ms per routing call at 720p on a TPU v5e, more than the
    band kernel it guards.) Other masks are evaluated arithmetically on index arrays.

    Args:
        mask: the executed mask (``BandMask``, ``TileMask``, or any with ``allowed``).
        rows: int32 [R], query positions in the mask's own coordinates.
        tokens: N, the keys.
    """
    if not isinstance(mask, TileMask):
        return mask.allowed(rows[:, None], jnp.arange(tokens, dtype=jnp.int32)[None, :])
    num_q, num_kv = mask.blocks.shape
    block_kv = mask.block_sizes.block_kv
    tile_rows = jnp.asarray(mask.blocks)[jnp.clip(rows // mask.block_sizes.block_q, 0, num_q - 1)]
    keep = jnp.repeat(tile_rows, block_kv, axis=1, total_repeat_length=num_kv * block_kv)
    return keep[:, :tokens]


def layout_keeps(mask, rows: jax.Array, geometry: TokenGeometry) -> tuple[jax.Array, jax.Array]:
    """Which frame-major keys each sampled row keeps under the spatial and the temporal layout.

    Args:
        mask: the executed mask in a head's own layout (``rows_keep``'s).
        rows: int32 [R], frame-major query rows.
        geometry: the token geometry (N tokens).

    Returns:
        (spatial, temporal): bool [R, N] each, over frame-major keys.
    """
    n = geometry.tokens
    spatial = rows_keep(mask, rows, n)
    # The temporal mask is the band in temporal-layout positions: each row's keep flags are
    # built over temporal positions, then put in frame-major key order by the layout's transpose.
    temporal = to_frame_major(rows_keep(mask, temporal_position(rows, geometry), n), geometry)
    return spatial, temporal


class SampledOutputs(NamedTuple):
    """The sampled rows' attention outputs under the three masks, float32 [B, H, R, D] each.

    Attributes:
        dense: every key.
        spatial: the keys the spatial mask keeps.
        temporal: the keys the temporal mask keeps.
    """

    dense: jax.Array
    spatial: jax.Array
    temporal: jax.Array


# (q_rows [B, R, H, D], k, v [B, N, H, D], spatial_keep, temporal_keep bool [R, N]) -> outputs.
OutputsFn = Callable[[jax.Array, jax.Array, jax.Array, jax.Array, jax.Array], SampledOutputs]


def _masked_output(scores: jax.Array, keep: jax.Array, v: jax.Array) -> jax.Array:
    """softmax over kept keys, times v: scores [B, H, R, N], keep [R, N], v [B, N, H, D]."""
    masked = jnp.where(keep[None, None], scores, -jnp.inf)
    probs = jax.nn.softmax(masked, axis=-1)
    return jnp.einsum("bhrk,bkhd->bhrd", probs, v)


def sampled_outputs(
    q_rows: jax.Array,
    k: jax.Array,
    v: jax.Array,
    spatial_keep: jax.Array,
    temporal_keep: jax.Array,
) -> SampledOutputs:
    """The sampled rows' outputs under every key, the spatial and the temporal mask (XLA).

    One float32 score matrix serves the three softmaxes. The oracle of every backend's own
    ``OutputsFn``.

    Args:
        q_rows: [B, R, H, D], the sampled query rows (unscaled).
        k: [B, N, H, D].
        v: [B, N, H, D].
        spatial_keep: bool [R, N], the keys each row keeps under the spatial mask.
        temporal_keep: bool [R, N], under the temporal mask (frame-major key order).

    Returns:
        ``SampledOutputs``, float32 [B, H, R, D] each.
    """
    f32 = jnp.float32
    qf, kf, vf = (x.astype(f32) for x in (q_rows, k, v))
    scores = jnp.einsum("brhd,bkhd->bhrk", qf, kf) / math.sqrt(q_rows.shape[3])
    dense = jnp.einsum("bhrk,bkhd->bhrd", jax.nn.softmax(scores, axis=-1), vf)
    return SampledOutputs(
        dense, _masked_output(scores, spatial_keep, vf), _masked_output(scores, temporal_keep, vf)
    )


def routing_outputs_for(backend: str, *, interpret: bool = False) -> OutputsFn:
    """How a run on ``backend`` computes routing's sampled outputs.

    On ``pallas_tpu``, the Pallas kernel (``kernels.executors.pallas_tpu_routing``); other
    backends keep XLA's ``sampled_outputs``, the oracle. The policy passes it to ``route_heads``;
    a sequence-parallel run keeps its own sharded routing (``kernels.parallel.routing``).

    Args:
        backend: the run's kernel backend.
        interpret: Pallas interpret mode (CPU tests).
    """
    if backend != "pallas_tpu":
        return sampled_outputs
    kernel = functools.partial(pallas_sampled_outputs, interpret=interpret)

    def outputs(q_rows, k, v, spatial_keep, temporal_keep) -> SampledOutputs:
        return SampledOutputs(*kernel(q_rows, k, v, spatial_keep, temporal_keep))

    return outputs


def route_rows(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    rows: jax.Array,
    mask,
    geometry: TokenGeometry,
    *,
    outputs: OutputsFn = sampled_outputs,
) -> Routing:
    """Routes every (batch, head) from the given query rows.

    Args:
        q: [batch, tokens, heads, head_dim], frame-major.
        k: [batch, tokens, heads, head_dim], frame-major.
        v: [batch, tokens, heads, head_dim], frame-major.
        rows: int32 [R], frame-major query rows to compare on.
        mask: the mask the sparse executor applies in a head's own layout (a ``BandMask`` or the
            tile-rounded ``TileMask`` of a b3 plan); ``mask.allowed`` is applied to frame-major
            indices for the spatial mask and to temporal-layout positions for the temporal mask.
        geometry: token geometry; ``geometry.tokens`` must equal the sequence length.
        outputs: computes the three masked outputs (``sampled_outputs``, or a backend's kernel
            with its signature).

    Returns:
        ``Routing`` with [batch, heads] arrays; ties go to spatial.
    """
    n = q.shape[1]
    if n != geometry.tokens:
        raise ValueError(f"q has {n} tokens but {geometry} has {geometry.tokens}")
    if getattr(mask, "tokens", n) != n:
        raise ValueError(f"mask covers {mask.tokens} tokens but the sequence has {n}")
    q_rows = jnp.take(q, rows, axis=1)  # [B, R, H, D]
    dense, spatial, temporal = outputs(q_rows, k, v, *layout_keeps(mask, rows, geometry))
    spatial_error = jnp.mean((spatial - dense) ** 2, axis=(2, 3))  # [B, H]
    temporal_error = jnp.mean((temporal - dense) ** 2, axis=(2, 3))
    return Routing(temporal_error < spatial_error, spatial_error, temporal_error)


def route_heads(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    mask,
    geometry: TokenGeometry,
    *,
    key: jax.Array | None = None,
    samples: int = 64,
    mode: str = "sampled",
    outputs: OutputsFn = sampled_outputs,
) -> Routing:
    """SVG routing of one (step, layer): spatial or temporal mask per (batch, head).

    Args:
        q: [batch, tokens, heads, head_dim], frame-major (after RMSNorm and RoPE, unscaled).
        k: [batch, tokens, heads, head_dim].
        v: [batch, tokens, heads, head_dim].
        mask: the executed mask in a head's own layout (see ``route_rows``).
        geometry: token geometry.
        key: PRNG key for the sampled rows (``routing_key``); required for "sampled".
        samples: R query rows for "sampled", in [1, tokens].
        mode: "sampled" (R stratified rows) or "oracle" (every row; O(N^2) memory, small N only).
        outputs: the three masked outputs' computation (``route_rows``).

    Returns:
        ``Routing`` ([batch, heads] flags and the two errors).
    """
    if mode not in ROUTING_MODES:
        raise ValueError(f"mode={mode!r}; use one of {ROUTING_MODES}")
    n = q.shape[1]
    if mode == "oracle":
        if n > ORACLE_MAX_TOKENS:
            raise ValueError(
                f"mode='oracle' at {n} tokens needs O(N^2) memory; use it up to "
                f"{ORACLE_MAX_TOKENS} tokens, or mode='sampled'"
            )
        rows = jnp.arange(n, dtype=jnp.int32)
    else:
        if key is None:
            raise ValueError(
                "mode='sampled' needs a PRNG key; pass key=routing_key(seed, step, layer)"
            )
        if isinstance(samples, bool) or not isinstance(samples, int) or not 1 <= samples <= n:
            raise ValueError(
                f"samples={samples!r}: expected an int in [1, {n}] (the sequence's tokens)"
            )
        rows = sample_rows(key, n, samples)
    return route_rows(q, k, v, rows, mask, geometry, outputs=outputs)


def routing_flops(tokens: int, head_dim: int, samples: int) -> int:
    """Matmul FLOPs of routing one head: R x N scores plus three R x N x D output products.

    Args:
        tokens: N.
        head_dim: D.
        samples: R.

    Returns:
        8 R N D (2 per multiply-add; the three softmaxes are O(R N) and left out).
    """
    return 2 * samples * tokens * head_dim * 4


def sparse_attention_flops(tokens: int, head_dim: int, density: float) -> float:
    """Matmul FLOPs of one head's sparse attention: 4 N^2 D density (QK^T and PV)."""
    return 4.0 * tokens * tokens * head_dim * density


def routing_flops_fraction(geometry: TokenGeometry, density: float, samples: int = 64) -> float:
    """Routing FLOPs as a fraction of the sparse attention they guard (head_dim cancels).

    Args:
        geometry: token geometry.
        density: kept fraction of the sparse masks.
        samples: R.

    Returns:
        ``2 R / (N density)``, e.g. 0.0068 at 720p (75,600 tokens), R = 64, density 0.25.
    """
    if not 0.0 < density <= 1.0:
        raise ValueError(f"density={density}: expected a kept fraction in (0, 1]")
    n = geometry.tokens
    return routing_flops(n, 1, samples) / sparse_attention_flops(n, 1, density)
