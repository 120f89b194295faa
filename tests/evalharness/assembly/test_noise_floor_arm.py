"""The noise-floor arm: a second dense executor, not the dense arm's own, so that the
dense-vs-dense PSNR measures the rounding noise of two correct kernels (an arm that ran the dense
arm's executor again would give identical frames: an infinite, meaningless floor)."""

from types import SimpleNamespace

import jax
import numpy as np
import pytest

from evalharness.assembly import platform_choices
from evalharness.assembly.attention_setup import build_attention
from evalharness.comparison import prepare_arms
from evalharness.config import to_config
from models.config import get_transformer_config
from models.video_geometry import VideoGeometry
from tests.helpers.harness_config import small_config


def test_the_noise_floor_attention_is_another_executor_close_to_the_dense_one(tmp_path):
    cfg = platform_choices.resolve(to_config(small_config(tmp_path)))
    assert cfg.kernel.noise_floor_executor is not cfg.kernel.dense_executor
    res = cfg.resolution
    video = VideoGeometry(res.frames, res.height, res.width)
    model = get_transformer_config(cfg.model.name)
    setup = build_attention(cfg, video, model)
    shape = (1, setup.geometry.tokens, model.num_attention_heads, model.attention_head_dim)
    q, k, v = np.random.default_rng(0).standard_normal((3, *shape), dtype=np.float32)
    dense = np.asarray(jax.jit(lambda *a: setup.dense(*a, step=0, layer=0))(q, k, v))
    floor = np.asarray(jax.jit(lambda *a: setup.noise_floor(*a, step=0, layer=0))(q, k, v))
    # Two kernels of one function: equal up to float32 rounding, but not bit for bit (the same
    # executor twice would be).
    np.testing.assert_allclose(floor, dense, rtol=1e-4, atol=1e-5 * np.abs(dense).max())
    assert not np.array_equal(floor, dense)


@pytest.mark.parametrize("routing_stats", [True, False])
def test_the_noise_floor_arm_is_prepared_with_the_noise_floor_attention(routing_stats):
    prepared = []
    attention = SimpleNamespace(
        dense="dense attend", sparse="sparse", noise_floor="floor", recording="recording"
    )

    class Comparison:
        plan = SimpleNamespace(attention=attention)
        cfg = SimpleNamespace(noise_floor=True, routing_stats=routing_stats)

        def prepare_arm(self, label, attend, inputs):
            prepared.append((label, attend))
            return label

    arms = prepare_arms(Comparison(), inputs=None)
    assert list(arms) == ["dense", "sparse", "noise_floor"]
    # The sparse arm that records its routing compiles the recording twin (it records in its
    # warm-up run only); without routing statistics, the plain policy.
    sparse = "recording" if routing_stats else "sparse"
    assert prepared == [("dense", "dense attend"), ("sparse", sparse), ("noise_floor", "floor")]
