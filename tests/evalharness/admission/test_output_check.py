"""The run's folders checked before any work, and I/O errors that name their setting."""

import errno
from collections import namedtuple

import pytest

from evalharness.admission import check_output_folders, io_hint
from evalharness.admission.output_check import run_bytes
from evalharness.config import to_config
from evalharness.refusal import PreflightRefusal
from tests.helpers.harness_config import small_config


def _cfg(tmp_path, *overrides):
    return to_config(small_config(tmp_path, *overrides))


def test_a_writable_root_passes_and_nothing_is_created(tmp_path):
    cfg = _cfg(tmp_path)
    check_output_folders(cfg, 1)
    assert not (tmp_path / "outputs").exists() and not (tmp_path / "cache").exists()


def test_an_output_root_under_a_file_is_refused_naming_the_setting(tmp_path):
    (tmp_path / "file").write_text("x")
    cfg = _cfg(tmp_path, f"output_root={tmp_path}/file/out")
    with pytest.raises(PreflightRefusal, match=r"output_root=.*file/out cannot be written"):
        check_output_folders(cfg, 1)


def test_a_folder_this_user_cannot_write_is_refused(tmp_path, monkeypatch):
    # Root ignores permission bits, so the check's own question is answered "no" here.
    monkeypatch.setattr("os.access", lambda path, mode: False)
    cfg = _cfg(tmp_path)
    with pytest.raises(PreflightRefusal, match="not writable by this user; set output_root"):
        check_output_folders(cfg, 1)


def test_too_little_free_space_is_refused_with_the_bytes(tmp_path, monkeypatch):
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr("shutil.disk_usage", lambda path: usage(10**9, 10**9, 1000))
    cfg = _cfg(tmp_path)
    with pytest.raises(
        PreflightRefusal, match=r"has 0.0 MB free; this run writes up to [0-9.]+ MB"
    ):
        check_output_folders(cfg, 1)


def test_run_bytes_grow_with_pairs_arms_and_latents(tmp_path):
    one = run_bytes(_cfg(tmp_path), 1)
    assert run_bytes(_cfg(tmp_path), 3) == 3 * one
    assert run_bytes(_cfg(tmp_path, "noise_floor=false"), 1) == one * 2 // 3
    assert run_bytes(_cfg(tmp_path, "save_latents=true"), 1) > one


def test_io_errors_name_the_setting_of_their_path(tmp_path):
    cfg = _cfg(tmp_path)
    full = OSError(errno.ENOSPC, "No space left on device", f"{tmp_path}/cache/x.npz")
    assert "disk" in io_hint(full, cfg) and "set cache_dir to a larger disk" in io_hint(full, cfg)
    denied = OSError(errno.EACCES, "Permission denied", f"{tmp_path}/outputs/runs/x/dense.mp4")
    assert "cannot be written: set output_root to a writable folder" in io_hint(denied, cfg)
    assert io_hint(ValueError("not I/O"), cfg) == ""
