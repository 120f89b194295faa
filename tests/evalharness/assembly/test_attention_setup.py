"""The run's attention functions are built from its config: the tiles it names, the compute
sub-tile among them, reach the sparse band's plan."""

from evalharness.assembly import platform_choices
from evalharness.assembly.attention_setup import build_attention
from evalharness.config import to_config
from models.config import get_transformer_config
from models.video_geometry import VideoGeometry
from tests.helpers.harness_config import small_config


def test_the_tiles_and_compute_sub_tile_of_the_config_reach_the_band_plan(tmp_path):
    cfg = platform_choices.resolve(
        to_config(
            small_config(
                tmp_path, "kernel.block_q=32", "kernel.block_kv=40", "kernel.block_kv_compute=8"
            )
        )
    )
    res = cfg.resolution
    setup = build_attention(
        cfg, VideoGeometry(res.frames, res.height, res.width), get_transformer_config("tiny")
    )
    assert (setup.block_sizes.block_q, setup.block_sizes.block_kv) == (32, 40)
    assert setup.block_sizes.block_kv_compute == 8
    assert setup.sparse.plan.block_sizes.block_kv_compute == 8
