"""Team scale tracking: a real PostgreSQL behind a real ``mlflow server`` (artifacts served by the
server, so clients share no file system) receives two harness runs made at once by separate
processes; everything is read back through ``MlflowClient``, artifacts included. A tracking
server that does not answer or a wrong database URI is refused in seconds, before any model is
built, with a message that names the URI and the fix.

The PostgreSQL tests skip where Debian's ``postgresql`` package or psycopg is missing (``.ci/run``
installs both).
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from evalharness import run as run_module
from evalharness.admission.preflight import PreflightRefusal
from evalharness.evidence.dense_cache import ArmCache, load_dense_arms
from evalharness.tracking.postgres import free_port
from evalharness.tracking.probe import TrackingUnavailable, redacted
from tests.helpers.harness_config import small_config
from tests.helpers.mlflow_server import (
    harness_command,
    postgres_missing,
    start_harness,
    team_server,
)

FAST_S = (
    30  # a refusal comes within this, on a loaded machine too (MLflow's own retries take minutes)
)
ARTIFACTS = {"config.yaml", "metrics.json", "report.md", "dense.mp4", "sparse.mp4"}


@pytest.fixture(scope="module")
def team():
    reason = postgres_missing()
    if reason:
        pytest.skip(f"no PostgreSQL-backed MLflow server here: {reason}")
    with team_server() as server:
        yield server


@pytest.fixture
def no_preflight(monkeypatch):
    """Fails the test if the run gets as far as preflight (which compiles a throughput probe)."""

    def reached(*_args, **_kwargs):
        raise AssertionError("the run reached preflight: the tracking store was not refused first")

    monkeypatch.setattr(run_module, "admit", reached)


def _refusal(tmp_path: Path, tracking_uri: str) -> tuple[str, float]:
    """Runs the harness in this process against ``tracking_uri``; returns the refusal and its
    time, and checks nothing was written."""
    cfg = small_config(tmp_path, f"logger.tracking_uri={tracking_uri}", "logger.experiment_name=x")
    start = time.perf_counter()
    with pytest.raises(TrackingUnavailable) as refused:
        run_module.run(cfg)
    elapsed = time.perf_counter() - start
    assert isinstance(refused.value, PreflightRefusal)  # the CLI's exit code 2, no traceback
    assert not (tmp_path / "outputs").exists() and not (tmp_path / "cache").exists()
    return str(refused.value), elapsed


def _wait_all(procs: list[subprocess.Popen], timeout_s: float) -> list[int]:
    deadline = time.monotonic() + timeout_s
    try:
        return [proc.wait(timeout=max(1.0, deadline - time.monotonic())) for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@pytest.mark.slow  # end to end: run by .ci/run's second step (pytest -m slow)
def test_two_parallel_runs_land_complete_on_a_postgres_backed_server(team, tmp_path):
    experiment = "team-parallel"
    shared_cache = tmp_path / "shared-cache"
    members = [tmp_path / f"member{i}" for i in (0, 1)]
    procs = [
        start_harness(
            member,
            f"logger.tracking_uri={team.uri}",
            f"logger.experiment_name={experiment}",
            "noise_floor=false",  # one arm fewer to compile on a 2-core machine
            cache_dir=shared_cache,  # both compute the same dense arm and store it at once
        )
        for member in members
    ]
    codes = _wait_all(procs, timeout_s=540)
    for member, code in zip(members, codes, strict=True):
        log = (member / "harness.log").read_text(errors="replace")
        assert code == 0, f"{member.name} exited {code}:\n{log[-4000:]}"

    client = MlflowClient(tracking_uri=team.uri)
    exp = client.get_experiment_by_name(experiment)
    runs = client.search_runs([exp.experiment_id])
    assert len(runs) == 2  # no duplicate parent runs, none lost
    assert len({r.info.run_name for r in runs}) == 2
    for stored in runs:
        _check_run_read_back(client, stored, tmp_path)
    # Artifacts went through the server: they are in its store, and no client kept a local one.
    for stored in runs:
        assert stored.info.artifact_uri.startswith("mlflow-artifacts:/")
        on_server = {p.name for p in team.artifacts.rglob("*") if stored.info.run_id in p.parts}
        assert ARTIFACTS <= on_server
    for member in members:
        assert not (member / "outputs" / "mlartifacts").exists()
        assert not (member / "outputs" / "mlflow.db").exists()
    _check_postgres_holds(team.database_uri, exp.experiment_id, {r.info.run_id for r in runs})
    _check_one_dense_entry(shared_cache)


def _check_run_read_back(client: MlflowClient, stored, tmp_path: Path) -> None:
    run_id = stored.info.run_id
    assert stored.info.status == "FINISHED"
    assert "mlflow.parentRunId" not in stored.data.tags
    local = json.loads((Path(stored.data.tags["run_dir"]) / "metrics.json").read_text())
    for key in ("dense_median_s", "sparse_median_s", "speedup", "psnr_db", "ssim_frames"):
        assert stored.data.metrics[key] == pytest.approx(local[key]), key
    assert stored.data.params["steps"] == "2"
    assert len(client.get_metric_history(run_id, "psnr_frame_db")) == 33  # one point per frame
    assert ARTIFACTS <= {a.path for a in client.list_artifacts(run_id)}
    fetched = client.download_artifacts(run_id, "metrics.json", str(tmp_path / "fetched" / run_id))
    assert json.loads(Path(fetched).read_text()) == local


def _check_postgres_holds(database_uri: str, experiment_id: str, run_ids: set[str]) -> None:
    """The runs are rows of the PostgreSQL database itself, with their metrics."""
    import psycopg

    conninfo = database_uri.replace("postgresql+psycopg://", "postgresql://", 1)
    with psycopg.connect(conninfo) as conn:
        rows = conn.execute(
            "SELECT run_uuid, status FROM runs WHERE experiment_id = %s", (int(experiment_id),)
        ).fetchall()
        assert {(run_id, "FINISHED") for run_id in run_ids} == set(rows)
        for run_id in run_ids:
            (count,) = conn.execute(
                "SELECT count(*) FROM latest_metrics WHERE run_uuid = %s", (run_id,)
            ).fetchone()
            assert count > 20


def _check_one_dense_entry(cache_dir: Path) -> None:
    """Both runs computed the same dense arm: one valid entry, no temporary folder left."""
    folder = cache_dir / "dense_arms"  # where the run keeps them (Comparison.cache)
    names = sorted(p.name for p in folder.iterdir())
    assert len(names) == 1 and not names[0].startswith("."), names
    arms = load_dense_arms(ArmCache(folder), names[0])
    assert arms is not None and arms.dense.frames is not None


def test_an_unreachable_server_is_refused_in_seconds_with_the_fix(tmp_path, no_preflight):
    url = f"http://127.0.0.1:{free_port()}"
    message, elapsed = _refusal(tmp_path, url)
    assert elapsed < FAST_S
    assert url in message and "Connection refused" in message
    assert "python -m evalharness.tracking.server" in message and "logger=none" in message


@pytest.mark.parametrize("multirun", [False, True], ids=["run", "sweep"])
def test_an_unreachable_server_exits_2_through_the_cli_before_any_work(tmp_path, multirun):
    url = f"http://127.0.0.1:{free_port()}"
    sweep = ["schedule=dense,balanced"] if multirun else []
    command = harness_command(tmp_path, f"logger.tracking_uri={url}", *sweep)
    if multirun:  # the sweep callback refuses before any job starts
        command.insert(command.index("evalharness") + 1, "-m")
    done = subprocess.run(
        command,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stderr[-3000:]
    assert f"error: MLflow tracking store {url} cannot be used" in done.stderr
    assert "Traceback" not in done.stderr
    for started in ("Launching", "build model", "compiling"):
        assert started not in done.stdout
    if not multirun:
        assert not (tmp_path / "outputs").exists()


def test_benchmarks_and_reports_refuse_an_unreachable_server_before_measuring(tmp_path, capsys):
    from evalharness.bench import placement, schedules
    from reports.cli import main as reports_main

    url = f"http://127.0.0.1:{free_port()}"
    for bench in (placement.main, schedules.main):
        start = time.perf_counter()
        with pytest.raises(SystemExit) as refused:
            bench(["--mlflow", f"logger.tracking_uri={url}"])
        assert refused.value.code == 2 and time.perf_counter() - start < FAST_S
        assert f"error: MLflow tracking store {url} cannot be used" in capsys.readouterr().err
    assert reports_main(["--tracking-uri", url, "--out", str(tmp_path / "r")]) == 2
    assert f"MLflow tracking store {url} cannot be used" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_a_closed_database_port_is_refused_in_seconds(tmp_path, no_preflight):
    pytest.importorskip("psycopg", reason="psycopg (PostgreSQL's driver) is not installed")
    uri = f"postgresql+psycopg://team:s3cret@127.0.0.1:{free_port()}/mlflow"
    message, elapsed = _refusal(tmp_path, uri)
    assert elapsed < FAST_S
    assert redacted(uri) in message and "s3cret" not in message
    assert "Connection refused" in message and "logger.tracking_uri" in message


@pytest.mark.parametrize(
    ("wrong", "reason"),
    [("database", 'database "no_such_db" does not exist'), ("password", "password authentication")],
)
@pytest.mark.slow  # end to end: run by .ci/run's second step (pytest -m slow)
def test_a_wrong_database_uri_is_refused_in_seconds(team, tmp_path, no_preflight, wrong, reason):
    uri = team.database_uri
    if wrong == "database":
        uri = uri.rpartition("/")[0] + "/no_such_db"
    else:
        user, _, rest = uri.partition("@")
        uri = f"{user.rpartition(':')[0]}:not-the-password@{rest}"
    message, elapsed = _refusal(tmp_path, uri)
    assert elapsed < FAST_S
    assert redacted(uri) in message and "not-the-password" not in message
    assert reason in message and "createdb" in message
