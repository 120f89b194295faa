"""Dense controls: splash/cuDNN/einsum/b0 against the oracle, the platform rule, the memory model."""

from __future__ import annotations

import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import pytest
from jax import export

from kernels.executors.dense_controls import (
    check_dense_pair,
    cudnn_attention,
    dense_controls,
    splash_attention,
)
from kernels.executors.dense_memory import dense_executor_temp_bytes, grows_quadratically
from kernels.executors.dispatch import KernelOptions, attention
from kernels.executors.reference import reference_attention
from kernels.executors.splash_tiles import (
    SPLASH_BLOCK_KV_COMPUTE,
    SplashTiles,
    splash_tiles,
    splash_vmem_bytes,
)
from kernels.executors.tpu_generation import describe_limit, generation_of, scoped_vmem_limit
from kernels.masks.band import BandMask, PaddingMask, band_for_density
from kernels.masks.geometry import TokenGeometry
from kernels.plans.block_sizes import BlockSizes
from kernels.plans.tiles import build_plan
from kernels.policy import DENSE_EXECUTORS, AttentionPolicy, SparsitySchedule, make_dense_attend
from tests.helpers.numerics import assert_allclose
from tests.helpers.paths import REPO_ROOT

# 300 tokens: not a multiple of 128, so splash pads (segment ids) and b0 has a partial last tile.
SHAPE = (2, 300, 2, 64)
# Relative to the output's magnitude (|out| <= max |v|): float32 rounding, bfloat16's 8-bit
# mantissa on inputs, scaled q and probabilities.
TOLERANCE = {jnp.float32: 1e-5, jnp.bfloat16: 2e-2}


def _qkv(shape, dtype, seed=0):
    keys = jax.random.split(jax.random.key(seed), 3)
    return tuple(3 * jax.random.normal(key, shape, jnp.float32).astype(dtype) for key in keys)


def _assert_matches_oracle(out, q, k, v, dtype):
    expected = reference_attention(q, k, v)
    scale = float(jnp.max(jnp.abs(expected.astype(jnp.float32))))
    tol = TOLERANCE[dtype]
    assert out.dtype == q.dtype
    assert_allclose(out, expected, atol=tol * scale, rtol=tol)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
@pytest.mark.parametrize(
    "executor", ["b0", "splash", "dot_product_attention", "reference", "xla_flash"]
)
def test_dense_executors_match_the_oracle(executor, dtype):
    q, k, v = _qkv(SHAPE, dtype, seed=1)
    attend = make_dense_attend(executor, options=KernelOptions(interpret=True))
    out = jax.jit(lambda q, k, v: attend(q, k, v, step=0, layer=0))(q, k, v)
    _assert_matches_oracle(out, q, k, v, dtype)


@pytest.mark.parametrize(
    "block_sizes", [BlockSizes(128, 256), BlockSizes(256, 128, 128), BlockSizes(256, 256, 128)]
)
def test_splash_with_several_tiles_matches_the_oracle(block_sizes):
    # Several query and key tiles per head, padded keys in the last key tile.
    q, k, v = _qkv(SHAPE, jnp.float32, seed=2)
    out = attention(
        q,
        k,
        v,
        executor="splash",
        block_sizes=block_sizes,
        options=KernelOptions(interpret=True),
    )
    _assert_matches_oracle(out, q, k, v, jnp.float32)


def test_splash_without_padding_matches_the_oracle():
    q, k, v = _qkv((1, 256, 3, 128), jnp.bfloat16, seed=3)
    assert splash_tiles(256).padded_tokens == 256
    out = splash_attention(q, k, v, block_sizes=BlockSizes(128, 128), interpret=True)
    _assert_matches_oracle(out, q, k, v, jnp.bfloat16)


@pytest.mark.parametrize("tokens", [384, 300])  # a multiple of the tiles, and padded
def test_splash_given_our_band_and_sink_matches_the_masked_oracle(tokens):
    # The peer b1-b3 are compared with: splash with the same band-plus-sink mask, lazily.
    q, k, v = _qkv((1, tokens, 2, 128), jnp.float32, seed=5)
    band = BandMask(tokens, 40, 16)
    out = splash_attention(q, k, v, block_sizes=BlockSizes(128, 128), interpret=True, band=band)
    expected = reference_attention(q, k, v, band)
    scale = float(jnp.max(jnp.abs(expected)))
    assert_allclose(out, expected, atol=TOLERANCE[jnp.float32] * scale, rtol=TOLERANCE[jnp.float32])
    # And it is not the dense answer: the mask changed the output.
    assert float(jnp.max(jnp.abs(out - reference_attention(q, k, v)))) > 0.1 * scale
    with pytest.raises(ValueError, match="band covers 100 tokens"):
        splash_attention(q, k, v, interpret=True, band=BandMask(100, 4, 4))


