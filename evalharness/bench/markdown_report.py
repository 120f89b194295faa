"""A benchmark's Markdown report: title, setup, machine, table and verdict."""

from __future__ import annotations


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
