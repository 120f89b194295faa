"""The team server's authentication, without starting one: a server that answers 401 or 403 is
refused naming MLflow's credential variables (through MLflow's own client, against a stub HTTP
server), the admin credentials file is private and well formed, the auth config reads back
through MLflow's own parser, the server refuses to bind beyond loopback without ``--auth``, and
``add-user`` takes passwords from standard input only. The end-to-end runs against a real
authenticated server on PostgreSQL are in ``tests/e2e/test_team_auth.py``."""

from __future__ import annotations

import contextlib
import io
import stat
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from evalharness.refusal import PreflightRefusal
from evalharness.tracking import auth, server
from evalharness.tracking.probe import TrackingUnavailable, check_tracking

SECRET = "not-this-one-please"


class _Refusing(BaseHTTPRequestHandler):
    """Answers every request as MLflow's basic-auth app answers a refused one."""

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        status = self.server.status  # type: ignore[attr-defined]
        body = b"You are not authenticated." if status == 401 else b"Permission denied"
        self.send_response(status)
        if status == 401:
            self.send_header("WWW-Authenticate", 'Basic realm="mlflow"')
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_GET

    def log_message(self, *args) -> None:
        pass


@contextlib.contextmanager
def _refusing_server(status: int) -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Refusing)
    httpd.status = status  # type: ignore[attr-defined]
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.mark.parametrize(
    ("status", "login", "expected"),
    [
        (401, None, "are not both set (401)"),
        (401, ("alice", SECRET), "it refused user 'alice' with the password given (401)"),
        (403, ("alice", SECRET), "user 'alice' may not read its experiments (403)"),
    ],
    ids=["no-credentials", "wrong-credentials", "no-permission"],
)
def test_a_server_that_wants_a_login_is_refused_naming_the_variables(
    monkeypatch, status, login, expected
):
    monkeypatch.delenv(auth.USERNAME_VAR, raising=False)
    monkeypatch.delenv(auth.PASSWORD_VAR, raising=False)
    if login:
        monkeypatch.setenv(auth.USERNAME_VAR, login[0])
        monkeypatch.setenv(auth.PASSWORD_VAR, login[1])
    with _refusing_server(status) as url, pytest.raises(TrackingUnavailable) as refused:
        check_tracking("mlflow", url, "team")
    message = str(refused.value)
    assert isinstance(refused.value, PreflightRefusal)  # exit code 2, no traceback
    assert message.startswith(f"MLflow tracking store {url} cannot be used for experiment 'team'")
    assert expected in message
    assert "set MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD" in message
    assert "add-user" in message and SECRET not in message


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3"])
def test_binding_beyond_loopback_without_auth_is_refused_before_anything_starts(
    tmp_path, capsys, host
):
    folder = tmp_path / "server"
    assert server.main(["--folder", str(folder), "--host", host]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --host {host} serves the tracking server beyond this machine")
    assert "add --auth" in err and "--host 127.0.0.1" in err
    assert not folder.exists()  # neither PostgreSQL nor MLflow was started


def test_loopback_hosts_are_told_apart_from_others():
    for host in ("127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost"):
        assert auth.is_loopback(host), host
    for host in ("0.0.0.0", "::", "192.168.1.5", "no-such-host.invalid"):
        assert not auth.is_loopback(host), host
    auth.check_exposure("0.0.0.0", auth=True)  # with authentication any interface is served


def test_admin_credentials_are_created_private_and_reused(tmp_path):
    path = tmp_path / "srv" / auth.ADMIN_FILE
    admin, created = auth.ensure_admin_credentials(path)
    assert created and admin.username == auth.DEFAULT_ADMIN
    assert len(admin.password) >= auth.MIN_PASSWORD
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text() == f"admin:{admin.password}\n"
    assert admin.password not in repr(admin)
    again, created = auth.ensure_admin_credentials(path)
    assert again == admin and not created
    other, _ = auth.ensure_admin_credentials(tmp_path / "other" / auth.ADMIN_FILE)
    assert other.password != admin.password


def test_a_credentials_file_others_can_read_or_a_malformed_one_is_refused(tmp_path):
    path = tmp_path / "admin.credentials"
    path.write_text(f"root:{SECRET}\n")
    path.chmod(0o644)
    with pytest.raises(PermissionError, match=f"chmod 600 {path}"):
        auth.read_credentials(path)
    path.chmod(0o600)
    assert auth.read_credentials(path) == auth.Credentials("root", SECRET)
    for text in ("no-colon-here\n", ":password-without-user\n", ""):
        path.write_text(text)
        with pytest.raises(ValueError, match="USERNAME:PASSWORD"):
            auth.read_credentials(path)
    path.write_text("root:short\n")
    with pytest.raises(ValueError, match="shorter than 12 characters") as short:
        auth.read_credentials(path)
    assert "short\n" not in str(short.value)


def test_the_auth_config_reads_back_through_mlflow(tmp_path, monkeypatch):
    from mlflow.server.auth.config import read_auth_config

    users_db = "postgresql+psycopg://evalharness:p%40ss%25word@127.0.0.1:5432/mlflow_auth"
    path = auth.write_auth_config(tmp_path / "basic_auth.ini", users_db, "boss", "READ")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    monkeypatch.setenv("MLFLOW_AUTH_CONFIG_PATH", str(path))
    monkeypatch.delenv("MLFLOW_AUTH_ADMIN_USERNAME", raising=False)
    monkeypatch.delenv("MLFLOW_AUTH_ADMIN_PASSWORD", raising=False)
    config = read_auth_config()
    assert config.database_uri == users_db  # '%' survives configparser's interpolation
    assert config.admin_username == "boss" and config.admin_password is None
    assert config.default_permission == "READ"
    with pytest.raises(ValueError, match="use one of READ, USE, EDIT"):
        auth.write_auth_config(tmp_path / "x.ini", users_db, "boss", "WRITE")


def test_add_user_reads_the_new_password_from_stdin_and_refuses_an_empty_one(
    tmp_path, monkeypatch, capsys
):
    admin, _ = auth.ensure_admin_credentials(tmp_path / auth.ADMIN_FILE)
    command = ["add-user", "bob", "--tracking-uri", "http://127.0.0.1:9"]
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    assert server.main([*command, "--admin-credentials", str(tmp_path / auth.ADMIN_FILE)]) == 2
    assert capsys.readouterr().err.startswith("error: add-user: no password for 'bob'")
    monkeypatch.setattr("sys.stdin", io.StringIO("short\n"))
    assert server.main([*command, "--admin-credentials", str(tmp_path / auth.ADMIN_FILE)]) == 2
    err = capsys.readouterr().err
    assert "the password for 'bob' is shorter than 12 characters" in err
    missing = tmp_path / "nope" / auth.ADMIN_FILE
    assert server.main([*command, "--admin-credentials", str(missing)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: add-user:") and str(missing) in err
    assert admin.password not in err
