"""Frame-major and temporal-major token layouts, and per-head layout selection.

Frame-major is the model's order: token (f, y, x) sits at f * S + y * Wp + x. A temporal head's
pattern (a token attends to the same place in nearby frames) is a set of stripes S apart in that
order; in a temporal-major order, where the F copies of one spatial position sit side by side, the
same pattern becomes one contiguous band that a tiled kernel can skip through cheaply.

The temporal layout is Sparse VideoGen's: every frame, frame 0 included, is reordered as
(Hp, Wp, F), so the token at spatial position p = y * Wp + x of frame f sits at ``p * F + f``. Every
temporal query, a frame-0 query too, then finds its own position in every frame within F - 1
places of itself, inside any band of half-width >= F - 1. The band-plus-sink mask
(``kernels.masks.band.BandMask``) is applied in each head's own layout, as SVG's code applies it,
so its sink ``k < S`` is frame 0 for a spatial head (frame-major) and, for a temporal head, the
first S positions of this layout: the top ``S / F`` spatial positions (about Hp / F image rows) of
every frame. One mask and one tile plan therefore serve both head kinds. Keeping frame 0 itself as a
temporal head's sink would make it a comb of single columns F apart, touching every key tile; the
measurements behind that choice are in docs/against-sparse-videogen.md.

The permutation is a fixed reshape of the token axis: frame-major tokens are an [F, S] grid and
the temporal layout is its transpose [S, F]. ``to_temporal_major`` and ``to_frame_major`` move data
that way (a transpose, which an accelerator copies at memory bandwidth; a gather by an index vector
of N entries is far slower on a TPU). The permutations as NumPy index arrays (host side, cached per
geometry) stay as the plain definition the tests hold the transposes to. Per-head selection uses
``jnp.where`` over a transposed copy so shapes never depend on the (possibly traced) flags.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from kernels.masks.geometry import TokenGeometry


@functools.lru_cache(maxsize=64)
def temporal_permutation(geometry: TokenGeometry) -> np.ndarray:
    """Frame-major index of the token at each temporal-major position.

    ``x_temporal = x_frame_major[perm]``.

    Args:
        geometry: the token geometry.

    Returns:
        int32 [N], a permutation of ``range(N)``; read-only.
    """
    s, f = geometry.tokens_per_frame, geometry.frames
    frame_major = np.arange(geometry.tokens, dtype=np.int64).reshape(f, s)  # [F, S]
    perm = frame_major.T.reshape(-1).astype(np.int32)  # position p * F + f holds f * S + p
    perm.setflags(write=False)
    return perm


@functools.lru_cache(maxsize=64)
def inverse_temporal_permutation(geometry: TokenGeometry) -> np.ndarray:
    """Temporal-major position of each frame-major token: ``x_frame_major = x_temporal[inv]``.

    Args:
        geometry: the token geometry.

    Returns:
        int32 [N]; read-only.
    """
    perm = temporal_permutation(geometry)
    inv = np.empty_like(perm)
    inv[perm] = np.arange(perm.size, dtype=np.int32)
    inv.setflags(write=False)
    return inv


def temporal_position(frame_major_index, geometry: TokenGeometry):
    """Arithmetic form of ``inverse_temporal_permutation`` for NumPy or jnp integer arrays.

    Used where a gather is unwanted (e.g. evaluating the strided temporal mask from iota indices).

    Args:
        frame_major_index: integer array of frame-major token indices (any shape).
        geometry: the token geometry.

    Returns:
        Array of the same shape: each token's position in the temporal layout.
    """
    s, f = geometry.tokens_per_frame, geometry.frames
    # Frame f at spatial position p goes to p * F + f.
    return (frame_major_index % s) * f + frame_major_index // s


def _transpose_grid(x: jax.Array, axis: int, rows: int, cols: int) -> jax.Array:
    """``x`` with its ``axis`` (``rows * cols`` entries, a row-major [rows, cols] grid) replaced
    by the grid's transpose, flattened again."""
    if x.shape[axis] != rows * cols:
        raise ValueError(
            f"axis {axis} has {x.shape[axis]} entries; expected {rows * cols} tokens "
            f"({rows} x {cols})"
        )
    grid = x.reshape(x.shape[:axis] + (rows, cols) + x.shape[axis + 1 :])
    return jnp.swapaxes(grid, axis, axis + 1).reshape(x.shape)


