"""The report from real logged runs: two tiny harness comparisons, the kernel benchmark, the
attention-share benchmark and the schedule benchmark, all logged to one real ``mlflow server``
(started once for the module), then ``python -m reports`` against it."""

from __future__ import annotations

import base64
import html
import json
import re
import shutil
import subprocess
from pathlib import Path

import matplotlib.image
import numpy as np
import pytest
from mlflow.tracking import MlflowClient

from evalharness.bench import attention_share
from evalharness.bench.__main__ import main as bench_main
from evalharness.run import run
from evalharness.tracking.mlflow_client import EXPERIMENT_KIND, EXPERIMENT_KIND_TAG
from reports.build import FIGURES, build_report
from reports.cli import main as reports_main
from reports.sources import ReportError, load_runs
from tests.helpers.harness_config import small_config
from tests.helpers.mlflow_server import mlflow_server

# End to end (harness runs and benchmarks behind a real server): .ci/run's second step.
pytestmark = pytest.mark.slow

EXPERIMENT = "report-test"
CHROMIUM = "/usr/bin/chromium"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A real ``mlflow server`` on 127.0.0.1 for the module."""
    with mlflow_server(tmp_path_factory.mktemp("mlflow-server")) as url:
        yield url


@pytest.fixture(scope="module")
def logged(server, tmp_path_factory):
    """Runs of every kind the report reads, logged to ``server``; returns the client."""
    tmp = tmp_path_factory.mktemp("logged")
    tracking = ["--mlflow", f"logger.tracking_uri={server}", f"logger.experiment_name={EXPERIMENT}"]
    for schedule, floor in (("balanced", "true"), ("aggressive", "false")):
        run(
            small_config(
                tmp,
                f"schedule={schedule}",
                f"noise_floor={floor}",
                "logger.log_videos=false",
                f"logger.tracking_uri={server}",
                f"logger.experiment_name={EXPERIMENT}",
            )
        )
    # One call of [1, 320, 1, 64]: 5 x 8 x 8 tokens, the tiny model's 4 heads over 4 devices.
    grid = ["resolution.frames=17", "resolution.height=128", "resolution.width=128"]
    call = ["model=tiny-random", "parallel.sequence=4", "guidance_scale=1", "warm_runs=1"]
    tiles = ["kernel.block_q=32", "kernel.block_kv=32", "--sweep-block-q", "32,64"]
    plot = ["--plot", str(tmp / "sweep.png"), "--skip", "temporal,memory"]
    assert bench_main([*grid, *call, *tiles, *plot, *tracking]) == 0
    small = ["model=tiny-random", "resolution.frames=9", "resolution.height=64"]
    assert attention_share.main([*small, "resolution.width=64", *tracking]) == 0
    return MlflowClient(server)


@pytest.fixture(scope="module")
def report(logged, tmp_path_factory):
    runs = load_runs(logged, experiment=EXPERIMENT)
    return build_report(logged, runs, tmp_path_factory.mktemp("report"), source="test")


def test_benchmarks_are_mlflow_runs_with_stable_names(logged):
    experiment = logged.get_experiment_by_name(EXPERIMENT)
    assert experiment.tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND
    runs = {r.data.tags.get("bench"): r for r in logged.search_runs([experiment.experiment_id])}
    expected = {"kernel_table", "tile_sweep", "attention_share"}
    assert expected <= set(runs)
    kernel = runs["kernel_table"]
    assert kernel.data.tags["backend"] == "xla" and kernel.data.tags["device_kind"]
    assert kernel.data.params["tokens"] == "320" and kernel.data.params["version.jax"]
    for variant in ("b0", "b1", "b2", "b3"):
        for key in ("median_ms", "min_ms", "max_ms", "tiles_visited_fraction", "masked_fraction"):
            assert f"{variant}.{key}" in kernel.data.metrics
    names = {a.path for a in logged.list_artifacts(kernel.info.run_id)}
    assert {"kernel_table.md", "kernel_table.json"} <= names
    assert "sweep.png" in {a.path for a in logged.list_artifacts(runs["tile_sweep"].info.run_id)}
    share = runs["attention_share"]
    assert (
        share.data.tags["resolution"] == "9x64x64px" and share.data.tags["model"] == "tiny-random"
    )
    assert 0.0 < share.data.metrics["9x64x64px.analytic_flop_share"] < 1.0


def test_report_has_the_three_tables_and_every_figure(report):
    table1, table2, table3 = report.tables
    measured = [r for r in table1.rows if not r.get("_seed")]
    assert len(measured) == 1 and 0.0 < measured[0]["analytic"] < 1.0
    assert {r["resolution"] for r in table1.rows} >= {"720p", "1080p", "1440p"}
    dense = ["xla_flash", "dot_product_attention"]  # the run's dense controls on a CPU
    assert [r["variant"] for r in table2.rows] == ["b0", *dense, "b1", "b2", "b3"]
    assert all(0.0 < r["tiles_visited_fraction"] <= 1.0 for r in table2.rows)
    assert [r["schedule"] for r in table3.rows] == ["balanced", "aggressive"]
    assert all(r["speedup_vs_xla_flash"] > 0 and r["dense_median_s"] > 0 for r in table3.rows)
    assert table3.rows[0]["noise_floor_psnr_db"] is not None
    assert all(r["_machine"] and r["_versions"].startswith("jax ") for r in table3.rows)
    assert set(report.figures) == set(FIGURES)
    for path in report.figures.values():
        assert matplotlib.image.imread(path).std() > 0.01, path
    text = report.markdown.read_text()
    assert "Table 1" in text and "Table 2" in text and "Table 3" in text
    assert "### tile_sweep" in text  # the benchmark appendix


def _embedded_images(html: str) -> list[bytes]:
    return [base64.b64decode(m) for m in re.findall(r'src="data:image/png;base64,([^"]+)"', html)]


def test_html_page_is_self_contained(report, tmp_path):
    html = report.html.read_text()
    assert html.count("<table>") >= 3 and "http://" not in html and "https://" not in html
    images = _embedded_images(html)
    assert len(images) == len(FIGURES)
    for n, data in enumerate(images):
        path = tmp_path / f"{n}.png"
        path.write_bytes(data)
        assert matplotlib.image.imread(path).shape[0] > 100


needs_chromium = pytest.mark.skipif(
    not Path(CHROMIUM).exists(),
    reason=f"{CHROMIUM} is absent: install Debian's chromium (apt-get install -y chromium; "
    ".ci/run does) to render the report page",
)


def _chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    command = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic"]
    command += ["--no-first-run", "--disable-background-networking", "--disable-component-update"]
    command += ["--disable-sync", f"--user-data-dir={tmp_path / 'profile'}", "--hide-scrollbars"]
    return subprocess.run(
        [*command, *args], check=True, capture_output=True, timeout=120, text=True
    )


@needs_chromium
def test_html_page_renders_in_headless_chromium(report, tmp_path):
    shot = tmp_path / "page.png"
    _chromium(tmp_path, f"--screenshot={shot}", "--window-size=1400,5000", report.html.as_uri())
    pixels = matplotlib.image.imread(shot)[..., :3]
    assert pixels.shape[:2] == (5000, 1400)
    assert pixels.std() > 0.05  # not blank: text, tables and figures drawn
    non_white = (pixels < 0.9).any(axis=2).mean(axis=1)  # ink per row of pixels
    assert (non_white > 0.01).sum() > 1000, "too little of the page is drawn"
    artifacts = report.folder / "screenshot"
    artifacts.mkdir(exist_ok=True)
    shutil.copy(shot, artifacts / "page.png")
    assert np.isfinite(pixels).all()


# Measures the verdict table (the first table after the "Verdict" heading) as laid out, and
# writes it where --dump-dom shows it: the page itself runs no script.
_MEASURE = """<script>
const table = document.querySelector("h2 + ul + div table, h2 + div table");
const box = table.getBoundingClientRect(), pane = table.parentElement;
const heads = [...table.querySelectorAll("th")].map(th => {
  const b = th.getBoundingClientRect();
  return {text: th.textContent, left: b.left, right: b.right, bottom: b.bottom};
});
document.body.dataset.measure = JSON.stringify({
  viewport: innerWidth, top: box.top, right: box.right, bottom: box.bottom,
  scrollWidth: pane.scrollWidth, clientWidth: pane.clientWidth, heads});
