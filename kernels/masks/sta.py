"""Sliding Tile Attention (STA): a 3D window over tiles of tokens, in the tile order.

STA (Zhang et al., "Fast video generation with sliding tile attention", arXiv 2502.04507; FastVideo's
kernels) cuts the (frames, rows, columns) token grid into tiles of ``tile`` = (t, h, w) tokens and
reorders the tokens so that each tile is contiguous (``TileOrder``). Each query tile attends to
the key tiles inside a window of ``window`` = (kt, kh, kw) tiles around it, the window's centre
clamped so it stays ``k // 2`` tiles from the grid's edge (FastVideo's ``sta_mask_3d``): along each
axis, key tile b is kept for query tile a when ``|clamp(a, k // 2, n - 1 - k // 2) - b| <= k // 2``.
A window as large as the grid keeps the whole axis. Every (query tile, key tile) pair is kept
whole or dropped whole, so a kernel whose tiles are the STA tiles runs it without a mask; the
grid's last tile on an axis is smaller when the tile does not divide the axis.

FastVideo's Wan 2.1 tile is (6, 8, 8) latent tokens (``STA_WAN_TILE``), and its Wan window
candidates are (3, 1, 10), (1, 5, 7), (3, 3, 3), (1, 6, 5), (1, 3, 10) and (3, 6, 1) tiles.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from kernels.masks.block_sums import group_block_sums
from kernels.masks.geometry import TokenGeometry
from kernels.masks.protocols import BlockSizesLike, PredicateMask

STA_WAN_TILE = (6, 8, 8)


def _triple(owner: str, name: str, value) -> tuple[int, int, int]:
    values = tuple(value) if isinstance(value, list | tuple) else ()
    if len(values) != 3 or any(isinstance(v, bool) or not isinstance(v, int) for v in values):
        raise ValueError(f"{owner}.{name}={value!r}: expected three ints (frames, rows, columns)")
    if min(values) < 1:
        raise ValueError(f"{owner}.{name}={value!r}: expected positive sizes, e.g. [3, 3, 3]")
    return values  # type: ignore[return-value]


@dataclasses.dataclass(frozen=True)
class TileOrder:
    """The token layout where each STA tile is contiguous: tiles in (t, h, w) raster order, each
    tile's tokens in frame-major order within it.

    Attributes:
        geometry: token geometry (frame-major order is the model's).
        tile: tile size in tokens along (frames, rows, columns).
    """

    geometry: TokenGeometry
    tile: tuple[int, int, int]

    def __post_init__(self) -> None:
        object.__setattr__(self, "tile", _triple("TileOrder", "tile", self.tile))

    @property
    def dims(self) -> tuple[int, int, int]:
        """Tokens along (frames, rows, columns)."""
        g = self.geometry
        return (g.frames, g.height, g.width)

    @property
    def grid(self) -> tuple[int, int, int]:
        """Tiles along each axis (the last one smaller when the tile does not divide the axis)."""
        return tuple(-(-d // t) for d, t in zip(self.dims, self.tile, strict=True))

    def axis_sizes(self, axis: int) -> np.ndarray:
        """int64 [grid[axis]]: tokens of each tile along ``axis``."""
        d, t = self.dims[axis], self.tile[axis]
        return np.minimum(d, np.arange(1, self.grid[axis] + 1) * t) - np.arange(self.grid[axis]) * t

    @functools.cached_property
    def permutation(self) -> np.ndarray:
        """int64 [N]: the frame-major index of the token at each tile-order position."""
        f, h, w = np.indices(self.dims).reshape(3, -1)
        tt, th, tw = self.tile
        index = np.arange(self.geometry.tokens)
        return np.lexsort((index, w // tw, h // th, f // tt)).astype(np.int64)

    @functools.cached_property
    def inverse(self) -> np.ndarray:
        """int64 [N]: the tile-order position of each frame-major token."""
        inverse = np.empty_like(self.permutation)
        inverse[self.permutation] = np.arange(self.permutation.size)
        return inverse

    @functools.cached_property
    def starts(self) -> np.ndarray:
        """int64 [tiles + 1]: each tile's first tile-order position, then N."""
        sizes = [self.axis_sizes(a) for a in range(3)]
        volume = np.einsum("i,j,k->ijk", *sizes).reshape(-1)
        return np.concatenate([[0], np.cumsum(volume)]).astype(np.int64)


def sta_axis_window(tiles: int, kernel: int) -> np.ndarray:
    """bool [tiles, tiles]: key tiles kept along one axis, per query tile (FastVideo's rule).

    Args:
        tiles: tiles along the axis n.
        kernel: window size k in tiles (a window of at least n tiles keeps every tile).

    Returns:
        ``|clamp(a, k // 2, n - 1 - k // 2) - b| <= k // 2`` for query tile a, key tile b.
    """
    half = kernel // 2
    a = np.arange(tiles)
    centre = np.minimum(np.maximum(a, half), tiles - 1 - half)
    return np.abs(centre[:, None] - a[None, :]) <= half


@dataclasses.dataclass(frozen=True)
class StaMask(PredicateMask):
    """STA's mask over tile-order token indices (``TileOrder``).

    Attributes:
        order: the tile layout (geometry and tile size).
        window: window size in tiles along (frames, rows, columns).
    """

    order: TileOrder
    window: tuple[int, int, int]

    def __post_init__(self) -> None:
        object.__setattr__(self, "window", _triple("StaMask", "window", self.window))

    @property
    def tokens(self) -> int:
        """N."""
        return self.order.geometry.tokens

    @functools.cached_property
    def tile_window(self) -> np.ndarray:
        """bool [tiles, tiles]: kept (query tile, key tile) pairs, tiles in raster order."""
        axes = [sta_axis_window(n, k) for n, k in zip(self.order.grid, self.window, strict=True)]
        kron = np.einsum("ad,be,cf->abcdef", *axes)
        tiles = int(np.prod(self.order.grid))
        return kron.reshape(tiles, tiles)

    @functools.cached_property
    def _tile_of(self) -> np.ndarray:
        return np.repeat(np.arange(self.order.starts.size - 1), np.diff(self.order.starts))

    def allowed(self, q, k):
        """Predicate on broadcastable tile-order index arrays (NumPy, or jnp when traced)."""
        if isinstance(q, np.ndarray | int) and isinstance(k, np.ndarray | int):
            window, tile_of = self.tile_window, self._tile_of
            q, k = np.asarray(q), np.asarray(k)
        else:
            import jax.numpy as jnp

            window, tile_of = jnp.asarray(self.tile_window), jnp.asarray(self._tile_of)
        last = self.tokens - 1
        return window[tile_of[q.clip(0, last)], tile_of[k.clip(0, last)]] & (k < self.tokens)

    @property
    def kept_pairs(self) -> int:
        """Exact kept pairs: the window is separable, so a product of per-axis pair counts."""
        total = 1
        for axis, kernel in enumerate(self.window):
            sizes = self.order.axis_sizes(axis)
            kept = sta_axis_window(sizes.size, kernel)
            total *= int(sizes @ kept.astype(np.int64) @ sizes)
        return total

    def tile_counts(self, block_sizes: BlockSizesLike) -> np.ndarray:
        """int64 [nq, nkv]: kept real pairs per kernel tile (exact, from per-tile prefix sums)."""
        starts = self.order.starts
        per_key_block = group_block_sums(
            self.tile_window.T.astype(np.int64), starts, block_sizes.block_kv
        )  # [nkv, STA query tiles]
        return group_block_sums(per_key_block.T.copy(), starts, block_sizes.block_q)


def sta_mask(geometry: TokenGeometry, window, tile=STA_WAN_TILE) -> StaMask:
    """STA's mask at ``geometry``: ``window`` tiles of ``tile`` tokens (in the tile order)."""
    return StaMask(TileOrder(geometry, tuple(tile)), tuple(window))


def to_tile_order(x, order: TileOrder):
    """Frame-major tokens to STA's tile order (an exact gather).

    Args:
        x: [batch, tokens, heads, head_dim] (jnp or NumPy), frame-major.
        order: the tile layout.

    Returns:
        The same array with its tokens in tile order.
    """
    return _take(x, order.permutation)


def from_tile_order(x, order: TileOrder):
    """STA's tile order back to frame-major (the inverse gather of ``to_tile_order``).

    Args:
        x: [batch, tokens, heads, head_dim] in tile order.
        order: the tile layout.

    Returns:
        The same array, frame-major.
    """
    return _take(x, order.inverse)


def _take(x, index: np.ndarray):
    if isinstance(x, np.ndarray):
        return np.take(x, index, axis=1)
    import jax.numpy as jnp

    return jnp.take(x, jnp.asarray(index, dtype=jnp.int32), axis=1)
