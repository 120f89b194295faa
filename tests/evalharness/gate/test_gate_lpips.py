"""The gate's LPIPS upper threshold, its PSNR convention, and LPIPS' statistics across pairs."""

import pytest

from evalharness.config import GateConfig, GatePSNR
from evalharness.evidence import statistic_name, suite_metrics
from evalharness.gate.verdict import check_gate
from evalharness.search.objectives import readings, thresholds

METRICS = {"psnr_db": 30.0, "psnr_frames_db": 32.0, "lpips": 0.05, "speedup": 1.2}


def test_max_lpips_is_an_upper_bound():
    assert check_gate(METRICS, min_psnr_db=None, min_speedup=None, max_lpips=0.06).passed
    result = check_gate(METRICS, min_psnr_db=None, min_speedup=None, max_lpips=0.04)
    assert result.failures == ("lpips = 0.05 is above the threshold 0.04",)
    missing = check_gate({"psnr_db": 30.0}, min_psnr_db=None, min_speedup=None, max_lpips=0.1)
    assert "lpips is missing" in missing.failures[0]


def test_gate_psnr_picks_the_convention_min_psnr_db_reads():
    assert not check_gate(METRICS, min_psnr_db=31, min_speedup=None).passed
    frames = check_gate(METRICS, min_psnr_db=31, min_speedup=None, psnr="frames")
    assert frames.passed
    failed = check_gate(METRICS, min_psnr_db=33, min_speedup=None, psnr="frames")
    assert failed.failures[0].startswith("psnr_frames_db = 32")
    with pytest.raises(ValueError, match="gate.psnr='mean'"):
        check_gate(METRICS, min_psnr_db=33, min_speedup=None, psnr="mean")


def test_lpips_worst_pair_is_the_largest_and_lcb_reads_its_upper_end():
    pairs = [{**METRICS, "lpips": value} for value in (0.02, 0.08, 0.05)]
    suite = suite_metrics(pairs)
    assert suite["lpips_worst"] == 0.08 and suite["psnr_db_worst"] == 30.0
    assert suite["lpips_lcb"] <= suite["lpips_mean"] <= suite["lpips_ucb"]
    assert statistic_name("lpips", "lcb") == "lpips_ucb"
    assert statistic_name("psnr_db", "lcb") == "psnr_db_lcb"
    gated = check_gate(suite, min_psnr_db=None, min_speedup=None, max_lpips=0.07, on="lcb")
    assert gated.passed == (suite["lpips_ucb"] <= 0.07)
    assert not check_gate(
        suite, min_psnr_db=None, min_speedup=None, max_lpips=0.07, on="worst"
    ).passed


def test_the_search_reads_max_lpips_as_an_upper_constraint():
    (met,) = readings(METRICS, {"lpips": 0.06}, "mean")
    (missed,) = readings(METRICS, {"lpips": 0.04}, "mean")
    assert met.met and met.constraint == pytest.approx(-0.01)
    assert not missed.met and missed.constraint == pytest.approx(0.01)


def test_the_search_reads_min_psnr_db_in_the_gates_psnr_convention():
    gate = GateConfig(min_psnr_db=31.0, max_lpips=0.1)
    assert thresholds(gate) == {"psnr_db": 31.0, "lpips": 0.1}
    gate.psnr = GatePSNR.frames
    (psnr, lpips) = readings(METRICS, thresholds(gate), "mean")
    assert (psnr.metric, psnr.met, lpips.metric, lpips.met) == (
        "psnr_frames_db",
        True,
        "lpips",
        True,
    )
