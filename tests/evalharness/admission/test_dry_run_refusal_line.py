"""A dry run that does not fit ends as every refusal does: exit 2 and one ``error:`` line naming
its reasons, each said once (two plans refused for one reason give one line in the verdict)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from evalharness.admission import plan_dry_run
from tests.helpers.harness_config import small_config
from tests.helpers.paths import REPO_ROOT

# Two Pallas TPU plans (the sparse arm's, the dense control's), both over the physical VMEM.
OVER_VMEM = ("target=tpu-v5e-1", "kernel=pallas_tpu", "kernel.vmem_limit_bytes=300000000")
REASON = "vmem_limit_bytes 300000000 exceeds"


@pytest.fixture(autouse=True)
def our_model_only(monkeypatch):
    """Our SMEM/VMEM model judges the plan (with the ``tpu`` extra installed, Mosaic would)."""
    monkeypatch.setattr("evalharness.estimates.tpu_compiler.libtpu_installed", lambda: False)


def test_a_plan_that_does_not_fit_has_one_error_line_and_each_reason_once(tmp_path):
    planned = plan_dry_run(small_config(tmp_path, "dry_run=true", *OVER_VMEM, small=False))
    assert planned.code == 2
    assert "\n" not in planned.error
    assert "does not fit" in planned.error and REASON in planned.error
    assert planned.error.count(REASON) == 1
    verdict = planned.report.split("## Verdict")[1]
    assert verdict.count(REASON) == 1, verdict
    assert "a v6e has" not in planned.report


def test_a_plan_over_time_has_one_error_line(tmp_path):
    planned = plan_dry_run(small_config(tmp_path, "dry_run=true", "max_minutes=0.001"))
    assert planned.code == 3
    assert "exceed max_minutes=0.001" in planned.error and "\n" not in planned.error


@pytest.mark.slow  # a whole command in a subprocess (about 20 s): the line on stderr, the code
def test_the_command_prints_the_line_and_exits_2(tmp_path):
    command = [sys.executable, "-m", "evalharness", "dry_run=true", "logger=none"]
    command += [f"output_root={tmp_path}/o", "chip_compile=off", *OVER_VMEM]
    done = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and REASON in errors[0], done.stderr
