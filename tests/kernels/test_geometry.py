"""Token geometry, temporal layout permutations and per-head layout selection."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from kernels.masks.geometry import TokenGeometry
from kernels.masks.layouts import (
    from_head_layouts,
    inverse_temporal_permutation,
    temporal_permutation,
    temporal_position,
    to_frame_major,
    to_head_layouts,
    to_temporal_major,
)
from tests.helpers.geometry import preset_tokens
from tests.helpers.numerics import assert_allclose


def test_presets_match_wan_token_counts():
    expected = {"480p": 32_760, "720p": 75_600, "1080p": 171_360, "1440p": 302_400}
    for name, tokens in expected.items():
        geometry = preset_tokens(name)
        assert geometry.tokens == tokens
        assert geometry.frames == 21
    assert preset_tokens("720p").tokens_per_frame == 3_600


@pytest.mark.parametrize("bad", [(0, 2, 2), (2, -1, 2), (2, 2, 1.5), (True, 2, 2)])
def test_geometry_rejects_bad_sizes(bad):
    with pytest.raises(ValueError, match="positive int"):
        TokenGeometry(*bad)


def test_unknown_resolution_lists_presets():
    with pytest.raises(ValueError, match="720p"):
        preset_tokens("4k")


def test_temporal_permutation_hand_written():
    # F=3 frames of S=2 tokens, SVG's (position, frame) order over every frame: p * F + f.
    geometry = TokenGeometry(3, 1, 2)
    np.testing.assert_array_equal(temporal_permutation(geometry), [0, 2, 4, 1, 3, 5])
    np.testing.assert_array_equal(inverse_temporal_permutation(geometry), [0, 3, 1, 4, 2, 5])
    geometry = TokenGeometry(3, 1, 3)  # S=3: [0 3 6 | 1 4 7 | 2 5 8]
    np.testing.assert_array_equal(temporal_permutation(geometry), [0, 3, 6, 1, 4, 7, 2, 5, 8])


@pytest.mark.parametrize("geometry", [TokenGeometry(4, 2, 3), TokenGeometry(1, 3, 3)])
def test_permutation_inverse_and_arithmetic_form_agree(geometry):
    perm = temporal_permutation(geometry)
    inv = inverse_temporal_permutation(geometry)
    np.testing.assert_array_equal(np.sort(perm), np.arange(geometry.tokens))
    np.testing.assert_array_equal(perm[inv], np.arange(geometry.tokens))
    idx = np.arange(geometry.tokens)
    np.testing.assert_array_equal(temporal_position(idx, geometry), inv)
    np.testing.assert_array_equal(np.asarray(temporal_position(jnp.asarray(idx), geometry)), inv)
    # Every frame of one spatial position is contiguous, in frame order (frame 0 included).
    s, f = geometry.tokens_per_frame, geometry.frames
    np.testing.assert_array_equal(perm.reshape(s, f) % s, np.repeat(np.arange(s)[:, None], f, 1))
    np.testing.assert_array_equal(perm.reshape(s, f) // s, np.tile(np.arange(f), (s, 1)))


def test_head_layouts_per_head_and_round_trip():
    geometry = TokenGeometry(3, 2, 2)
    x = jax.random.normal(jax.random.key(0), (2, geometry.tokens, 3, 8))
    flags = jnp.array([True, False, True])
    moved = to_head_layouts(x, geometry, flags)
    perm = temporal_permutation(geometry)
    assert_allclose(moved[:, :, 0], x[:, perm, 0])
    assert_allclose(moved[:, :, 1], x[:, :, 1])
    assert_allclose(moved[:, :, 2], x[:, perm, 2])
    assert_allclose(from_head_layouts(moved, geometry, flags), x)


PRESETS = ("cpu", "480p", "720p", "1080p", "1440p")


@pytest.mark.parametrize("preset", PRESETS)
def test_transposed_layouts_equal_the_permutation_gather(preset):
    # The layout change the sparse arm runs (a reshape and transpose) against its definition (a
    # gather by the permutation), exactly, both ways, at every preset's real token count.
    geometry = preset_tokens(preset)
    n = geometry.tokens
    x = jnp.arange(2 * n * 3, dtype=jnp.int32).reshape(2, n, 3, 1)
    forward = to_temporal_major(x, geometry)
    np.testing.assert_array_equal(forward, jnp.take(x, temporal_permutation(geometry), axis=1))
    back = to_frame_major(x, geometry)
    np.testing.assert_array_equal(back, jnp.take(x, inverse_temporal_permutation(geometry), axis=1))
    np.testing.assert_array_equal(to_frame_major(forward, geometry), x)
    # Another token axis (a heads-leading tensor) moves the same way.
    heads_leading = jnp.swapaxes(x, 1, 2)
    np.testing.assert_array_equal(
        to_temporal_major(heads_leading, geometry, axis=2), jnp.swapaxes(forward, 1, 2)
    )


@pytest.mark.parametrize("preset", PRESETS)
def test_head_layouts_per_batch_row_equal_the_gather(preset):
    # Mixed temporal and spatial heads, routed differently in the two halves of a guided batch
    # (conditional, unconditional), against a per-(batch, head) gather.
    geometry = preset_tokens(preset)
    n = geometry.tokens
    x = jax.random.normal(jax.random.key(1), (2, n, 4, 2), jnp.bfloat16)
    flags = jnp.array([[True, False, True, False], [False, False, True, True]])
    perm, inv = temporal_permutation(geometry), inverse_temporal_permutation(geometry)
    moved = to_head_layouts(x, geometry, flags)
    for b in range(2):
        for h in range(4):
            want = x[b, perm, h] if flags[b, h] else x[b, :, h]
            np.testing.assert_array_equal(moved[b, :, h], want)
    restored = from_head_layouts(moved, geometry, flags)
    np.testing.assert_array_equal(restored, x)
    for b in range(2):
        for h in range(4):
            want = moved[b, inv, h] if flags[b, h] else moved[b, :, h]
            np.testing.assert_array_equal(restored[b, :, h], want)


def test_traced_flags_do_not_recompile():
    geometry = TokenGeometry(3, 1, 2)  # with F=2 the temporal order would equal frame-major
    x = jnp.arange(2 * geometry.tokens * 2 * 4, dtype=jnp.float32).reshape(2, geometry.tokens, 2, 4)
    fn = jax.jit(lambda x, f: to_head_layouts(x, geometry, f))
    a = fn(x, jnp.array([True, False]))
    b = fn(x, jnp.array([False, True]))
    assert fn._cache_size() == 1
    assert not np.array_equal(np.asarray(a), np.asarray(b))


def test_layout_errors_name_the_problem():
    geometry = TokenGeometry(2, 2, 2)
    x = jnp.zeros((1, geometry.tokens, 2, 4))
    with pytest.raises(ValueError, match="one bool per head"):
        to_head_layouts(x, geometry, jnp.array([True, False, True]))
    with pytest.raises(ValueError, match="one per \\(batch, head\\)"):
        to_head_layouts(x, geometry, jnp.ones((2, 2), bool))
    with pytest.raises(ValueError, match="tokens"):
        to_head_layouts(jnp.zeros((1, 7, 2, 4)), geometry, jnp.array([True, False]))
