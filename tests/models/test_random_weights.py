"""Random weights at a preset's real shapes (``models.random_weights``): the 1.3B and 14B
transformers and the Wan VAE are checked shape by shape without allocating a weight; the tiny
preset's are drawn for real."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from kernels.parallel.mesh import make_mesh
from models.config import get_transformer_config
from models.loading import diffusers_key_map
from models.random_weights import (
    preset_vae_config,
    random_identity,
    random_prompt_encoder,
    random_text_config,
    random_transformer,
    random_vae,
)
from models.sharding import param_shardings
from models.transformer import abstract_transformer
from models.vae import WanVAE, WanVAEConfig


def _shapes(state) -> dict[tuple, tuple]:
    """``{path: (shape, dtype)}`` of every parameter of an ``nnx.State``."""
    shapes = {}
    for path, x in jax.tree_util.tree_leaves_with_path(state):
        names = tuple(str(getattr(k, "key", getattr(k, "name", k))) for k in path)
        shapes[names[:-1] if names[-1] == "value" else names] = (x.shape, jnp.dtype(x.dtype))
    return shapes


# 14B's 40 blocks take 12 s on 2 cores: the slow step checks it, the default suite 1.3B's 30.
@pytest.mark.parametrize(
    "preset", ["wan2.1-t2v-1.3b", pytest.param("wan2.1-t2v-14b", marks=pytest.mark.slow)]
)
def test_a_random_wan_transformer_has_the_checkpoints_layout_without_allocating(preset):
    config = get_transformer_config(preset)
    drawn = jax.eval_shape(
        lambda: nnx.state(
            random_transformer(config, 0, param_dtype=jnp.bfloat16, dtype=jnp.bfloat16)
        )
    )
    skeleton = abstract_transformer(config, param_dtype=jnp.bfloat16, dtype=jnp.bfloat16)
    # The skeleton checkpoint loading fills: the same parameters, shapes and dtypes.
    assert _shapes(drawn) == _shapes(nnx.state(skeleton))
    # Every tensor of the diffusers checkpoint lands on one of them, and every one is covered.
    covered = {tuple(str(p) for p in path) for path, _ in diffusers_key_map(config).values()}
    assert covered == set(_shapes(drawn))
    total = sum(int(np.prod(shape)) for shape, _ in _shapes(drawn).values())
    assert total == pytest.approx(
        {"wan2.1-t2v-1.3b": 1.42e9, "wan2.1-t2v-14b": 14.29e9}[preset], rel=0.01
    )


@pytest.mark.slow
def test_the_scanned_form_stacks_the_same_layout():
    config = get_transformer_config("wan2.1-t2v-1.3b")
    drawn = jax.eval_shape(lambda: nnx.state(random_transformer(config, 0, scan_layers=True)))
    skeleton = abstract_transformer(
        config, param_dtype=jnp.bfloat16, dtype=jnp.bfloat16, scan_layers=True
    )
    assert _shapes(drawn) == _shapes(nnx.state(skeleton))
    blocks = {k: v for k, v in _shapes(drawn).items() if k[0] == "blocks"}
    assert blocks and all(shape[0] == config.num_layers for shape, _ in blocks.values())


def test_the_random_wan_vae_is_wan_2_1s_decoder():
    assert preset_vae_config("wan2.1-t2v-14b") == WanVAEConfig()
    drawn = nnx.eval_shape(lambda: random_vae("wan2.1-t2v-1.3b", 0))
    real = nnx.eval_shape(lambda: WanVAE(WanVAEConfig(), rngs=nnx.Rngs(0)))
    assert _shapes(nnx.state(drawn)) == _shapes(nnx.state(real))


def test_random_prompt_embeddings_have_wans_shape_and_zero_past_the_prompt(tmp_path):
    encoder = random_prompt_encoder(4096, 0, max_length=512, cache_dir=tmp_path)
    out = encoder.encode(["a cat", ""])
    assert out.shape == (2, 512, 4096) and out.dtype == np.float32
    assert np.all(np.isfinite(out)) and np.abs(out[0, :5]).min() > 0
    # "a cat" is 5 bytes and </s>: zero after position 6, as the real encoder's output is.
    assert not out[0, 6:].any() and not out[1, 1:].any()
    again = random_prompt_encoder(4096, 0, max_length=512, cache_dir=None).encode(["a cat"])
    other = random_prompt_encoder(4096, 1, max_length=512, cache_dir=None).encode(["a cat"])
    np.testing.assert_array_equal(again[0], out[0])
    assert not np.array_equal(other[0], out[0])
    assert random_text_config(4096).d_model == 4096


@pytest.mark.slow
def test_tiny_random_weights_follow_the_seed_and_land_on_the_mesh():
    config = get_transformer_config("tiny")
    first = nnx.state(random_transformer(config, 3, param_dtype=jnp.float32, dtype=jnp.float32))
    other = nnx.state(random_transformer(config, 4, param_dtype=jnp.float32, dtype=jnp.float32))
    mesh = make_mesh(1)
    shardings = functools.partial(param_shardings, mesh=mesh, rule="fsdp")
    placed = random_transformer(
        config, 3, param_dtype=jnp.float32, dtype=jnp.float32, shardings=shardings
    )
    leaves = jax.tree.leaves
    # The same seed draws the same weights, whether or not they are placed on a mesh.
    for a, b in zip(leaves(first), leaves(nnx.state(placed)), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert any(not np.array_equal(a, b) for a, b in zip(leaves(first), leaves(other), strict=True))
    assert random_identity("tiny", 3) != random_identity("tiny", 4)
