"""The exit-code contract of every command (``evalharness``, ``evalharness.gate``, the
benchmarks, ``reports``): one code, one meaning, so CI can tell a typo from a regression.

| code | meaning |
|---|---|
| 0 | done (a dry run: fits within ``max_minutes``) |
| 1 | the comparison ran and missed a gate threshold (the message names the metric) |
| 2 | refused before any work: a bad setting or override, a bad checkpoint, an impossible plan, an unusable tracking store or output folder, a gate CLI's missing experiment or run |
| 3 | a dry run that fits but whose estimate exceeds ``max_minutes`` |
| 4 | the run failed while running (a crash, out of memory, a full disk); its folder's ``status.json`` says ``failed`` and holds the error, its MLflow run is FAILED |
| 130 | interrupted (Ctrl-C); 143 terminated (SIGTERM): the folder says ``killed``, MLflow KILLED |

It lives below every room of the harness so that each command can use it. SIGINT and SIGTERM
are handled at safe points by ``models.interruption`` (shared with the training commands, which
import nothing of the harness), re-exported here.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable

# Re-exported: the harness's commands reach the signal handling through this module.
from models.interruption import Terminated as Terminated
from models.interruption import as_interruption as as_interruption
from models.interruption import clear as clear_signals
from models.interruption import deferred as signals_deferred  # noqa: F401 - re-exported
from models.interruption import handle_signals, pending
from models.interruption import stop_if_signalled as stop_if_signalled

OK = 0
GATE_FAILED = 1
REFUSED = 2
OVER_TIME = 3
FAILED = 4
INTERRUPTED = 130
TERMINATED = 143


class RunFailed(RuntimeError):
    """A run that started work (its folder exists) and then failed; ``run_dir`` holds its
    ``status.json`` and ``error.log``. The cause is the exception's ``__cause__``.

    ``exit_code`` is ``FAILED``, or ``REFUSED`` when the chip's compiler refused the run's
    settings (tiles out of VMEM): a setting to change, as at preflight, found only by compiling.
    """

    def __init__(self, message: str, run_dir: str, exit_code: int = FAILED) -> None:
        super().__init__(message)
        self.run_dir = run_dir
        self.exit_code = exit_code


def _end_signalled(ctrl_c: bool, interrupted: str, finished: bool = False) -> None:
    clear_signals()  # the signal has ended the command: nothing is left to act on
    what = "interrupted (Ctrl-C)" if ctrl_c else "terminated (SIGTERM)"
    if finished:  # after the last safe point: what the command wrote says how it ended
        interrupted = "it came after the command's last step, whose results are complete"
    print(f"error: {what}; {interrupted}", file=sys.stderr, flush=True)
    sys.exit(INTERRUPTED if ctrl_c else TERMINATED)


def run_hydra_entry(main: Callable[[], object], interrupted: str) -> None:
    """Runs a ``@hydra.main`` function under the contract: SIGINT and SIGTERM, noted by the
    handlers and acted on at the command's safe points (``models.interruption``), end it with
    130 / 143 (also when the signal came after its last safe point, or its work then failed on
    the signal's account), and Hydra's own exit 1 (a config it cannot compose: an unknown group
    value, a wrong type) becomes 2, since a command's own endings never use 1 from inside Hydra.

    Args:
        main: the decorated function, called without arguments (Hydra reads ``sys.argv``).
        interrupted: what the interrupted command left, after "interrupted (Ctrl-C); " or
            "terminated (SIGTERM); " in its message.

    Raises:
        SystemExit: with the contract's code when ``main`` was interrupted or refused; other
            exits pass through.
    """
    handle_signals()
    try:
        main()
    except SystemExit as done:
        if pending() is not None:  # an ending that followed a signal is the signal's
            _end_signalled(pending() == signal.SIGINT, interrupted)
        if done.code == 1:
            sys.exit(REFUSED)
        raise
    except (KeyboardInterrupt, Terminated) as signalled:
        _end_signalled(isinstance(signalled, KeyboardInterrupt), interrupted)
    except Exception:
        if pending() is not None:
            _end_signalled(pending() == signal.SIGINT, interrupted)
        raise
    if pending() is not None:  # it came after the command's last safe point
        _end_signalled(pending() == signal.SIGINT, interrupted, finished=True)
