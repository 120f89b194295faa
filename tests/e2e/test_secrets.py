"""A password in the tracking URI is written down nowhere: a one-job sweep (its job a whole run,
through the code a single run takes), a one-trial schedule search and a report against a real PostgreSQL store whose URI carries its password leave
no trace of it in their console output, in any file under their folders (run folders, Hydra's
``multirun.yaml``, ``search.json``, the report, the artifact store) or in any row of the database
(MLflow's params, tags, experiment tags and notes; Optuna's study attributes). PostgreSQL's own
client variables (``PGPASSWORD``, ``PGPASSFILE``) carry the password instead of the URI.

The PostgreSQL tests skip where Debian's ``postgresql`` package or psycopg is missing (``.ci/run``
installs both).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import sqlalchemy
from mlflow.tracking import MlflowClient

from evalharness.tracking import TrackingUnavailable, check_tracking, open_client
from evalharness.tracking.postgres import postgres_server
from tests.helpers.harness_config import SMALL
from tests.helpers.mlflow_server import harness_command, postgres_missing
from tests.helpers.search_config import ONE_TRIAL

EXPERIMENT = "secrets"
# One trial over a grid of one point: the search's own files and MLflow parent, at the tests' size.
SEARCH = [*ONE_TRIAL, "search.study_name=planted", "gate.min_psnr_db=10"]


@pytest.fixture(scope="module")
def store() -> str:
    """A PostgreSQL database on 127.0.0.1 and its URI, password included (random, per session).

    The folder is opened to other users: started by root, PostgreSQL runs as ``postgres``, who
    cannot enter pytest's ``/tmp/pytest-of-root`` (0700).
    """
    reason = postgres_missing()
    if reason:
        pytest.skip(f"no PostgreSQL here: {reason}")
    folder = Path(tempfile.mkdtemp(prefix="evalharness-secrets-pg-"))
    folder.chmod(0o755)
    try:
        with postgres_server(folder) as uri:
            yield uri
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _run(tmp_path: Path, name: str, command: list[str], allowed: tuple[int, ...] = (0,)) -> str:
    """Runs ``command`` in ``tmp_path``; keeps its console output as ``console/<name>.txt``
    (searched with every other file) and returns it. ``allowed``: the exit codes accepted."""
    done = subprocess.run(
        command, cwd=tmp_path, capture_output=True, text=True, timeout=900, check=False
    )
    console = tmp_path / "console"
    console.mkdir(exist_ok=True)
    text = done.stdout + done.stderr
    (console / f"{name}.txt").write_text(text)
    assert done.returncode in allowed, f"{name} exited {done.returncode}:\n{text[-4000:]}"
    return text


def _files_holding(root: Path, secret: bytes) -> list[str]:
    return [
        str(p.relative_to(root))
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.is_symlink() and secret in p.read_bytes()
    ]


def _rows_holding(uri: str, secret: str) -> tuple[int, list[str]]:
    """How many rows the database's MLflow and Optuna tables hold, and the tables of those whose
    text holds ``secret``."""
    engine = sqlalchemy.create_engine(uri, poolclass=sqlalchemy.pool.NullPool)
    try:
        with engine.connect() as db:
            tables = db.execute(
                sqlalchemy.text(
                    "SELECT table_schema, table_name FROM information_schema.tables "
                    "WHERE table_schema IN ('public', 'optuna') AND table_type = 'BASE TABLE'"
                )
            ).fetchall()
            rows, found = 0, []
            for schema, table in tables:
                texts = db.execute(sqlalchemy.text(f'SELECT t::text FROM "{schema}"."{table}" t'))
                for (text,) in texts:
                    rows += 1
                    if secret in text:
                        found.append(f"{schema}.{table}")
    finally:
        engine.dispose()
    return rows, found


def _artifact_texts(client: MlflowClient, run_id: str, folder: Path) -> dict[str, bytes]:
    """Every artifact of the run, downloaded through MLflow."""
    local = Path(client.download_artifacts(run_id, "", str(folder)))
    return {str(p.relative_to(local)): p.read_bytes() for p in local.rglob("*") if p.is_file()}


@pytest.mark.slow  # three whole-harness commands: run by .ci/run's second step (pytest -m slow)
def test_a_planted_password_is_written_down_nowhere(store, tmp_path):
    password = urlsplit(store).password
    assert password and len(password) >= 16  # planted: random, so a hit cannot be chance
    shown = store.replace(f":{password}@", ":***@")
    uri = [f"logger.tracking_uri={store}", f"logger.experiment_name={EXPERIMENT}"]
    cache = tmp_path / "cache"  # shared: the search's trial reuses the sweep's dense arm
    fewer_compiles = ["noise_floor=false", "routing_stats=false"]
    sweep = harness_command(tmp_path, *uri, *fewer_compiles, "-m", "seed=0", cache_dir=cache)
    consoles = [_run(tmp_path, "sweep", sweep)]
    small = [o for o in SMALL if not o.startswith("schedule.")]
    search = [sys.executable, "-m", "evalharness.search", *small, *SEARCH]
    folders = [f"output_root={tmp_path / 'outputs'}", f"cache_dir={cache}"]
    # The search's one trial may be slower than dense on a busy CPU: it then recommends nothing
    # and exits 1, having logged its trial all the same (its rows are searched below).
    consoles.append(_run(tmp_path, "search", [*search, *folders, *uri], allowed=(0, 1)))
    report = [sys.executable, "-m", "reports", "--tracking-uri", store]
    report += ["--experiment", EXPERIMENT, "--output-root", str(tmp_path / "outputs")]
    consoles.append(_run(tmp_path, "report", report))

    client = MlflowClient(store)
    experiment = client.get_experiment_by_name(EXPERIMENT)
    runs = client.search_runs([experiment.experiment_id], max_results=100)
    kinds = sorted(r.data.tags.get("run_kind", "?") for r in runs)
    assert kinds == ["harness", "harness", "report", "search"], kinds
    artifacts: dict[str, bytes] = {}
    for i, r in enumerate(runs):
        params, tags = r.data.params, r.data.tags
        assert not [k for k, v in {**params, **tags}.items() if password in v], r.info.run_id
        found = _artifact_texts(client, r.info.run_id, tmp_path / "downloads" / str(i))
        artifacts.update({f"{r.info.run_id}/{k}": v for k, v in found.items()})
    assert not [name for name, data in artifacts.items() if password.encode() in data]
    assert not [c for c in consoles if password in c]
    assert _files_holding(tmp_path, password.encode()) == []
    rows, tables = _rows_holding(store, password)
    assert tables == [] and rows > 100  # MLflow's and Optuna's tables were there to search

    # What was written down names the store, its password hidden, where the URI was recorded.
    harness = next(r for r in runs if r.data.tags.get("run_kind") == "harness")
    assert harness.data.params["logger.tracking_uri"] == shown
    assert f"--backend-store-uri {shown}" in harness.data.tags["mlflow.note.content"]
    run_dirs = sorted((tmp_path / "outputs" / "runs").iterdir())
    assert len(run_dirs) == 2  # the sweep's job and the search's trial
    for written in ("config.yaml", "status.json"):
        assert all(shown in (d / written).read_text() for d in run_dirs), written
    assert any(k.endswith("/config.yaml") and shown.encode() in v for k, v in artifacts.items())
    assert shown in (tmp_path / "outputs" / "multirun" / "multirun.yaml").read_text()
    assert shown in next((tmp_path / "outputs").rglob("search.json")).read_text()
    report_md = next((tmp_path / "outputs" / "reports").rglob("report.md")).read_text()
    store_at = f"@{urlsplit(store).hostname}:{urlsplit(store).port}/"
    assert store_at in report_md  # the report names the store (its '***' escaped for Markdown)
    assert "MLflow tracking at " + shown in consoles[0]


def _without_password(uri: str) -> str:
    return uri.replace(f":{urlsplit(uri).password}@", "@")


@pytest.mark.slow  # starts PostgreSQL (seconds): with the module's other PostgreSQL test
def test_postgres_credentials_come_from_pgpassword_or_pgpassfile(store, tmp_path, monkeypatch):
    parts, bare = urlsplit(store), _without_password(store)
    monkeypatch.delenv("PGPASSWORD", raising=False)
    monkeypatch.setenv("PGPASSFILE", str(tmp_path / "absent"))
    with pytest.raises(TrackingUnavailable) as refused:
        check_tracking("mlflow", bare, EXPERIMENT)  # no password anywhere: refused, exit 2
    assert "credentials" in str(refused.value) and parts.password not in str(refused.value)

    monkeypatch.setenv("PGPASSWORD", parts.password)
    check_tracking("mlflow", bare, EXPERIMENT)
    assert open_client(bare).search_experiments(max_results=1) is not None

    monkeypatch.delenv("PGPASSWORD")
    passfile = tmp_path / "pgpass"
    database = parts.path.lstrip("/")
    passfile.write_text(
        f"{parts.hostname}:{parts.port}:{database}:{parts.username}:{parts.password}\n"
    )
    passfile.chmod(0o600)  # libpq ignores a password file others can read
    monkeypatch.setenv("PGPASSFILE", str(passfile))
    check_tracking("mlflow", bare, EXPERIMENT)
    assert os.environ.get("PGPASSWORD") is None
