"""Random weights at a preset's real shapes (``models.random_weights``): the 1.3B and 14B
transformers and the Wan VAE are checked shape by shape without allocating a weight; the tiny
preset's are drawn for real, bit for bit those of the plain recipe (``WanTransformer`` under
``jit`` with ``nnx.Rngs(seed)``)."""

import dataclasses
import functools
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from kernels.parallel.mesh import make_mesh
from models.config import get_transformer_config
from models.loading import diffusers_key_map
from models.random_weights import (
    draw_transformer,
    preset_vae_config,
    random_identity,
    random_prompt_encoder,
    random_text_config,
    random_transformer,
    random_vae,
    reference_random_transformer,
)
from models.sharding import param_shardings
from models.transformer import WanTransformer, WanTransformerBlock, abstract_transformer
from models.vae import WanVAE, WanVAEConfig

ROOT = Path(__file__).resolve().parents[2]


def _shapes(state) -> dict[tuple, tuple]:
    """``{path: (shape, dtype)}`` of every parameter of an ``nnx.State``."""
    shapes = {}
    for path, x in jax.tree_util.tree_leaves_with_path(state):
        names = tuple(str(getattr(k, "key", getattr(k, "name", k))) for k in path)
        shapes[names[:-1] if names[-1] == "value" else names] = (x.shape, jnp.dtype(x.dtype))
    return shapes


# 14B's 40 blocks in the slow step, 1.3B's 30 in the default suite.
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


def _assert_bit_identical(got: nnx.Module, want: nnx.Module) -> None:
    """Same structure, paths, shapes, dtypes and bits in every parameter."""
    got_state, want_state = nnx.state(got), nnx.state(want)
    assert jax.tree.structure(got_state) == jax.tree.structure(want_state)
    pairs = zip(
        jax.tree_util.tree_leaves_with_path(got_state),
        jax.tree_util.tree_leaves_with_path(want_state),
        strict=True,
    )
    for (path, x), (_, y) in pairs:
        x, y = np.asarray(x), np.asarray(y)
        assert (x.shape, x.dtype) == (y.shape, y.dtype), jax.tree_util.keystr(path)
        assert np.array_equal(x.view(np.uint8), y.view(np.uint8)), jax.tree_util.keystr(path)


def _tiny_config(layers: int = 3):
    """The tiny preset at ``layers`` blocks (three: a first, a middle and a last block)."""
    return dataclasses.replace(get_transformer_config("tiny"), num_layers=layers)


# Each form compiles the plain recipe and the scanned draw (about 10 s on 2 cores): the unrolled
# one (the CPU's) here, the scanned one (the TPU's) in the slow step.
@pytest.mark.parametrize("scan_layers", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_the_scanned_draw_keeps_the_plain_recipes_weights_bit_for_bit(scan_layers):
    config = _tiny_config()
    kw = {"param_dtype": jnp.bfloat16, "dtype": jnp.bfloat16}
    drawn = random_transformer(config, 7, scan_layers=scan_layers, **kw)
    assert drawn.scan_layers == scan_layers and drawn.config == config
    assert isinstance(drawn.blocks, WanTransformerBlock if scan_layers else nnx.List)
    reference = reference_random_transformer(config, 7, scan_layers=scan_layers, **kw)
    _assert_bit_identical(drawn, reference)


def _primitive_count(jaxpr, name: str) -> int:
    """Equations of primitive ``name`` in ``jaxpr`` and every jaxpr nested in it."""
    count = 0
    for eqn in jaxpr.eqns:
        count += eqn.primitive.name == name
        for param in eqn.params.values():
            for sub in param if isinstance(param, tuple | list) else (param,):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    count += _primitive_count(inner, name)
    return count


def test_the_draw_program_holds_one_blocks_draw_whatever_the_depth():
    # Traced only: Wan 1.3B's widths at 2 and 8 blocks.
    def draws(layers: int, recipe: str) -> tuple[int, int]:
        config = dataclasses.replace(get_transformer_config("wan2.1-t2v-1.3b"), num_layers=layers)
        kw = {"param_dtype": jnp.bfloat16, "dtype": jnp.bfloat16, "scan_layers": True}
        if recipe == "scanned":
            jaxpr = jax.make_jaxpr(lambda key: nnx.state(draw_transformer(config, key, **kw)))(
                jax.random.key(0)
            )
        else:
            jaxpr = jax.make_jaxpr(
                lambda: nnx.state(WanTransformer(config, rngs=nnx.Rngs(0), **kw))
            )()
        bits = _primitive_count(jaxpr.jaxpr, "random_bits")
        return bits, _primitive_count(jaxpr.jaxpr, "random_fold_in")

    # The plain recipe draws every block in the program (its counts held in traced state)...
    plain_2, plain_8 = draws(2, "plain"), draws(8, "plain")
    assert plain_8[0] > plain_2[0] and plain_8[1] > plain_2[1]
    # ...the scanned draw one block, in the scan's body, whatever the depth.
    assert draws(2, "scanned") == draws(8, "scanned")
    assert draws(8, "scanned")[0] < plain_8[0]


def check_sharded_draw() -> None:
    """On 8 devices: the tiny model drawn onto an "fsdp" mesh (a low ``min_size`` so its
    matrices split) lands where the shardings say, with the unsharded draw's weights, in both
    forms. Run by :func:`test_the_draw_lands_on_eight_devices` in a process of 8 host devices."""
    assert jax.device_count() >= 8, jax.devices()
    config = _tiny_config()
    mesh = make_mesh(8)
    shardings = functools.partial(param_shardings, mesh=mesh, rule="fsdp", min_size=4096)
    kw = {"param_dtype": jnp.float32, "dtype": jnp.float32}
    for scan_layers in (False, True):
        placed = random_transformer(config, 5, scan_layers=scan_layers, shardings=shardings, **kw)
        plain = random_transformer(config, 5, scan_layers=scan_layers, **kw)
        _assert_bit_identical(placed, plain)
        wanted = jax.tree.leaves(shardings(placed))
        leaves = jax.tree.leaves(nnx.state(placed))
        assert any(
            len(x.sharding.device_set) == 8 and not x.sharding.is_fully_replicated for x in leaves
        )
        for x, sharding in zip(leaves, wanted, strict=True):
            assert x.sharding.is_equivalent_to(sharding, x.ndim), (x.shape, x.sharding, sharding)


@pytest.mark.slow
def test_the_draw_lands_on_eight_devices():
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=8"}
    env["JAX_PLATFORMS"] = "cpu"
    code = "from tests.models.test_random_weights import check_sharded_draw; check_sharded_draw()"
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
