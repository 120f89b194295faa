"""A run on random weights says its quality figures are meaningless where they are shown: the
printed summary line and ``report.md``; a run on real weights says nothing of the kind."""

from types import SimpleNamespace

from evalharness.evidence.results import write_report
from evalharness.evidence.run_folder import summary_lines
from evalharness.metric_names import QUALITY_MEANINGLESS, RunMetrics

MEASURED = {"dense_median_s": 2.0, "sparse_median_s": 1.0, "speedup": 2.0, "psnr_db": 11.0}
RANDOM = {"weights": "random", "quality": QUALITY_MEANINGLESS}


def _cfg():
    return SimpleNamespace(
        model=SimpleNamespace(name="wan2.1-t2v-1.3b", seed=7),
        resolution=SimpleNamespace(name="720p"),
        schedule=SimpleNamespace(name="balanced"),
        gate=SimpleNamespace(min_psnr_db=None, min_worst_frame_psnr_db=None, min_speedup=1.1),
        prompt="a cat",
        seed=0,
        steps=4,
        sampler="unipc",
        guidance_scale=5.0,
        dtype="bfloat16",
    )


def test_the_summary_line_marks_quality_meaningless_on_random_weights():
    line = summary_lines(RunMetrics.of({**MEASURED, **RANDOM})).splitlines()[0]
    assert "speedup 2.000x" in line
    assert "| [random weights: quality meaningless] PSNR 11.00 dB" in line
    assert "random weights" not in summary_lines(RunMetrics.of(MEASURED))


def test_the_report_says_first_that_quality_is_meaningless(tmp_path):
    report = write_report(tmp_path, _cfg(), RunMetrics.of({**MEASURED, **RANDOM}), []).read_text()
    first = report.split("\n\n")[1]
    assert first.startswith("**Random weights** (`model.checkpoint=random`, `model.seed=7`)")
    assert "timings and speedups are real" in first and "meaningless" in first
    real = write_report(tmp_path, _cfg(), RunMetrics.of(MEASURED), []).read_text()
    assert "Random weights" not in real
