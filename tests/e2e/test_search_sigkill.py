"""A search SIGKILLed in a trial, resumed, SIGKILLed again in a trial and resumed once more, as
real processes (``python -m evalharness.search``'s own entry point): each killed trial is failed
on the next resume and its knobs run exactly once more, no point is drawn twice, and nothing is
left RUNNING. The trials' runs are faked in the child process (the kill, the storage and the
resume are real): a trial that is to be killed announces itself and waits, so the kill always
lands inside it, whatever the machine's load."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import optuna
import pytest

from tests.helpers.harness_config import SMALL
from tests.helpers.search_config import SEARCH

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
BLOCKED = "trial blocked, waiting to be killed"

# The child: ``python -m evalharness.search`` with its trials' runs faked. Each run appends its knobs to the file
# $RAN; the $BLOCK_AT-th run of the process prints BLOCKED and waits to be killed.
CHILD = f"""
import json, os, runpy, sys, time
from evalharness import exit_codes
from evalharness.search import study_run
from evalharness.search.plan import SearchPlan
from evalharness.search.trials import TrialOutcome

calls = []

def run_trial(cfg):
    calls.append(cfg)
    knobs = {{k: cfg.schedule[k] for k in ("density", "first_times_fp", "first_layers_fp")}}
    with open(os.environ["RAN"], "a") as f:
        f.write(json.dumps(knobs) + "\\n")
    if len(calls) == int(os.environ["BLOCK_AT"]):
        print({BLOCKED!r}, flush=True)
        time.sleep(3600)
    return TrialOutcome(exit_codes.OK, {{"speedup": 1.2, "psnr_db_mean": 40.0}})

def plan(run_cfg, search, done, max_minutes):
    return SearchPlan(search.trials - done, done, 1 / 60, max_minutes, None)

study_run.run_trial = run_trial
study_run.make_plan = plan
sys.argv[0] = "evalharness.search"
runpy.run_module("evalharness.search", run_name="__main__", alter_sys=True)
"""


def _search(tmp_path: Path, trials: int, block_at: int, *extra: str) -> int:
    """Runs the search in a child process; SIGKILLs it once its ``block_at``-th trial has begun
    (0: never). Returns its exit code."""
    args = [
        *(o for o in SMALL if not o.startswith("schedule.")),
        *SEARCH,
        "search.first_layers_fp.high=0.2",
        "search.first_layers_fp.step=0.01",
        f"output_root={tmp_path / 'outputs'}",
        f"cache_dir={tmp_path / 'cache'}",
        "logger=none",
        "search.study_name=st1",
        f"search.trials={trials}",
        *extra,
    ]
    env = {
        **os.environ,
        "RAN": str(tmp_path / "ran.jsonl"),
        "BLOCK_AT": str(block_at),
        "PYTHONPATH": str(REPO),
    }
    with subprocess.Popen(
        [sys.executable, "-c", CHILD, *args],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    ) as child:
        lines = []
        for line in child.stdout:
            lines.append(line)
            if block_at and BLOCKED in line:
                child.send_signal(signal.SIGKILL)
        code = child.wait()
    if block_at:
        assert code == -signal.SIGKILL, "".join(lines)
    return code


def test_a_sigkilled_search_resumed_twice_runs_each_killed_trial_once_more(tmp_path):
    _search(tmp_path, trials=2, block_at=2)  # trial 1 killed
    _search(tmp_path, 3, 2, "search.resume=true")  # trial 1's knobs again, then a new one killed
    assert _search(tmp_path, 3, 0, "search.resume=true") == 0  # the second killed one again

    db = tmp_path / "outputs" / "searches" / "st1" / "optuna.db"
    trials = optuna.load_study(study_name="st1", storage=f"sqlite:///{db}").trials
    assert [t.state.name for t in trials] == ["COMPLETE", "FAIL", "COMPLETE", "FAIL", "COMPLETE"]
    for lost, again in ((trials[1], trials[2]), (trials[3], trials[4])):
        assert lost.user_attrs["interrupted"] and lost.user_attrs["error"].startswith("lost:")
        assert again.params == lost.params
    ran = [json.loads(line) for line in (tmp_path / "ran.jsonl").read_text().splitlines()]
    # Killed, then run again, once each; the resumed sampler drew a new point, not trial 0's.
    assert ran[1] == ran[2] and ran[3] == ran[4] and len(ran) == 5
    distinct = [json.dumps(k, sort_keys=True) for k in (ran[0], ran[2], ran[4])]
    assert len(set(distinct)) == 3
