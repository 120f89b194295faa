"""The preflight's FFmpeg probe is bounded: an FFmpeg that never finishes (a wrapper that waits,
a hung binary) is refused with the fix, and it and the processes it started are ended."""

from __future__ import annotations

import os
import stat

import pytest

from evalharness.evidence import video


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_an_ffmpeg_that_never_finishes_is_refused_and_ended(tmp_path, monkeypatch):
    pid_file = tmp_path / "sleeper.pid"
    fake = tmp_path / "ffmpeg"
    # The shell starts a child that holds FFmpeg's pipes: it must be ended too, or reading
    # them would wait for it.
    fake.write_text(f"#!/bin/sh\nsleep 600 &\necho $! > {pid_file}\nwait\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("EVALHARNESS_FFMPEG", str(fake))
    monkeypatch.setattr(video, "PROBE_TIMEOUT_S", 1.0)
    with pytest.raises(video.VideoError) as refused:
        video.check_encoder()
    message = str(refused.value)
    assert "did not finish a two-frame probe within 1 s" in message
    assert "EVALHARNESS_FFMPEG" in message  # the fix
    sleeper = int(pid_file.read_text())
    assert not _alive(sleeper) or _is_zombie(sleeper)


def _is_zombie(pid: int) -> bool:
    try:
        return open(f"/proc/{pid}/stat").read().split()[2] == "Z"
    except OSError:
        return True
