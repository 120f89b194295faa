"""Ctrl-C and SIGTERM acted on at safe points (``models.interruption``): the handler only notes a
real signal, a safe point raises it once, a second signal raises at once, bookkeeping in a
``deferred`` block is never cut, and a signal inside a garbage-collection callback is neither
lost nor printed as "Exception ignored".

Signals are sent with ``signal.raise_signal``, which runs the Python handler before it returns:
each arrives exactly where the test says.
"""

from __future__ import annotations

import gc
import signal
import threading

import pytest

from models import interruption
from models.interruption import Terminated


@pytest.fixture
def handled():
    """The noting handlers installed for the test, the session's own put back after it."""
    before = {sig: signal.getsignal(sig) for sig in interruption.SIGNALS}
    interruption.handle_signals()
    yield
    interruption.clear()
    for sig, handler in before.items():
        signal.signal(sig, handler)


@pytest.mark.parametrize(
    ("sig", "raised"), [(signal.SIGINT, KeyboardInterrupt), (signal.SIGTERM, Terminated)]
)
def test_a_signal_is_noted_and_raised_at_the_next_safe_point_once(handled, sig, raised):
    signal.raise_signal(sig)  # nothing raised here: the handler only notes it
    assert interruption.pending() == sig
    with pytest.raises(raised):
        interruption.stop_if_signalled()
    interruption.stop_if_signalled()  # acted on: the code that handles it goes on
    assert interruption.pending() == sig  # the entry point still ends with its code
    interruption.clear()
    assert interruption.pending() is None


def test_no_signal_no_stop(handled):
    interruption.stop_if_signalled()
    assert interruption.pending() is None


def test_a_second_signal_before_a_safe_point_raises_at_once(handled):
    signal.raise_signal(signal.SIGTERM)
    with pytest.raises(Terminated):  # the first signal's kind decides the exit code
        signal.raise_signal(signal.SIGINT)
    interruption.stop_if_signalled()  # both acted on


def test_a_signal_after_one_was_acted_on_waits_for_the_next_safe_point(handled):
    signal.raise_signal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        interruption.stop_if_signalled()
    signal.raise_signal(signal.SIGINT)  # during the cleanup: noted, not raised
    with pytest.raises(KeyboardInterrupt):
        interruption.stop_if_signalled()


def test_a_deferred_block_runs_whole_and_stops_right_after(handled):
    done = []
    with pytest.raises(KeyboardInterrupt), interruption.deferred():
        signal.raise_signal(signal.SIGINT)
        signal.raise_signal(signal.SIGINT)  # not even a second one cuts the block
        done.append("bookkeeping")
    assert done == ["bookkeeping"]


@pytest.mark.parametrize(
    ("first", "raised"),
    [(signal.SIGINT, KeyboardInterrupt), (signal.SIGTERM, Terminated)],
    ids=["SIGINT-first", "SIGTERM-first"],
)
def test_two_signals_in_a_deferred_block_are_acted_on_once(handled, first, raised):
    """Ctrl-C pressed twice while bookkeeping runs: the block's end raises once, for the first
    signal; the code that handles it (marking a trial failed, rewriting the answer's files)
    then passes its safe points and its own deferred blocks."""
    with pytest.raises(raised), interruption.deferred():
        signal.raise_signal(first)
        signal.raise_signal(signal.SIGINT)
    # A raise here would stop pytest itself (a KeyboardInterrupt): caught, it fails the test.
    try:
        interruption.stop_if_signalled()  # both were acted on when the block ended
        with interruption.deferred():
            pass  # the cleanup's own bookkeeping ends without raising
    except (KeyboardInterrupt, Terminated) as again:
        pytest.fail(f"a safe point after the block raised {type(again).__name__} again")
    assert interruption.pending() == first  # the entry point still ends with its code


def test_a_deferred_block_that_raises_keeps_its_own_error(handled):
    with pytest.raises(ValueError), interruption.deferred():
        signal.raise_signal(signal.SIGINT)
        raise ValueError("the block's own failure")
    with pytest.raises(KeyboardInterrupt):  # the signal waits for the next safe point
        interruption.stop_if_signalled()


def test_a_deferred_block_holds_signals_without_a_commands_handlers_too():
    before = signal.getsignal(signal.SIGINT)
    done = []
    with pytest.raises(KeyboardInterrupt), interruption.deferred():
        signal.raise_signal(signal.SIGINT)  # Python's default handler would raise right here
        done.append("bookkeeping")
    assert done == ["bookkeeping"]
    assert signal.getsignal(signal.SIGINT) is before  # the caller's handler is back


def test_a_signal_inside_a_garbage_collection_callback_is_not_swallowed(handled, monkeypatch):
    unraisable = []
    monkeypatch.setattr("sys.unraisablehook", unraisable.append)

    def callback(phase, info):
        if phase == "start":
            signal.raise_signal(signal.SIGINT)

    gc.callbacks.append(callback)
    try:
        gc.collect()
    finally:
        gc.callbacks.remove(callback)
    assert unraisable == []  # Python's "Exception ignored in ..." path was never taken
    with pytest.raises(KeyboardInterrupt):
        interruption.stop_if_signalled()


def test_a_safe_point_outside_the_main_thread_goes_on(handled):
    interruption.request(signal.SIGINT)
    outcome = []
    worker = threading.Thread(target=lambda: outcome.append(interruption.stop_if_signalled()))
    worker.start()
    worker.join()
    assert outcome == [None]
    with pytest.raises(KeyboardInterrupt):  # the main thread's next safe point still stops
        interruption.stop_if_signalled()


def test_a_failure_after_a_signal_is_the_signals():
    failure = BrokenPipeError("ffmpeg stopped by the terminal's Ctrl-C")
    assert interruption.as_interruption(failure) is failure  # no signal: a failure
    interruption.request(signal.SIGTERM)
    assert isinstance(interruption.as_interruption(failure), Terminated)
    ctrl_c = KeyboardInterrupt()
    assert interruption.as_interruption(ctrl_c) is ctrl_c


@pytest.mark.parametrize(
    ("argv", "module"),
    [
        (["python", "-m", "evalharness", "steps=2"], "evalharness"),
        (["python", "-u", "-X", "dev", "-m", "models.training", "--out", "x"], "models.training"),
        (["python", "-c", "import evalharness", "-m", "evalharness"], None),
        (["python", "script.py", "-m", "evalharness"], None),
        (["python", "-m"], None),
    ],
)
def test_the_module_a_command_line_runs(argv, module):
    assert interruption._module_run(argv) == module


def test_only_the_commands_note_signals_from_their_first_import(monkeypatch):
    before = {sig: signal.getsignal(sig) for sig in interruption.SIGNALS}
    monkeypatch.setattr("sys.orig_argv", ["python", "-m", "reports", "--out", "x"])
    interruption.handle_signals_if_command()
    assert signal.getsignal(signal.SIGINT) is before[signal.SIGINT]  # reports does not act on them
    monkeypatch.setattr("sys.orig_argv", ["python", "-m", "evalharness.search"])
    try:
        interruption.handle_signals_if_command()
        signal.raise_signal(signal.SIGINT)  # noted, kept for the entry point's first safe point
        interruption.handle_signals()
        assert interruption.pending() == signal.SIGINT
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