def test_splash_tiles_rule():
    # At Wan's 720p the fastest tiling measured on a v5e, which fits v5e's 16 MiB.
    wan_720p = splash_tiles(75_600, generation="v5e")
    assert (wan_720p.block_q, wan_720p.block_kv, wan_720p.block_kv_compute) == (1024, 2048, 512)
    assert wan_720p.padded_tokens == 75_776  # 37 x 2,048: 0.2% padding
    assert splash_tiles(300) == splash_tiles(384)
    assert (splash_tiles(300).block_q, splash_tiles(300).padded_tokens) == (384, 384)
    assert splash_tiles(300, BlockSizes(128, 256)).padded_tokens == 512
    with pytest.raises(ValueError, match="multiple of 128"):
        splash_tiles(300, BlockSizes(128, 200))
    with pytest.raises(ValueError, match="block_kv_compute=384"):
        splash_tiles(4096, None, 384)
    assert SPLASH_BLOCK_KV_COMPUTE % 128 == 0


@pytest.mark.parametrize("tokens", [2_160, 17_160, 32_760, 75_600, 171_360, 302_400])
@pytest.mark.parametrize("generation", ["v5e", "v6e", None])
def test_splash_tiles_fit_the_chips_scoped_vmem(tokens, generation):
    tiles = splash_tiles(tokens, generation=generation)
    need = splash_vmem_bytes(tiles, tokens, 128, 2)
    assert need <= scoped_vmem_limit(generation)
    assert tiles.padded_tokens % tiles.block_q == 0 and tiles.padded_tokens % tiles.block_kv == 0


# Mosaic's scoped VMEM for splash tilings (libtpu 0.0.42.1, bf16, head_dim 128), in MiB, as it
# printed them refusing each kernel for v5e's 16 MiB ("Scoped allocation with size 16.16M ..."):
# the first on a TPU v5e at 17,160 tokens, the others compiled for v5e from a CPU. The model is
# read at 17,160 tokens (padded to 18,432) for all three, as splash_tiles.py quotes them.
MOSAIC_SPLASH_MIB = {(2048, 1024, 512): 16.16, (2048, 2048, 512): 24.94, (2048, 1024, 1024): 19.03}


@pytest.mark.parametrize(
    ("tiling", "measured"),
    MOSAIC_SPLASH_MIB.items(),
    ids=["x".join(map(str, tiling)) for tiling in MOSAIC_SPLASH_MIB],
)
def test_the_splash_vmem_model_is_never_under_mosaic(tiling, measured):
    # Preflight accepts a tiling whose estimate fits the limit, so an estimate under Mosaic's
    # figure accepts tiles that do not compile: the model may lean over (at most 30%), never
    # under.
    bq, bkv, chunk = tiling
    estimate = splash_vmem_bytes(SplashTiles(bq, bkv, chunk, 18_432), 17_160, 128, 2) / (1 << 20)
    assert measured <= estimate <= measured * 1.3, (tiling, estimate)


def test_mosaics_refusals_are_tilings_the_rule_never_picks():
    # Every tiling Mosaic refused on v5e passes v5e's 16 MiB in the model as well.
    for bq, bkv, chunk in MOSAIC_SPLASH_MIB:
        tiles = SplashTiles(bq, bkv, chunk, 18_432)
        assert splash_vmem_bytes(tiles, 17_160, 128, 2) > 16 << 20
    chosen = splash_tiles(17_160, generation="v5e")
    assert (chosen.block_q, chosen.block_kv, chosen.block_kv_compute) not in MOSAIC_SPLASH_MIB