def to_temporal_major(x: jax.Array, geometry: TokenGeometry, axis: int = 1) -> jax.Array:
    """Frame-major tokens along ``axis`` put in temporal-major order, by reshape and transpose.

    Equal to ``jnp.take(x, temporal_permutation(geometry), axis=axis)``: the [F, S] grid of
    frame-major tokens transposed to [S, F], so position p * F + f holds token f * S + p.

    Args:
        x: any array whose ``axis`` holds ``geometry.tokens`` frame-major tokens, e.g.
            [batch, tokens, heads, head_dim] with ``axis=1``.
        geometry: the token geometry.
        axis: the token axis (non-negative).

    Returns:
        An array of ``x``'s shape and dtype, tokens in temporal-major order.
    """
    return _transpose_grid(x, axis, geometry.frames, geometry.tokens_per_frame)  # [F, S] -> [S, F]


def to_frame_major(x: jax.Array, geometry: TokenGeometry, axis: int = 1) -> jax.Array:
    """Inverse of ``to_temporal_major``: temporal-major tokens along ``axis`` back to frame-major.

    Equal to ``jnp.take(x, inverse_temporal_permutation(geometry), axis=axis)``.

    Args:
        x: any array whose ``axis`` holds ``geometry.tokens`` temporal-major tokens.
        geometry: the token geometry.
        axis: the token axis (non-negative).

    Returns:
        An array of ``x``'s shape and dtype, tokens in frame-major order.
    """
    return _transpose_grid(x, axis, geometry.tokens_per_frame, geometry.frames)  # [S, F] -> [F, S]


def _check_flags(x: jax.Array, geometry: TokenGeometry, temporal_heads) -> jax.Array:
    """The flags as bool [batch, heads] (one row broadcast over the batch when given per head)."""
    if x.ndim != 4:
        raise ValueError(f"x has shape {x.shape}; expected [batch, tokens, heads, head_dim]")
    if x.shape[1] != geometry.tokens:
        raise ValueError(
            f"x has {x.shape[1]} tokens but {geometry} has {geometry.tokens}; pass the geometry "
            "the sequence was built from"
        )
    flags = jnp.asarray(temporal_heads)
    batch, heads = x.shape[0], x.shape[2]
    if flags.shape not in ((heads,), (batch, heads)):
        raise ValueError(
            f"temporal_heads has shape {flags.shape}; expected ({heads},), one bool per head, or "
            f"({batch}, {heads}), one per (batch, head)"
        )
    return jnp.broadcast_to(flags.astype(bool), (batch, heads))


def to_head_layouts(x: jax.Array, geometry: TokenGeometry, temporal_heads) -> jax.Array:
    """Puts each temporal head's tokens in temporal-major order; spatial heads are untouched.

    The select and the transpose fuse into one pass over ``x`` under XLA.

    Args:
        x: [batch, tokens, heads, head_dim] in frame-major order.
        geometry: the token geometry (tokens must equal ``geometry.tokens``).
        temporal_heads: bool [heads] or [batch, heads] (may be traced); True = temporal layout.
            Per (batch, head) because the conditional and unconditional halves of a guided
            batch may route differently.

    Returns:
        [batch, tokens, heads, head_dim], same shape and dtype.
    """
    flags = _check_flags(x, geometry, temporal_heads)
    return jnp.where(flags[:, None, :, None], to_temporal_major(x, geometry), x)


def from_head_layouts(x: jax.Array, geometry: TokenGeometry, temporal_heads) -> jax.Array:
    """Inverse of ``to_head_layouts``: restores frame-major order for temporal heads.

    Args:
        x: [batch, tokens, heads, head_dim], temporal heads in temporal-major order.
        geometry: the token geometry.
        temporal_heads: bool [heads] or [batch, heads], the flags given to ``to_head_layouts``.

    Returns:
        [batch, tokens, heads, head_dim] in frame-major order for every head.
    """
    flags = _check_flags(x, geometry, temporal_heads)
    return jnp.where(flags[:, None, :, None], to_frame_major(x, geometry), x)
