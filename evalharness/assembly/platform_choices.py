"""Platform-dependent defaults: every ``auto`` of a config turned into a concrete choice.

One place decides what ``kernel.backend=auto``, ``kernel.block_q=null``, ``kernel.dense_executor=auto``
and ``dtype=auto`` mean, from the platform the run targets (the host's for a real run, the target's
for a dry run) and the sequence length:

| platform | backend | tiles (query x key) | dense arm | second dense control | compute dtype |
|---|---|---|---|---|---|
| tpu | pallas_tpu | seed 3,328 x 1,536* | splash attention | our B0 (Pallas TPU) | bf16 (ckpt) |
| gpu | pallas_gpu | 128 x 64 | cuDNN flash attention | our B0 (Pallas GPU) | bf16 (all) |
| cpu | xla | 128 x 128* | our xla_flash (XLA) | einsum attention | bf16 (ckpt) |

*each side no larger than the sequence, nor than the sparse band's full width (rounded down to the
backend's granularity): ``kernels.plans.block_sizes.auto_block_sizes``.

our xla_flash: online softmax over query chunks and key blocks as plain matmuls
(``kernels.executors.xla_flash``). B0 (the block-sparse scan over every tile) is not the CPU's dense
control: measured 2x slower than PyTorch's SDPA, it would inflate every CPU speedup; it
stays available by name (``kernel.dense_executor=b0``).

bf16 (ckpt): checkpoint models compute in bfloat16 and the tiny preset in float32 (its purpose is
a fast, exact CPU check). bf16 (all): on a GPU every model, tiny included, computes in bfloat16,
because the GPU's dense arm, cuDNN flash attention, takes bfloat16 only; a float32 run there must
name two other dense controls (e.g. ``kernel.dense_executor=b0
kernel.noise_floor_executor=dot_product_attention`` at small sizes). The resolved config is what
the run records (``config.yaml``, MLflow params, the dense cache key), so a run always says which
tiles and executors it timed. Nothing here falls back silently: an explicit
choice that does not suit the platform is refused with the setting to change.
"""

from __future__ import annotations

import dataclasses

import jax

from evalharness.config import (
    ComputeDType,
    DenseExecutor,
    EvalConfig,
    KernelBackend,
    KernelConfig,
    token_geometry,
)
from kernels.executors.dense_controls import check_dense_pair, dense_controls
from kernels.masks.geometry import TokenGeometry
from kernels.plans.block_sizes import BlockSizes, auto_block_sizes
from kernels.policy.schedule import SparsitySchedule
from kernels.registry import PLATFORMS as PLATFORM_TABLE
from kernels.registry import get_executor
from models.accelerator_env import platform_family
from models.config import TINY_PRESETS

PLATFORMS = tuple(PLATFORM_TABLE)


def host_platform() -> str:
    """The platform of this process's first device: ``tpu``, ``gpu`` or ``cpu``."""
    return platform_family(jax.devices()[0].platform)


# The platform each Pallas backend needs (``kernels.registry.PLATFORMS``), in words, with a
# dry-run target of it, for the refusal.
_PALLAS_NEEDS = {
    "pallas_tpu": ("tpu", "a TPU", "tpu-v6e-8"),
    "pallas_gpu": ("gpu", "a GPU", "h200"),
}


def backend_for(backend: KernelBackend | str, platform: str) -> str:
    """The kernels' backend string; ``auto`` is the platform's (the module's table).

    Raises:
        ValueError: ``pallas_tpu`` asked for off a TPU, or ``pallas_gpu`` off a GPU (either would
            only run interpreted, which times the interpreter, not the kernel).
    """
    _check_platform(platform)
    backend = KernelBackend(backend)
    if backend is KernelBackend.auto:
        return PLATFORM_TABLE[platform].backend
    if backend.value in _PALLAS_NEEDS:
        needed, device, target = _PALLAS_NEEDS[backend.value]
        if platform != needed:
            raise ValueError(
                f"kernel.backend={backend.value} needs {device} but the run targets {platform!r}; "
                f"use kernel={PLATFORM_TABLE[platform].backend} (or kernel=auto) here, or {device} target "
                f"(e.g. target={target} for a dry run)"
            )
    return backend.value


