"""Hugging Face hub caches built on disk, in the layout ``huggingface_hub`` itself writes, so that
hub checkpoints are tested offline (``HF_HUB_OFFLINE=1``, nothing downloaded).

``<cache>/models--Org--Name/``: ``blobs/<hash>`` (the files' content), ``snapshots/<commit>/<path>``
(relative symlinks into ``blobs/``), ``refs/<branch or tag>`` (the commit) and, as huggingface_hub
2.x writes after a download, ``trees/<commit>.json`` (the repository's file list at that commit,
through which it tells a complete snapshot from an incomplete one).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np
from huggingface_hub._tree_cache import TreeCacheEntry, write_tree_cache
from safetensors.numpy import save_file

from models.config import get_transformer_config
from models.shipped_weights import shipped_checkpoint
from models.text_encoder import save_umt5_encoder
from models.tiny_components import tiny_umt5_encoder, tiny_vae
from models.vae import save_vae

COMMIT = "0123456789abcdef0123456789abcdef01234567"
OTHER_COMMIT = "fedcba9876543210fedcba9876543210fedcba98"
# Files stored through Git LFS on the hub (their blob is named by sha256, as huggingface_hub does).
_LFS_SUFFIXES = (".safetensors", ".model")


def offline_hub(monkeypatch, root: Path) -> Path:
    """Points ``HF_HOME`` at ``root``, forbids the network (``HF_HUB_OFFLINE=1``) and returns the
    hub cache folder (``root/hub``)."""
    monkeypatch.setenv("HF_HOME", str(root))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return root / "hub"


def repo_folder(cache: Path, repo_id: str) -> Path:
    """``<cache>/models--Org--Name``."""
    return cache / ("models--" + repo_id.replace("/", "--"))


def _git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def write_snapshot(
    cache: Path,
    repo_id: str,
    files: Mapping[str, bytes],
    *,
    commit: str = COMMIT,
    refs: Iterable[str] = ("main",),
    listed: Mapping[str, bytes] | None = None,
) -> Path:
    """Writes ``files`` as the snapshot ``commit`` of ``repo_id`` and returns the snapshot folder.

    Args:
        cache: the hub cache folder (``HF_HOME/hub``).
        repo_id: ``Org/Name``.
        files: repository path -> content, the files present in the snapshot.
        commit: the commit hash.
        refs: branches or tags pointing at ``commit``.
        listed: the repository's files at ``commit`` (the tree listing); default ``files``. A
            file listed but not in ``files`` is one the cache lacks; None lists ``files``.
    """
    root = repo_folder(cache, repo_id)
    snapshot = root / "snapshots" / commit
    entries = {}
    for path, data in (files if listed is None else listed).items():
        lfs = path.endswith(_LFS_SUFFIXES)
        sha256 = hashlib.sha256(data).hexdigest()
        entries[path] = TreeCacheEntry(
            size=len(data),
            blob_id=_git_blob_sha1(data),
            lfs_sha256=sha256 if lfs else None,
            lfs_size=len(data) if lfs else None,
        )
    for path, data in files.items():
        entry = entries.get(path)
        blob_name = (entry.lfs_sha256 or entry.blob_id) if entry else _git_blob_sha1(data)
        blob = root / "blobs" / blob_name
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        link = snapshot / path
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    snapshot.mkdir(parents=True, exist_ok=True)
    for ref in refs:
        (root / "refs" / ref).parent.mkdir(parents=True, exist_ok=True)
        (root / "refs" / ref).write_text(commit)
    write_tree_cache(str(root), commit, entries)
    return snapshot


def folder_files(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` by its relative path (a checkpoint folder as a repository)."""
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def transformer_config_json(preset: str) -> bytes:
    """A diffusers ``transformer/config.json`` of a preset's architecture."""
    fields = dataclasses.asdict(get_transformer_config(preset))
    fields.pop("text_len")
    fields["patch_size"] = list(fields["patch_size"])
    return json.dumps({"_class_name": "WanTransformer3DModel", **fields}, indent=2).encode()


def wan_config_files(preset: str) -> dict[str, bytes]:
    """The three configs of a Wan preset's repository (all a dry run fetches)."""
    config = get_transformer_config(preset)
    vae = {"_class_name": "AutoencoderKLWan", "base_dim": 96, "z_dim": config.in_channels}
    encoder = {"architectures": ["UMT5EncoderModel"], "d_model": config.text_dim}
    return {
        "transformer/config.json": transformer_config_json(preset),
        "vae/config.json": json.dumps(vae).encode(),
        "text_encoder/config.json": json.dumps(encoder).encode(),
    }


def wan_repository_listing(preset: str) -> dict[str, bytes]:
    """A Wan ``*-Diffusers`` repository's files (configs as written, weights as stand-ins): what
    the hub lists, of which a dry run's cache holds only the configs."""
    stand_in = b"weights"
    return {
        **wan_config_files(preset),
        "model_index.json": b"{}",
        "scheduler/scheduler_config.json": b"{}",
        "transformer/diffusion_pytorch_model.safetensors.index.json": b"{}",
        "transformer/diffusion_pytorch_model-00001-of-00002.safetensors": stand_in,
        "transformer/diffusion_pytorch_model-00002-of-00002.safetensors": stand_in,
        "vae/diffusion_pytorch_model.safetensors": stand_in,
        "text_encoder/model.safetensors.index.json": b"{}",
        "text_encoder/model-00001-of-00002.safetensors": stand_in,
        "text_encoder/model-00002-of-00002.safetensors": stand_in,
        "tokenizer/spiece.model": stand_in,
        "tokenizer/tokenizer_config.json": b"{}",
    }


def write_locatable_checkpoint(root: Path, preset: str = "tiny-planted") -> Path:
    """A folder ``models.checkpoint.locate_checkpoint`` accepts: ``preset``'s transformer config
    with a one-tensor safetensors file, the tiny VAE and UMT5, and the shipped tiny model's
    tokenizer (the check loads it)."""
    transformer = root / "transformer"
    transformer.mkdir(parents=True)
    (transformer / "config.json").write_bytes(transformer_config_json(preset))
    weights = {"dummy": np.zeros((2,), np.float32)}
    save_file(weights, str(transformer / "diffusion_pytorch_model.safetensors"))
    save_vae(tiny_vae(0), root / "vae")
    save_umt5_encoder(tiny_umt5_encoder(0), root / "text_encoder")
    (root / "tokenizer").mkdir()
    shutil.copy(shipped_checkpoint("tiny") / "tokenizer" / "tokenizer.json", root / "tokenizer")
    return root
