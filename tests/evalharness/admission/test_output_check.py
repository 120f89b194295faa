"""The run's folders checked before any work, and I/O errors that name their setting."""

import errno
import os
from collections import namedtuple
from pathlib import Path

import pytest

from evalharness import compile_cache
from evalharness.admission import check_compile_cache, check_output_folders, io_hint
from evalharness.admission.output_check import run_bytes
from evalharness.config import to_config
from evalharness.refusal import PreflightRefusal
from tests.helpers.harness_config import small_config


def _cfg(tmp_path, *overrides):
    return to_config(small_config(tmp_path, *overrides))


def test_a_writable_root_passes_and_nothing_is_created(tmp_path):
    cfg = _cfg(tmp_path)
    check_output_folders(cfg, 1)
    assert list(tmp_path.iterdir()) == []  # the probe's folder and file are gone again


def _virtual_folder_that_passes_access():
    """A kernel folder that answers access(W_OK) yet refuses every new entry, or None."""
    for folder in ("/proc/self/fd", "/proc/self/task", "/proc"):
        if os.path.isdir(folder) and os.access(folder, os.W_OK | os.X_OK):
            return folder
    return None


@pytest.mark.skipif(_virtual_folder_that_passes_access() is None, reason="no such /proc folder")
def test_a_folder_that_passes_access_but_takes_no_new_file_is_refused(tmp_path):
    folder = _virtual_folder_that_passes_access()
    cfg = _cfg(tmp_path, f"cache_dir={folder}/evalharness-cache")
    with pytest.raises(PreflightRefusal) as refusal:
        check_output_folders(cfg, 1)
    assert str(refusal.value).startswith(
        f"cache_dir={folder}/evalharness-cache cannot be written: a folder cannot be created in "
        f"{folder} ("
    )
    assert "set cache_dir to a folder this user can write" in str(refusal.value)


def test_a_folder_that_refuses_files_is_refused_naming_the_error(tmp_path, monkeypatch):
    real_write = Path.write_bytes

    def refuse(path, data):
        if path.name == "probe":
            raise OSError(errno.EROFS, "Read-only file system", str(path))
        return real_write(path, data)

    monkeypatch.setattr(Path, "write_bytes", refuse)
    with pytest.raises(PreflightRefusal, match=r"a file cannot be created in .* \(Read-only file"):
        check_output_folders(_cfg(tmp_path), 1)
    assert list(tmp_path.iterdir()) == []


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


def test_a_compilation_cache_that_cannot_be_written_is_refused_naming_cache_dir(
    tmp_path, monkeypatch
):
    monkeypatch.delenv(compile_cache.ENV_FOLDER, raising=False)  # the session's (conftest.py)
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / compile_cache.FOLDER).write_text("a file where the folder goes")
    with pytest.raises(PreflightRefusal) as refusal:
        check_output_folders(_cfg(tmp_path), 1)
    message = str(refusal.value)
    assert message.startswith(f"cache_dir={tmp_path / 'cache'}: the compilation cache's folder ")
    assert "jax_compile is not a folder" in message and "compile_cache=false" in message
    check_output_folders(_cfg(tmp_path, "compile_cache=false"), 1)  # off: nothing to write


def test_a_compilation_cache_the_environment_names_is_checked_under_its_name(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("x")
    monkeypatch.setenv(compile_cache.ENV_FOLDER, str(tmp_path / "file" / "jax"))
    with pytest.raises(PreflightRefusal, match=r"^JAX_COMPILATION_CACHE_DIR=.*file/jax: the "):
        check_compile_cache(_cfg(tmp_path))
