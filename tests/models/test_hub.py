"""Hub repository ids as checkpoints, resolved offline against hub caches built on disk in
huggingface_hub's own layout: revisions, only the files a run reads, and every failure named
with its fix. Nothing here reaches the network (``HF_HUB_OFFLINE=1``)."""

from __future__ import annotations

import shutil

import pytest

from models.checkpoint import CheckpointError
from models.hub import (
    CONFIG_FILES,
    RUN_FILES,
    cached_revisions,
    fetch_snapshot,
    hub_cache_dir,
    is_hub_id,
    locate_snapshot,
    offline,
)
from tests.helpers.hub_cache import (
    COMMIT,
    OTHER_COMMIT,
    folder_files,
    offline_hub,
    repo_folder,
    wan_config_files,
    wan_repository_listing,
    write_locatable_checkpoint,
    write_snapshot,
)

REPO = "Wan-AI/Wan2.1-T2V-1.3B-Diffusers"


@pytest.fixture(scope="module")
def checkpoint_files(tmp_path_factory):
    """A locatable checkpoint folder's files, with a file a run never reads beside them."""
    root = write_locatable_checkpoint(tmp_path_factory.mktemp("ckpt"))
    return {**folder_files(root), "scheduler/scheduler_config.json": b"{}"}


@pytest.fixture
def cache(monkeypatch, tmp_path):
    return offline_hub(monkeypatch, tmp_path / "hf")


def test_a_repository_id_is_a_hub_checkpoint_unless_such_a_folder_exists(tmp_path, monkeypatch):
    assert is_hub_id(REPO) and is_hub_id("org/name.v2_x")
    for folder in ("/data/Wan2.1-T2V-1.3B-Diffusers", "./wan", "a/b/c", "~/wan", "../x/y", "wan"):
        assert not is_hub_id(folder), folder
    (tmp_path / "org" / "name").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert not is_hub_id("org/name")  # a folder of that name here wins


def test_the_cache_and_offline_mode_follow_the_environment_now(monkeypatch, tmp_path):
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    assert hub_cache_dir() == tmp_path / "home" / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "elsewhere"))
    assert hub_cache_dir() == tmp_path / "elsewhere"
    monkeypatch.delenv("HF_HUB_CACHE")
    monkeypatch.delenv("HF_HOME")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert hub_cache_dir() == tmp_path / "xdg" / "huggingface" / "hub"
    for value, expected in (("1", True), ("true", True), ("0", False), ("", False)):
        monkeypatch.setenv("HF_HUB_OFFLINE", value)
        assert offline() is expected


def test_only_the_files_a_run_reads_are_asked_for():
    from fnmatch import fnmatchcase

    listing = wan_repository_listing("wan2.1-t2v-1.3b")
    listing["transformer/diffusion_pytorch_model.fp16.safetensors"] = b""
    wanted = {p for p in listing if any(fnmatchcase(p, pat) for pat in RUN_FILES)}
    assert wanted == set(listing) - {
        "model_index.json",
        "scheduler/scheduler_config.json",
        "transformer/diffusion_pytorch_model.fp16.safetensors",  # another precision: not read
    }
    configs = {p for p in listing if any(fnmatchcase(p, pat) for pat in CONFIG_FILES)}
    assert configs == set(wan_config_files("wan2.1-t2v-1.3b"))


def test_main_resolves_to_its_commit_and_the_snapshot_is_a_checkpoint(cache, checkpoint_files):
    write_snapshot(cache, REPO, checkpoint_files)
    snapshot = fetch_snapshot(REPO)
    assert (snapshot.revision, snapshot.commit) == ("main", COMMIT)
    assert snapshot.folder == repo_folder(cache, REPO) / "snapshots" / COMMIT
    assert snapshot.source == f"{REPO}@{COMMIT}"
    checkpoint = locate_snapshot(snapshot)
    assert checkpoint.vae == snapshot.folder / "vae"
    assert (checkpoint.transformer / "config.json").is_symlink()  # the cache's own layout


