"""``prompts=vbench`` end to end: with the vbench distribution's prompt file installed the main
command runs a dimension's sample on the tiny model; without it, it exits 2 naming the install."""

import json
import os
import subprocess
import sys

import pytest

from evalharness import exit_codes
from tests.helpers.harness_config import SMALL
from tests.helpers.paths import REPO_ROOT

# VBench_full_info.json's layout, four of its color prompts among others.
ENTRIES = [
    {"prompt_en": "a red bicycle", "dimension": ["color"]},
    {"prompt_en": "a person is swimming", "dimension": ["human_action"]},
    {"prompt_en": "a green bench", "dimension": ["color"]},
    {"prompt_en": "a white cat", "dimension": ["color"]},
    {"prompt_en": "a black umbrella", "dimension": ["color"]},
]
ARGS = ["prompts=vbench", "prompts.dimension=color", "prompts.limit=3", "logger=none"]


def _main(tmp_path, site: str | None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    if site is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [site, env.get("PYTHONPATH")]))
    command = [sys.executable, "-m", "evalharness", *SMALL, *ARGS, f"output_root={tmp_path}/o"]
    return subprocess.run(
        command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=900
    )


@pytest.mark.slow  # three pairs of the main job on the tiny model (about a minute on 2 cores)
def test_a_vbench_dimension_sample_runs_on_the_tiny_model(tmp_path):
    package = tmp_path / "site" / "vbench"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("raise ImportError('never imported')\n")
    (package / "VBench_full_info.json").write_text(json.dumps(ENTRIES))
    done = _main(tmp_path, str(tmp_path / "site"))
    assert done.returncode == 0, done.stderr[-3000:]
    (run_dir,) = (tmp_path / "o" / "runs").iterdir()
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["pairs"] == 3 and metrics["lpips_mean"] >= 0
    prompts = (run_dir / "pairs.csv").read_text()
    assert all(p in prompts for p in ("a red bicycle", "a white cat", "a black umbrella"))


@pytest.mark.slow  # a whole interpreter start with Hydra (about 15 s on 2 cores)
def test_without_vbench_the_main_command_exits_2_naming_the_install(tmp_path):
    done = _main(tmp_path, None)
    assert done.returncode == exit_codes.REFUSED, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "pip install --no-deps vbench==0.1.5" in errors[0]
    assert not (tmp_path / "o" / "runs").exists()
