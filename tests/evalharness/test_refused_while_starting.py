"""Refused with exit 2 and the setting to change: no working FFmpeg (before any work), and a
compile the chip refuses for want of scoped VMEM."""

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import evalharness.run as run_module
from evalharness import exit_codes
from evalharness.evidence.video import VideoError, check_encoder, ffmpeg_executable
from evalharness.exit_codes import RunFailed
from evalharness.refusal import PreflightRefusal
from tests.helpers.harness_config import small_config
from tests.helpers.paths import REPO_ROOT


def test_the_bundled_ffmpeg_passes():
    assert check_encoder() == ffmpeg_executable()


def test_a_missing_ffmpeg_is_refused_naming_the_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("EVALHARNESS_FFMPEG", str(tmp_path / "no-ffmpeg"))
    with pytest.raises(VideoError, match=r"cannot encode this run's videos.*EVALHARNESS_FFMPEG"):
        check_encoder()


def test_an_ffmpeg_without_the_codecs_is_refused(tmp_path, monkeypatch):
    fake = tmp_path / "ffmpeg"
    fake.write_text("#!/bin/sh\necho 'Unknown encoder libx264' >&2\nexit 1\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("EVALHARNESS_FFMPEG", str(fake))
    with pytest.raises(VideoError, match=r"FFmpeg at .* cannot encode"):
        check_encoder()


def test_no_imageio_binary_is_refused(monkeypatch):
    def none_found():
        raise RuntimeError("No ffmpeg exe could be found")

    monkeypatch.delenv("EVALHARNESS_FFMPEG", raising=False)
    monkeypatch.setattr("imageio_ffmpeg.get_ffmpeg_exe", none_found)
    with pytest.raises(VideoError, match=r"no FFmpeg executable .*reinstall imageio-ffmpeg"):
        check_encoder()


def test_the_run_refuses_before_any_model_is_built(tmp_path, monkeypatch):
    monkeypatch.setenv("EVALHARNESS_FFMPEG", str(tmp_path / "no-ffmpeg"))

    def must_not_run(*args, **kwargs):
        raise AssertionError("a model was built although FFmpeg cannot encode")

    monkeypatch.setattr(run_module, "build_components", must_not_run)
    monkeypatch.setattr(run_module, "admit", must_not_run)
    cfg = small_config(tmp_path, "logger=none")
    with pytest.raises(PreflightRefusal, match="EVALHARNESS_FFMPEG.*Nothing was computed"):
        run_module.run(cfg)
    assert not (tmp_path / "outputs" / "runs").exists() or not any(
        (tmp_path / "outputs" / "runs").iterdir()
    )


@pytest.mark.slow
def test_the_cli_exits_2_with_one_error_line(tmp_path):
    env = {**os.environ, "EVALHARNESS_FFMPEG": str(tmp_path / "no-ffmpeg")}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "evalharness",
            f"output_root={tmp_path}/o",
            f"cache_dir={tmp_path}/c",
        ],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "EVALHARNESS_FFMPEG" in errors[0], done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "o" / "runs").exists() or not any((tmp_path / "o" / "runs").iterdir())


def test_a_compile_out_of_scoped_vmem_is_refused_with_exit_2_naming_the_settings(
    tmp_path, monkeypatch
):
    # Mosaic's refusal as a TPU v5e printed it, raised where the arms compile.
    def out_of_vmem(*args, **kwargs):
        raise RuntimeError(
            "INTERNAL: Mosaic failed to compile TPU kernel: CompileTimeScopedVmemOom: Scoped "
            "allocation with size 16.16M and limit 16.00M exceeded scoped vmem limit by 160.0K."
        )

    monkeypatch.setattr(run_module, "measure_pairs", out_of_vmem)
    cfg = small_config(tmp_path, "logger=none")
    with pytest.raises(RunFailed) as failed:
        run_module.run(cfg)
    assert failed.value.exit_code == exit_codes.REFUSED
    message = str(failed.value)
    assert "needs 16.16MB of scoped VMEM over a limit of 16.00MB" in message
    assert "kernel.block_q" in message and "--xla_tpu_scoped_vmem_limit_kib" in message
    assert "Traceback" not in message
    status = json.loads((Path(failed.value.run_dir) / "status.json").read_text())
    assert status["status"] == "failed"


@pytest.mark.slow
def test_other_failures_while_running_stay_exit_4(tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("something else")

    monkeypatch.setattr(run_module, "measure_pairs", broken)
    with pytest.raises(RunFailed) as failed:
        run_module.run(small_config(tmp_path, "logger=none"))
    assert failed.value.exit_code == exit_codes.FAILED
