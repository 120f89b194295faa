"""Inputs the main job refuses with exit 2 before any work: no model built, no run folder, no
MLflow run; one ``error:`` line naming the value and the fix.

Each broken checkpoint is a copy of the shipped tiny one with one file broken; the end-to-end
commands are in ``tests/e2e/test_refused_inputs.py``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from mlflow import MlflowClient
from mlflow.entities import ViewType

import evalharness.__main__ as cli_module
from evalharness import exit_codes
from evalharness import run as run_module
from evalharness.tracking.mlflow_client import default_tracking_uri
from models.shipped_weights import shipped_checkpoint
from tests.helpers.harness_config import small_config


def _heads_as_a_word(folder: Path) -> None:
    path = folder / "transformer" / "config.json"
    config = json.loads(path.read_text())
    config["num_attention_heads"] = "four"
    path.write_text(json.dumps(config))


# Each checkpoint breakage: how the copy is broken, and what the one error line must say.
BROKEN = {
    "unreadable tokenizer.json": (
        lambda folder: (folder / "tokenizer" / "tokenizer.json").write_text("{not json"),
        "tokenizer/tokenizer.json is not a readable tokenizer.json",
    ),
    "a word for an int": (
        _heads_as_a_word,
        "transformer/config.json: num_attention_heads='four' has type str; it must be an integer",
    ),
    "non-UTF-8 config.json": (
        lambda folder: (folder / "transformer" / "config.json").write_bytes(b'\xff\xfe{"a": 1}'),
        "transformer/config.json is not UTF-8 text",
    ),
}


@pytest.fixture
def no_work(monkeypatch):
    """Fails the test if the run builds its model or opens its folder and tracker run."""

    def forbidden(*args, **kwargs):
        raise AssertionError("work started before the refusal")

    monkeypatch.setattr(run_module, "build_components", forbidden)
    monkeypatch.setattr(run_module, "_open_run", forbidden)


def _refused(cfg, capsys) -> str:
    """The one error line ``cfg`` ends with, after checking its exit code is 2."""
    with pytest.raises(SystemExit) as done:
        cli_module._run_job(cfg, multirun=False)
    assert done.value.code == exit_codes.REFUSED
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, err
    return err[err.index("error: ") :]


@pytest.mark.parametrize("breakage", sorted(BROKEN))
def test_a_broken_checkpoint_file_is_refused_naming_the_file(tmp_path, capsys, no_work, breakage):
    folder = tmp_path / "checkpoint"
    shutil.copytree(shipped_checkpoint("tiny"), folder)
    breaking, expected = BROKEN[breakage]
    breaking(folder)
    message = _refused(small_config(tmp_path, f"model.checkpoint={folder}"), capsys)
    assert f"{folder}/{expected}" in message
    assert not (tmp_path / "outputs" / "runs").exists()


@pytest.mark.parametrize("value", ["''", "' '"])
def test_an_empty_checkpoint_is_refused_not_read_as_the_shipped_weights(
    tmp_path, capsys, no_work, value
):
    message = _refused(small_config(tmp_path, f"model.checkpoint={value}"), capsys)
    assert f"model.checkpoint={value}" in message and "names no checkpoint" in message
    assert "leave model.checkpoint out" in message  # the fix
    assert not (tmp_path / "outputs").exists()


def test_a_deleted_experiment_is_refused_before_the_run_folder(tmp_path, capsys, no_work):
    uri = default_tracking_uri(tmp_path / "outputs")
    client = MlflowClient(uri)
    experiment_id = client.create_experiment("gone")
    client.delete_experiment(experiment_id)
    message = _refused(small_config(tmp_path, "logger.experiment_name=gone"), capsys)
    assert "'gone'" in message and "is deleted" in message
    assert f"mlflow experiments restore --experiment-id {experiment_id}" in message
    assert "logger.experiment_name=" in message
    assert not (tmp_path / "outputs" / "runs").exists()
    assert client.search_runs([experiment_id], run_view_type=ViewType.ALL) == []


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("hydra.run.dir=/proc/nope", "hydra.run.dir=/proc/nope cannot be written"),
        ("hydra.sweep.dir={file}/sweep", "{file} is not a folder"),
    ],
)
def test_a_hydra_folder_that_cannot_be_made_is_refused_before_hydra(
    tmp_path, capsys, monkeypatch, override, expected
):
    afile = tmp_path / "a-file"
    afile.write_text("")
    monkeypatch.setattr(exit_codes, "run_hydra_entry", lambda *a: pytest.fail("Hydra started"))
    args = [override.format(file=afile), f"output_root={tmp_path / 'o'}"]
    with pytest.raises(SystemExit) as done:
        cli_module.cli(args)
    assert done.value.code == exit_codes.REFUSED
    err = capsys.readouterr().err
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1, err
    assert expected.format(file=afile) in err and "=/tmp/evalharness" in err  # the fix
    assert not (tmp_path / "o").exists()


def test_a_hydra_folder_given_as_an_interpolation_is_left_to_hydra():
    assert cli_module._hydra_folder_problem(["hydra.run.dir=${output_root}/x"]) is None
    assert cli_module._hydra_folder_problem(["hydra.job.chdir=true"]) is None
