"""The machine this process runs on, described once: its CPU, its cores and its JAX devices.

Benchmarks record it beside their tables, runs tag their MLflow runs with it, the dense-arm cache
keys on the CPU model (XLA's CPU code follows the host), and the CPU time calibration checks it
against the host its factors were measured on.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Mapping
from pathlib import Path

import jax


def cpu_model() -> str:
    """The host CPU's model name (``/proc/cpuinfo``; else ``platform.processor()``)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def cpu_count() -> int:
    """Logical CPUs of the host (0 where unknown)."""
    return os.cpu_count() or 0


def machine_info() -> dict[str, str | int]:
    """CPU model, core count, OS and JAX backend and devices (recorded with every benchmark)."""
    return {
        "processor": cpu_model(),
        "platform": platform.platform(),
        "cpu_count": cpu_count(),
        "jax_backend": jax.default_backend(),
        "jax_version": jax.__version__,
        "devices": ", ".join(str(d) for d in jax.devices()),
    }


def machine_line(info: Mapping[str, str | int] | None = None) -> str:
    """The line a benchmark prints under its table to name the machine, e.g. ``Machine: AMD EPYC
    7B13, 2 cores, Linux-6.1-x86_64, JAX 0.6.2 (cpu: TFRT_CPU_0)``.

    Args:
        info: what :func:`machine_info` returned (e.g. a result's recorded machine); None reads
            this machine.
    """
    m = machine_info() if info is None else info
    return (
        f"Machine: {m['processor']}, {m['cpu_count']} cores, {m['platform']}, "
        f"JAX {m['jax_version']} ({m['jax_backend']}: {m['devices']})"
    )


def machine_summary() -> str:
    """One line: architecture, CPU model and core count."""
    return f"{platform.machine()} {cpu_model()} {cpu_count()} cpus"
