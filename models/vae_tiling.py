"""Spatial tiling of the Wan VAE decode: diffusers' tile grid and blending, and their one-program
device form.

Two forms of one tiled decode, around any per-tile decoder:

- :func:`decode_in_tiles`, the reference (the test oracle): diffusers' ``tiled_decode`` grid and
  in-place linear blending on the host, one tile (cut at the edges) at a time;
- :func:`blend_windows`, traced into one program (``models.vae.decode_tiled``): every tile decoded
  from a latent window of one shape (:class:`TileWindows`) in a ``lax.scan``, blended on the
  device with weights read off the reference (:func:`tile_blend_weights`), row strip by row strip.

The grid (:meth:`TilingConfig.latent_grid`): tiles of ``min // 8`` latents every ``stride // 8``,
the last ones cut at the edge; 720p's 90 x 160 latents make 4 x 7 tiles in four shapes (32 x 32,
32 x 16, 18 x 32, 18 x 16), which the reference decodes as four compiled programs and the
windows as one.

The one program: a tile the grid cuts at the edge is decoded from the full-size window that ends
at the edge and only its own part kept, so every window has one shape and the decoder compiles
once. A ``lax.scan`` over window rows and columns decodes one window at a time and adds it, times
its blend weights, into a float32 strip of the frame's width; each finished strip of ``stride``
rows is clipped, converted to uint8 on the device (as :func:`models.frames.video_to_uint8`, bit
for bit) and emitted. The strip and the frames keep the colour channels folded into the width
axis (``[T, H, W · 3]``), which TPU memory stores unpadded (a minor axis of 3 is padded to 128).
Interior tiles are decoded exactly as by the reference, so the two agree there to float rounding;
near the bottom and right edges the windows see real neighbouring latents where the reference's
cut tiles see the decoder's zero padding (on the test VAEs, slightly closer to the untiled decode).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from functools import lru_cache

import jax
import jax.numpy as jnp
import numpy as np


@dataclasses.dataclass(frozen=True)
class TilingConfig:
    """Spatial tiling in pixels (diffusers' defaults); tiles overlap by ``min - stride`` pixels,
    blended linearly (top tile → bottom tile, left → right), as the reference does."""

    tile_sample_min_height: int = 256
    tile_sample_min_width: int = 256
    tile_sample_stride_height: int = 192
    tile_sample_stride_width: int = 192

    def __post_init__(self):
        for name in ("height", "width"):
            size = getattr(self, f"tile_sample_min_{name}")
            stride = getattr(self, f"tile_sample_stride_{name}")
            if size % 8 or stride % 8 or not 0 < stride <= size:
                raise ValueError(
                    f"tile_sample_min_{name}={size}, tile_sample_stride_{name}={stride}: both must be "
                    "positive multiples of 8 with stride <= size (e.g. 256 and 192)"
                )

    def latent_grid(self, h: int, w: int, scale: int) -> list[list[tuple[int, int]]]:
        """``[rows, cols]``: the ``(start, length)`` of each tile along each axis of ``h x w`` latent
        pixels at spatial compression ``scale``; a tile every stride, the last ones cut at the edge."""
        axes = (
            (h, self.tile_sample_min_height, self.tile_sample_stride_height),
            (w, self.tile_sample_min_width, self.tile_sample_stride_width),
        )
        return [
            [
                (start, min(size // scale, extent - start))
                for start in range(0, extent, stride // scale)
            ]
            for extent, size, stride in axes
        ]


def decode_in_tiles(
    decode_tile: Callable[[jax.Array], np.ndarray],
    z: jax.Array,
    tiling: TilingConfig,
    scale: int,
) -> np.ndarray:
    """The reference's tile grid and linear blending around any per-tile decoder.

    Tiles start every ``stride // scale`` latent pixels and span ``min // scale``; each decoded tile
    is blended in place with the (already blended) tile above and to its left over ``min - stride``
    pixels, then cropped to ``stride`` pixels, exactly as diffusers' ``tiled_decode``.

    Args:
        decode_tile: ``[B, F, th, tw, C]`` latent tile → ``[B, T, scale·th, scale·tw, 3]`` writable
            NumPy array.
        z: ``[B, F, h, w, C]`` channels-last latents.
        tiling: tile sizes in pixels.
        scale: spatial compression (8).

    Returns:
        ``[B, T, scale·h, scale·w, 3]`` float32.
    """
    _, _, h, w, _ = z.shape
    row_spans, col_spans = tiling.latent_grid(h, w, scale)
    stride_h, stride_w = tiling.tile_sample_stride_height, tiling.tile_sample_stride_width
    blend_h = tiling.tile_sample_min_height - stride_h
    blend_w = tiling.tile_sample_min_width - stride_w
    rows = [
        [decode_tile(z[:, :, i : i + m, j : j + n]) for j, n in col_spans] for i, m in row_spans
    ]
    out_rows = []
    for i, row in enumerate(rows):
        pieces = []
        for j, tile in enumerate(row):
            # Blended in place, as the reference does: the next tile blends with this blended one.
            if i > 0:
                above = rows[i - 1][j]
                ext = min(above.shape[2], tile.shape[2], blend_h)
                r = _blend_weights(ext)[:, None, None]
                tile[:, :, :ext] = above[:, :, -ext:] * (1 - r) + tile[:, :, :ext] * r
            if j > 0:
                left = row[j - 1]
                ext = min(left.shape[3], tile.shape[3], blend_w)
                r = _blend_weights(ext)[None, :, None]
                tile[:, :, :, :ext] = left[:, :, :, -ext:] * (1 - r) + tile[:, :, :, :ext] * r
            pieces.append(tile[:, :, :stride_h, :stride_w])
        out_rows.append(np.concatenate(pieces, axis=3))
    return np.concatenate(out_rows, axis=2)[:, :, : h * scale, : w * scale]


def _blend_weights(extent: int) -> np.ndarray:
    # Weight of the later tile at offset y of the overlap: y / extent (the reference's ramp).
    return np.arange(extent, dtype=np.float32) / extent


@dataclasses.dataclass(frozen=True)
class TileWindows:
    """Where each tile of diffusers' grid is decoded from, for one latent size.

    Every tile is decoded from a latent *window* of one shape, ``window_hw = (min(min_h // s, h),
    min(min_w // s, w))``: a grid tile ``(start, length)`` (:meth:`TilingConfig.latent_grid`) is
    decoded from ``[start, start + size)``, or, when the grid cuts it at the edge, from the
    full-size window that ends at the edge, ``[extent - size, extent)``, of which only the
    tile's own ``[start, start + length)`` is kept. Interior tiles are thus decoded exactly as
    the reference decodes them; edge tiles see real neighbouring latents instead of the decoder's
    zero padding at the cut. One window shape means one compiled decoder.

    Tiles that share a window (the cut tiles at one edge, and the last uncut one when it already
    ends at the edge) are decoded once, their weights summed (:func:`tile_blend_weights`): 480p's
    5 tile columns are 4 windows, 1440p's 14 are 13. The full-size edge windows still decode more
    area than the reference's cut tiles: 21% more at 720p, 19% at 480p, 6% at 1440p.

    Attributes:
        latent_hw: latent ``(h, w)``.
        window_hw: latent ``(th, tw)`` of every window.
        scale: spatial compression (8).
        stride_px: tile stride ``(stride_h, stride_w)`` in pixels.
        row_starts: latent row where each window row starts, increasing; window row ``k`` is
            tile row ``k``'s, the last one also that of every later tile row.
        col_starts: latent column where each window column starts, likewise.
    """

    latent_hw: tuple[int, int]
    window_hw: tuple[int, int]
    scale: int
    stride_px: tuple[int, int]
    row_starts: tuple[int, ...]
    col_starts: tuple[int, ...]

    @property
    def window_px(self) -> tuple[int, int]:
        """``(S, Sw)``: a decoded window in pixels."""
        return self.window_hw[0] * self.scale, self.window_hw[1] * self.scale

    @property
    def strip_height(self) -> int:
        """Pixel rows of the row accumulator: a window's, or a stride's if longer."""
        return max(self.window_px[0], self.stride_px[0])

    def window_of(self, row: int, col: int) -> tuple[int, int]:
        """``(k, l)``: the window row and column that decode the grid tile starting at latent
        ``(row, col)``."""
        h, w = self.latent_hw
        th, tw = self.window_hw
        return self.row_starts.index(min(row, h - th)), self.col_starts.index(min(col, w - tw))

    @property
    def row_shifts(self) -> tuple[int, ...]:
        """Pixels by which window row ``k`` starts above its strip (``k · stride_h``); non-zero
        only for the window moved up to end at the bottom edge."""
        return tuple(
            i * self.stride_px[0] - start * self.scale for i, start in enumerate(self.row_starts)
        )


def tile_windows(tiling: TilingConfig, h: int, w: int, scale: int) -> TileWindows:
    """The windows of ``h x w`` latents' tile grid (see :class:`TileWindows`)."""
    row_spans, col_spans = tiling.latent_grid(h, w, scale)
    th = min(tiling.tile_sample_min_height // scale, h)
    tw = min(tiling.tile_sample_min_width // scale, w)
    stride_h = tiling.tile_sample_stride_height // scale * scale
    stride_w = tiling.tile_sample_stride_width // scale * scale
    if (stride_h, stride_w) != (tiling.tile_sample_stride_height, tiling.tile_sample_stride_width):
        raise ValueError(f"tile strides must be multiples of the spatial compression {scale}")
    return TileWindows(
        latent_hw=(h, w),
        window_hw=(th, tw),
        scale=scale,
        stride_px=(stride_h, stride_w),
        # Non-decreasing, so equal windows are neighbours: dict.fromkeys keeps one of each.
        row_starts=tuple(dict.fromkeys(min(start, h - th) for start, _ in row_spans)),
        col_starts=tuple(dict.fromkeys(min(start, w - tw) for start, _ in col_spans)),
    )


@lru_cache(maxsize=8)
def tile_blend_weights(tiling: TilingConfig, h: int, w: int, scale: int) -> np.ndarray:
    """The weight of every decoded pixel of every window in the blended video.

    Diffusers' blending (:func:`decode_in_tiles`) is linear and position-wise: the output pixel
    at ``(y, x)`` is ``sum_t W_t(y, x) · tile_t(y, x)`` over the tiles covering it, with weights
    from the ramps alone (not separable: the in-place blending counts the diagonal neighbour
    through both its neighbours, so the corner weights are not products of the row and column
    ramps). The weights are therefore read off the oracle itself: it blends one-hot tiles, one
    channel per colour ``(i mod kr, j mod kc)`` with ``kr · stride >= size`` so that tiles of one
    colour never overlap, and each tile's weights are its colour's channel over its window, zero
    outside the tile's kept ``[start, start + length)``; a window's weights are the sum of its
    tiles' (they decode to the same pixels).

    Args:
        tiling: tile sizes in pixels.
        h: latent height.
        w: latent width.
        scale: spatial compression (8).

    Returns:
        ``[window rows, window cols, S, Sw]`` float32 (read-only): window ``(k, l)``'s weights, in
        its own pixels (:class:`TileWindows`).
    """
    windows = tile_windows(tiling, h, w, scale)
    row_spans, col_spans = tiling.latent_grid(h, w, scale)
    stride_h, stride_w = (s // scale for s in windows.stride_px)
    kr = -(-(tiling.tile_sample_min_height // scale) // stride_h)
    kc = -(-(tiling.tile_sample_min_width // scale) // stride_w)
    # Each latent pixel holds its own (row, col), so a tile says where it was cut from.
    coords = np.stack(np.meshgrid(np.arange(h), np.arange(w), indexing="ij"), axis=-1)

    def one_hot(tile: np.ndarray) -> np.ndarray:
        i, j = (int(c) for c in tile[0, 0, 0, 0])
        out = np.zeros((1, 1, tile.shape[2] * scale, tile.shape[3] * scale, kr * kc), np.float32)
        out[..., (i // stride_h % kr) * kc + j // stride_w % kc] = 1.0
        return out

    canvas = decode_in_tiles(one_hot, coords[None, None], tiling, scale)[0, 0]
    s_h, s_w = windows.window_px
    weights = np.zeros((len(windows.row_starts), len(windows.col_starts), s_h, s_w), np.float32)
    for i, (start_i, len_i) in enumerate(row_spans):
        for j, (start_j, len_j) in enumerate(col_spans):
            row, col = windows.window_of(start_i, start_j)
            y0, x0 = windows.row_starts[row] * scale, windows.col_starts[col] * scale
            keep_y = slice(start_i * scale - y0, (start_i + len_i) * scale - y0)
            keep_x = slice(start_j * scale - x0, (start_j + len_j) * scale - x0)
            window = canvas[y0 : y0 + s_h, x0 : x0 + s_w, (i % kr) * kc + j % kc]
            weights[row, col, keep_y, keep_x] += window[keep_y, keep_x]
    weights.flags.writeable = False
    return weights


def blend_windows(
    decode_window: Callable[[jax.Array], jax.Array],
    z: jax.Array,
    windows: TileWindows,
    weights: jax.Array,
    *,
    to_uint8: bool,
) -> tuple[jax.Array, jax.Array]:
    """The tiled decode as one traced program: every window decoded and blended on the device.

    The device counterpart of :func:`decode_in_tiles` (its oracle): a ``lax.scan`` over window
    rows, and in it one over window columns, so ``decode_window`` is traced once. Window row ``k``
    accumulates into a float32 strip of the video's pixel rows ``[k · stride_h, k · stride_h +
    Hs)`` (``Hs`` = :attr:`TileWindows.strip_height`): each window's output times its weights
    (:func:`tile_blend_weights`), moved up by the row's shift, is added at its columns. After the
    row the strip's first ``stride_h`` rows are final (later tiles start below them): they are
    clipped (and converted to uint8 exactly as :func:`models.frames.video_to_uint8` does) and
    emitted, the rest carried up into the next row's strip. After the last row the carried rest
    is emitted too (the last window row may hold several tile rows).

    The strip and the result keep the 3 colour channels folded into the last axis (``8w · 3``):
    TPU memory pads an array's minor axis to 128 lanes, which would make a ``[..., 8w, 3]``
    strip or video ~40 times its size; a window's output is refolded as it is added.

    Args:
        decode_window: ``[B, F, th, tw, C]`` latent window → ``[B, T, S, Sw, 3]`` float32 (traced).
        z: ``[B, F, h, w, C]`` channels-last latents.
        windows: the grid's windows (:func:`tile_windows`).
        weights: ``[window rows, window cols, S, Sw]`` float32 (:func:`tile_blend_weights`).
        to_uint8: emit uint8 frames instead of the clipped float32 video.

    Returns:
        ``([B, T, scale·h, scale·w · 3]`` float32 in [-1, 1] or uint8 (``[..., scale·w, 3]``
        folded), and a bool scalar: whether every blended value was finite).
    """
    b, f, h, w, c = z.shape
    th, tw = windows.window_hw
    scale = windows.scale
    stride_h = windows.stride_px[0]
    strip_h = windows.strip_height
    window_struct = jax.ShapeDtypeStruct((b, f, th, tw, c), z.dtype)
    _, frames, s_h, s_w, channels = jax.eval_shape(decode_window, window_struct).shape

    def add_tile(strip, y0, shift, x0, weight):
        window = jax.lax.dynamic_slice(z, (0, 0, y0, x0, 0), (b, f, th, tw, c))
        part = decode_window(window) * weight[:, :, None]  # [B, T, S, Sw, 3]
        part = part.reshape(b, frames, s_h, s_w * channels)
        # Window rows → strip rows: pad below, then take the rows from the shift on.
        part = jnp.pad(part, ((0, 0), (0, 0), (0, strip_h), (0, 0)))
        part = jax.lax.dynamic_slice_in_dim(part, shift, strip_h, axis=2)
        x = x0 * scale * channels
        here = jax.lax.dynamic_slice_in_dim(strip, x, s_w * channels, axis=3)
        return jax.lax.dynamic_update_slice_in_dim(strip, here + part, x, axis=3)

    def finish(rows):  # final float32 rows → (clipped float32 or uint8 rows, all finite)
        finite = jnp.isfinite(rows).all()
        rows = jnp.clip(rows, -1.0, 1.0)
        if to_uint8:
            rows = jnp.round(jnp.clip(rows / 2.0 + 0.5, 0.0, 1.0) * 255.0).astype(jnp.uint8)
        return rows, finite

    def tile_row(carry, row):
        strip, finite = carry
        y0, shift, row_weights = row

        def column(strip, col):
            x0, weight = col
            return add_tile(strip, y0, shift, x0, weight), None

        strip, _ = jax.lax.scan(column, strip, (col_starts, row_weights))
        done, done_finite = finish(strip[:, :, :stride_h])
        strip = jnp.concatenate([strip[:, :, stride_h:], jnp.zeros_like(strip[:, :, :stride_h])], 2)
        return (strip, finite & done_finite), done

    col_starts = jnp.asarray(windows.col_starts, jnp.int32)
    rows = (
        jnp.asarray(windows.row_starts, jnp.int32),
        jnp.asarray(windows.row_shifts, jnp.int32),
        weights,
    )
    strip = jnp.zeros((b, frames, strip_h, w * scale * channels), jnp.float32)
    (strip, finite), done = jax.lax.scan(tile_row, (strip, jnp.array(True)), rows)
    tail, tail_finite = finish(strip[:, :, : strip_h - stride_h])
    video = jnp.moveaxis(done, 0, 2)  # [B, T, window rows, stride_h, 8w · 3]
    video = video.reshape(b, frames, -1, w * scale * channels)
    video = jnp.concatenate([video, tail], axis=2)[:, :, : h * scale]
    return video, finite & tail_finite
