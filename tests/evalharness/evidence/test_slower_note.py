"""A run whose sparse arm was slower than dense says so plainly and names the real-shape command."""

from evalharness.evidence.run_folder import summary_lines
from evalharness.metric_names import REAL_SHAPES_COMMAND, RunMetrics, slower_note


def _metrics(speedup):
    return RunMetrics.of(
        {"speedup": speedup, "tokens": 2160, "dense_control": "splash", "run_dir": "/tmp/r"}
    )


def test_a_slower_sparse_arm_is_said_plainly_with_the_command():
    lines = summary_lines(_metrics(0.232))
    note = next(line for line in lines.splitlines() if line.startswith("note: "))
    assert "slower than dense here (0.232x)" in note and "2160 tokens" in note
    assert note.endswith(REAL_SHAPES_COMMAND)
    assert lines.splitlines()[-1] == "run folder: /tmp/r"


def test_a_faster_or_unmeasured_arm_has_no_note():
    assert slower_note(_metrics(1.2)) is None
    assert slower_note(_metrics(None)) is None
    assert "note:" not in summary_lines(_metrics(1.0))


def test_a_negative_control_is_named_as_the_reason_not_the_shape():
    metrics = RunMetrics.of(
        {"speedup": 0.613, "tokens": 2160, "negative_control": "redundant_dense", "run_dir": "/r"}
    )
    note = slower_note(metrics)
    assert "(0.613x)" in note and "negative_control=redundant_dense" in note
    assert REAL_SHAPES_COMMAND not in note  # real shapes would not make a planted arm faster
