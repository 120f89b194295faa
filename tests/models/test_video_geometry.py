"""Pixel → latent → token geometry and its validation messages."""

import pytest

from evalharness.config.resolutions import load_resolution, resolution_names
from models.video_geometry import VideoGeometry


@pytest.mark.parametrize(
    ("name", "latent_hw", "per_frame", "tokens"),
    [
        ("480p", (60, 104), 1560, 32760),
        ("720p", (90, 160), 3600, 75600),
        ("1080p", (136, 240), 8160, 171360),
        ("1440p", (180, 320), 14400, 302400),
    ],
)
def test_presets_at_81_frames(name, latent_hw, per_frame, tokens):
    g = load_resolution(name).video
    assert g.frames == 81
    assert (g.latent_height, g.latent_width) == latent_hw
    assert g.latent_frames == 21
    assert g.tokens_per_frame == per_frame
    assert g.tokens == tokens
    assert g.token_grid == (21, latent_hw[0] // 2, latent_hw[1] // 2)
    assert g.latent_shape() == (16, 21, *latent_hw)


def test_small_geometry_derivations():
    g = VideoGeometry(frames=17, height=384, width=640)
    assert g.latent_frames == 5
    assert g.latent_shape() == (16, 5, 48, 80)
    assert g.latent_shape(channels=4) == (4, 5, 48, 80)
    assert g.token_grid == (5, 24, 40)
    assert g.tokens == 5 * 24 * 40
    one = VideoGeometry(frames=1, height=16, width=32)
    assert one.token_grid == (1, 1, 2)


def test_1080_suggests_1088():
    with pytest.raises(ValueError, match="use 1920x1088") as err:
        VideoGeometry(frames=81, height=1080, width=1920)
    assert "height=1080" in str(err.value)
    assert "1072 or 1088" in str(err.value)


def test_frames_suggestion():
    with pytest.raises(ValueError, match="frames=80 is not 4k\\+1.*nearest valid: 81"):
        VideoGeometry(frames=80, height=480, width=832)
    with pytest.raises(ValueError, match="nearest valid: 77\\b"):
        VideoGeometry(frames=78, height=480, width=832)
    with pytest.raises(ValueError, match="nearest valid: 81 or 85"):
        VideoGeometry(frames=83, height=480, width=832)


def test_all_problems_reported_together():
    with pytest.raises(ValueError) as err:
        VideoGeometry(frames=50, height=100, width=1000)
    msg = str(err.value)
    for part in ("frames=50", "height=100", "width=1000", "use 1008x96, 49 frames"):
        assert part in msg, msg


@pytest.mark.parametrize("bad", [0, -16])
def test_non_positive_sizes_rejected(bad):
    with pytest.raises(ValueError, match="nearest valid: 16"):
        VideoGeometry(frames=1, height=bad, width=16)


def test_unknown_resolution_lists_known():
    with pytest.raises(ValueError, match="unknown resolution '4k'") as err:
        load_resolution("4k")
    for name in ("480p", "720p", "1080p", "1440p", "cpu"):
        assert name in str(err.value)
    assert set(resolution_names()) == {"480p", "720p", "1080p", "1440p", "cpu"}


def test_preset_geometries_agree():
    # The pixel config, the model's geometry and the kernels' token geometry describe one video.
    for name in resolution_names():
        preset = load_resolution(name)
        assert preset.config.name == name
        sizes = (preset.config.frames, preset.config.height, preset.config.width)
        assert (preset.video.frames, preset.video.height, preset.video.width) == sizes
        grid = (preset.tokens.frames, preset.tokens.height, preset.tokens.width)
        assert grid == preset.video.token_grid
        assert preset.tokens.tokens == preset.video.tokens


def test_cpu_preset():
    preset = load_resolution("cpu")
    assert preset.video.token_grid == (9, 12, 20)
    assert preset.tokens.tokens == 2_160
    assert preset.config.default_steps == 10
