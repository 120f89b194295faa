"""The machine this process runs on, described once: its CPU, its cores and its JAX devices.

Benchmarks record it beside their tables, runs tag their MLflow runs with it, the dense-arm cache
keys on the CPU model (XLA's CPU code follows the host), and the CPU time calibration checks it
against the host its factors were measured on.
"""

from __future__ import annotations

import os
import platform
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


def machine_summary() -> str:
    """One line: architecture, CPU model and core count."""
    return f"{platform.machine()} {cpu_model()} {cpu_count()} cpus"
