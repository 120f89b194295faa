"""The memory table: bytes per device by component (rows) and arm (columns), each row in a phase.

For each arm, since the text encoder is released before the denoising loop, the VAE decodes after
it, and within one attention call routing's buffers are freed before the executor runs:

    peak = resident + max(encode, denoise, decode)
    denoise = its rows + max(routing, attention)

Arms run one after another, so the run's peak is the largest arm's.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from evalharness.estimates.targets import GIB
from evalharness.formatting import markdown_table

ARMS = ("dense", "noise_floor", "sparse")
PHASES = ("resident", "encode", "denoise", "routing", "attention", "decode")


@dataclass(frozen=True)
class MemoryTable:
    """Bytes per device by component (rows) and arm (columns), with each row's phase.

    Attributes:
        rows: component -> {arm -> bytes}.
        phases: component -> one of ``PHASES``.
        notes: component -> what the row counts.
        device_bytes: memory of one device.
        device: the device's name, for the table.
        executors: arm -> executor name (``ExecutorSpec.name``).
    """

    rows: Mapping[str, Mapping[str, int]]
    phases: Mapping[str, str]
    notes: Mapping[str, str]
    device_bytes: int
    device: str = "device"
    executors: Mapping[str, str] = field(default_factory=dict)

    @property
    def arms(self) -> tuple[str, ...]:
        """The arms planned, in ``ARMS`` order."""
        present = {arm for row in self.rows.values() for arm in row}
        return tuple(arm for arm in ARMS if arm in present) + tuple(sorted(present - set(ARMS)))

    def phase_bytes(self, arm: str) -> dict[str, int]:
        """{"encode", "denoise", "decode"} peaks of ``arm``, each including resident weights."""
        resident = _sum(self.rows, self.phases, arm, "resident")
        return {
            "encode": resident + _sum(self.rows, self.phases, arm, "encode"),
            "denoise": resident + loop_bytes(self.rows, self.phases, arm),
            "decode": resident + _sum(self.rows, self.phases, arm, "decode"),
        }

    def peak(self, arm: str) -> int:
        """Peak bytes of ``arm``: resident + max(encode, denoise, decode)."""
        return max(self.phase_bytes(arm).values())

    @property
    def peak_bytes(self) -> int:
        """The run's peak: the largest arm's (arms run one after another)."""
        return max(self.peak(arm) for arm in self.arms)

    @property
    def fits(self) -> bool:
        """Whether every arm's peak fits in ``device_bytes``."""
        return self.peak_bytes <= self.device_bytes

    def dominant(self, arm: str) -> str:
        """The largest component of ``arm`` other than the resident weights."""
        others = {c: r.get(arm, 0) for c, r in self.rows.items() if self.phases[c] != "resident"}
        return max(others, key=others.__getitem__)

    def problem(self) -> str | None:
        """One line on the arm that peaks highest when the table does not fit, else None."""
        if self.fits:
            return None
        worst = max(self.arms, key=self.peak)
        return (
            f"memory: the {worst} arm peaks at {self.peak(worst) / GIB:,.2f} GiB per device "
            f"(largest part: {self.dominant(worst)}), more than the {self.device}'s "
            f"{self.device_bytes / GIB:,.2f} GiB"
        )

    def to_markdown(self) -> str:
        """The table in GiB (2 decimals): components, then each phase's peak and the peak."""
        arms = self.arms
        body = [
            {"component": c, "phase": self.phases[c], **{a: r.get(a, 0) / GIB for a in arms}}
            for c, r in self.rows.items()
        ]
        for phase in ("encode", "denoise", "decode"):
            body.append(
                {"component": f"**{phase} phase**", "phase": phase}
                | {a: self.phase_bytes(a)[phase] / GIB for a in arms}
            )
        body.append(
            {"component": "**peak**", "phase": "max"} | {a: self.peak(a) / GIB for a in arms}
        )
        columns = [("component", "component", "{}"), ("phase", "phase", "{}")]
        columns += [(f"{a} ({self.executors.get(a, '?')})", a, "{:.2f}") for a in arms]
        verdict = "fits" if self.fits else "does NOT fit"
        notes = "".join(f"\n- {c}: {self.notes[c]}" for c in self.rows if c in self.notes)
        return (
            markdown_table(body, columns)
            + f"\n\nPer-device GiB; {self.device}: {self.device_bytes / GIB:.2f} GiB; peak "
            f"{self.peak_bytes / GIB:.2f} GiB {verdict}. peak = resident + max(encode, denoise, "
            "decode); in denoise, routing and attention are not live together (the larger counts)."
            + notes
        )

    def as_metrics(self) -> dict[str, float]:
        """``memory.<component>.<arm>`` bytes, ``memory.peak.<arm>``, ``memory.peak``,
        ``memory.device_bytes`` and ``memory.fits`` (1 or 0)."""
        out = {
            f"memory.{_slug(c)}.{arm}": float(b)
            for c, r in self.rows.items()
            for arm, b in r.items()
        }
        out.update({f"memory.peak.{arm}": float(self.peak(arm)) for arm in self.arms})
        out["memory.peak"] = float(self.peak_bytes)
        out["memory.device_bytes"] = float(self.device_bytes)
        out["memory.fits"] = float(self.fits)
        return out


def add_runtime_overhead(
    rows: dict[str, dict[str, int]], phases: dict[str, str], fraction: float, arms: Iterable[str]
) -> None:
    """Adds the "runtime overhead" row (denoise phase) after the rows so far, unless ``fraction``
    is 0: ``fraction`` of each arm's ``loop_bytes``."""
    if fraction:
        rows["runtime overhead"] = {
            arm: int(fraction * loop_bytes(rows, phases, arm)) for arm in arms
        }
        phases["runtime overhead"] = "denoise"


def loop_bytes(rows: Mapping[str, Mapping[str, int]], phases: Mapping[str, str], arm: str) -> int:
    """The denoising loop's bytes of ``arm`` without the resident weights: its denoise rows plus
    the larger of routing and the attention call (they are not live together)."""
    routing, attention = (_sum(rows, phases, arm, p) for p in ("routing", "attention"))
    return _sum(rows, phases, arm, "denoise") + max(routing, attention)


def _sum(
    rows: Mapping[str, Mapping[str, int]], phases: Mapping[str, str], arm: str, phase: str
) -> int:
    return sum(r.get(arm, 0) for c, r in rows.items() if phases[c] == phase)


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")
