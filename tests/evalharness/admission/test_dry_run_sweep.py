"""A dry-run sweep's table: each job's fit and time beside the seed's figures, the seed
experiments planned for the seed's hardware within their own ``max_minutes``, and the command
line of the issue (``dry_run=true -m experiment=...``) as Hydra would refuse it otherwise."""

from __future__ import annotations

import subprocess
import sys

import pytest

from evalharness.admission import dry_run_table, plan_dry_run
from evalharness.config import multirun_first
from tests.helpers.harness_config import small_config
from tests.helpers.paths import REPO_ROOT


@pytest.fixture(autouse=True)
def our_model_only(monkeypatch):
    """Our model's plan (with the ``tpu`` extra a TPU target would be compiled for the chip)."""
    monkeypatch.setattr("evalharness.estimates.tpu_compiler.libtpu_installed", lambda: False)


def test_a_seed_experiment_plans_for_the_seed_hardware_within_its_minutes(tmp_path):
    planned = plan_dry_run(
        small_config(tmp_path, "dry_run=true", "experiment=seed_720p", small=False)
    )
    assert planned.code == 0, planned.report  # fits, and within the experiment's max_minutes
    row = planned.row
    assert (row["model"], row["resolution"], row["target"]) == (
        "wan2.1-t2v-14b",
        "720p",
        "tpu-v6e-8",
    )
    assert row["verdict"] == "fits" and row["max_minutes"] == 60 and row["minutes"] < 60
    assert row["peak"].endswith(" / 31.25")
    # The seed's measurements first, our estimate after, with the difference.
    assert row["dense_s"].startswith("153.50 / ") and row["dense_s"].endswith("%)")
    assert row["sparse_s"].startswith("119.86 / ") and row["speedup"].startswith("1.28 / ")


def test_outside_the_seed_setting_a_row_has_our_figures_alone(tmp_path):
    planned = plan_dry_run(small_config(tmp_path, "dry_run=true", "max_minutes=0.001"))
    row = planned.row
    assert planned.code == 3 and row["verdict"] == "fits, over max_minutes"
    assert (row["model"], row["target"]) == ("tiny", "cpu")
    assert row["speedup"].startswith("- / ") and row["dense_s"].startswith("- / ")


def test_the_table_lists_jobs_in_order():
    rows = [{"sweep_job": 1, "resolution": "1080p"}, {"sweep_job": 0, "resolution": "720p"}]
    table = dry_run_table(rows).splitlines()
    assert table[0].startswith("| job | model | resolution |") and "speedup seed / ours" in table[0]
    assert table[2].startswith("| 0 | - | 720p") and table[3].startswith("| 1 | - | 1080p")


def test_the_multirun_flag_goes_first_wherever_it_stands():
    args = ["dry_run=true", "-m", "experiment=seed_720p,seed_1080p", "--multirun"]
    assert multirun_first(args) == [
        "-m",
        "--multirun",
        "dry_run=true",
        "experiment=seed_720p,seed_1080p",
    ]
    assert multirun_first(["a=1", "b=2"]) == ["a=1", "b=2"]


@pytest.mark.slow  # three 14B dry runs in a subprocess: about a minute on 2 cores
def test_the_seed_sweep_dry_run_prints_one_table_beside_the_seed(tmp_path):
    # chip_compile=off: with the tpu extra (CI's slow step) each job would otherwise compile its
    # three 14B denoising loops for the chips, 10 minutes and more per job (test_step_compile.py
    # covers that compile; this test covers the sweep's table).
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "evalharness",
            "dry_run=true",
            "chip_compile=off",
            "-m",
            "experiment=seed_720p,seed_1080p,seed_1440p",
            f"output_root={tmp_path}",
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    table = done.stdout.split("Dry-run sweep (3 jobs")[1]
    rows = [line for line in table.splitlines() if line.startswith("| ") and "wan2.1" in line]
    assert [r.split(" | ")[2] for r in rows] == ["720p", "1080p", "1440p"]
    for row, seed in zip(rows, ("1.28 / ", "1.49 / ", "1.69 / "), strict=True):
        assert "| tpu-v6e-8 | fits |" in row and seed in row
    assert (tmp_path / "multirun" / "summary.md").is_file()
    assert not (tmp_path / "mlflow.db").exists()  # a dry run logs nothing
