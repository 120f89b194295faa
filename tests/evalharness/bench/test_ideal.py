"""The ideal a sparse arm is held to: the dense time with its dense attention replaced by the
band kernel alone, in the schedule benchmark (whole loops) and the step-parts benchmark (a block)."""

import pytest

from evalharness.bench.schedules import _add_ideals, ideal_ms
from evalharness.bench.step_parts import summarize


def test_ideal_loop_replaces_each_sparse_calls_dense_attention_by_the_band():
    # A dense loop of 10 s; 2 steps x 30 layers, 20 calls sparse; attention 400 ms dense and
    # 100 ms banded: 20 x 300 ms = 6 s saved at best.
    assert ideal_ms(10_000.0, 20, 400.0, 100.0) == pytest.approx(4_000.0)
    assert ideal_ms(10_000.0, 0, 400.0, 100.0) == 10_000.0


class _Call:
    batch = 2

    class cfg:  # noqa: N801 - a stand-in for the run's config
        steps = 4

    class model:  # noqa: N801
        num_layers = 10


class _Setup:
    call = _Call()
    inputs = (None, None, "negative context")


def test_each_arm_gets_its_ideal_speedup_and_the_fraction_reached():
    arms = {
        "dense": {"median_ms": 8_000.0, "dense_steps": 4, "dense_layers": 10},
        "aggressive": {"median_ms": 5_000.0, "dense_steps": 1, "dense_layers": 0},
    }
    _add_ideals(_Setup(), arms, {"dense": 150.0, "aggressive": 50.0})
    arm = arms["aggressive"]
    # 3 sparse steps x 10 layers x 1 call (CFG as one batch of 2): 30 x 100 ms saved.
    assert arm["ideal_ms"] == pytest.approx(5_000.0)
    assert arm["ideal_speedup"] == pytest.approx(1.6)
    assert arm["fraction_of_ideal"] == pytest.approx(1.0)
    assert "ideal_ms" not in arms["dense"]


def test_guidance_in_two_passes_doubles_the_sparse_calls():
    setup = _Setup()
    setup.call = _Call()
    setup.call.batch = 1
    arms = {
        "dense": {"median_ms": 8_000.0, "dense_steps": 4, "dense_layers": 10},
        "aggressive": {"median_ms": 4_000.0, "dense_steps": 2, "dense_layers": 0},
    }
    _add_ideals(setup, arms, {"dense": 150.0, "aggressive": 50.0})
    assert arms["aggressive"]["ideal_ms"] == pytest.approx(8_000.0 - 2 * 10 * 2 * 100.0)


def test_a_block_summary_names_the_overhead_beyond_the_band():
    parts = {
        "dense block": {"median_ms": 100.0},
        "dense attention": {"median_ms": 70.0},
        "band kernel": {"median_ms": 20.0},
        "sparse block": {"median_ms": 60.0},
    }
    s = summarize(parts)
    assert s["ideal_sparse_block_ms"] == pytest.approx(50.0)
    assert s["fraction_of_ideal"] == pytest.approx(50.0 / 60.0)
    assert s["overhead_ms"] == pytest.approx(10.0)
    assert s["ideal_speedup"] == pytest.approx(2.0)
    assert s["block_speedup"] == pytest.approx(100.0 / 60.0)


def test_only_keeps_the_dense_arm_and_the_named_schedules():
    from evalharness.bench.schedules import only
    from kernels.policy.schedule import SparsitySchedule

    def schedule(name, sparse):
        return SparsitySchedule(
            name, first_times_fp=0.0, first_layers_fp=0.0, density=0.3, sparse=sparse
        )

    all_five = [schedule("dense", False), schedule("balanced", True), schedule("aggressive", True)]
    assert [s.name for s in only(all_five, "aggressive")] == ["dense", "aggressive"]
    assert only(all_five, None) == all_five
    with pytest.raises(ValueError, match=r"no schedule \['nope'\]; the presets are dense"):
        only(all_five, "aggressive,nope")


def test_splash_given_the_same_mask_is_compared_with_never_a_baseline():
    from evalharness.bench.kernel_table import add_speedups

    rows = [
        {"variant": "b0", "median_ms": 186.0},
        {"variant": "splash", "median_ms": 180.0},
        {"variant": "splash_band", "median_ms": 88.0},  # faster than any dense row
        {"variant": "b3", "median_ms": 74.5},
    ]
    add_speedups(rows, 0.3887, cpu=False)
    b3 = rows[-1]
    assert b3["fastest_dense"] == "splash" and b3["dense_control"] == "splash"
    assert b3["speedup_vs_fastest_dense"] == pytest.approx(180.0 / 74.5)
    assert b3["speedup_vs_masked_peer"] == pytest.approx(88.0 / 74.5)
    assert rows[2]["fastest_dense"] == "splash"  # the peer is not its own baseline
