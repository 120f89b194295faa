"""3D rotary position embedding of Wan 2.1 (frames, height, width axes).

Each head's channels are split into a time part and two equal spatial parts, and each part rotates
interleaved channel pairs (2i, 2i+1) by position * theta^(-2i/d_axis). The per-axis angle tables are
tiny, so they are built on the host in float64 (as diffusers does) and rounded to float32 once; the
full per-token table is assembled by broadcasting on device so a 300K-token video does not embed a
huge constant in the compiled program.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def rope_axis_dims(head_dim: int) -> tuple[int, int, int]:
    """Channels given to (time, height, width): h = w = 2 * (d // 6), t = d - h - w.

    Example: head_dim 128 → (44, 42, 42); 64 → (24, 20, 20).
    """
    hw = 2 * (head_dim // 6)
    return head_dim - 2 * hw, hw, hw


def axis_frequencies(axis_dim: int, theta: float = 10000.0) -> np.ndarray:
    """Rotation per position of each channel pair of one axis: float64 [axis_dim // 2],
    theta^(-2i / axis_dim) (1 for the first pair, then ever slower)."""
    return 1.0 / theta ** (np.arange(0, axis_dim, 2, dtype=np.float64) / axis_dim)


def _axis_angles(length: int, axis_dim: int, theta: float) -> np.ndarray:
    """Angles [length, axis_dim // 2] in float64: position * theta^(-2i / axis_dim)."""
    return np.outer(np.arange(length, dtype=np.float64), axis_frequencies(axis_dim, theta))


def rope_tables(
    grid: tuple[int, int, int],
    head_dim: int,
    *,
    theta: float = 10000.0,
    max_seq_len: int = 1024,
) -> tuple[jax.Array, jax.Array]:
    """Cosine and sine of the rotation angle of every (token, channel pair).

    Args:
        grid: (F, Hp, Wp) token grid; tokens are frame-major (F, Hp, Wp) flattened.
        head_dim: channels per head D.
        theta: base of the frequencies (one per axis).
        max_seq_len: positions per axis the model supports (diffusers' ``rope_max_seq_len``).

    Returns:
        ``(cos, sin)``, each float32 [N, D // 2] with N = F * Hp * Wp.

    Raises:
        ValueError: if an axis of ``grid`` exceeds ``max_seq_len``.
    """
    if max(grid) > max_seq_len or min(grid) < 1:
        raise ValueError(
            f"token grid {grid} (F, Hp, Wp) must have every axis in 1..{max_seq_len} "
            "(rope_max_seq_len); use a smaller video"
        )
    dims = rope_axis_dims(head_dim)
    f, hp, wp = grid
    angles = [_axis_angles(n, d, theta) for n, d in zip(grid, dims, strict=True)]
    cos_parts, sin_parts = [], []
    for axis, table in enumerate(angles):
        # Put this axis's positions on its own grid axis and broadcast over the other two.
        shape = [1, 1, 1, table.shape[1]]
        shape[axis] = table.shape[0]
        full = (f, hp, wp, table.shape[1])
        cos_parts.append(
            jnp.broadcast_to(jnp.asarray(np.cos(table), jnp.float32).reshape(shape), full)
        )
        sin_parts.append(
            jnp.broadcast_to(jnp.asarray(np.sin(table), jnp.float32).reshape(shape), full)
        )
    n = f * hp * wp
    cos = jnp.concatenate(cos_parts, axis=-1).reshape(n, head_dim // 2)
    sin = jnp.concatenate(sin_parts, axis=-1).reshape(n, head_dim // 2)
    return cos, sin


def apply_rope(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
    """Rotates interleaved channel pairs of ``x`` (computed in float32).

    Args:
        x: [B, N, H, D] queries or keys.
        cos: [N, D // 2] from ``rope_tables``.
        sin: [N, D // 2] from ``rope_tables``.

    Returns:
        [B, N, H, D] in ``x.dtype``: pair (x0, x1) → (x0 cos - x1 sin, x0 sin + x1 cos).
    """
    b, n, h, d = x.shape
    pairs = x.astype(jnp.float32).reshape(b, n, h, d // 2, 2)
    x0, x1 = pairs[..., 0], pairs[..., 1]
    c = cos[None, :, None, :]
    s = sin[None, :, None, :]
    rotated = jnp.stack([x0 * c - x1 * s, x0 * s + x1 * c], axis=-1)
    return rotated.reshape(b, n, h, d).astype(x.dtype)
