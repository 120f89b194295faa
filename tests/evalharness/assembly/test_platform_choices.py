"""``auto`` per platform: tiles, dense controls and dtype, with the platform faked as TPU / GPU."""

import jax.numpy as jnp
import pytest

from evalharness.assembly import platform_choices
from evalharness.config import token_geometry
from evalharness.config.schemas import (
    ComputeDType,
    DenseExecutor,
    KernelBackend,
    KernelConfig,
    to_config,
)
from kernels.executors.pallas_tpu_budget import (
    VMEM_AUTO_CAP_BYTES,
    auto_vmem_limit_bytes,
    kernel_vmem_bytes,
)
from kernels.executors.splash_tiles import splash_tiles, splash_vmem_bytes
from kernels.executors.tpu_generation import scoped_vmem_limit
from kernels.plans.block_sizes import BlockSizes
from tests.helpers.harness_config import small_config

TOKENS_720P = 75_600


@pytest.mark.parametrize(
    ("platform", "backend", "tiles", "dense", "floor"),
    [
        ("tpu", "pallas_tpu", (3328, 1536), "splash", "b0"),
        ("gpu", "pallas_gpu", (128, 64), "cudnn", "b0"),
        ("cpu", "xla", (128, 128), "xla_flash", "dot_product_attention"),
    ],
)
def test_auto_picks_the_platforms_tiles_and_dense_controls(platform, backend, tiles, dense, floor):
    kernel = platform_choices.resolve_kernel(KernelConfig(), platform, TOKENS_720P)
    assert kernel.backend is KernelBackend(backend)
    assert (kernel.block_q, kernel.block_kv) == tiles
    assert kernel.dense_executor is DenseExecutor(dense)
    assert kernel.noise_floor_executor is DenseExecutor(floor)


def test_auto_shrinks_tpu_tiles_for_short_sequences():
    kernel = platform_choices.resolve_kernel(KernelConfig(), "tpu", 2160)
    assert kernel.block_q <= 2176 and kernel.block_kv <= 2176
    assert kernel.block_q % 128 == 0 and kernel.block_kv % 128 == 0


def test_auto_shrinks_gpu_tiles_to_powers_of_two_for_short_sequences():
    kernel = platform_choices.resolve_kernel(KernelConfig(), "gpu", 40)  # 48 tokens rounded: 64
    assert (kernel.block_q, kernel.block_kv) == (64, 64)
    kernel = platform_choices.resolve_kernel(KernelConfig(), "gpu", 2160)
    assert (kernel.block_q, kernel.block_kv) == (128, 64)


def test_explicit_tiles_and_executors_are_kept():
    requested = KernelConfig(block_q=256, dense_executor=DenseExecutor.b0)
    kernel = platform_choices.resolve_kernel(requested, "tpu", TOKENS_720P)
    assert (kernel.block_q, kernel.block_kv) == (256, 1536)
    # The user pinned the dense arm to B0, which auto would pick second: the other control moves.
    assert kernel.dense_executor is DenseExecutor.b0
    assert kernel.noise_floor_executor is DenseExecutor.splash


def test_pinned_tiles_that_do_not_suit_the_platform_name_its_own():
    # The seed experiment pins the TPU's 3,328 x 1,536 tiles; aimed at a GPU they are refused,
    # pointing at the GPU's tiles rather than at a power of two that would overflow the SM.
    seed_tiles = KernelConfig(block_q=3328, block_kv=1536)
    with pytest.raises(ValueError, match=r"kernel.block_q=null kernel.block_kv=null .*128 x 64"):
        platform_choices.resolve_kernel(seed_tiles, "gpu", 75_600)
    assert platform_choices.resolve_kernel(seed_tiles, "tpu", 75_600).block_q == 3328
    with pytest.raises(ValueError, match=r"not a multiple of 8 .*128 x 128 here"):
        platform_choices.resolve_kernel(KernelConfig(block_q=100, block_kv=128), "cpu", 2160)


def test_equal_dense_executors_are_refused():
    same = KernelConfig(dense_executor=DenseExecutor.b0, noise_floor_executor=DenseExecutor.b0)
    with pytest.raises(ValueError, match="noise_floor_executor"):
        platform_choices.resolve_kernel(same, "cpu", 2160)


