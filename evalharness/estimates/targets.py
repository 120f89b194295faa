"""The devices a run can be planned for: memory, peak throughput and bandwidth, with their sources.

A dry run plans for a device it may not have (``target=tpu-v6e-8`` from a laptop), a real run for
the one it is on; the ``cpu`` target is this host, measured when asked for. The time estimate
(``evalharness.estimates.workload``) is a roofline per denoising step:
``max(FLOPs / (peak x efficiency), bytes moved / HBM bandwidth)``, with ``efficiency`` 0.45 on
accelerators (large bf16 matmuls and a flash-style attention usually reach 40-60% of peak).
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

import jax
import jax.numpy as jnp

from kernels.executors.pallas_gpu_budget import H200_SHARED_MEMORY_BYTES
from kernels.registry import PLATFORMS as PLATFORM_TABLE
from models.accelerator_env import platform_family

GIB = 1024**3
# What an H200 SXM reports as its memory (nvidia-smi: 143,771 MiB; the product is "141 GB").
H200_PHYSICAL_BYTES = 143_771 * 2**20
# JAX's GPU allocator takes this fraction of the device's memory unless told otherwise.
DEFAULT_GPU_MEM_FRACTION = 0.75
_FRACTION_ENV = ("XLA_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_MEM_FRACTION")
PLATFORMS = tuple(PLATFORM_TABLE)
ACCELERATOR_EFFICIENCY = 0.45
# Stated, not measured: a share of a dual-channel DDR4/DDR5 server socket.
CPU_BYTES_PER_S = 20e9
# XLA:CPU's runtime allocated 14-19% beyond the compiled plan of the flash-style arms and more for
# N^2 ones in `python -m evalharness.bench.memory` (2-core VM, JAX 0.10.2); 0.15 is the flash figure.
CPU_RUNTIME_OVERHEAD = 0.15
# Stated, not measured (no GPU run has been lent yet; .ci/gpu-check's memory benchmark measures
# it): what XLA:GPU takes from its pool beyond a program's memory_analysis: cuBLAS and cuDNN
# workspaces and autotuning buffers, taken as 5% of the loop's planned bytes. The CUDA context
# itself lives outside the pool (in the 25% JAX leaves).
GPU_RUNTIME_OVERHEAD = 0.05


@dataclass(frozen=True)
class DeviceTarget:
    """One device kind a run is planned for; every figure is per device.

    Attributes:
        name: the target's name (``TARGET_NAMES``).
        platform: ``tpu``, ``gpu`` or ``cpu``.
        devices: devices of the target (the default ``parallel.sequence``).
        hbm_bytes: device memory a JAX program may use.
        peak_flops: peak matmul FLOP/s by dtype name (``bfloat16``, ``float32``).
        hbm_bytes_per_s: memory bandwidth.
        efficiency: assumed fraction of ``peak_flops`` the transformer reaches.
        source: where the figures come from and which choices were made.
        smem_bytes: TPU scalar memory (where scalar-prefetched visit tables live); None elsewhere.
        vmem_bytes: TPU vector memory (physical); None elsewhere.
        runtime_overhead: what the runtime allocates beyond XLA's memory plan, as a fraction of
            the denoising loop's planned bytes (measured on CPU by ``evalharness.bench.memory``;
            0 where it has not been measured).
        shared_memory_bytes: GPU shared memory one thread block may use (the opt-in maximum),
            which bounds the Pallas GPU kernel's tiles; None elsewhere and for unknown GPUs.
        topology: what the compiler compiles for when the target is not attached (a
            ``jax.experimental.topologies`` TPU name such as ``v6e:2x4``; ``h200`` for XLA's GPU
            compiler); None elsewhere.
    """

    name: str
    platform: str
    devices: int
    hbm_bytes: int
    peak_flops: Mapping[str, float]
    hbm_bytes_per_s: float
    efficiency: float
    source: str
    smem_bytes: int | None = None
    vmem_bytes: int | None = None
    runtime_overhead: float = 0.0
    shared_memory_bytes: int | None = None
    topology: str | None = None

    def __post_init__(self) -> None:
        if self.platform not in PLATFORMS:
            raise ValueError(f"platform={self.platform!r}; use one of {PLATFORMS}")
        if self.devices < 1 or self.hbm_bytes < 1 or not 0.0 < self.efficiency <= 1.0:
            raise ValueError(f"{self.name}: devices, hbm_bytes must be >= 1, efficiency in (0, 1]")
        object.__setattr__(self, "peak_flops", MappingProxyType(dict(self.peak_flops)))


# TPU v6e (Trillium) per chip. f32 matmuls run as bf16 passes on the MXU; precision "highest" takes
# six, so f32 is stated at 1/6 of bf16 (an upper bound on time).
_V6E = dict(
    platform="tpu",
    hbm_bytes=int(31.25 * GIB),
    peak_flops={"bfloat16": 918e12, "float32": 918e12 / 6},
    hbm_bytes_per_s=1640e9,
    smem_bytes=1 << 20,
    vmem_bytes=128 << 20,
    efficiency=ACCELERATOR_EFFICIENCY,
    source=(
        "Google Cloud TPU v6e: 918 TFLOP/s bf16, 32 GB HBM (31.25 GiB usable), 1,640 GB/s, "
        "SMEM 1 MiB, VMEM 128 MiB physical; f32 = bf16 / 6 (six-pass 'highest' precision)"
    ),
)

# TPU v5e per chip: the lent chip reported 15.75 GiB of HBM to JAX and ran bf16 matmuls at about
# 165 TFLOP/s (docs/benchmarks.md); SMEM, VMEM and the rest as on v6e (jax's tpu_info: 128 MiB
# VMEM).
_V5E = dict(
    _V6E,
    hbm_bytes=int(15.75 * GIB),
    peak_flops={"bfloat16": 197e12, "float32": 197e12 / 6},
    hbm_bytes_per_s=819e9,
    source=(
        "Google Cloud TPU v5e: 197 TFLOP/s bf16, 16 GB HBM (15.75 GiB as a lent chip reported "
        "it), 819 GB/s, VMEM 128 MiB physical (16 MiB scoped by default); f32 = bf16 / 6"
    ),
)

TARGETS: Mapping[str, DeviceTarget] = MappingProxyType(
    {
        "tpu-v5e-1": DeviceTarget(name="tpu-v5e-1", devices=1, topology="v5e:1x1", **_V5E),
        "tpu-v6e-1": DeviceTarget(name="tpu-v6e-1", devices=1, topology="v6e:1x1", **_V6E),
        "tpu-v6e-8": DeviceTarget(name="tpu-v6e-8", devices=8, topology="v6e:2x4", **_V6E),
        # The allocator's limit, not the HBM: see ``gpu_allocator_bytes``.
        "h200": DeviceTarget(
            name="h200",
            platform="gpu",
            devices=1,
            hbm_bytes=H200_PHYSICAL_BYTES * 3 // 4,
            peak_flops={"bfloat16": 989e12, "float32": 67e12},
            hbm_bytes_per_s=4.8e12,
            efficiency=ACCELERATOR_EFFICIENCY,
            source=(
                "NVIDIA H200 SXM: 141 GB HBM3e (143,771 MiB as the device reports it), 4.8 TB/s, "
                "989 TFLOP/s dense bf16, 67 TFLOP/s f32 (CUDA cores; TF32 would be faster); usable "
                "= JAX's allocator limit (75% by default, XLA_CLIENT_MEM_FRACTION or "
                "XLA_PYTHON_CLIENT_MEM_FRACTION to change it); 227 KiB of shared memory per "
                "thread block (Hopper); +5% over XLA's plan for cuBLAS/cuDNN workspaces (stated)"
            ),
            shared_memory_bytes=H200_SHARED_MEMORY_BYTES,
            topology="h200",
            runtime_overhead=GPU_RUNTIME_OVERHEAD,
        ),
    }
)
TARGET_NAMES = (*TARGETS, "cpu")
# Device kinds (as JAX names them) with Hopper's 227 KiB of shared memory per thread block.
_HOPPER_KINDS = ("H100", "H200", "H800", "GH200")


def host_memory_bytes() -> int:
    """Physical RAM of this host."""
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def device_memory_bytes(device: jax.Device | None = None) -> int:
    """Memory of one device: the accelerator's limit, or the host's physical RAM on CPU."""
    device = device or jax.devices()[0]
    if device.platform != "cpu":
        stats = device.memory_stats() or {}
        if "bytes_limit" in stats:
            return int(stats["bytes_limit"])
    return host_memory_bytes()


def measure_matmul_flops(dtype: str = "float32", size: int | None = None) -> float:
    """Measured FLOP/s of a square matmul on the default device: the fastest of 7 warm runs.

    The fastest run is what the device can do; a median reads the moment's contention instead (on
    a shared 2-core VM a median of 3 read 20 to 150 GFLOP/s within minutes). What load costs a
    whole run is in the measured CPU factors (``evalharness.estimates.cpu_calibration``).
    """
    device = jax.devices()[0]
    size = size or (1024 if device.platform == "cpu" else 8192)
    a = jnp.ones((size, size), dtype)
    matmul = jax.jit(lambda x: x @ x).lower(a).compile()
    jax.block_until_ready(matmul(a))
    runs = []
    for _ in range(7):
        start = time.perf_counter()
        jax.block_until_ready(matmul(a))
        runs.append(time.perf_counter() - start)
    return 2.0 * size**3 / min(runs)


def cpu_target(flops_per_s: Mapping[str, float] | None = None) -> DeviceTarget:
    """This host as a target: RAM from ``os.sysconf``, matmul FLOP/s measured now.

    Args:
        flops_per_s: measured FLOP/s by dtype to use instead of measuring (tests).

    Returns:
        A ``cpu`` target with efficiency 1 (the measured rate is already a sustained one) split
        evenly over the host's JAX devices (they share its cores and RAM).
    """
    devices = len(jax.devices("cpu"))
    if flops_per_s is None:
        # bf16 matmuls are emulated on most CPUs; a smaller size keeps the measurement short.
        flops_per_s = {
            "float32": measure_matmul_flops("float32"),
            "bfloat16": measure_matmul_flops("bfloat16", 512),
        }
    return DeviceTarget(
        name="cpu",
        platform="cpu",
        devices=devices,
        hbm_bytes=host_memory_bytes() // devices,
        peak_flops={k: v / devices for k, v in flops_per_s.items()},
        hbm_bytes_per_s=CPU_BYTES_PER_S / devices,
        efficiency=1.0,
        source=(
            "this host: RAM from os.sysconf, FLOP/s measured by a jitted square matmul, "
            f"bandwidth a stated {CPU_BYTES_PER_S / 1e9:.0f} GB/s, runtime "
            f"+{CPU_RUNTIME_OVERHEAD:.0%} over XLA's plan (measured)"
        ),
        runtime_overhead=CPU_RUNTIME_OVERHEAD,
    )


def gpu_allocator_bytes(physical: int, env: Mapping[str, str] | None = None) -> tuple[int, str]:
    """What JAX's GPU allocator may use of a device with ``physical`` bytes, and why.

    ``XLA_PYTHON_CLIENT_ALLOCATOR=platform`` allocates on demand (the whole device); otherwise the
    BFC pool is ``XLA_CLIENT_MEM_FRACTION`` (or its old name ``XLA_PYTHON_CLIENT_MEM_FRACTION``)
    of the device, 75% when neither is set, preallocated or not. On an attached GPU the runtime's
    ``memory_stats()["bytes_limit"]`` replaces this (``device_memory_bytes``).

    Raises:
        ValueError: a fraction that is not a number in (0, 1].
    """
    env = os.environ if env is None else env
    if env.get("XLA_PYTHON_CLIENT_ALLOCATOR", "").lower() == "platform":
        return physical, "XLA_PYTHON_CLIENT_ALLOCATOR=platform: the whole device"
    for name in _FRACTION_ENV:
        if env.get(name):
            try:
                fraction = float(env[name])
            except ValueError:
                fraction = -1.0
            if not 0.0 < fraction <= 1.0:
                raise ValueError(f"{name}={env[name]!r}: expected a fraction in (0, 1], e.g. .90")
            return int(physical * fraction), f"{name}={env[name]}: {fraction:.0%} of the device"
    share = f"{DEFAULT_GPU_MEM_FRACTION:.0%}"
    return int(physical * DEFAULT_GPU_MEM_FRACTION), f"JAX's default {share} of the device"


def get_target(name: str, *, devices: int | None = None) -> DeviceTarget:
    """The target called ``name`` (``cpu`` is measured now).

    Args:
        name: one of ``TARGET_NAMES``.
        devices: override of the device count (e.g. ``parallel.sequence``).

    Raises:
        ValueError: an unknown name (the message lists the known ones).
    """
    if name == "cpu":
        target = cpu_target()
    elif name in TARGETS:
        target = TARGETS[name]
        if target.platform == "gpu":  # the allocator's limit as this environment would set it
            usable, why = gpu_allocator_bytes(H200_PHYSICAL_BYTES)
            target = dataclasses.replace(
                target, hbm_bytes=usable, source=f"{target.source}; here: {why}"
            )
    else:
        raise ValueError(f"unknown target {name!r}; known targets: {', '.join(TARGET_NAMES)}")
    if devices is not None and devices != target.devices:
        target = dataclasses.replace(target, devices=devices)
    return target


def host_target(flops_per_s: float, *, dtype: str) -> DeviceTarget:
    """This process's devices as a target, for a real run's preflight.

    Args:
        flops_per_s: the matmul throughput preflight measured on one device in ``dtype``.
        dtype: the run's compute dtype.

    Returns:
        ``cpu_target`` on a CPU; on an accelerator its memory limit, device count and the measured
        (sustained: efficiency 1) throughput in ``dtype`` and in float32 (the VAE's; measured now
        if another), with a v6e's SMEM/VMEM and Hopper's shared memory per thread block.
    """
    device = jax.devices()[0]
    if device.platform == "cpu":
        return cpu_target({"float32": flops_per_s, "bfloat16": flops_per_s})
    peak = {dtype: flops_per_s}
    if dtype != "float32":
        peak["float32"] = measure_matmul_flops("float32")
    v6e = TARGETS["tpu-v6e-1"]
    is_v6e = device.platform == "tpu" and "v6" in device.device_kind.lower()
    is_hopper = any(kind in device.device_kind.upper() for kind in _HOPPER_KINDS)
    return DeviceTarget(
        name=device.device_kind,
        platform=platform_family(device.platform),
        devices=len(jax.devices()),
        hbm_bytes=device_memory_bytes(device),
        peak_flops=peak,
        hbm_bytes_per_s=v6e.hbm_bytes_per_s,
        smem_bytes=v6e.smem_bytes if is_v6e else None,
        vmem_bytes=v6e.vmem_bytes if is_v6e else None,
        efficiency=1.0,
        source=f"this host: {device.device_kind}, memory from the runtime, FLOP/s measured",
        shared_memory_bytes=H200_SHARED_MEMORY_BYTES if is_hopper else None,
    )
