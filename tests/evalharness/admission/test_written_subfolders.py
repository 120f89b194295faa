"""The folders a run writes under ``output_root`` and ``cache_dir`` (run folders, prompt
embeddings, the dense-arm cache, phase times) are checked at preflight too: one that cannot be
written is refused before any work, naming the folder and its setting."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from evalharness.admission import check_output_folders
from evalharness.admission.output_check import written_folders
from evalharness.config import to_config
from evalharness.refusal import PreflightRefusal
from tests.helpers.harness_config import small_config

REAL_ACCESS = os.access


def _refusing(blocked: Path):
    """``os.access`` answering "no" for ``blocked`` alone (root ignores permission bits)."""

    def access(path, mode):
        return Path(path).absolute() != blocked.absolute() and REAL_ACCESS(path, mode)

    return access


CASES = [("output_root", "runs"), ("cache_dir", "prompts"), ("cache_dir", "dense_arms")]


@pytest.mark.parametrize(("setting", "name"), CASES)
def test_a_subfolder_the_run_writes_is_refused_when_it_cannot_be_written(
    tmp_path, monkeypatch, setting, name
):
    cfg = to_config(small_config(tmp_path, "logger=mlflow"))
    root = Path(getattr(cfg, setting))
    blocked = root / name
    blocked.mkdir(parents=True)
    monkeypatch.setattr("os.access", _refusing(blocked))
    with pytest.raises(PreflightRefusal) as refused:
        check_output_folders(cfg, 1)
    message = str(refused.value)
    assert message.startswith(f"{blocked} (the {name}/ folder the run writes under {setting}=")
    assert f"set {setting} to another folder" in message and "Nothing was computed" in message


def test_subfolders_not_made_yet_are_covered_by_their_root(tmp_path):
    cfg = to_config(small_config(tmp_path, "logger=mlflow"))
    check_output_folders(cfg, 1)  # nothing exists yet: the roots' own check decides
    assert written_folders(cfg)["cache_dir"] == ("prompts", "dense_arms", "phases")
    assert "mlartifacts" in written_folders(cfg)["output_root"]
