"""The report's methods section: runs of different sparse attentions side by side per setting,
each marked on or off the setting's Pareto front of speedup against PSNR."""

from reports.methods_section import methods_rows, methods_section
from reports.sources import ReportRun


def _run(
    run_id: str,
    schedule: str,
    method: str,
    speedup: float,
    psnr: float,
    *,
    backend: str = "xla",
    sparse: bool = True,
) -> ReportRun:
    tags = {"schedule": schedule, "model": "tiny", "resolution": "cpu", "backend": backend}
    params = {"schedule.method": method, "schedule.sparse": str(sparse)}
    metrics = {"speedup": speedup, "psnr_db": psnr, "mask_density": 0.4, "lpips": 0.02}
    return ReportRun(run_id, run_id, params, metrics, tags)


def test_each_setting_with_two_methods_gets_its_own_front():
    runs = [
        _run("svg", "balanced", "svg", 1.10, 28.9),
        _run("sta", "sta", "sta", 1.30, 24.0),
        _run("radial", "radial", "radial", 1.05, 27.0),  # slower and further than svg: off
        _run("dense", "dense", "svg", 1.0, float("inf"), sparse=False),  # not a sparse arm
        # Another backend is another dense control: its own setting, one method only, so left out.
        _run("tpu-svg", "balanced", "svg", 2.0, 30.0, backend="pallas_tpu"),
    ]
    rows = {r["run"]: r for r in methods_rows(runs)}  # in the report's schedule order
    assert {run: (r["method"], r["pareto"]) for run, r in rows.items()} == {
        "svg": ("svg", "yes"),
        "sta": ("sta", "yes"),
        "radial": ("radial", ""),
    }
    assert rows["svg"]["speedup"] == "1.10x" and rows["svg"]["psnr"] == "28.90"
    assert rows["svg"]["lpips"] == "0.0200" and rows["svg"]["mask_kept"] == "0.400"


def test_a_run_without_a_speedup_is_listed_but_not_placed():
    runs = [
        _run("svg", "balanced", "svg", 1.1, 28.9),
        _run("sta", "sta", "sta", float("nan"), 24.0),
    ]
    rows = methods_rows(runs)
    assert {r["run"]: r["pareto"] for r in rows} == {"svg": "yes", "sta": "-"}


def test_no_section_without_two_methods_in_a_setting():
    assert methods_section([_run("svg", "balanced", "svg", 1.1, 28.9)]) == []
    lines = methods_section(
        [_run("svg", "balanced", "svg", 1.1, 28.9), _run("sta", "sta", "sta", 1.3, 24.0)]
    )
    assert lines[0] == "## Methods side by side" and any("| sta |" in line for line in lines)
