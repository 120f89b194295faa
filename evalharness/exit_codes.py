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

It lives below every room of the harness so that each command can use it.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Callable, Iterator

OK = 0
GATE_FAILED = 1
REFUSED = 2
OVER_TIME = 3
FAILED = 4
INTERRUPTED = 130
TERMINATED = 143


class RunFailed(RuntimeError):
    """A run that started work (its folder exists) and then failed; ``run_dir`` holds its
    ``status.json`` and ``error.log``. The cause is the exception's ``__cause__``."""

    def __init__(self, message: str, run_dir: str) -> None:
        super().__init__(message)
        self.run_dir = run_dir


class Terminated(BaseException):
    """SIGTERM, raised in the main thread so that a run closes its folder and MLflow run as
    ``killed`` (a ``BaseException``, like ``KeyboardInterrupt``, so no ``except Exception`` in
    the run swallows it)."""


# A signal's exception, kept until it has ended the run. Python runs a signal handler between
# any two bytecodes, also inside a garbage-collection callback (JAX registers one), where an
# exception is printed as "ignored" and dropped: the run would go on after Ctrl-C or SIGTERM.
_pending: list[BaseException] = []


def on_signal(signum: int, frame: object) -> None:
    """The handler of SIGINT and SIGTERM: raises ``KeyboardInterrupt`` or ``Terminated`` now,
    and again at the run's next progress step (:func:`raise_pending`) if this one is dropped."""
    error: BaseException = (
        KeyboardInterrupt() if signum == signal.SIGINT else Terminated(f"signal {signum}")
    )
    _pending.append(error)
    raise error


def _quiet_when_signalled(unraisable: object) -> None:
    """``sys.unraisablehook`` while a command runs: a signal's own exception dropped in a
    callback is kept in ``_pending`` and raised again at the next step, so Python's "Exception
    ignored" traceback for it would only mislead; anything else is printed as Python would."""
    if getattr(unraisable, "exc_value", None) in _pending:
        return
    sys.__unraisablehook__(unraisable)


def raise_pending() -> None:
    """Raises a signal's exception that a callback dropped (called between a run's steps)."""
    if _pending:
        raise _pending.pop()


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """Holds SIGINT and SIGTERM for the block, then delivers them to the handlers in place.

    For bookkeeping that must not stop half-way (a trial created in a study and remembered, a
    tracking run created and its id kept): a signal that arrives inside the block ends the
    command right after it, with its usual exception and exit code. Outside the main thread
    (where Python runs no signal handler) the block runs as it is.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    wanted = (signal.SIGINT, signal.SIGTERM)
    previous = {
        sig: signal.signal(sig, lambda signum, frame: held.append(signum)) for sig in wanted
    }
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)
        if held:
            signal.raise_signal(held[0])


def run_hydra_entry(main: Callable[[], object], interrupted: str) -> None:
    """Runs a ``@hydra.main`` function under the contract: SIGINT and SIGTERM end it with 130 /
    143, and Hydra's own exit 1 (a config it cannot compose: an unknown group value, a wrong
    type) becomes 2, since a command's own endings never use 1 from inside Hydra.

    Args:
        main: the decorated function, called without arguments (Hydra reads ``sys.argv``).
        interrupted: what the interrupted command left, after "interrupted (Ctrl-C); " or
            "terminated (SIGTERM); " in its message.

    Raises:
        SystemExit: with the contract's code when ``main`` was interrupted or refused; other
            exits pass through.
    """
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_signal)
    sys.unraisablehook = _quiet_when_signalled
    try:
        main()
    except SystemExit as done:
        if done.code == 1:
            sys.exit(REFUSED)
        raise
    except (KeyboardInterrupt, Terminated) as signalled:
        _pending.clear()  # the signal has ended the run: nothing is left to raise
        ctrl_c = isinstance(signalled, KeyboardInterrupt)
        what = "interrupted (Ctrl-C)" if ctrl_c else "terminated (SIGTERM)"
        print(f"error: {what}; {interrupted}", file=sys.stderr)
        sys.exit(INTERRUPTED if ctrl_c else TERMINATED)
