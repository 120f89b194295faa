"""The tracking refusal's fix matches the kind of store: the folder and its permissions for
sqlite, host, port and credentials for a server, the PostgreSQL URI for PostgreSQL."""

import contextlib
import os

import pytest

from evalharness.tracking import probe
from evalharness.tracking.postgres import free_port
from evalharness.tracking.probe import TrackingUnavailable, check_tracking, fix_for

as_root = pytest.mark.skipif(os.geteuid() == 0, reason="root ignores file permissions")
SERVER_ADVICE = "host, port and credentials"


def _refusal(uri: str, **kwargs) -> str:
    with pytest.raises(TrackingUnavailable) as refused:
        check_tracking("mlflow", uri, "exp", **kwargs)
    return str(refused.value)


def test_each_kind_of_store_gets_its_own_fix(tmp_path):
    sqlite = fix_for(f"sqlite:///{tmp_path}/m.db")
    assert str(tmp_path) in sqlite and "writable" in sqlite
    assert "sqlite:////writable/path/mlflow.db" in sqlite and "host" not in sqlite
    assert SERVER_ADVICE in fix_for("http://127.0.0.1:5000")
    assert "MLFLOW_TRACKING_USERNAME" in fix_for("https://mlflow.example.com")
    postgres = fix_for("postgresql+psycopg://u:p@h:5432/d")
    assert "postgresql+psycopg://USER:PASSWORD@HOST:PORT/DATABASE" in postgres
    assert "createdb" in postgres and "sqlite" not in postgres
    assert "createdb" not in fix_for("mysql+pymysql://u:p@h/d")


@contextlib.contextmanager
def _read_only_folder(tmp_path):
    """A folder this user cannot write (mode 0555), made writable again after."""
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        yield folder
    finally:
        folder.chmod(0o755)


@as_root
def test_read_only_sqlite_folder_is_named_with_a_writable_path_fix(tmp_path):
    with _read_only_folder(tmp_path) as folder:
        message = _refusal(f"sqlite:///{folder}/m.db")
    assert f"the folder {folder} is not writable" in message
    assert "logger.tracking_uri=sqlite:////writable/path/mlflow.db" in message
    assert SERVER_ADVICE not in message and "PostgreSQL" not in message
    assert not (folder / "m.db").exists()


@as_root
def test_sqlite_folder_that_cannot_be_created_names_the_blocking_folder(tmp_path):
    with _read_only_folder(tmp_path) as folder:
        message = _refusal(f"sqlite:///{folder}/new/m.db")
    assert f"{folder}/new does not exist and cannot be created" in message
    assert f"{folder} is not writable" in message and SERVER_ADVICE not in message


@as_root
def test_read_only_sqlite_file_is_named(tmp_path):
    db = tmp_path / "m.db"
    db.write_bytes(b"")
    db.chmod(0o444)
    message = _refusal(f"sqlite:///{db}")
    assert f"the file {db} is not writable" in message and SERVER_ADVICE not in message


def test_unwritable_sqlite_folder_is_refused_before_opening_it(tmp_path, monkeypatch):
    # Stands in for a read-only folder where permissions do not apply (root) or a read-only mount.
    folder = tmp_path / "ro"
    folder.mkdir()
    monkeypatch.setattr(probe.os, "access", lambda path, mode: str(path) != str(folder))
    message = _refusal(f"sqlite:///{folder}/m.db")
    assert f"the folder {folder} is not writable" in message
    assert "sqlite:////writable/path/mlflow.db" in message and SERVER_ADVICE not in message
    assert not (folder / "m.db").exists() and not (folder / "m.db.lock").exists()


def test_unwritable_default_store_folder_is_refused_without_creating_it(tmp_path, monkeypatch):
    monkeypatch.setattr(probe.os, "access", lambda path, mode: str(path) != str(tmp_path))
    message = _refusal(None, output_root=tmp_path / "outputs")
    assert f"the folder {tmp_path} is not writable" in message and "output_root" in message
    assert not (tmp_path / "outputs").exists()
    check_tracking("mlflow", None, "exp")  # without output_root nothing is checked


def test_missing_sqlite_folder_is_created_as_mlflow_would(tmp_path):
    db = tmp_path / "new" / "sub" / "m.db"
    check_tracking("mlflow", f"sqlite:///{db}", "exp")
    assert db.is_file() and (tmp_path / "new" / "sub" / "m.db.lock").is_file()


def test_sqlite_file_that_is_no_database_gets_the_sqlite_fix(tmp_path):
    db = tmp_path / "m.db"
    db.write_text("not a database")
    message = _refusal(f"sqlite:///{db}")
    assert "file is not a database" in message and "writable" in message
    assert SERVER_ADVICE not in message


def test_a_garbage_default_store_is_refused_like_the_same_file_given(tmp_path):
    db = tmp_path / "outputs" / "mlflow.db"
    db.parent.mkdir()
    db.write_bytes(bytes(range(256)) * 16)  # random-looking bytes, no sqlite header
    default = _refusal(None, output_root=tmp_path / "outputs")
    given = _refusal(f"sqlite:///{db}")
    assert default == given.replace(
        f"sqlite:///{db}", f"sqlite:///{db} (the default store, under output_root)"
    )
    assert "file is not a database" in default and f"check that {db} is" in default
    assert db.read_bytes() == bytes(range(256)) * 16  # refused, not touched


def test_an_existing_default_store_is_opened_and_a_missing_one_is_not_created(
    tmp_path, monkeypatch
):
    opened = []
    real_open = probe.open_client
    monkeypatch.setattr(probe, "open_client", lambda uri: opened.append(uri) or real_open(uri))
    check_tracking("mlflow", None, "exp", output_root=tmp_path / "outputs")
    assert not (tmp_path / "outputs").exists() and opened == []
    uri = f"sqlite:///{tmp_path}/outputs/mlflow.db"
    check_tracking("mlflow", uri, "exp")  # a real store
    check_tracking("mlflow", None, "exp", output_root=tmp_path / "outputs")
    assert opened == [uri, uri]


def test_server_that_does_not_answer_gets_host_port_and_credentials():
    message = _refusal(f"http://127.0.0.1:{free_port()}")
    assert SERVER_ADVICE in message and "sqlite" not in message


def test_postgres_that_does_not_answer_gets_the_postgres_fix():
    pytest.importorskip("psycopg")
    message = _refusal(f"postgresql+psycopg://user:secret@127.0.0.1:{free_port()}/mlflow")
    assert "postgresql+psycopg://USER:PASSWORD@HOST:PORT/DATABASE" in message
    assert "secret" not in message and "writable" not in message
