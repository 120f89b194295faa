"""The speedup gate can fail: a sparse arm that loses its advantage fails CI's gate on the default
job, while its video stays that of the correct arm.

The speed negative control ``redundant_dense`` makes every sparse cell also run the dense executor
and discard it (``kernels.policy.negative_controls``): the sparse arm then does all of the dense
arm's attention work and its own, with frames identical to the correct arm's. On the default job's
resolution (2,160 tokens, where self-attention is most of a block on the CPU) with every cell
sparse, that arm measured 0.695x of dense (3 steps, 3 interleaved rounds, beside another test on
the same two cores), far under the gate CI applies to the correct arm (``.ci/run``'s
``gate.min_speedup``), whatever the two cores' run-to-run spread (the correct arm's whole runs on
record: 0.95x-1.25x). Its video is the correct arm's, bit for bit
(``tests/evalharness/assembly/test_negative_controls.py``).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from evalharness import exit_codes
from tests.helpers.paths import REPO_ROOT

pytestmark = pytest.mark.slow  # a whole default-resolution job (about 2 minutes on 2 cores)


def _ci_min_speedup() -> float:
    """The speedup threshold of CI's wheel gate, read from ``.ci/run`` (one source)."""
    found = re.findall(r"gate\.min_speedup=([0-9.]+)", (REPO_ROOT / ".ci" / "run").read_text())
    assert len(found) == 1, found
    return float(found[0])


def test_a_sparse_arm_that_redoes_the_dense_work_fails_the_ci_speed_gate(tmp_path: Path):
    threshold = _ci_min_speedup()
    command = [
        sys.executable,
        "-m",
        "evalharness",
        f"output_root={tmp_path}/o",
        f"cache_dir={tmp_path}/c",
        "logger=none",
        "progress=off",
        "noise_floor=false",
        "negative_control=redundant_dense",
        # Every cell sparse, so every step pays for the planted work.
        "schedule.first_times_fp=0",
        "schedule.first_layers_fp=0",
        "steps=3",
        "warm_runs=5",  # the median of five interleaved rounds: one slow dense round cannot move it
        f"gate.min_speedup={threshold}",
        "gate.min_psnr_db=null",
    ]
    done = subprocess.run(
        command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=900, check=False
    )
    said = done.stdout + done.stderr
    assert done.returncode == exit_codes.GATE_FAILED, said[-3000:]
    # The gate names the statistic it read (``speedup_mean``: the mean over the job's pairs).
    failure = rf"error: gate failed: speedup(_mean)? = [0-9.]+ is below the threshold {threshold:g}"
    assert re.search(failure, said), said[-3000:]
    assert "it is the negative control redundant_dense, broken on purpose" in said, said[-3000:]
    (metrics_file,) = (tmp_path / "o" / "runs").glob("*/metrics.json")
    metrics = json.loads(metrics_file.read_text())
    assert metrics["speedup"] < threshold, metrics["speedup"]
