"""A password in the tracking URI is written down nowhere.

Against an MLflow server that accepts the URI (``http://admin:PASSWORD@127.0.0.1:PORT``, MLflow's
basic-auth app): a run, a search, the gate and a report print it on neither stdout nor stderr
(MLflow's own ``View run ... at: <URI>`` lines included) and write it to no file.

Against a real PostgreSQL store whose URI carries its password: a one-job sweep (its job a whole
run, through the code a single run takes), a one-trial schedule search and a report leave no
trace of it in their console output, in any file under their folders (run folders, Hydra's
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

from evalharness.tracking import TrackingUnavailable, auth, check_tracking, open_client
from evalharness.tracking.postgres import postgres_server
from models.uri_redaction import QUIET_LINKS_VAR
from tests.helpers.harness_config import SMALL
from tests.helpers.mlflow_server import auth_mlflow_server, harness_command, postgres_missing
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


def _run(
    tmp_path: Path,
    name: str,
    command: list[str],
    allowed: tuple[int, ...] = (0,),
    env: dict[str, str] | None = None,
) -> str:
    """Runs ``command`` in ``tmp_path``; keeps its console output as ``console/<name>.txt``
    (searched with every other file) and returns it. ``allowed``: the exit codes accepted."""
    done = subprocess.run(
        command, cwd=tmp_path, capture_output=True, text=True, timeout=900, check=False, env=env
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


@pytest.fixture(scope="module")
def accepting_uri(tmp_path_factory) -> str:
    """A URI with a planted password that its server accepts: ``mlflow server`` behind MLflow's
    basic-auth app on 127.0.0.1, the password its admin's."""
    with auth_mlflow_server(tmp_path_factory.mktemp("accepting-server")) as uri:
        yield uri


def _as_a_user_runs_it() -> dict[str, str]:
    """This environment without what would hide a leak: MLflow's switch for its run links (the
    commands must set it themselves) and credentials other than the URI's."""
    hidden = (QUIET_LINKS_VAR, auth.USERNAME_VAR, auth.PASSWORD_VAR)
    return {k: v for k, v in os.environ.items() if k not in hidden}


@pytest.mark.slow  # a tracking server and two whole-harness runs (a run and a search's trial)
def test_a_password_the_server_accepts_reaches_no_console_and_no_file(accepting_uri, tmp_path):
    password = urlsplit(accepting_uri).password
    assert password and len(password) >= 16  # planted: random, so a hit cannot be chance
    env = _as_a_user_runs_it()
    uri = [f"logger.tracking_uri={accepting_uri}", f"logger.experiment_name={EXPERIMENT}"]
    fewer_compiles = ["noise_floor=false", "routing_stats=false"]
    harness = harness_command(tmp_path, *uri, *fewer_compiles)
    consoles = [_run(tmp_path, "run", harness, env=env)]
    small = [o for o in SMALL if not o.startswith("schedule.")]
    search = [sys.executable, "-m", "evalharness.search", *small, *SEARCH, *fewer_compiles]
    folders = [f"output_root={tmp_path / 'outputs'}", f"cache_dir={tmp_path / 'cache'}"]
    # A trial slower than dense on a busy CPU recommends nothing (exit 1), logged all the same.
    consoles.append(_run(tmp_path, "search", [*search, *folders, *uri], (0, 1), env))
    gate = [sys.executable, "-m", "evalharness.gate", "--tracking-uri", accepting_uri]
    gate += ["--experiment", EXPERIMENT, "--min-psnr-db", "10"]
    consoles.append(_run(tmp_path, "gate", gate, (0, 1), env))
    report = [sys.executable, "-m", "reports", "--tracking-uri", accepting_uri]
    report += ["--experiment", EXPERIMENT, "--output-root", str(tmp_path / "outputs")]
    consoles.append(_run(tmp_path, "report", report, env=env))

    # The server accepted the URI: every command's runs are there, finished.
    runs = MlflowClient(accepting_uri).search_runs(
        [MlflowClient(accepting_uri).get_experiment_by_name(EXPERIMENT).experiment_id]
    )
    kinds = sorted(r.data.tags.get("run_kind", "?") for r in runs)
    assert kinds == ["harness", "harness", "report", "search"], kinds
    assert {r.info.status for r in runs} == {"FINISHED"}
    assert not [c for c in consoles if password in c]
    assert not [c for c in consoles if "View run" in c]  # MLflow's own links, switched off
    assert _files_holding(tmp_path, password.encode()) == []


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
