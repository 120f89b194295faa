"""Where a run's checkpoint comes from: a hub id pinned to its commit (configs only until the
run's weights are fetched), a local folder unchanged, ``model.revision`` only with a hub id.
Offline, on hub caches built on disk."""

from __future__ import annotations

import dataclasses

import pytest

from evalharness.assembly import checkpoint_tags, fetch_checkpoint, pin_revision
from evalharness.assembly.components import transformer_config_for
from evalharness.config import ModelConfig, to_config
from models.checkpoint import CheckpointError
from models.config import get_transformer_config
from tests.helpers.harness_config import small_config
from tests.helpers.hub_cache import (
    COMMIT,
    OTHER_COMMIT,
    folder_files,
    offline_hub,
    wan_config_files,
    wan_repository_listing,
    write_locatable_checkpoint,
    write_snapshot,
)

REPO = "Wan-AI/Wan2.1-T2V-1.3B-Diffusers"
WAN = "wan2.1-t2v-1.3b"


@pytest.fixture
def configs_only(monkeypatch, tmp_path):
    """A hub cache holding the 1.3B repository's configs at two commits (main, v1)."""
    cache = offline_hub(monkeypatch, tmp_path / "hf")
    listing = wan_repository_listing(WAN)
    write_snapshot(cache, REPO, wan_config_files(WAN), listed=listing)
    write_snapshot(cache, REPO, wan_config_files(WAN), commit=OTHER_COMMIT, refs=("v1",))
    return cache


def _model(**fields) -> ModelConfig:
    return ModelConfig(name=WAN, **fields)


def test_a_hub_checkpoint_is_pinned_to_its_commit_from_its_configs(tmp_path, configs_only):
    cfg = to_config(small_config(tmp_path, f"model={WAN}", f"model.checkpoint={REPO}"))
    assert cfg.model.revision is None
    pinned = pin_revision(cfg)
    assert pinned.model.revision == COMMIT and pinned.model.checkpoint == REPO
    again = pin_revision(dataclasses.replace(cfg, model=_model(checkpoint=REPO, revision="v1")))
    assert again.model.revision == OTHER_COMMIT
    assert pin_revision(pinned) == pinned  # a commit pins to itself
    assert checkpoint_tags(pinned.model) == {
        "checkpoint_repo": REPO,
        "checkpoint_revision": COMMIT,
    }


def test_admission_reads_the_architecture_without_the_weights(configs_only):
    model = _model(checkpoint=REPO, revision=COMMIT)
    assert transformer_config_for(model) == get_transformer_config(WAN)
    with pytest.raises(CheckpointError, match="lacks files the run reads"):
        fetch_checkpoint(model)  # the run needs the weights this cache lacks


def test_a_local_folder_keeps_working_and_takes_no_revision(monkeypatch, tmp_path):
    offline_hub(monkeypatch, tmp_path / "hf")
    folder = write_locatable_checkpoint(tmp_path / "Wan2.1-T2V-tiny-Diffusers")
    local = ModelConfig(name="wan2.1-t2v-1.3b", checkpoint=str(folder))
    assert fetch_checkpoint(local).root == folder
    cfg = to_config(small_config(tmp_path, f"model={WAN}", f"model.checkpoint={folder}"))
    assert pin_revision(cfg) == cfg and checkpoint_tags(cfg.model) == {}
    with pytest.raises(ValueError, match="is a folder here; drop model.revision"):
        fetch_checkpoint(dataclasses.replace(local, revision="main"))
    with pytest.raises(ValueError, match="needs a hub checkpoint"):
        pin_revision(to_config(small_config(tmp_path, "model.revision=main")))


def test_a_hub_snapshot_is_a_checked_checkpoint(monkeypatch, tmp_path):
    cache = offline_hub(monkeypatch, tmp_path / "hf")
    folder = write_locatable_checkpoint(tmp_path / "ckpt")
    snapshot = write_snapshot(cache, REPO, folder_files(folder))
    checkpoint = fetch_checkpoint(_model(checkpoint=REPO))
    assert checkpoint.root == snapshot and checkpoint.tokenizer == snapshot / "tokenizer"
