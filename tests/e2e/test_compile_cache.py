"""A second job with the same ``cache_dir`` takes its programs from JAX's persistent compilation
cache (a count, not a time); ``compile_cache=false`` makes no cache folder and takes nothing; a
cache folder that cannot be written is refused before any work."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from evalharness import compile_cache, exit_codes
from tests.helpers.harness_config import SMALL
from tests.helpers.paths import REPO_ROOT

pytestmark = pytest.mark.slow  # end to end: run by .ci/run's second step (pytest -m slow)


def _job(tmp_path: Path, cache_dir: Path, *overrides: str) -> subprocess.CompletedProcess:
    """``python -m evalharness`` at the small test sizes, without the test session's own cache
    (``tests/conftest.py``), so the job keeps its cache under ``cache_dir`` as a user's does."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_PERSISTENT_CACHE")}
    env.pop(compile_cache.ENV_FOLDER, None)
    command = [sys.executable, "-m", "evalharness", *SMALL, "logger=none", "noise_floor=false"]
    command += [f"output_root={tmp_path / 'o'}", f"cache_dir={cache_dir}", *overrides]
    return subprocess.run(
        command, cwd=REPO_ROOT, capture_output=True, text=True, env=env, timeout=600
    )


def _metrics(done: subprocess.CompletedProcess) -> dict:
    assert done.returncode == 0, done.stderr[-3000:]
    folder = next(line for line in done.stdout.splitlines() if line.startswith("run folder: "))
    return json.loads((Path(folder.split(": ", 1)[1]) / "metrics.json").read_text())


def test_a_second_job_takes_its_programs_from_the_cache_and_off_takes_none(tmp_path):
    cache = tmp_path / "c"
    first = _metrics(cold := _job(tmp_path, cache))
    folder = cache / compile_cache.FOLDER
    assert first["compile_cache_hits"] == 0 and first["compile_cache_misses"] > 0
    assert any(folder.iterdir())
    programs = first["compile_cache_misses"]
    assert f"compilation cache: 0 of {programs} programs taken from {folder}" in cold.stdout

    second = _metrics(_job(tmp_path, cache))
    assert second["compile_cache_hits"] > 0
    assert second["compile_cache_misses"] < first["compile_cache_misses"]
    # No more programs than the first job's (the prompt's embedding, cached on disk by the first,
    # spares the text encoder's), each taken from the cache or compiled again: a program with a
    # host callback (the routing recording) is never written.
    assert second["compile_cache_hits"] + second["compile_cache_misses"] <= programs

    off = _metrics(_job(tmp_path, tmp_path / "off", "compile_cache=false"))
    assert off["compile_cache_hits"] == 0 and off["compile_cache_misses"] > 0
    assert not (tmp_path / "off" / compile_cache.FOLDER).exists()


def test_a_cache_folder_that_cannot_be_written_is_refused_before_any_work(tmp_path):
    cache = tmp_path / "c"
    cache.mkdir()
    (cache / compile_cache.FOLDER).write_text("a file where the folder goes")
    done = _job(tmp_path, cache)
    assert done.returncode == exit_codes.REFUSED, done.stderr[-3000:]
    assert f"error: cache_dir={cache}: the compilation cache's folder" in done.stderr
    assert "compile_cache=false" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "o" / "runs").exists()
