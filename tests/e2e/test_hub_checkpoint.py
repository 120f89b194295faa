"""Checkpoints by hub repository id, end to end and offline: the dry run of the issue's command
against a hub cache holding only the configs, refusals with exit 2, and a whole harness run on
the CPU from a hub-cache checkpoint of a small Wan configuration written here (its commit in
the config, MLflow and the dense-arm cache key). Nothing is downloaded (``HF_HUB_OFFLINE=1``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from evalharness import exit_codes
from evalharness.run import run
from evalharness.tracking.mlflow_client import default_tracking_uri
from models import config as model_configs
from models.checkpoint import CheckpointError
from models.hub import locate_snapshot
from tests.helpers.harness_config import small_config
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
from tests.helpers.paths import REPO_ROOT

REPO = "Wan-AI/Wan2.1-T2V-1.3B-Diffusers"
SMALL_REPO = "test-org/Wan2.1-T2V-small-Diffusers"


def _evalharness(tmp_path: Path, *overrides: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1"}
    env.pop("HF_HUB_CACHE", None)
    command = [sys.executable, "-m", "evalharness", *overrides, f"output_root={tmp_path / 'o'}"]
    return subprocess.run(
        command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600
    )


@pytest.fixture
def configs_only_cache(tmp_path):
    """The cache a dry run leaves: the repository's configs, its file list, no weights."""
    cache = tmp_path / "hf" / "hub"
    listing = wan_repository_listing("wan2.1-t2v-1.3b")
    write_snapshot(cache, REPO, wan_config_files("wan2.1-t2v-1.3b"), listed=listing)
    return cache


@pytest.mark.slow
def test_the_issue_dry_run_works_offline_on_the_configs_alone(tmp_path, configs_only_cache):
    done = _evalharness(
        tmp_path,
        "model=wan2.1-t2v-1.3b",
        f"model.checkpoint={REPO}",
        "dry_run=true",
        "target=h200",
    )
    assert done.returncode == exit_codes.OK, done.stderr[-3000:]
    assert f"- checkpoint {REPO} at commit {COMMIT}: its transformer config read" in done.stdout
    assert "## Verdict: FITS" in done.stdout
    blobs = list((repo_folder(configs_only_cache, REPO) / "blobs").iterdir())
    assert len(blobs) == 3  # nothing was added to the cache


@pytest.mark.slow
def test_a_wrong_revision_and_an_empty_cache_are_refused_with_exit_2(tmp_path, configs_only_cache):
    wrong = _evalharness(
        tmp_path,
        "model=wan2.1-t2v-1.3b",
        f"model.checkpoint={REPO}",
        "model.revision=v9.9",
        "dry_run=true",
        "target=h200",
    )
    assert wrong.returncode == exit_codes.REFUSED, wrong.stderr[-3000:]
    assert "error: model.revision=v9.9" in wrong.stderr and "cached: main ->" in wrong.stderr
    assert "Traceback" not in wrong.stderr
    absent = _evalharness(
        tmp_path,
        "model=wan2.1-t2v-14b",
        "model.checkpoint=Wan-AI/Wan2.1-T2V-14B-Diffusers",
        "dry_run=true",
        "target=tpu-v6e-8",
    )
    assert absent.returncode == exit_codes.REFUSED, absent.stderr[-3000:]
    assert "not in the hub cache" in absent.stderr and "HF_HUB_OFFLINE=1" in absent.stderr


@pytest.mark.slow  # admission compiles the attention first: about 10 s
def test_a_run_missing_a_file_is_refused_before_any_folder(tmp_path, monkeypatch):
    cache = offline_hub(monkeypatch, tmp_path / "hf")
    files = folder_files(write_locatable_checkpoint(tmp_path / "ckpt"))
    listing = dict(files)
    del files["vae/diffusion_pytorch_model.safetensors"]
    write_snapshot(cache, SMALL_REPO, files, listed=listing)
    tiny = model_configs.get_transformer_config("tiny-planted")
    monkeypatch.setitem(model_configs._PRESETS, "wan-small", tiny)
    cfg = small_config(
        tmp_path,
        "model=wan2.1-t2v-1.3b",
        "model.name=wan-small",
        f"model.checkpoint={SMALL_REPO}",
        "model.param_dtype=float32",
        "dtype=float32",
    )
    with pytest.raises(CheckpointError) as err:
        run(cfg)
    assert "vae/diffusion_pytorch_model.safetensors" in str(err.value)
    assert "hf download" in str(err.value)
    assert not (tmp_path / "outputs" / "runs").exists()  # refused before any run folder