def compute_dtype_for(dtype: ComputeDType | str, model_name: str, platform: str) -> ComputeDType:
    """The compute dtype; ``auto`` as the module says: float32 for the tiny presets on a CPU or
    TPU, else bfloat16 (the seed's setting for Wan models; cuDNN's only dtype on a GPU)."""
    _check_platform(platform)
    dtype = ComputeDType(dtype)
    if dtype is not ComputeDType.auto:
        return dtype
    if model_name in TINY_PRESETS and platform != "gpu":
        return ComputeDType.float32
    return ComputeDType.bfloat16


# ``model.scan_layers=auto`` per platform (measurements in docs/memory-and-dry-runs.md): scanned
# on a TPU and a GPU, where the unrolled 40-block loop's compile dominates a dry run and a run's
# start; unrolled on a CPU, whose runs use small models (compile seconds either way).
_AUTO_SCAN_LAYERS = {"tpu": True, "gpu": True, "cpu": False}


def scan_layers_for(setting: str | bool, platform: str) -> bool:
    """Whether the transformer's blocks run scanned (``model.scan_layers``) on ``platform``.

    Args:
        setting: true, false or "auto".
        platform: ``tpu``, ``gpu`` or ``cpu``.
    """
    if isinstance(setting, bool):
        return setting
    _check_platform(platform)
    return _AUTO_SCAN_LAYERS[platform]


def resolve_kernel(
    kernel: KernelConfig, platform: str, tokens: int, band_width: int | None = None
) -> KernelConfig:
    """The kernel config with every ``auto``/None replaced by the platform's choice.

    Args:
        kernel: the requested kernel config.
        platform: ``tpu``, ``gpu`` or ``cpu``.
        tokens: tokens of one attention call (the whole sequence; sequence parallelism exchanges
            heads for tokens before attention).
        band_width: full width of the sparse band (``sparse_band_width``); None for a dense
            schedule. Automatic tiles are never wider than it (``auto_block_sizes``).

    Returns:
        A KernelConfig whose backend is not ``auto``, whose tiles are set, and whose two dense
        executors are concrete and different.

    Raises:
        ValueError: a choice that does not suit the platform, ``num_warps``/``num_stages`` set
            when the backend is not ``pallas_gpu``, or equal dense executors.
    """
    backend = backend_for(kernel.backend, platform)
    _check_gpu_launch(kernel, backend, platform)
    auto = auto_block_sizes(tokens, backend, band_width)
    block_q = auto.block_q if kernel.block_q is None else kernel.block_q
    block_kv = auto.block_kv if kernel.block_kv is None else kernel.block_kv
    _check_tiles(BlockSizes(block_q, block_kv), auto, backend, platform, tokens)
    dense, floor = dense_controls(platform)
    if kernel.dense_executor is not DenseExecutor.auto:
        dense = kernel.dense_executor.value
    if kernel.noise_floor_executor is not DenseExecutor.auto:
        floor = kernel.noise_floor_executor.value
    elif floor == dense:  # the user pinned the dense arm to what auto would pick second
        floor = dense_controls(platform)[0]
    check_dense_pair(dense, floor)
    for setting, executor in (("dense_executor", dense), ("noise_floor_executor", floor)):
        needed = get_executor(executor).only_on
        if needed is not None and needed != platform:
            raise ValueError(
                f"kernel.{setting}={executor} runs on {needed} only, but the run targets "
                f"{platform!r}; use kernel.{setting}=auto (or b0)"
            )
    return dataclasses.replace(
        kernel,
        backend=KernelBackend(backend),
        block_q=block_q,
        block_kv=block_kv,
        dense_executor=DenseExecutor(dense),
        noise_floor_executor=DenseExecutor(floor),
    )


