"""Progress over the run's stages (a tqdm bar) plus log lines saying what is being compiled, and
the run's :class:`~evalharness.phases.PhaseLedger`, whose phases name the finer steps."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from tqdm import tqdm

from evalharness.config import Pair
from evalharness.exit_codes import stop_if_signalled
from evalharness.phases import Phase, PhaseLedger

log = logging.getLogger("evalharness")

# The phases before the first pair.
PHASES = ("preflight", "build model", "encode prompts", "compile arms")


class Progress:
    """A phase bar; ``event`` logs finer steps (compiling, warm-up, timed rounds).

    Args:
        phases: the phase names in order.
        enabled: draw the bar (default: only when stderr is a terminal; in CI the log lines say
            where the run is).
        ledger: the run's phase ledger (a fresh one by default); its phases show on the bar.
    """

    def __init__(
        self,
        phases: Sequence[str],
        enabled: bool | None = None,
        ledger: PhaseLedger | None = None,
    ) -> None:
        self.phases = list(phases)
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self.bar = tqdm(total=len(self.phases), unit="phase", disable=not self.enabled, leave=False)
        self.current: str | None = None
        self.ledger = ledger if ledger is not None else PhaseLedger()
        self.ledger.on_enter = self._entered

    @contextmanager
    def timed(self, phase: Phase) -> Iterator[None]:
        """Times the enclosed work as ``phase`` in the ledger; a safe point on entry, as
        :meth:`phase` is."""
        with self.ledger.timed(phase):
            yield

    def _entered(self, phase: Phase) -> None:
        stop_if_signalled()
        self.bar.set_postfix_str(phase.value, refresh=True)

    def phase(self, name: str) -> None:
        """Marks the start of a phase (phases may be skipped, never revisited); a safe point: a
        Ctrl-C or SIGTERM received since the last one ends the run here
        (``evalharness.exit_codes.stop_if_signalled``)."""
        stop_if_signalled()
        if name not in self.phases:
            raise ValueError(f"unknown phase {name!r}; phases: {self.phases}")
        target = self.phases.index(name)
        self.bar.update(target - self.bar.n)
        self.bar.set_description(name)
        self.current = name
        log.info("[%d/%d] %s", target + 1, len(self.phases), name)

    def event(self, message: str) -> None:
        """Logs a finer step within the current phase (a compile, a warm-up, a timed round); a
        safe point, as :meth:`phase` is."""
        stop_if_signalled()
        self.bar.set_postfix_str(message, refresh=True)
        log.info("  %s", message)

    def close(self) -> None:
        """Closes the bar (the run is over, or failed)."""
        self.bar.close()


def run_phases(pairs: Sequence[Pair]) -> tuple[str, ...]:
    """A run's phases: :data:`PHASES`, one per pair (timing, routing, decode, quality, files),
    then the summary across pairs, the gate and the tracker's upload."""
    return (*PHASES, *(pair_phase(pair, len(pairs)) for pair in pairs), "summary")


def pair_phase(pair: Pair, count: int) -> str:
    """The phase name of one pair, e.g. ``pair 2/6 (p0-s1)``; ``compare`` for a single pair."""
    return "compare" if count == 1 else f"pair {pair.index + 1}/{count} ({pair.name})"
