"""The one conversion from decoded video in [-1, 1] to uint8 RGB frames.

Every path that produces frames (dense, sparse, tiny, checkpoint, tiled or not) goes through
:func:`video_to_uint8`, so quality metrics compare videos quantised the same way. It matches
diffusers' ``VideoProcessor`` + ``numpy_to_pil``: ``x/2 + 0.5`` clipped to [0, 1], ``·255``, rounded.
"""

from __future__ import annotations

import numpy as np


def video_to_uint8(video) -> np.ndarray:
    """Converts one decoded video to uint8 frames.

    Args:
        video: ``[T, H, W, 3]`` floats, nominally in [-1, 1] (values outside are clipped); any
            array-like (NumPy, JAX).

    Returns:
        ``[T, H, W, 3]`` uint8.

    Raises:
        ValueError: if the shape is not ``[T, H, W, 3]`` or values are not finite.
    """
    v = np.asarray(video, dtype=np.float32)
    if v.ndim != 4 or v.shape[-1] != 3:
        raise ValueError(f"video shape {v.shape}: expected [T, H, W, 3] (channels last, RGB)")
    if not np.isfinite(v).all():
        raise ValueError("video holds NaN or inf values; the decoder or the latents diverged")
    unit = np.clip(v / 2.0 + 0.5, 0.0, 1.0)
    return np.round(unit * 255.0).astype(np.uint8)
