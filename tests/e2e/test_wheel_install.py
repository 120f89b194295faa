"""The app installed from a wheel (`pip install .`, not editable) runs from a folder outside the
checkout: the Hydra config ships inside the package."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.paths import REPO_ROOT


@pytest.mark.slow  # builds a wheel and a venv (~1 min): run by .ci/run's second step
def test_the_installed_wheel_runs_from_another_folder(tmp_path):
    env = {**os.environ, "WORK": str(tmp_path), "VENV": str(Path(sys.prefix))}
    done = subprocess.run(
        [str(REPO_ROOT / ".ci" / "wheel-check"), "dry_run=true"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"evalharness imported from the wheel: {tmp_path}/venv/" in done.stdout
    assert "## Verdict: FITS" in done.stdout
    help_text = (tmp_path / "elsewhere" / "help.txt").read_text()
    assert "experiment: seed_1080p, seed_1440p, seed_720p" in help_text
