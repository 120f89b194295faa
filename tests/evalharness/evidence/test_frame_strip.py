"""The frame strip: dense | sparse | difference of chosen frames, from a run folder's videos."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from evalharness.evidence.frame_strip import frame_strip, main
from evalharness.evidence.video import encode_lossless, side_by_side


def _videos():
    rng = np.random.default_rng(0)
    dense = rng.integers(0, 256, (5, 16, 24, 3), dtype=np.uint8)
    sparse = dense.copy()
    sparse[3, 4:8, 4:8] = 0
    return dense, sparse


def test_the_strip_stacks_the_chosen_frames_of_the_side_by_side_layout():
    dense, sparse = _videos()
    strip = frame_strip(dense, sparse, [0, 3])
    panels = side_by_side(dense, sparse)
    band = panels.shape[1] - 16
    assert strip.shape == (band + 2 * 16, 3 * 24, 3)
    np.testing.assert_array_equal(strip[band + 16 :], panels[3, band:])
    assert strip[band + 16 :, 48:].any() and not strip[band : band + 16, 48:].any()
    with pytest.raises(ValueError, match="expected indices in 0..4"):
        frame_strip(dense, sparse, [5])
    with pytest.raises(ValueError, match="differ in shape"):
        frame_strip(dense, sparse[:4], [0])


def test_the_command_reads_a_run_folder_and_names_what_is_missing(tmp_path, capsys):
    dense, sparse = _videos()
    assert main([str(tmp_path), str(tmp_path / "s.png")]) == 2
    assert "sparse.lossless.mkv not found; pass a run folder" in capsys.readouterr().err
    encode_lossless(dense, tmp_path / "dense.lossless.mkv")
    encode_lossless(sparse, tmp_path / "sparse.lossless.mkv")
    assert main([str(tmp_path), str(tmp_path / "s.png"), "--frames", "0", "3"]) == 0
    saved = np.asarray(Image.open(tmp_path / "s.png"))
    np.testing.assert_array_equal(saved, frame_strip(dense, sparse, [0, 3]))