</script></body>"""


def _verdict_layout(page: Path, width: int, tmp_path: Path) -> dict:
    probe = tmp_path / f"probe-{width}.html"
    probe.write_text(page.read_text().replace("</body>", _MEASURE))
    dom = _chromium(tmp_path, "--dump-dom", f"--window-size={width},1000", probe.as_uri()).stdout
    return json.loads(html.unescape(re.search(r'data-measure="([^"]*)"', dom)[1]))


@needs_chromium
@pytest.mark.parametrize("width", [1400, 900])  # a desktop page; MLflow's artifact pane
def test_verdict_table_is_whole_at_the_top_of_the_page(report, tmp_path, width):
    layout = _verdict_layout(report.html, width, tmp_path)
    assert layout["viewport"] == width
    assert layout["right"] <= width, "the verdict table runs past the window's right edge"
    assert layout["scrollWidth"] <= layout["clientWidth"], "the verdict table scrolls sideways"
    assert layout["bottom"] <= 1000, "the verdict table is not above the fold"
    heads = " | ".join(h["text"] for h in layout["heads"])
    for column in ("speedup", "PSNR dB", "worst-frame PSNR dB", "gap to noise floor dB", "gate"):
        assert column in heads
    assert all(h["right"] <= width for h in layout["heads"]), heads
    shot = report.folder / "screenshot" / f"top-{width}.png"
    shot.parent.mkdir(exist_ok=True)
    _chromium(tmp_path, f"--screenshot={shot}", f"--window-size={width},1000", report.html.as_uri())
    assert matplotlib.image.imread(shot).shape[:2] == (1000, width)


def test_fixture_runs_say_not_gated(report):
    """The fixture's runs set no thresholds: the report says so, never "passed"."""
    text = report.markdown.read_text()
    assert "no thresholds set: nothing gated" in text
    assert [r["gate"] for r in report.tables[-1].rows] == ["not gated", "not gated"]


