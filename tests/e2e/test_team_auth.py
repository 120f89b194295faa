"""The team server with authentication, end to end: ``python -m evalharness.tracking.server
--auth`` (PostgreSQL behind MLflow's basic-auth app), a user added by its admin with the
``add-user`` command, then a harness run, the gate, the schedule search and ``python -m
reports`` against it with the user's credentials in MLflow's environment variables. Without
credentials, or with a wrong password, each of them exits 2 before any work with a message that
names the variables. No password is ever printed.

Skips where Debian's ``postgresql`` package or psycopg is missing (``.ci/run`` installs both).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from evalharness.tracking import auth
from tests.helpers.harness_config import SMALL
from tests.helpers.mlflow_server import harness_command, postgres_missing, team_server
from tests.helpers.search_config import ONE_TRIAL

pytestmark = pytest.mark.slow  # a PostgreSQL and an MLflow server, whole-harness runs

EXPERIMENT = "team-auth"
MEMBER = auth.Credentials("alice", "alices-password-0123")
LOGIN_VARS = (auth.USERNAME_VAR, auth.PASSWORD_VAR)


@pytest.fixture(scope="module")
def team():
    reason = postgres_missing()
    if reason:
        pytest.skip(f"no PostgreSQL-backed MLflow server here: {reason}")
    with team_server("--auth") as server:
        yield server


@pytest.fixture(scope="module")
def member(team):
    """The user the tests run as, added by the admin through the command."""
    done = _add_user(team, MEMBER.username, MEMBER.password)
    assert done.returncode == 0, done.stderr[-3000:]
    return MEMBER


def _admin_file(team) -> Path:
    return team.folder / auth.ADMIN_FILE


def _add_user(team, username: str, password: str, admin_file: Path | None = None):
    command = [sys.executable, "-m", "evalharness.tracking.server", "add-user", username]
    command += ["--tracking-uri", team.uri]
    command += ["--admin-credentials", str(admin_file or _admin_file(team))]
    return subprocess.run(
        command, input=f"{password}\n", capture_output=True, text=True, timeout=120, check=False
    )


def _env(login: auth.Credentials | None) -> dict[str, str]:
    """This process's environment with MLflow's credentials set to ``login`` (or unset)."""
    env = {k: v for k, v in os.environ.items() if k not in LOGIN_VARS}
    if login is not None:
        env.update(zip(LOGIN_VARS, (login.username, login.password), strict=True))
    return env


def _run(command: list[str], cwd: Path, login: auth.Credentials | None, timeout_s: float = 600):
    cwd.mkdir(parents=True, exist_ok=True)
    return subprocess.run(
        command,
        cwd=cwd,
        env=_env(login),
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def _commands(team, tmp_path: Path) -> dict[str, list[str]]:
    """Each client command against the server, outputs under ``tmp_path``."""
    uri = f"logger.tracking_uri={team.uri}"
    small = [o for o in SMALL if not o.startswith("schedule.")]
    return {
        "harness": harness_command(
            tmp_path, uri, f"logger.experiment_name={EXPERIMENT}", "noise_floor=false"
        ),
        "gate": [
            *(sys.executable, "-m", "evalharness.gate", "--experiment", EXPERIMENT),
            *("--tracking-uri", team.uri, "--min-psnr-db", "1"),
        ],
        "reports": [
            *(sys.executable, "-m", "reports", "--experiment", EXPERIMENT),
            *("--tracking-uri", team.uri, "--out", str(tmp_path / "report")),
        ],
        "search": [
            *(sys.executable, "-m", "evalharness.search", *small, *ONE_TRIAL),
            *(f"output_root={tmp_path / 'outputs'}", f"cache_dir={tmp_path / 'cache'}", uri),
            f"logger.experiment_name={EXPERIMENT}-search",
        ],
    }


def _ours(stderr: str) -> str:
    """``stderr`` without the native runtime's start-up lines (absl's ``WARNING: All log
    messages before absl::InitializeLog()``, ``I0000 ...``), which the CUDA plugin prints on a
    machine without a GPU where the ``gpu-compile`` extra is installed."""
    native = re.compile(r"^(WARNING: All log messages before absl|[IWE]\d{4} )")
    return "\n".join(line for line in stderr.splitlines() if not native.match(line))


def test_the_admin_adds_users_and_no_password_is_printed(team, member):
    admin = auth.read_credentials(_admin_file(team))  # it is still private (0600)
    assert "auth: MLflow basic-auth" in team.banner and str(_admin_file(team)) in team.banner
    again = _add_user(team, member.username, "another-password-9")
    assert again.returncode == 2
    assert _ours(again.stderr).startswith(
        f"error: add-user: user 'alice' already exists on {team.uri}"
    )
    impostor = team.folder / "impostor.credentials"
    impostor.write_text("admin:not-the-admin-password\n")
    impostor.chmod(0o600)
    refused = _add_user(team, "mallory", "mallorys-password-1", admin_file=impostor)
    assert refused.returncode == 2
    assert _ours(refused.stderr).startswith(f"error: add-user: the server at {team.uri} refused")
    log = (team.folder / "mlflow.log").read_text(errors="replace")
    for secret in (admin.password, member.password, "not-the-admin-password"):
        for text in (team.banner, again.stdout, again.stderr, refused.stderr, log):
            assert secret not in text


@pytest.mark.parametrize(
    ("command", "login"),
    [
        ("harness", None),
        ("harness", auth.Credentials("alice", "wrong-password-0123")),
        ("gate", None),
        ("reports", None),
        ("search", None),
    ],
    ids=["harness", "harness-wrong-password", "gate", "reports", "search"],
)
def test_without_credentials_each_command_exits_2_before_any_work(
    team, member, tmp_path, command, login
):
    done = _run(_commands(team, tmp_path)[command], tmp_path, login, timeout_s=180)
    assert done.returncode == 2, done.stderr[-3000:]
    refusal = [line for line in done.stderr.splitlines() if auth.USERNAME_VAR in line]
    assert refusal, done.stderr[-3000:]
    assert f"MLflow tracking store {team.uri} cannot be used" in refusal[0]
    assert "error:" in refusal[0] or command == "reports"  # reports prefixes its own name
    expected = "refused user 'alice'" if login else "are not both set (401)"
    assert expected in refusal[0] and "Traceback" not in done.stderr
    if login:
        assert login.password not in done.stdout + done.stderr
    for started in ("build model", "compiling", "trial 0"):
        assert started not in done.stdout
    assert not (tmp_path / "outputs" / "runs").exists() and not (tmp_path / "report").exists()


def test_a_run_the_gate_a_search_and_a_report_work_with_credentials_from_the_environment(
    team, member, tmp_path, monkeypatch
):
    commands = _commands(team, tmp_path)
    for name in ("harness", "gate", "reports", "search"):
        done = _run(commands[name], tmp_path, member)
        # The search's one trial may be slower than dense on a busy CPU: then it recommends
        # nothing and exits 1, having logged its trial all the same (checked below).
        allowed = (0, 1) if name == "search" else (0,)
        output = f"{name}: {done.stdout[-3000:]}{done.stderr[-3000:]}"
        assert done.returncode in allowed and "Traceback" not in done.stderr, output
        assert member.password not in done.stdout + done.stderr
    for key, value in zip(LOGIN_VARS, (member.username, member.password), strict=True):
        monkeypatch.setenv(key, value)
    client = MlflowClient(tracking_uri=team.uri)
    runs = client.search_runs(
        [client.get_experiment_by_name(EXPERIMENT).experiment_id],
        filter_string="tags.run_kind = 'harness'",
    )
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"
    assert "psnr_db" in runs[0].data.metrics
    stored = [*runs[0].data.params.values(), *runs[0].data.tags.values()]
    assert not [value for value in stored if member.password in value]
    written = [p for p in [*tmp_path.rglob("*"), *team.artifacts.rglob("*")] if p.is_file()]
    assert not [p for p in written if member.password.encode() in p.read_bytes()]
    assert (tmp_path / "report" / "report.md").is_file()
    search = client.get_experiment_by_name(f"{EXPERIMENT}-search")
    searched = client.search_runs([search.experiment_id])
    assert len(searched) >= 2 and {r.info.status for r in searched} == {"FINISHED"}