def resolve(cfg: EvalConfig, platform: str | None = None, tokens: int | None = None) -> EvalConfig:
    """The run's config with its kernel, compute dtype and ``model.scan_layers`` made concrete
    for ``platform``.

    Args:
        cfg: a validated config (``evalharness.config.to_config``).
        platform: the targeted platform; None is this host's.
        tokens: tokens per sample; None computes them from ``cfg.resolution``.

    Returns:
        A new EvalConfig (``cfg`` is not modified).
    """
    platform = host_platform() if platform is None else platform
    geometry = token_geometry(cfg.resolution.video)
    tokens = geometry.tokens if tokens is None else tokens
    band_width = sparse_band_width(cfg.schedule, geometry) if tokens == geometry.tokens else None
    kernel = resolve_kernel(cfg.kernel, platform, tokens, band_width)
    dtype = compute_dtype_for(cfg.dtype, cfg.model.name, platform)
    _check_cudnn_dtype(kernel, dtype)
    scan = scan_layers_for(cfg.model.scan_layers, platform)
    model = dataclasses.replace(cfg.model, scan_layers=scan)
    return dataclasses.replace(cfg, kernel=kernel, dtype=dtype, model=model)


def sparse_band_width(schedule: SparsitySchedule, geometry: TokenGeometry) -> int | None:
    """Full width 2w + 1 of the band a sparse schedule keeps at ``geometry`` (None when dense).

    The automatic tiles are capped at it, so a tile never spans more than the band. A static mask
    (``sta``, ``radial``) has no single band, so its tiles are not capped.
    """
    if not schedule.sparse or not schedule.routes:
        return None
    return 2 * schedule.band(geometry).half_width + 1


def _check_tiles(
    tiles: BlockSizes, auto: BlockSizes, backend: str, platform: str, tokens: int
) -> None:
    """Pinned tiles that do not suit the resolved backend (e.g. an experiment's TPU tiles aimed
    at a GPU) are refused here, naming the platform's own tiles."""
    for name, value in (("block_q", tiles.block_q), ("block_kv", tiles.block_kv)):
        # The platform's own tile may pass the sequence (it covers it in one hardware-sized
        # tile); anything larger only pads.
        largest = max(tokens, getattr(auto, name))
        if value > largest:
            raise ValueError(
                f"kernel.{name}={value} is larger than the {tokens:,} tokens of one attention "
                f"call; use a tile of at most {largest:,}, or kernel.{name}=null for this "
                f"platform's ({auto.block_q} x {auto.block_kv} here)"
            )
    try:
        tiles.validate(tokens, backend)
    except ValueError as error:
        raise ValueError(
            f"kernel.block_q={tiles.block_q} x kernel.block_kv={tiles.block_kv} do not suit "
            f"backend {backend} on {platform!r}: {error}. Set kernel.block_q=null "
            f"kernel.block_kv=null for this platform's tiles ({auto.block_q} x {auto.block_kv} "
            "here)"
        ) from error


def _check_gpu_launch(kernel: KernelConfig, backend: str, platform: str) -> None:
    """``num_warps``/``num_stages`` tune the Pallas GPU kernel only; elsewhere they would be
    ignored, so a run that sets them on another backend is refused."""
    if backend == "pallas_gpu":
        return
    for name in ("num_warps", "num_stages"):
        value = getattr(kernel, name)
        if value is not None:
            raise ValueError(
                f"kernel.{name}={value} applies to kernel.backend=pallas_gpu only, but the run "
                f"uses {backend} on {platform!r}; set kernel.{name}=null, or run on a GPU"
            )


def _check_cudnn_dtype(kernel: KernelConfig, dtype: ComputeDType) -> None:
    """cuDNN flash attention takes bfloat16 only: a float32 run naming it is refused here, not
    deep inside the first arm's compile."""
    for setting in ("dense_executor", "noise_floor_executor"):
        if getattr(kernel, setting) is DenseExecutor.cudnn and dtype is not ComputeDType.bfloat16:
            raise ValueError(
                f"kernel.{setting}=cudnn takes bfloat16 only, but dtype={dtype.value}; use "
                "dtype=bfloat16 (or dtype=auto), or two other dense controls (e.g. "
                "kernel.dense_executor=b0 kernel.noise_floor_executor=dot_product_attention at "
                "small sizes)"
            )


def _check_platform(platform: str) -> None:
    if platform not in PLATFORMS:
        raise ValueError(f"platform={platform!r}; use one of {PLATFORMS}")
