"""The compile heartbeat: a line naming what compiles and for how long, none once it is done."""

import io
import threading

import pytest

from evalharness.admission.heartbeat import elapsed_text, heartbeat


@pytest.mark.parametrize(
    "seconds, text", [(0.4, "0s"), (42, "42s"), (150, "2m30s"), (3599, "59m59s"), (3900, "1h05m")]
)
def test_elapsed_text(seconds, text):
    assert elapsed_text(seconds) == text


class _Lines(io.StringIO):
    """A stream that says when its first line arrived."""

    def __init__(self):
        super().__init__()
        self.first = threading.Event()

    def flush(self):
        super().flush()
        self.first.set()


def test_lines_name_what_compiles_while_the_block_runs_and_stop_after():
    out = _Lines()
    with heartbeat("the dense arm's denoising loop for TPU v6 lite 2x4", every_s=0.001, stream=out):
        assert out.first.wait(30), "no heartbeat line while the block ran"
    written = out.getvalue()
    lines = written.splitlines()
    assert lines[0].startswith("compiling the dense arm's denoising loop for TPU v6 lite 2x4: ")
    assert lines[0].endswith(" so far")
    # The thread has ended with the block: nothing more is written.
    assert not any(t.name == "compile-heartbeat" for t in threading.enumerate())
    assert out.getvalue() == written


def test_a_block_shorter_than_the_interval_writes_nothing():
    out = _Lines()
    with heartbeat("the text encoder", every_s=3600, stream=out):
        pass
    assert out.getvalue() == ""