@pytest.mark.parametrize(
    ("executor", "platform"), [("splash", "cpu"), ("cudnn", "tpu"), ("cudnn", "cpu")]
)
def test_platform_only_executors_are_refused_elsewhere(executor, platform):
    kernel = KernelConfig(dense_executor=DenseExecutor(executor))
    with pytest.raises(ValueError, match=f"dense_executor={executor} runs on"):
        platform_choices.resolve_kernel(kernel, platform, 2160)


def test_pallas_tpu_off_a_tpu_is_refused_not_interpreted():
    with pytest.raises(ValueError, match="kernel.backend=pallas_tpu needs a TPU"):
        platform_choices.resolve_kernel(KernelConfig(backend=KernelBackend.pallas_tpu), "gpu", 2160)


@pytest.mark.parametrize(("platform", "instead"), [("cpu", "xla"), ("tpu", "pallas_tpu")])
def test_pallas_gpu_off_a_gpu_is_refused_with_the_setting_to_change(platform, instead):
    kernel = KernelConfig(backend=KernelBackend.pallas_gpu)
    with pytest.raises(ValueError, match="kernel.backend=pallas_gpu needs a GPU") as info:
        platform_choices.resolve_kernel(kernel, platform, 2160)
    assert f"use kernel={instead} (or kernel=auto)" in str(info.value)
    assert "target=h200" in str(info.value)


def test_pallas_gpu_on_a_gpu_keeps_its_launch_settings():
    requested = KernelConfig(backend=KernelBackend.pallas_gpu, num_warps=4, num_stages=3)
    kernel = platform_choices.resolve_kernel(requested, "gpu", 75_600)
    assert kernel.backend is KernelBackend.pallas_gpu
    assert (kernel.num_warps, kernel.num_stages) == (4, 3)
    assert platform_choices.resolve_kernel(KernelConfig(num_stages=1), "gpu", 2160).num_stages == 1


@pytest.mark.parametrize(
    ("backend", "platform"),
    [("auto", "cpu"), ("auto", "tpu"), ("xla", "gpu"), ("reference", "gpu")],
)
@pytest.mark.parametrize("setting", ["num_warps", "num_stages"])
def test_gpu_launch_settings_off_pallas_gpu_are_refused_not_ignored(backend, platform, setting):
    kernel = KernelConfig(backend=KernelBackend(backend), **{setting: 4})
    with pytest.raises(
        ValueError, match=f"kernel.{setting}=4 applies to kernel.backend=pallas_gpu"
    ):
        platform_choices.resolve_kernel(kernel, platform, 2160)


def test_unknown_platform_is_refused():
    with pytest.raises(ValueError, match="platform='metal'"):
        platform_choices.resolve_kernel(KernelConfig(), "metal", 2160)


# small_config pins the CPU tests' 8 x 8 tiles; runs resolved for a TPU or GPU take the platform's.
PLATFORM_TILES = ("kernel.block_q=null", "kernel.block_kv=null")


@pytest.mark.parametrize(
    ("model", "platform", "expected"),
    [
        ("tiny-planted", "cpu", ComputeDType.float32),
        ("tiny-planted", "tpu", ComputeDType.float32),
        (
            "tiny-planted",
            "gpu",
            ComputeDType.bfloat16,
        ),  # cuDNN, the GPU's dense arm, takes bf16 only
        ("tiny-random", "cpu", ComputeDType.float32),  # the other seeded preset
        ("wan2.1-t2v-14b", "tpu", ComputeDType.bfloat16),
        ("wan2.1-t2v-14b", "cpu", ComputeDType.bfloat16),
        ("wan2.1-t2v-1.3b", "gpu", ComputeDType.bfloat16),
    ],
)
def test_auto_dtype_is_bf16_for_checkpoints_and_on_gpu(tmp_path, model, platform, expected):
    cfg = to_config(
        small_config(tmp_path, f"model={model}", "model.checkpoint=null", *PLATFORM_TILES)
    )
    resolved = platform_choices.resolve(cfg, platform)
    assert resolved.dtype is expected
    assert cfg.dtype is ComputeDType.auto  # the input is not modified


def test_explicit_dtype_wins(tmp_path):
    cfg = to_config(
        small_config(
            tmp_path,
            "model=wan2.1-t2v-14b",
            "model.checkpoint=null",
            "dtype=float32",
            *PLATFORM_TILES,
        )
    )
    assert platform_choices.resolve(cfg, "tpu").dtype is ComputeDType.float32


