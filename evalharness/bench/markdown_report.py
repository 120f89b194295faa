"""A benchmark's Markdown report: title, setup, machine, table and verdict."""

from __future__ import annotations

from evalharness.machine import machine_line


def report_markdown(title: str, setup: dict, table: str, closing: str, machine: dict) -> str:
    """A benchmark's Markdown report: title, the setup line, the machine, its table and the
    closing line (the verdict or summary); ``machine`` is what ``evalharness.machine.machine_info``
    returned."""
    return "\n\n".join(
        [
            f"# {title}",
            ", ".join(f"{k} {v}" for k, v in setup.items()),
            machine_line(machine),
            table,
            closing,
        ]
    )
