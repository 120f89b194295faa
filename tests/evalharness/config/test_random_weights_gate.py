"""``model.checkpoint=random``: one rule says a run is on random weights, and its quality
thresholds are refused before any work while its speed threshold stays."""

import pytest

from evalharness.config import ModelConfig, random_weights_gate_problem, to_config
from tests.helpers.harness_config import small_config


def test_random_weights_are_the_random_checkpoint_and_count_as_seeded():
    assert ModelConfig(name="wan2.1-t2v-1.3b", checkpoint="random").random_weights
    assert ModelConfig(name="wan2.1-t2v-1.3b", checkpoint="random").seeded
    assert ModelConfig(name="tiny-random").seeded
    assert not ModelConfig(name="tiny-random").random_weights
    assert not ModelConfig(name="tiny", checkpoint="/data/random").seeded


@pytest.mark.parametrize(
    ("threshold", "named"),
    [
        ("gate.min_psnr_db=20", "gate.min_psnr_db"),
        ("gate.min_worst_frame_psnr_db=18", "gate.min_worst_frame_psnr_db"),
    ],
)
def test_a_quality_threshold_on_random_weights_is_refused_naming_it(tmp_path, threshold, named):
    overrides = ("model=wan2.1-t2v-1.3b", "model.checkpoint=random", threshold)
    with pytest.raises(ValueError, match=f"drop {named} ") as refusal:
        to_config(small_config(tmp_path, *overrides, "gate.min_speedup=1.1"))
    assert "gate.min_speedup still gates its speed" in str(refusal.value)


def test_the_speed_threshold_alone_is_kept_on_random_weights(tmp_path):
    cfg = to_config(small_config(tmp_path, "model.checkpoint=random", "gate.min_speedup=1.1"))
    assert cfg.model.random_weights and cfg.gate.min_speedup == 1.1


def test_quality_thresholds_on_real_weights_are_untouched(tmp_path):
    cfg = to_config(small_config(tmp_path, "gate.min_psnr_db=20"))
    assert cfg.gate.min_psnr_db == 20


def test_the_refusal_names_every_threshold_set_and_nothing_when_none_is():
    both = random_weights_gate_problem({"--a": 1.0, "--b": 2.0, "--c": None}, "--s")
    assert both is not None and "drop --a and --b (--s still" in both
    assert random_weights_gate_problem({"--a": None}, "--s") is None
