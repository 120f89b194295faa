"""Keep libtpu from reaching for a TPU on a machine that has none, before JAX loads.

With the ``tpu`` extra installed (libtpu, for compiling for a TPU topology that is not attached),
JAX tries to initialise a TPU backend in every process, and libtpu may then query a cloud metadata
server. On a machine without TPU chips every process must therefore start with
``JAX_PLATFORMS`` naming only the platforms it has (``cpu``, or ``cuda,cpu`` beside an NVIDIA GPU)
and ``TPU_SKIP_MDS_QUERY=1``; compiling for a TPU topology still works then
(``jax.experimental.topologies``), and ``ALLOW_MULTIPLE_LIBTPU_LOAD=1`` lets several such
processes load libtpu at once. libtpu's start-up also describes the host's own slice from
``TPU_ACCELERATOR_TYPE`` and ``TPU_WORKER_HOSTNAMES`` (a Cloud TPU VM's metadata gives both);
without them it prints "Failed to find host bounds", "Logging before InitGoogle" and an
"unexpected worker hostname" trace to stderr. A compile-only process has no slice of its own: the
topology it compiles for is given explicitly (``jax.experimental.topologies``), and its devices
and compiled programs are the same whatever these say (checked for ``v6e:1x1`` and ``v6e:2x4``),
so they are set to one chip on this host (:data:`COMPILE_ONLY_HOST`). On a TPU host nothing is
set: JAX must find its chips.

``import evalharness`` applies this (:func:`guard_libtpu`), so every command of the harness, its
benchmarks and the reports start guarded; tests do the same in ``tests/conftest.py``. A value the
user set is never overridden.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

# PCI vendor of Google devices and the device IDs of TPU chips (as JAX's own
# ``jax._src.hardware_utils`` lists them: v3, an unnamed one, v4, v5p, v5e, v6e, TPU7x). Other
# Google devices (the gVNIC network card, persistent-disk NVMe) share the vendor and are not TPUs.
GOOGLE_PCI_VENDOR = "0x1ae0"
TPU_PCI_DEVICE_IDS = frozenset(
    {"0x0027", "0x0056", "0x005e", "0x0062", "0x0063", "0x006f", "0x0076"}
)
# What libtpu's start-up reads to describe this host's slice, for a compile-only process: one
# chip, this host (values it accepts without a warning; they do not change the programs).
COMPILE_ONLY_HOST = {"TPU_ACCELERATOR_TYPE": "v6e-1", "TPU_WORKER_HOSTNAMES": "localhost"}
_NVIDIA_DEVICE_FILES = ("/dev/nvidia0", "/dev/nvidiactl", "/dev/dxg")
_PCI_DEVICES = Path("/sys/bus/pci/devices")


def tpu_chips_attached(pci_devices: Path = _PCI_DEVICES) -> int:
    """TPU chips on this machine's PCI bus (0 on a machine without TPUs)."""
    try:
        devices = list(pci_devices.iterdir())
    except OSError:
        return 0
    chips = 0
    for device in devices:
        try:
            vendor = (device / "vendor").read_text().strip()
            ident = (device / "device").read_text().strip()
        except OSError:
            continue
        chips += vendor == GOOGLE_PCI_VENDOR and ident in TPU_PCI_DEVICE_IDS
    return chips


def nvidia_gpu_visible() -> bool:
    """Whether an NVIDIA GPU's device files exist (as JAX's own probe looks for them)."""
    return any(os.path.exists(path) for path in _NVIDIA_DEVICE_FILES)


def libtpu_installed() -> bool:
    """Whether libtpu (the ``tpu`` extra) is importable, without importing it."""
    return importlib.util.find_spec("libtpu") is not None


def cuda_plugin_installed() -> bool:
    """Whether JAX's CUDA plugin (the ``cuda`` or ``gpu-compile`` extra) is importable."""
    try:
        return importlib.util.find_spec("jax_plugins.xla_cuda12") is not None
    except ModuleNotFoundError:
        return False


def platform_family(platform: str) -> str:
    """``tpu``, ``gpu`` or ``cpu`` for a JAX device's platform name (``cuda`` and ``rocm`` are
    GPUs)."""
    return "gpu" if platform in ("gpu", "cuda", "rocm") else platform


def guard_settings(
    *,
    tpu_chips: int,
    libtpu: bool,
    nvidia_gpu: bool,
    environ: dict[str, str],
    cuda_plugin: bool = False,
) -> dict[str, str]:
    """The variables to set so that libtpu stays off a machine without TPU chips.

    Args:
        tpu_chips: TPU chips attached (``tpu_chips_attached``).
        libtpu: libtpu is installed.
        nvidia_gpu: an NVIDIA GPU is visible.
        environ: the current environment; variables already set are left alone.
        cuda_plugin: JAX's CUDA plugin is installed; without a GPU it compiles for one that is not
            attached (``gpu-compile``), and JAX must then not try to initialise a GPU backend.

    Returns:
        name -> value of each variable to set (empty on a TPU host).
    """
    if tpu_chips:
        return {}
    wanted = {"TPU_SKIP_MDS_QUERY": "1"}
    if cuda_plugin and not nvidia_gpu:
        wanted["JAX_PLATFORMS"] = "cpu"
    if libtpu:
        wanted["JAX_PLATFORMS"] = "cuda,cpu" if nvidia_gpu else "cpu"
        # Compile-only processes share no chip: two dry runs at once must not fight over
        # libtpu's single-process lock file (/tmp/libtpu_lockfile).
        wanted["ALLOW_MULTIPLE_LIBTPU_LOAD"] = "1"
        wanted.update(COMPILE_ONLY_HOST)
    return {name: value for name, value in wanted.items() if name not in environ}


def guard_libtpu() -> dict[str, str]:
    """Sets :func:`guard_settings` in ``os.environ`` if JAX has not loaded yet.

    Returns:
        What was set (empty when nothing was needed, or when JAX was already imported: then its
        platforms are already fixed, and the caller's process must have set them itself).
    """
    if "jax" in sys.modules:
        return {}
    settings = guard_settings(
        tpu_chips=tpu_chips_attached(),
        libtpu=libtpu_installed(),
        nvidia_gpu=nvidia_gpu_visible(),
        environ=dict(os.environ),
        cuda_plugin=cuda_plugin_installed(),
    )
    os.environ.update(settings)
    return settings
