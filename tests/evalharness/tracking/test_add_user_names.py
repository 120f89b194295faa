"""``python -m evalharness.tracking.server add-user NAME`` refuses a user name that could never
sign in (basic auth splits ``NAME:PASSWORD`` at the first colon; a control character cannot be
typed back) with exit 2 and one ``error:`` line, before it reads a file or a password."""

from __future__ import annotations

import io

import pytest

from evalharness.tracking import auth, server


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("eve:admin", "colon"),
        ("eve\nadmin", "control character"),
        ("eve\tadmin", "control character"),
        (" eve", "surrounding spaces"),
        ("", "empty"),
    ],
)
def test_a_name_that_could_never_sign_in_is_refused_first(tmp_path, monkeypatch, capsys, name, why):
    stdin = io.StringIO("a-password-long-enough\n")
    monkeypatch.setattr("sys.stdin", stdin)
    missing = tmp_path / "nope" / auth.ADMIN_FILE  # would be refused too, if it were read
    command = ["add-user", name, "--tracking-uri", "http://127.0.0.1:9"]
    assert server.main([*command, "--admin-credentials", str(missing)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"error: add-user: user name {name!r} could never sign in")
    assert why in err and "e.g. eve" in err
    assert stdin.tell() == 0  # the password was never asked for


@pytest.mark.parametrize("name", ["eve", "eve.smith@example.org", "team-ci_2", "Ève"])
def test_names_that_can_sign_in_pass(name):
    auth.check_username(name)


def test_a_name_longer_than_mlflows_user_table_is_refused_before_the_server(
    tmp_path, monkeypatch, capsys
):
    # MLflow's user table stores 255 characters: a longer name reached the server before, whose
    # SQL error came back as thousands of characters.
    monkeypatch.setattr("sys.stdin", io.StringIO("a-password-long-enough\n"))
    name = "e" * 5000
    missing = tmp_path / "nope" / auth.ADMIN_FILE
    command = ["add-user", name, "--tracking-uri", "http://127.0.0.1:9"]
    assert server.main([*command, "--admin-credentials", str(missing)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert "5,000 characters" in err and f"at most {auth.MAX_USERNAME}" in err
    assert len(err) < 400
    auth.check_username("e" * auth.MAX_USERNAME)  # the longest that fits passes
