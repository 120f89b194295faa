"""What the benchmark ran on."""

from __future__ import annotations

import os
import platform

import jax


def machine_info() -> dict[str, str | int]:
    """Processor, core count and JAX backend (recorded with every result)."""
    return {
        "processor": platform.processor() or platform.machine(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count() or 0,
        "jax_backend": jax.default_backend(),
        "jax_version": jax.__version__,
        "devices": ", ".join(str(d) for d in jax.devices()),
    }


def report_markdown(title: str, setup: dict, table: str, closing: str, machine: dict) -> str:
    """A benchmark's Markdown report: title, the setup line, the machine, its table and the
    closing line (the verdict or summary)."""
    return "\n\n".join(
        [
            f"# {title}",
            ", ".join(f"{k} {v}" for k, v in setup.items()),
            "Machine: " + ", ".join(f"{k} {v}" for k, v in machine.items()),
            table,
            closing,
        ]
    )
