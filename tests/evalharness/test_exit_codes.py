"""How the command line turns each way a run ends into its exit code (``evalharness.exit_codes``)."""

import pytest
from omegaconf.errors import ConfigKeyError, ValidationError

import evalharness.__main__ as cli_module
from evalharness import exit_codes
from evalharness.exit_codes import RunFailed
from evalharness.refusal import PreflightRefusal
from evalharness.run import GateFailed


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
