"""How the command line turns each way a run ends into its exit code (``evalharness.exit_codes``),
and how Ctrl-C and SIGTERM end a command at its next safe point: real signals, sent with
``signal.raise_signal`` (its handler runs before it returns) exactly where each test says."""

import signal
import sys

import pytest
from omegaconf.errors import ConfigKeyError, ValidationError

import evalharness.__main__ as cli_module
from evalharness import exit_codes
from evalharness.evidence import run_status
from evalharness.exit_codes import RunFailed
from evalharness.refusal import PreflightRefusal
from evalharness.run import GateFailed, run
from models.pipeline import DenoiseLoop
from tests.helpers.harness_config import small_config


def _raising(error):
    def run(cfg):
        raise error

    return run


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (PreflightRefusal("too big"), exit_codes.REFUSED),
        (ValueError("kernel.block_q=0 must be positive"), exit_codes.REFUSED),
        (FileNotFoundError("no checkpoint"), exit_codes.REFUSED),
        (RunFailed("the run failed while running: OSError", "/runs/x"), exit_codes.FAILED),
        (RuntimeError("a bug before the folder"), exit_codes.FAILED),
        # A bare KeyError or TypeError is a bug in the code, not a setting; OmegaConf's own
        # errors (a wrong type, an unknown key) are settings, whatever else they subclass.
        (KeyError("psnr_db"), exit_codes.FAILED),
        (TypeError("unsupported operand type(s)"), exit_codes.FAILED),
        (ValidationError("Value 'abc' of type 'str' could not be converted"), exit_codes.REFUSED),
        (ConfigKeyError("Key 'warm_run' is not in struct"), exit_codes.REFUSED),
    ],
)
def test_each_ending_has_one_code_and_one_error_line(monkeypatch, capsys, error, code):
    monkeypatch.setattr(cli_module, "run", _raising(error))
    with pytest.raises(SystemExit) as done:
        cli_module._run_job({}, multirun=False)
    assert done.value.code == code
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith("error: ")


def test_a_missed_gate_returns_its_metrics_and_exits_1_at_the_end(monkeypatch):
    monkeypatch.setattr(cli_module, "run", _raising(GateFailed("gate failed: psnr", {"a": 1})))
    monkeypatch.setattr(cli_module, "_failed_gates", [])
    assert cli_module._run_job({}, multirun=False) == {"a": 1}
    assert cli_module._failed_gates == ["gate failed: psnr"]


def test_a_sweep_runs_every_job_and_exits_with_the_worst(monkeypatch):
    monkeypatch.setattr(cli_module, "_job_codes", [])
    for error in (PreflightRefusal("x"), RunFailed("y", "/r"), ValueError("z")):
        monkeypatch.setattr(cli_module, "run", _raising(error))
        assert cli_module._run_job({}, multirun=True) is None  # the sweep goes on
    assert cli_module._job_codes == [2, 4, 2]
    assert cli_module._worst(cli_module._job_codes) == exit_codes.FAILED
    assert cli_module._worst([2, 3]) == exit_codes.REFUSED
    assert cli_module._worst([0, 0]) == exit_codes.OK


def test_codes_are_distinct():
    codes = [exit_codes.OK, exit_codes.GATE_FAILED, exit_codes.REFUSED, exit_codes.OVER_TIME]
    codes += [exit_codes.FAILED, exit_codes.INTERRUPTED, exit_codes.TERMINATED]
    assert len(set(codes)) == len(codes)


def _entry(main) -> int:
    """``main`` run as a command runs it (``run_hydra_entry``); its exit code."""
    with pytest.raises(SystemExit) as done:
        exit_codes.run_hydra_entry(main, "the test's folder says killed")
    return done.value.code


@pytest.fixture
def session_handlers():
    """The session's SIGINT / SIGTERM handlers put back after a command installed its own."""
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    yield
    for sig, handler in before.items():
        signal.signal(sig, handler)


@pytest.mark.parametrize(
    ("sig", "code", "said"),
    [
        (signal.SIGINT, exit_codes.INTERRUPTED, "error: interrupted (Ctrl-C); "),
        (signal.SIGTERM, exit_codes.TERMINATED, "error: terminated (SIGTERM); "),
    ],
)
def test_a_signal_ends_the_command_at_its_next_safe_point(
    session_handlers, capsys, sig, code, said
):
    steps = []

    def main():
        for step in range(3):
            exit_codes.stop_if_signalled()
            steps.append(step)
            if step == 1:
                signal.raise_signal(sig)  # noted only: this step runs to its end

    assert _entry(main) == code
    assert steps == [0, 1]
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == said + "the test's folder says killed"
    assert exit_codes.pending() is None  # the command has ended on it


@pytest.mark.parametrize(
    "ending",
    [
        lambda: None,  # the signal came after the last safe point
        lambda: sys.exit(exit_codes.FAILED),  # a failure that followed it (a child stopped too)
        lambda: (_ for _ in ()).throw(BrokenPipeError("ffmpeg is gone")),
    ],
)
def test_a_signal_is_never_ignored_however_the_command_then_ends(session_handlers, ending):
    def main():
        signal.raise_signal(signal.SIGTERM)
        ending()

    assert _entry(main) == exit_codes.TERMINATED


def test_a_signal_after_the_last_step_says_the_results_are_complete(session_handlers, capsys):
    assert _entry(lambda: signal.raise_signal(signal.SIGINT)) == exit_codes.INTERRUPTED
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: interrupted (Ctrl-C); ") and "results are complete" in line


def test_hydras_own_exit_1_is_a_refusal_and_exit_0_passes(session_handlers):
    assert _entry(lambda: sys.exit(1)) == exit_codes.REFUSED
    assert _entry(lambda: sys.exit(0)) == exit_codes.OK


@pytest.mark.slow  # a whole run up to its first compile (seconds on a quiet CPU)
def test_a_signal_during_a_compile_stops_the_run_when_the_compile_returns(
    tmp_path, monkeypatch, session_handlers, capsys
):
    """A Ctrl-C between the tracing of an arm's loop and XLA's compile of it: the compile runs
    to its end, the run stops at the next safe point (before the warm-up), its folder says
    killed and the command exits 130 with one error line."""
    real_lower, real_compile = DenoiseLoop.lower, DenoiseLoop.compile
    compiled = []

    def lower(self, *args):
        lowered = real_lower(self, *args)
        signal.raise_signal(signal.SIGINT)
        return lowered

    def compile_loop(self, *args):
        compiled.append(real_compile(self, *args))
        return compiled[-1]

    monkeypatch.setattr(DenoiseLoop, "lower", lower)
    monkeypatch.setattr(DenoiseLoop, "compile", compile_loop)
    cfg = small_config(tmp_path, "logger=none", "noise_floor=false", "progress=off")
    assert _entry(lambda: run(cfg)) == exit_codes.INTERRUPTED
    assert len(compiled) == 1  # the interrupted compile finished; no other arm began
    (folder,) = (tmp_path / "outputs" / "runs").iterdir()
    status = run_status.read_status(folder)
    assert status["status"] == "killed" and status["error"] == "interrupted (Ctrl-C)"
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith("error: interrupted")
