"""Ctrl-C and SIGTERM, acted on at safe points: the one mechanism of every command (the harness,
its schedule search, the training commands; the harness re-exports it in
``evalharness.exit_codes``).

The handlers that :func:`handle_signals` installs only note the signal. The code asks
:func:`stop_if_signalled` at its safe points (between stages, compiles, timed runs and training
steps), which raises ``KeyboardInterrupt`` (SIGINT) or :class:`Terminated` (SIGTERM) there, in
the main thread, where the command's own endings mark its folder and tracking run ``killed``.

Raising from the handler itself, as Python's default SIGINT handler does, lands between any two
bytecodes: inside a garbage-collection callback (JAX registers one), where Python prints the
exception as "ignored" and drops it, so the command runs on to exit 0; or inside JAX's tracing
and lowering in the middle of a compile, which can leave the process to crash (SIGSEGV) on its
way out. A compile or a compiled loop that is running when the signal comes is not stopped
part-way: the command stops at the first safe point after it returns.

A second signal while the first is still waiting for a safe point raises at once (outside
:func:`deferred` blocks): a way out of a wait that has no safe point.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator

SIGNALS = (signal.SIGINT, signal.SIGTERM)
# The commands that act on noted signals (their entry points end them as 130 / 143).
COMMANDS = (
    "evalharness",
    "evalharness.search",
    "models.training",
    "models.training.refine_decoder",
)


class Terminated(BaseException):
    """SIGTERM, raised at a safe point so that a command closes its folder and tracking run as
    ``killed`` (a ``BaseException``, like ``KeyboardInterrupt``, so no ``except Exception``
    swallows it)."""


# The signals received since the handlers were installed (or cleared), first first, and how
# many of them a safe point has acted on (raised for).
_received: list[int] = []
_acted: list[int] = [0]
# How many :func:`deferred` blocks the main thread is inside.
_deferring: list[None] = []


def exception_for(signum: int) -> BaseException:
    """The exception a signal ends a command with: ``KeyboardInterrupt`` for SIGINT, else
    :class:`Terminated`."""
    if signum == signal.SIGINT:
        return KeyboardInterrupt()
    return Terminated(f"signal {signum}")


def request(signum: int) -> None:
    """Notes ``signum`` as the handlers do: the next safe point stops the command. A second one
    before a safe point acted raises at once, unless inside a :func:`deferred` block.

    Tests call it to deliver an interruption at an exact point of the code.
    """
    waiting = len(_received) > _acted[0]
    _received.append(signum)
    if waiting and not _deferring and _in_main_thread():
        _acted[0] = len(_received)
        raise exception_for(_received[0])


def _on_signal(signum: int, frame: object) -> None:
    request(signum)


def handle_signals() -> None:
    """Installs the noting handlers for SIGINT and SIGTERM (from the main thread; elsewhere
    Python cannot install handlers and nothing changes); a signal noted earlier is kept."""
    if not _in_main_thread():
        return
    for sig in SIGNALS:
        signal.signal(sig, _on_signal)


def handle_signals_if_command(commands: tuple[str, ...] = COMMANDS) -> None:
    """Installs the noting handlers now when this process is one of ``commands`` (``python -m
    <command>``, read from ``sys.orig_argv``); its package's ``__init__`` calls this before the
    command's imports, which take seconds (JAX, MLflow): a Ctrl-C meanwhile would meet Python's
    own handler, and a library's bare ``except:`` around an import could swallow it. Any other
    process (a library user, pytest, ``python -m reports``) keeps its handlers."""
    if _module_run(sys.orig_argv) in commands:
        handle_signals()


def _module_run(argv: list[str]) -> str | None:
    """The module an interpreter command line runs with ``-m``, or None (a script, ``-c``)."""
    words = iter(argv[1:])
    for word in words:
        if word == "-m":
            return next(words, None)
        if word in ("-X", "-W"):  # options that take the next word as their value
            next(words, None)
        elif word == "-c" or not word.startswith("-"):
            return None
    return None


def pending() -> int | None:
    """The first signal received and not yet cleared, or None."""
    return _received[0] if _received else None


def stop_if_signalled() -> None:
    """A safe point: raises the first signal's exception (:func:`exception_for`) when a signal
    came since the last safe point acted, in the main thread only (a runtime thread's callback
    goes on; the main thread stops at its next safe point). The code that handles the exception
    (marking a folder or a trial ``killed``) passes safe points without raising it again; the
    entry point still ends with the signal's code (:func:`pending`), whatever caught it."""
    if len(_received) > _acted[0] and _in_main_thread():
        _acted[0] = len(_received)
        raise exception_for(_received[0])


def clear() -> None:
    """Forgets the received signals (the command has ended on them)."""
    _received.clear()
    _acted[0] = 0


def as_interruption(err: BaseException) -> BaseException:
    """``err``, or the pending signal's exception when a signal is pending and ``err`` is not
    already an interruption: a failure that follows a signal is its consequence (Ctrl-C in a
    terminal also stops the command's child processes, such as FFmpeg or a worker pool)."""
    if isinstance(err, KeyboardInterrupt | Terminated) or not _received:
        return err
    return exception_for(_received[0])


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Bookkeeping that must not stop half-way (a trial created in a study and remembered, a
    tracking run created and its id kept): no signal raises inside the block, not even a second
    one; a signal received before or inside it stops the command right after it (a safe point),
    unless the block itself raised. Where the noting handlers are not installed (a library call
    without a command's entry point), they are for the block."""
    replaced = {}
    if _in_main_thread():  # called without a command's entry point (a library call): note too
        replaced = {
            s: signal.signal(s, _on_signal) for s in SIGNALS if signal.getsignal(s) != _on_signal
        }
    _deferring.append(None)
    try:
        yield
    finally:
        _deferring.pop()
        for sig, handler in replaced.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)
    stop_if_signalled()


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()