def test_report_is_logged_to_the_server_and_listed(logged, server, tmp_path, capsys):
    out = tmp_path / "report"
    argv = ["--tracking-uri", server, "--experiment", EXPERIMENT, "--out", str(out)]
    assert reports_main(argv) == 0
    run_id = re.search(r"MLflow run (\w+)", capsys.readouterr().out).group(1)
    stored = logged.get_run(run_id)
    assert stored.data.tags["report"] == "true" and stored.info.status == "FINISHED"
    assert stored.data.tags["run_kind"] == "report"  # told apart from harness and bench runs
    names = {a.path for a in logged.list_artifacts(run_id)}
    assert {"report.html", "report.md", "figures"} <= names
    figures = {a.path for a in logged.list_artifacts(run_id, "figures")}
    assert "figures/pareto.png" in figures
    # A second report does not read the first as a source.
    assert all(r.kind != "report" for r in load_runs(logged, experiment=EXPERIMENT))


def test_unknown_experiment_names_the_fix(logged, server, capsys):
    argv = ["--tracking-uri", server, "--experiment", "no-such-experiment", "--no-log"]
    assert reports_main(argv) == 2
    err = capsys.readouterr().err
    assert "no MLflow experiment named 'no-such-experiment'" in err
    assert "--experiment NAME" in err and EXPERIMENT in err


def test_missing_kinds_say_what_to_run(logged, tmp_path):
    runs = [r for r in load_runs(logged, experiment=EXPERIMENT) if r.kind.startswith("bench:")]
    partial = build_report(logged, runs, tmp_path / "partial", source="benchmarks only")
    missing = "\n".join(partial.missing)
    assert "no harness runs: run `python -m evalharness" in missing
    assert "pareto" in missing and "routing" in missing
    assert "no harness runs" in partial.markdown.read_text()


def test_empty_experiment_and_bad_run_id(logged):
    logged.create_experiment("report-test-empty")
    with pytest.raises(ReportError, match="no finished runs: run `python -m evalharness`"):
        load_runs(logged, experiment="report-test-empty")
    with pytest.raises(ReportError, match="no MLflow run 'deadbeef'"):
        load_runs(logged, run_ids=["deadbeef"])


def test_a_run_closed_failed_for_its_gate_is_still_reported(logged):
    experiment = logged.create_experiment("report-test-gate-failed")
    for schedule, status, gate in (
        ("aggressive", "FAILED", "failed"),  # missed its gate: measured, so reported
        ("balanced", "FAILED", None),  # crashed: nothing measured, left out
        ("conservative", "FINISHED", "not gated"),
    ):
        tags = {"schedule": schedule, **({"gate": gate} if gate else {})}
        run_id = logged.create_run(experiment, tags=tags).info.run_id
        logged.set_terminated(run_id, status)
    runs = load_runs(logged, experiment="report-test-gate-failed")
    assert sorted(r.tags["schedule"] for r in runs) == ["aggressive", "conservative"]
    failed = next(r for r in runs if r.tags["schedule"] == "aggressive")
    assert load_runs(logged, run_ids=[failed.run_id])[0].tags["gate"] == "failed"
