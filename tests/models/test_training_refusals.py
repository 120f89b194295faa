"""``python -m models.training`` refuses, with exit 2 and one ``error:`` line naming the value and
the fix, before any work: an empty ``--out`` (the current folder), an ``--out`` that is a file, a
learning rate or weight that is not a finite number, and a run folder whose stage checkpoint is
cut short or damaged. The first stage is replaced by one that fails the test, so a refusal that
came after the work began could not pass."""

from __future__ import annotations

import numpy as np
import pytest

from models.training import vae_stage
from models.training.__main__ import main
from models.training.checkpoints import check_checkpoint
from models.training.settings import preset

SMOKE = ["--preset", "smoke", "--no-mlflow", "--quiet"]


@pytest.fixture(autouse=True)
def no_work(monkeypatch):
    """Training's first stage, replaced by a failure of the test."""

    def began(*args, **kwargs):
        raise AssertionError("the training began before the refusal")

    monkeypatch.setattr(vae_stage, "train_vae", began)


def _refused(capsys, argv: list[str]) -> str:
    """Runs the command, checks exit 2 and a single ``error:`` line, and returns that line."""
    assert main([*SMOKE, *argv]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: ")
    return line


@pytest.mark.parametrize("out", ["", "  "])
def test_an_empty_out_is_refused_not_the_current_folder(tmp_path, monkeypatch, capsys, out):
    monkeypatch.chdir(tmp_path)
    line = _refused(capsys, ["--out", out])
    assert "would train into the current folder" in line and "--out outputs/training" in line
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    ("setting", "default"),
    [("vae_lr=nan", "0.002"), ("transformer_lr=inf", "0.001"), ("vae_kl_weight=-inf", "1e-06")],
)
def test_a_value_that_is_not_a_finite_number_is_refused(tmp_path, capsys, setting, default):
    line = _refused(capsys, ["--out", str(tmp_path / "run"), "--set", setting])
    assert f"{setting}: must be a finite number >= 0 (e.g. its default {default})" in line
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("below", ["", "sub"])
def test_an_out_that_is_a_file_is_refused_naming_it(tmp_path, capsys, below):
    afile = tmp_path / "notes.txt"
    afile.write_text("kept")
    out = afile / below if below else afile
    line = _refused(capsys, ["--out", str(out)])
    assert f"{afile} is a file, not a folder" in line and "name a run folder" in line
    assert afile.read_text() == "kept"


def _folder_with_checkpoint(tmp_path):
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "settings.json").write_text(preset("smoke").to_json())
    path = run_dir / "checkpoints" / "vae.npz"
    np.savez(path, step=np.int64(6), a0=np.arange(100_000, dtype=np.float32))
    check_checkpoint(path)  # the intact file reads
    return run_dir, path


@pytest.mark.parametrize("damage", ["truncated", "a flipped byte"])
def test_a_damaged_stage_checkpoint_is_refused_naming_it(tmp_path, capsys, damage):
    run_dir, path = _folder_with_checkpoint(tmp_path)
    data = bytearray(path.read_bytes())
    if damage == "truncated":
        data = data[: len(data) // 2]
    else:
        data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    before = sorted(p.name for p in run_dir.rglob("*"))
    line = _refused(capsys, ["--out", str(run_dir)])
    assert f"{path} is not a readable checkpoint" in line and "delete it" in line
    assert sorted(p.name for p in run_dir.rglob("*")) == before