def test_the_default_job_resolves_to_bf16_pallas_gpu_and_cudnn_on_a_gpu(tmp_path):
    resolved = platform_choices.resolve(to_config(small_config(tmp_path, small=False)), "gpu")
    assert resolved.model.name == "tiny" and resolved.dtype is ComputeDType.bfloat16
    assert resolved.kernel.backend is KernelBackend.pallas_gpu
    assert (resolved.kernel.dense_executor, resolved.kernel.noise_floor_executor) == (
        DenseExecutor.cudnn,
        DenseExecutor.b0,
    )


@pytest.mark.parametrize("setting", ["dense_executor", "noise_floor_executor"])
def test_cudnn_in_float32_is_refused_before_anything_compiles(tmp_path, setting):
    overrides = ["dtype=float32", *PLATFORM_TILES]
    if setting == "noise_floor_executor":
        overrides += ["kernel.dense_executor=b0", "kernel.noise_floor_executor=cudnn"]
    cfg = to_config(small_config(tmp_path, *overrides))
    with pytest.raises(ValueError, match=f"kernel.{setting}=cudnn takes bfloat16 only"):
        platform_choices.resolve(cfg, "gpu")
    explicit = "kernel.dense_executor=b0", "kernel.noise_floor_executor=dot_product_attention"
    assert platform_choices.resolve(
        to_config(small_config(tmp_path, *overrides[:3], *explicit)), "gpu"
    )


def test_seed_experiment_resolves_to_the_seed_setting_on_tpu(tmp_path):
    cfg = to_config(
        small_config(tmp_path, "experiment=seed_720p", "model.checkpoint=null", small=False)
    )
    resolved = platform_choices.resolve(cfg, "tpu")
    assert resolved.kernel.backend is KernelBackend.pallas_tpu
    assert (resolved.kernel.block_q, resolved.kernel.block_kv) == (3328, 1536)
    assert resolved.dtype is ComputeDType.bfloat16
    assert resolved.parallel.sequence == 8
    assert (resolved.kernel.dense_executor, resolved.kernel.noise_floor_executor) == (
        DenseExecutor.splash,
        DenseExecutor.b0,
    )


PRESETS = ("cpu", "480p", "720p", "1080p", "1440p")
SCHEDULES = ("conservative", "balanced", "aggressive", "svg_720p", "dense")


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("resolution", PRESETS)
def test_automatic_tiles_fit_the_band_and_the_chip(tmp_path, resolution, schedule):
    # Over every preset geometry and schedule, on every platform: no automatic tile is wider
    # than the band the sparse arm keeps, and on a TPU both executors' tiles fit the scoped VMEM
    # of a v5e and a v6e (ours by asking Mosaic for a larger limit, splash within the default).
    cfg = to_config(
        small_config(tmp_path, f"resolution={resolution}", f"schedule={schedule}", small=False)
    )
    geometry = token_geometry(cfg.resolution.video)
    for platform in ("tpu", "gpu", "cpu"):
        resolved = platform_choices.resolve(cfg, platform)
        tiles = BlockSizes(resolved.kernel.block_q, resolved.kernel.block_kv)
        tiles.validate(geometry.tokens, resolved.kernel.backend.value)
        if cfg.schedule.sparse:
            width = 2 * cfg.schedule.band(geometry).half_width + 1
            assert max(tiles.block_q, tiles.block_kv) <= width, platform
            cfg.schedule.validate(geometry, tiles)  # the run's own check passes
        if platform == "tpu":
            _assert_tpu_tiles_fit(tiles, geometry.tokens)


def _assert_tpu_tiles_fit(tiles: BlockSizes, tokens: int) -> None:
    ours = kernel_vmem_bytes(tiles.block_q, tiles.block_kv, 128, jnp.bfloat16)
    asked = auto_vmem_limit_bytes(ours)
    for generation in ("v5e", "v6e"):
        limit = scoped_vmem_limit(generation) if asked is None else asked
        assert ours <= limit <= VMEM_AUTO_CAP_BYTES
        splash = splash_tiles(tokens, generation=generation)
        assert splash_vmem_bytes(splash, tokens, 128, 2) <= scoped_vmem_limit(generation)


def test_the_default_job_on_a_tpu_gets_tiles_within_its_band(tmp_path):
    # 2,160 tokens at density 0.35: a 605-token band, so 512 x 512 tiles (the seed's 720p tiles
    # were refused at preflight).
    cfg = platform_choices.resolve(to_config(small_config(tmp_path, small=False)), "tpu")
    assert (cfg.kernel.block_q, cfg.kernel.block_kv) == (512, 512)
