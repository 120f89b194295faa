"""A Ctrl-C or SIGTERM during the preflight or a dry run ends the command at the next safe point
of its checks and compiles, with the signal's exception, before any run folder or tracking run
exists: nothing had started, so nothing is left marked ``killed``."""

from __future__ import annotations

import signal

import pytest

import evalharness.run as run_module
from evalharness.admission import decision, dry_run_report, heartbeat
from evalharness.exit_codes import Terminated
from models import interruption
from tests.helpers.harness_config import small_config

SIGNALS = [(signal.SIGINT, KeyboardInterrupt), (signal.SIGTERM, Terminated)]


def _must_not_run(*args, **kwargs):
    raise AssertionError("work went on after the signal")


@pytest.mark.parametrize(("signum", "raised"), SIGNALS)
def test_a_signal_during_the_preflight_checks_ends_the_run_before_its_folder(
    tmp_path, monkeypatch, signum, raised
):
    monkeypatch.setattr(run_module, "check_video_encoder", lambda: interruption.request(signum))
    monkeypatch.setattr(run_module, "admit", _must_not_run)
    monkeypatch.setattr(run_module, "make_run_dir", _must_not_run)
    with pytest.raises(raised):
        run_module.run(small_config(tmp_path, "logger=none"))
    assert not (tmp_path / "outputs" / "runs").exists()


def test_a_signal_during_admission_ends_it_before_the_sizing(tmp_path, monkeypatch):
    def measured(dtype):
        interruption.request(signal.SIGINT)
        return 1e12

    monkeypatch.setattr(decision, "measure_matmul_flops", measured)
    monkeypatch.setattr(decision, "_size_run", _must_not_run)
    monkeypatch.setattr(run_module, "make_run_dir", _must_not_run)
    with pytest.raises(KeyboardInterrupt):
        run_module.run(small_config(tmp_path, "logger=none"))


def test_a_signal_during_a_dry_run_ends_it_before_the_plan(tmp_path, monkeypatch):
    real_target = dry_run_report.get_target

    def target(name):
        interruption.request(signal.SIGTERM)
        return real_target(name)

    monkeypatch.setattr(dry_run_report, "get_target", target)
    monkeypatch.setattr(dry_run_report, "size_run", _must_not_run)
    with pytest.raises(Terminated):
        dry_run_report.plan_dry_run(small_config(tmp_path, "dry_run=true"))


def test_a_compile_signalled_meanwhile_ends_the_command_when_it_returns():
    returned = []
    with pytest.raises(KeyboardInterrupt):
        with heartbeat.heartbeat("a compile"):
            interruption.request(signal.SIGINT)  # arrives while the compile runs
            returned.append(True)
    assert returned == [True]  # the compile was not stopped part-way
    interruption.clear()
    interruption.request(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):  # nor is the next one started
        with heartbeat.heartbeat("the next compile"):
            raise AssertionError("a compile started after the signal")


def test_every_planning_compile_is_a_safe_point():
    from evalharness.estimates.tpu_compiler import compile_program

    compiled = []

    def compile_signalled():
        compiled.append(True)
        interruption.request(signal.SIGINT)  # arrives while the compiler runs

    with pytest.raises(KeyboardInterrupt):
        compile_program(compile_signalled)
    assert compiled == [True]  # the compile was not stopped part-way
    with pytest.raises(KeyboardInterrupt):  # a signal already noted: no compile starts
        interruption.clear()
        interruption.request(signal.SIGINT)
        compile_program(_must_not_run)
