"""The host's memory on an accelerator: the streamed checkpoint's largest tensor, the videos, and
the target host's documented RAM."""

from __future__ import annotations

import dataclasses

from evalharness.admission.run_timing import UMT5_XXL
from evalharness.estimates.host_memory import GIB, HOST_RAM, largest_tensor, size_host
from models.config import get_transformer_config
from models.tiny_components import TINY_UMT5_CONFIG
from models.video_geometry import VideoGeometry

WAN14B = get_transformer_config("wan2.1-t2v-14b")
VIDEO_1440P = VideoGeometry(81, 1440, 2560)


def test_the_14b_runs_largest_streamed_tensor_is_umt5s_embedding():
    name, elements = largest_tensor(WAN14B, UMT5_XXL)
    assert name == "the text encoder's token embedding" and elements == 256384 * 4096
    # With the tiny text encoder the transformer's FFN matrix is the largest.
    assert largest_tensor(WAN14B, TINY_UMT5_CONFIG) == (
        "the transformer's FFN matrix",
        13824 * 5120,
    )


def test_a_14b_1440p_run_fits_the_documented_v6e_host():
    host = size_host("tpu-v6e-8", WAN14B, UMT5_XXL, VIDEO_1440P, arms=3, reads_checkpoint=True)
    assert host.loading_bytes == 2 * 256384 * 4096 * 4  # read + cast, float32 storage assumed
    frame = 81 * 1440 * 2560 * 3
    assert host.videos_bytes == (3 + 3 + 4) * frame
    assert host.peak_bytes == max(host.loading_bytes, host.videos_bytes)
    assert host.host_ram_bytes == 1536 * GIB and "docs.cloud.google.com/tpu/docs/v6e" in host.source
    assert host.fits and host.problem() is None
    assert "| **peak** vs host RAM | 8.34 of 1,536 | fits |" in host.to_markdown()


def test_a_host_too_small_is_a_problem_and_an_undocumented_one_is_not_checked(monkeypatch):
    monkeypatch.setitem(HOST_RAM, "tpu-v6e-8", (4 * GIB, "a 4 GiB stand-in"))
    host = size_host("tpu-v6e-8", WAN14B, UMT5_XXL, VIDEO_1440P, arms=3, reads_checkpoint=True)
    assert host.fits is False
    assert host.problem() == (
        "host memory: the run peaks at 8.3 GiB on the host, more than the 4 GiB of its documented "
        "RAM (a 4 GiB stand-in)"
    )
    h200 = size_host("h200", WAN14B, UMT5_XXL, VIDEO_1440P, arms=2, reads_checkpoint=True)
    assert h200.fits is None and h200.problem() is None and "not checked" in h200.source
    assert "| not checked |" in h200.to_markdown()


def test_seeded_weights_read_nothing_on_the_host():
    tiny = dataclasses.replace(get_transformer_config("tiny-planted"))
    host = size_host(
        "tpu-v6e-8", tiny, TINY_UMT5_CONFIG, VideoGeometry(33, 192, 320), arms=2,
        reads_checkpoint=False,
    )  # fmt: skip
    assert host.loading_bytes == 0 and host.peak_bytes == host.videos_bytes