def test_a_tag_or_a_commit_pins_another_snapshot(cache, checkpoint_files):
    write_snapshot(cache, REPO, checkpoint_files)
    write_snapshot(cache, REPO, checkpoint_files, commit=OTHER_COMMIT, refs=("v1.0",))
    assert fetch_snapshot(REPO, "v1.0").commit == OTHER_COMMIT
    assert fetch_snapshot(REPO, OTHER_COMMIT).commit == OTHER_COMMIT
    assert fetch_snapshot(REPO, COMMIT).commit == COMMIT
    assert cached_revisions(REPO, cache) == {"main": COMMIT, "v1.0": OTHER_COMMIT}


def test_a_dry_run_needs_only_the_configs(cache):
    listing = wan_repository_listing("wan2.1-t2v-1.3b")
    write_snapshot(cache, REPO, wan_config_files("wan2.1-t2v-1.3b"), listed=listing)
    snapshot = fetch_snapshot(REPO, weights=False)
    assert (snapshot.folder / "transformer" / "config.json").is_file()
    with pytest.raises(CheckpointError) as err:  # the run needs the weights the cache lacks
        fetch_snapshot(REPO)
    message = str(err.value)
    assert f"{REPO}@{COMMIT} in the hub cache {cache} lacks files the run reads" in message
    assert "file(s)" in message and "HF_HUB_OFFLINE=1 forbids downloading" in message
    assert f"hf download {REPO} --revision {COMMIT}" in message


def test_a_missing_file_in_a_cache_without_its_file_list_is_named(cache, checkpoint_files):
    files = {p: d for p, d in checkpoint_files.items() if not p.startswith("vae/")}
    write_snapshot(cache, REPO, files)
    shutil.rmtree(repo_folder(cache, REPO) / "trees")  # an older huggingface_hub's cache
    snapshot = fetch_snapshot(REPO)
    with pytest.raises(CheckpointError) as err:
        locate_snapshot(snapshot)
    message = str(err.value)
    assert f"{REPO}@{COMMIT} in the hub cache" in message and "missing sub-folder vae/" in message
    assert "unset it" in message and "hf download" in message


def test_a_wrong_revision_offline_lists_the_cached_ones(cache, checkpoint_files):
    write_snapshot(cache, REPO, checkpoint_files, refs=("main", "v1.0"))
    with pytest.raises(CheckpointError) as err:
        fetch_snapshot(REPO, "v9.9")
    message = str(err.value)
    assert "model.revision=v9.9" in message and "no such revision in the hub cache" in message
    assert f"main -> {COMMIT[:12]}" in message and "HF_HUB_OFFLINE=1" in message


def test_offline_with_nothing_cached_says_how_to_get_it(cache):
    with pytest.raises(CheckpointError) as err:
        fetch_snapshot(REPO)
    message = str(err.value)
    assert f"model.checkpoint={REPO}: not in the hub cache {cache}" in message
    assert "HF_HUB_OFFLINE=1 forbids looking it up" in message and "local folder" in message


def _http_error(kind):
    import httpx2

    request = httpx2.Request("GET", f"https://huggingface.co/api/models/{REPO}")
    return kind("not found", response=httpx2.Response(404, request=request))


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("RevisionNotFoundError", "model.revision=v9.9: no such branch, tag or commit"),
        ("RepositoryNotFoundError", "no such repository on the hub"),
        ("GatedRepoError", "is gated: accept its terms"),
    ],
)
def test_online_refusals_name_the_fix(monkeypatch, tmp_path, kind, expected):
    import huggingface_hub
    from huggingface_hub import errors

    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    asked = {}

    def refuse(repo_id, **kwargs):  # what the hub answers; no request leaves the process
        asked.update(kwargs)
        raise _http_error(getattr(errors, kind))

    monkeypatch.setattr(huggingface_hub, "snapshot_download", refuse)
    with pytest.raises(CheckpointError, match=expected):
        fetch_snapshot(REPO, "v9.9")
    assert asked["allow_patterns"] == list(RUN_FILES) and asked["local_files_only"] is False
    assert asked["cache_dir"] == tmp_path / "hub"
