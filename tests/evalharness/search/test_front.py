"""The pure parts of the search: objectives and constraints read as the gate reads them, the
Pareto front, the recommendation and the message of a search no trial passes."""

from __future__ import annotations

import math

import pytest

from evalharness.config import GateConfig
from evalharness.search import (
    Reading,
    TrialPoint,
    feasible_front,
    objective_values,
    pareto_front,
    readings,
    recommend,
    thresholds,
    uncovered_references,
    unmet_message,
)
from evalharness.search.front import no_recommendation_message
from evalharness.search.objectives import UNMET

KNOBS = {"density": 0.3, "first_times_fp": 0.1, "first_layers_fp": 0.0}


def point(n: int, speedup: float, psnr: float, *, floor: float = 30.0, ref: str | None = None):
    return TrialPoint(n, KNOBS, speedup, psnr, (Reading("psnr_db_mean", floor, psnr),), ref)


def test_thresholds_keep_only_those_set():
    gate = GateConfig(min_psnr_db=30, min_worst_frame_psnr_db=None, min_speedup=1.1)
    assert thresholds(gate) == {"psnr_db": 30.0, "speedup": 1.1}


def test_readings_use_the_statistic_and_give_optuna_constraints():
    metrics = {"psnr_db_lcb": 28.0, "psnr_db_mean": 31.0, "speedup_lcb": 1.3, "speedup": 1.2}
    found = readings(metrics, {"psnr_db": 30.0, "speedup": 1.1}, "lcb")
    assert [(r.metric, r.value) for r in found] == [("psnr_db_lcb", 28.0), ("speedup_lcb", 1.3)]
    assert found[0].constraint == pytest.approx(2.0) and not found[0].met  # > 0: violated
    assert found[1].constraint == pytest.approx(-0.2) and found[1].met


def test_a_missing_or_infinite_reading_is_a_finite_constraint():
    (missing,) = readings({}, {"psnr_db": 30.0}, "mean")
    assert missing.constraint == UNMET and not missing.met
    assert Reading("psnr_db_mean", 30.0, math.inf).met  # identical frames pass, as in the gate


def test_objectives_are_speedup_and_psnr_at_the_statistic():
    metrics = {"speedup": 1.25, "psnr_db_worst": 27.0, "psnr_db_mean": 30.0}
    assert objective_values(metrics, "worst") == (1.25, 27.0)
    with pytest.raises(ValueError, match="psnr_db_lcb"):
        objective_values(metrics, "lcb")


def test_front_keeps_the_points_nothing_dominates():
    points = [point(0, 1.0, 40), point(1, 1.2, 35), point(2, 1.1, 30), point(3, 1.5, 20)]
    assert [p.number for p in pareto_front(points)] == [0, 1, 3]
    assert [p.number for p in feasible_front(points)] == [0, 1]  # trial 3 misses 30 dB


def test_recommendation_is_the_fastest_feasible_trial():
    points = [point(0, 1.0, 40), point(1, 1.2, 35), point(3, 1.5, 20)]
    assert recommend(points).number == 1
    assert recommend([point(0, 1.5, 20)]) is None


def test_unmet_message_names_the_best_value_reached():
    message = unmet_message([point(0, 1.1, 22.5, floor=90), point(1, 1.3, 25.0, floor=90)])
    assert "psnr_db_mean: best 25 against the threshold 90 (never met)" in message
    assert "nearest: trial 1" in message


def test_references_are_covered_when_the_front_dominates_or_equals_them():
    ref = point(0, 1.1, 30, ref="balanced")
    assert uncovered_references([ref, point(1, 1.2, 31)]) == []
    assert uncovered_references([ref]) == []  # a front point equal to it counts
    lone = TrialPoint(2, KNOBS, 1.0, 50.0, (), "conservative")
    assert uncovered_references([lone, point(1, 1.2, 31)]) == []  # conservative is on the front


def test_nothing_slower_than_dense_is_recommended():
    slow = [point(0, 0.95, 40), point(1, 1.0, 41)]  # both meet 30 dB; neither beats dense
    assert recommend(slow) is None
    message = no_recommendation_message(slow)
    assert "none is faster than dense" in message and "trial 1, 1.000x" in message
    assert recommend([*slow, point(2, 1.01, 35)]).number == 2
    assert "never met" in no_recommendation_message([point(0, 1.5, 20)])
