"""The phase ledger: each phase's seconds, the wall, and the unaccounted rest between them."""

from __future__ import annotations

import pytest

from evalharness.phases import Phase, PhaseLedger, PhaseMemory


def _ledger(*ticks: float, memory=lambda: None) -> PhaseLedger:
    clock = iter(ticks)
    return PhaseLedger(clock=lambda: next(clock), memory=memory)


def test_phases_add_up_and_the_rest_is_unaccounted():
    ledger = _ledger(0.0, 1.0, 4.0, 5.0, 6.0, 10.0, 12.0, 13.0)
    with ledger.timed(Phase.WEIGHTS):
        pass
    with ledger.timed(Phase.DECODE):
        pass
    with ledger.timed(Phase.DECODE):  # a phase entered twice adds up
        pass
    times = ledger.snapshot()
    assert times.seconds() == {"weights": 3.0, "decode": 3.0}
    assert times.phases[Phase.DECODE].entries == 2
    assert times.wall_s == 13.0 and times.unaccounted_s == pytest.approx(7.0)
    metrics = times.as_metrics()
    assert metrics["phase_weights_s"] == 3.0 and metrics["phase_unaccounted_s"] == 7.0
    assert Phase.NOISE_FLOOR_WARMUP.metric == "phase_noise_floor_warm_up_s"


def test_a_running_phase_counts_its_seconds_so_far():
    ledger = _ledger(0.0, 2.0, 5.0, 6.0, 7.0)
    with ledger.timed(Phase.LOGGING):
        assert ledger.snapshot().seconds() == {"logging": 3.0}
    assert ledger.snapshot().seconds() == {"logging": 4.0}  # completed at 6.0


def test_a_phase_inside_another_is_refused():
    ledger = _ledger(0.0, 1.0, 2.0)
    with pytest.raises(RuntimeError, match="inside 'timing'"):
        with ledger.timed(Phase.TIMING):
            with ledger.timed(Phase.DECODE):
                pass
    assert ledger.current is None


def test_device_memory_is_kept_at_each_phases_end():
    ledger = _ledger(0.0, 1.0, 2.0, 3.0, memory=lambda: PhaseMemory(2**30, 3 * 2**30))
    with ledger.timed(Phase.TIMING):
        pass
    times = ledger.snapshot()
    assert times.as_metrics()["phase_timing_peak_gib"] == 3.0
    assert times.as_json()["phases"]["timing"]["in_use_bytes"] == 2**30