def test_splash_tiles_over_the_limit_are_refused_naming_the_fix(monkeypatch):
    with pytest.raises(
        ValueError, match=r"over this chip's 16 MiB, v5e's default.*LIBTPU_INIT_ARGS"
    ):
        splash_tiles(75_600, BlockSizes(2048, 2048), generation="v5e")
    assert splash_tiles(75_600, BlockSizes(2048, 2048), generation="v6e").block_q == 2048
    monkeypatch.setenv("LIBTPU_INIT_ARGS", "--xla_tpu_scoped_vmem_limit_kib=65536")
    assert splash_tiles(75_600, BlockSizes(2048, 2048), generation="v5e").block_q == 2048


def test_the_scoped_vmem_rule_reads_the_compiler_flag(monkeypatch):
    monkeypatch.delenv("LIBTPU_INIT_ARGS", raising=False)
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    assert scoped_vmem_limit("v5e") == 16 << 20
    assert scoped_vmem_limit("v6e") == 32 << 20
    assert scoped_vmem_limit(None) == 16 << 20
    assert generation_of("TPU v5 lite") == "v5e" and generation_of("TPU v6 lite") == "v6e"
    monkeypatch.setenv("LIBTPU_INIT_ARGS", "--foo=1 --xla_tpu_scoped_vmem_limit_kib=24576")
    assert scoped_vmem_limit("v5e") == 24 << 20
    assert "set by --xla_tpu_scoped_vmem_limit_kib" in describe_limit("v5e")


def test_splash_lowers_for_tpu_at_wan_14b_720p():
    # Mosaic lowering from a CPU: CFG batch 2, 75,600 tokens, 40 heads x 128, bfloat16.
    spec = jax.ShapeDtypeStruct((2, 75_600, 40, 128), jnp.bfloat16)
    exported = export.export(
        jax.jit(lambda q, k, v: attention(q, k, v, executor="splash")), platforms=["tpu"]
    )(spec, spec, spec)
    assert "tpu_custom_call" in exported.mlir_module()
    assert exported.out_avals[0].shape == spec.shape


def test_splash_off_a_tpu_needs_interpret():
    q, k, v = _qkv((1, 128, 1, 128), jnp.float32)
    with pytest.raises(ValueError, match="interpret"):
        jax.jit(lambda q, k, v: attention(q, k, v, executor="splash"))(q, k, v)


def test_cudnn_validates_dtype_and_head_dim():
    q, k, v = _qkv((1, 64, 2, 64), jnp.float32)
    with pytest.raises(ValueError, match="compute dtype bfloat16"):
        cudnn_attention(q, k, v)
    q, k, v = _qkv((1, 64, 2, 12), jnp.bfloat16)
    with pytest.raises(ValueError, match="head_dim a multiple of 8"):
        attention(q, k, v, executor="cudnn")


@pytest.mark.skipif(jax.default_backend() == "gpu", reason="checks the no-GPU message")
def test_cudnn_without_a_gpu_names_the_alternatives():
    q, k, v = _qkv((1, 64, 2, 64), jnp.bfloat16)
    with pytest.raises(ValueError, match="needs a CUDA GPU with cuDNN.*'b0'"):
        attention(q, k, v, executor="cudnn")


def test_cudnn_lowers_for_cuda_when_detection_is_stubbed(monkeypatch):
    # JAX asks the CUDA plugin for cuDNN's version and the GPU's compute capability while
    # tracing, so without a GPU nothing lowers. Stubbing those (JAX internals: skipped if they
    # move) shows what this executor hands to XLA: one cuDNN flash-attention custom call.
    fused = pytest.importorskip("jax._src.cudnn.fused_attention_stablehlo")
    for name, value in [
        ("check_cudnn_version", lambda: 91000),
        ("check_compute_capability", lambda capability: True),
        ("is_cuda_compute_capability_equal", lambda capability: False),
    ]:
        if not hasattr(fused, name):
            pytest.skip(f"JAX moved {name}")
        monkeypatch.setattr(fused, name, value)
    spec = jax.ShapeDtypeStruct((2, 1000, 2, 64), jnp.bfloat16)
    target = "__cudnn$fmhaSoftmax"
    exported = export.export(
        jax.jit(lambda q, k, v: attention(q, k, v, executor="cudnn")),
        platforms=["cuda"],
        disabled_checks=[export.DisabledSafetyCheck.custom_call(target)],
    )(spec, spec, spec)
    module = exported.mlir_module()
    assert f"custom_call @{target}" in module
    assert re.search(r"\\22is_flash_attention\\22: true", module)
    assert re.search(r"\\22fmha_scale\\22: 0.125", module)  # 1/sqrt(64)