def _small_wan_checkpoint(root: Path) -> Path:
    """A diffusers-format Wan checkpoint of the tiny architecture: the transformer written by
    diffusers itself, the tiny VAE and UMT5, a trained sentencepiece tokenizer."""
    import sentencepiece
    import torch
    from diffusers import WanTransformer3DModel

    write_locatable_checkpoint(root)
    tiny = model_configs.get_transformer_config("tiny-planted")
    torch.manual_seed(0)
    transformer = WanTransformer3DModel(
        num_attention_heads=tiny.num_attention_heads,
        attention_head_dim=tiny.attention_head_dim,
        text_dim=tiny.text_dim,
        ffn_dim=tiny.ffn_dim,
        num_layers=tiny.num_layers,
    )
    (root / "transformer" / "diffusion_pytorch_model.safetensors").unlink()
    transformer.save_pretrained(root / "transformer")
    corpus = root.parent / "corpus.txt"
    corpus.write_text("\n".join(["a cat walks on the grass", "waves crash on the rocks"] * 30))
    sentencepiece.SentencePieceTrainer.Train(
        input=str(corpus),
        model_prefix=str(root / "tokenizer" / "spiece"),
        vocab_size=20,
        pad_id=0,
        eos_id=1,
        unk_id=2,
        bos_id=-1,
        minloglevel=2,
    )
    return root


@pytest.mark.slow  # a whole harness run from a checkpoint: .ci/run's second step
def test_the_harness_runs_end_to_end_from_a_hub_cache_checkpoint(tmp_path, monkeypatch):
    cache = offline_hub(monkeypatch, tmp_path / "hf")
    files = folder_files(_small_wan_checkpoint(tmp_path / "ckpt"))
    write_snapshot(cache, SMALL_REPO, files, commit=OTHER_COMMIT, refs=("main", "v1"))
    write_snapshot(cache, SMALL_REPO, files, commit=COMMIT, refs=("old",))
    from models.hub import fetch_snapshot
    from models.loading import read_diffusers_config

    snapshot = fetch_snapshot(SMALL_REPO)
    # The small configuration as a preset (the Wan presets name 1.3B and 14B only).
    found = read_diffusers_config(locate_snapshot(snapshot).transformer, text_len=128)
    monkeypatch.setitem(model_configs._PRESETS, "wan-small", found)
    metrics = run(
        small_config(
            tmp_path,
            "model=wan2.1-t2v-1.3b",
            "model.name=wan-small",
            f"model.checkpoint={SMALL_REPO}",
            "model.revision=v1",
            "model.param_dtype=float32",
            "dtype=float32",
            "progress=off",
        )
    )
    assert metrics["psnr_db"] > 0 and metrics["dense_median_s"] > 0
    run_dir = Path(metrics["run_dir"])
    assert f"revision: {OTHER_COMMIT}" in (run_dir / "config.yaml").read_text()
    client = MlflowClient(default_tracking_uri(tmp_path / "outputs"))
    logged = client.get_run(metrics["mlflow_run_id"]).data
    assert logged.params["model.checkpoint"] == SMALL_REPO
    assert logged.params["model.revision"] == OTHER_COMMIT
    assert logged.tags["checkpoint_revision"] == OTHER_COMMIT
    assert logged.tags["checkpoint_repo"] == SMALL_REPO
    keys = list((tmp_path / "cache").rglob("key.json"))
    assert keys and json.loads(keys[0].read_text())["checkpoint_revision"] == OTHER_COMMIT
