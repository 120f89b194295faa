"""``python -m reports`` reads a store that exists; it never creates one where none was."""

from __future__ import annotations

from reports.cli import main as reports_main


def test_a_missing_store_is_refused_without_creating_it(tmp_path, capsys):
    missing = tmp_path / "nowhere" / "mlflow.db"
    assert reports_main(["--tracking-uri", f"sqlite:///{missing}", "--no-log"]) == 2
    assert f"error: reports: no tracking store at {missing}" in capsys.readouterr().err
    outputs = tmp_path / "outputs"
    assert reports_main(["--output-root", str(outputs), "--no-log"]) == 2
    assert f"no tracking store at {outputs / 'mlflow.db'}" in capsys.readouterr().err
    assert not missing.parent.exists() and not outputs.exists()