@pytest.mark.parametrize("variant", ["splash", "cudnn", "dot_product_attention"])
def test_dense_controls_refuse_a_mask(variant):
    geometry = TokenGeometry(2, 4, 4)
    q, k, v = _qkv((1, geometry.tokens, 1, 64), jnp.bfloat16)
    with pytest.raises(ValueError, match="is a dense control"):
        attention(q, k, v, band_for_density(geometry, 0.5), executor=variant)


def test_platform_rule_and_equal_pair_refusal():
    assert dense_controls("tpu") == ("splash", "b0")
    assert dense_controls("gpu") == dense_controls("cuda") == ("cudnn", "b0")
    assert dense_controls("cpu") == ("xla_flash", "dot_product_attention")
    for platform in ("tpu", "gpu", "cuda", "cpu"):
        dense, floor = dense_controls(platform)
        check_dense_pair(dense, floor)
        assert {dense, floor} <= set(DENSE_EXECUTORS) - {"auto"}
    with pytest.raises(ValueError, match="platform='rocm'"):
        dense_controls("rocm")
    message = "noise_floor_executor=b0 equals dense_executor=b0: choose another, e.g."
    with pytest.raises(ValueError, match=message):
        check_dense_pair("b0", "b0")


def test_make_dense_attend_refuses_auto_and_unknown():
    with pytest.raises(ValueError, match="'auto' must be resolved.*dense_controls"):
        make_dense_attend("auto")
    with pytest.raises(ValueError, match="executor='flash'"):
        make_dense_attend("flash")


def test_pallas_options_reach_the_kernel(monkeypatch):
    # The Pallas TPU options pass from the policy through the dispatch to the kernel.
    from kernels.executors import pallas_tpu

    seen = []

    def record(q, k, v, plan, **kwargs):
        seen.append((plan.variant, kwargs["block_kv_compute"], kwargs["vmem_limit_bytes"]))
        return q

    monkeypatch.setattr(pallas_tpu, "pallas_blocksparse_attention", record)
    geometry = TokenGeometry(4, 8, 16)  # 512 tokens
    q, k, v = _qkv((1, geometry.tokens, 2, 64), jnp.float32)
    options = KernelOptions(vmem_limit_bytes=64 * 2**20)
    policy = AttentionPolicy(
        SparsitySchedule("s", 0.0, 0.0, 0.5, variant="b2"),
        geometry,
        num_steps=1,
        num_layers=1,
        backend="pallas_tpu",
        block_sizes=BlockSizes(128, 128, block_kv_compute=128),
        options=options,
    )
    policy.execute_band(q, k, v)
    policy.dense_attend(q, k, v, step=0, layer=0)
    assert seen == [("b2", 128, 64 * 2**20), ("b0", 128, 64 * 2**20)]
    make_dense_attend("b0", backend="xla", options=options)(q, k, v)  # ignored off Pallas
    assert len(seen) == 2


def test_pallas_b0_with_a_compute_chunk_matches_the_oracle():
    q, k, v = _qkv((1, 512, 2, 64), jnp.float32, seed=4)
    attend = make_dense_attend(
        "b0",
        backend="pallas_tpu",
        block_sizes=BlockSizes(256, 256, block_kv_compute=128),
        options=KernelOptions(interpret=True),
    )
    _assert_matches_oracle(attend(q, k, v), q, k, v, jnp.float32)


@pytest.mark.parametrize("executor", ["dot_product_attention", "reference", "b0"])
def test_memory_model_matches_the_compiled_temporaries(executor):
    # b0's XLA model is calibrated on 512 x 512 tiles; on 128 x 128 it overestimates (up to 1.5x
    # measured at 1,024-8,192 tokens), the safe side for a planner.
    batch, tokens, heads, head_dim = 1, 1024, 2, 64
    tiles = BlockSizes(512, 512)
    spec = jax.ShapeDtypeStruct((batch, tokens, heads, head_dim), jnp.float32)
    compiled = (
        jax.jit(lambda q, k, v: attention(q, k, v, executor=executor, block_sizes=tiles))
        .lower(spec, spec, spec)
        .compile()
    )
    measured = compiled.memory_analysis().temp_size_in_bytes
    model = dense_executor_temp_bytes(
        executor,
        batch=batch,
        heads=heads,
        tokens=tokens,
        head_dim=head_dim,
        dtype_bytes=4,
        block_q=tiles.block_q,
        block_kv=tiles.block_kv,
    )
    assert model == pytest.approx(measured, rel=0.25), (model, measured)


