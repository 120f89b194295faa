"""A heartbeat on stderr while a long compile runs (14B's loop for a TPU topology takes minutes
per arm on a small machine): ``compiling <what>: 2m30s so far`` every ``every_s`` seconds, nothing
when the block ends sooner. XLA's compiler releases the GIL, so the lines keep coming.

Its start and its end are safe points (``evalharness.exit_codes.stop_if_signalled``): a Ctrl-C
or SIGTERM during a compile ends the command as soon as that compile returns, not after the
compiles that would follow it.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Iterator
from typing import TextIO

from evalharness.exit_codes import stop_if_signalled

HEARTBEAT_S = 30.0


def elapsed_text(seconds: float) -> str:
    """``42s``, ``2m30s``, ``1h05m``."""
    whole = int(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


@contextlib.contextmanager
def heartbeat(
    what: str, *, every_s: float = HEARTBEAT_S, stream: TextIO | None = None
) -> Iterator[None]:
    """Writes ``compiling <what>: <elapsed> so far`` to ``stream`` every ``every_s`` seconds while
    the block runs.

    Args:
        what: what is compiling, e.g. "the dense arm's denoising loop for TPU v6 lite 2x4".
        every_s: seconds between lines (the first comes after ``every_s``).
        stream: where the lines go; stderr when None (read at each line: a redirect is honoured).
    """
    stop_if_signalled()
    done = threading.Event()
    start = time.monotonic()

    def beat() -> None:
        while not done.wait(every_s):
            out = stream if stream is not None else sys.stderr
            out.write(f"compiling {what}: {elapsed_text(time.monotonic() - start)} so far\n")
            out.flush()

    thread = threading.Thread(target=beat, name="compile-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
    stop_if_signalled()  # the compile returned: a signal meanwhile ends the command here
