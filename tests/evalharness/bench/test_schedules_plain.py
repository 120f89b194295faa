"""The schedule benchmark's context arm (the model's materialised softmax) is refused up front
where its scores cannot fit the device, naming ``--no-plain``; small sizes keep it."""

import pytest

from evalharness.bench import schedules

GIB = 2**30


def test_scores_bytes_counts_cfg_batch_heads_and_exponentials():
    heads = schedules.get_transformer_config("wan2.1-t2v-1.3b").num_attention_heads
    assert schedules.plain_scores_bytes("wan2.1-t2v-1.3b", 1000) == 2 * 2 * heads * 1000**2 * 4


def test_plain_arm_refused_at_1p3b_480p_on_an_h200_sized_device():
    problem = schedules.plain_arm_problem("wan2.1-t2v-1.3b", 32_760, int(104.85 * GIB))
    assert problem is not None
    assert "--no-plain" in problem and "32,760 tokens" in problem


@pytest.mark.parametrize("device_bytes", [None, int(104.85 * GIB)])
def test_plain_arm_kept_at_the_cpu_preset(device_bytes):
    assert schedules.plain_arm_problem("tiny-planted", 1_920, device_bytes) is None


def test_no_plain_flag_parses():
    assert schedules._parser().parse_args([]).plain is True
    assert schedules._parser().parse_args(["--no-plain"]).plain is False