def test_memory_model_at_wan_14b_720p():
    sizes = {"batch": 2, "heads": 40, "tokens": 75_600, "head_dim": 128, "dtype_bytes": 2}
    einsum = dense_executor_temp_bytes("dot_product_attention", **sizes)
    assert einsum > 1.8e12  # the [B, H, N, N] float32 logits alone are 1.83 TB
    one_copy = 2 * 40 * 75_600 * 128 * 2  # one bfloat16 q, k, v or out: 1.55 GB
    assert dense_executor_temp_bytes("cudnn", **sizes) == one_copy
    # Splash: heads-leading, padded q, k, v, out (75,776 tokens).
    assert dense_executor_temp_bytes("splash", **sizes) == 4 * one_copy * 75_776 // 75_600
    # Our Pallas TPU b0 reads in place and unpadded: q's scaled copy, k and v laid out.
    pallas_b0 = dense_executor_temp_bytes(
        "b0", **sizes, block_q=3328, block_kv=1536, backend="pallas_tpu"
    )
    assert pallas_b0 == 3 * one_copy
    # head_dim 64 goes heads-leading: four copies, each row filling a 128-lane row.
    sixty_four = {**sizes, "heads": 80, "head_dim": 64}
    assert dense_executor_temp_bytes("b0", **sixty_four, backend="pallas_tpu") == 8 * one_copy
    quadratic = {e for e in DENSE_EXECUTORS[1:] if grows_quadratically(e)}
    assert quadratic == {"dot_product_attention", "reference"}
    with pytest.raises(ValueError, match="resolve 'auto'"):
        grows_quadratically("auto")
    with pytest.raises(ValueError, match="tokens=0"):
        dense_executor_temp_bytes("b0", **{**sizes, "tokens": 0})


def test_pallas_gpu_b0_memory_is_linear_in_padded_copies():
    # The softmax state stays in registers and shared memory: HBM holds q and out padded to
    # block_q, k and v padded to block_kv (128 x 64 at 720p: 75,648 tokens each).
    sizes = {"batch": 2, "heads": 40, "tokens": 75_600, "head_dim": 128, "dtype_bytes": 2}
    one_copy = 2 * 40 * 75_600 * 128 * 2
    gpu_b0 = dense_executor_temp_bytes(
        "b0", **sizes, block_q=128, block_kv=64, backend="pallas_gpu"
    )
    assert gpu_b0 == 4 * one_copy * 75_648 // 75_600
    # Default tiles are the GPU's own (128 x 64), not the 512 x 512 CPU default.
    assert dense_executor_temp_bytes("b0", **sizes, backend="pallas_gpu") == gpu_b0
    doubled = dense_executor_temp_bytes("b0", **{**sizes, "tokens": 151_200}, backend="pallas_gpu")
    assert doubled == pytest.approx(2 * gpu_b0, rel=1e-3)
    # No float32 state or score tiles in HBM, unlike the XLA scan (1.8x here).
    assert gpu_b0 < dense_executor_temp_bytes("b0", **sizes, block_q=128, block_kv=64) / 1.5
    with pytest.raises(ValueError, match="pallas_gpu"):
        dense_executor_temp_bytes("b0", **sizes, backend="triton")


def test_splash_is_imported_lazily():
    # Importing the executors must not pay for splash (about 0.2 s) before a run asks for it.
    code = (
        "import sys, kernels.executors, kernels.policy; "
        "print('splash_attention' in ' '.join(sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT, check=False
    )
    assert result.stdout.strip() == "False", result.stderr


def test_a_plan_runs_with_tiles_that_differ_only_in_the_compute_sub_tile():
    q, k, v = _qkv((1, 512, 2, 64), jnp.float32, seed=5)
    plan = build_plan(PaddingMask(512), BlockSizes(256, 256, block_kv_compute=128), "b0")
    out = attention(q, k, v, plan, executor=None, block_sizes=BlockSizes(256, 256))
    _assert_matches_oracle(out, q, k, v, jnp.float32)
    with pytest.raises(ValueError, match="but the plan uses"):
        attention(q, k, v, plan, executor=None, block_sizes=BlockSizes(128, 256))
