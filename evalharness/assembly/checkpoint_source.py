"""Where a run's checkpoint comes from: a local folder, or a hub repository id pinned to a commit.

``model.checkpoint=Wan-AI/Wan2.1-T2V-14B-Diffusers`` (no such folder here) is fetched through
``huggingface_hub`` (``models.hub``). A run first pins the revision (:func:`pin_revision`: the
configs only, seconds), so the config it records, its MLflow params and its dense-arm cache key
name the commit; admission reads the transformer's config; then, before any run folder exists,
:func:`fetch_checkpoint` downloads the weights (only the files a run reads) and checks every part.
A failure at any of these steps is a ``CheckpointError`` (exit 2, nothing computed).
``model.checkpoint=random`` (``ModelConfig.random_weights``) and the seeded presets have no
checkpoint: nothing here looks up a folder or the hub for them.
"""

from __future__ import annotations

import dataclasses
import logging

from evalharness.config import EvalConfig, ModelConfig
from models.checkpoint import WanCheckpoint, locate_checkpoint
from models.hub import HubSnapshot, fetch_snapshot, is_hub_id, locate_snapshot
from models.shipped_weights import shipped_checkpoint

log = logging.getLogger(__name__)


def _check_revision(model: ModelConfig) -> None:
    """``model.revision`` only means something for a hub repository id."""
    if model.revision is None or (model.checkpoint and is_hub_id(model.checkpoint)):
        return
    if model.seeded or not model.checkpoint:
        raise ValueError(
            f"model.revision={model.revision} needs a hub checkpoint (model.checkpoint="
            "Org/Name); drop model.revision"
        )
    raise ValueError(
        f"model.revision={model.revision} applies to a hub repository id, but "
        f"model.checkpoint={model.checkpoint} is a folder here; drop model.revision (or name the "
        "repository, e.g. Wan-AI/Wan2.1-T2V-1.3B-Diffusers)"
    )


def hub_snapshot(model: ModelConfig, *, weights: bool) -> HubSnapshot | None:
    """The snapshot of a hub checkpoint (configs only unless ``weights``); None for a folder.

    Raises:
        ValueError: ``model.revision`` without a hub checkpoint; ``CheckpointError`` from the hub.
    """
    _check_revision(model)
    if model.seeded or not model.checkpoint or not is_hub_id(model.checkpoint):
        return None
    # The weights' fetch is the one that may take long (and shows huggingface_hub's bar).
    level = logging.INFO if weights else logging.DEBUG
    what = "the files a run reads" if weights else "its configs"
    log.log(
        level, "checkpoint %s (revision %s): %s", model.checkpoint, model.revision or "main", what
    )
    return fetch_snapshot(model.checkpoint, model.revision, weights=weights)


def pin_revision(cfg: EvalConfig) -> EvalConfig:
    """``cfg`` with a hub checkpoint's ``model.revision`` replaced by the commit it resolves to
    (its configs fetched); unchanged for a local folder or a seeded preset."""
    snapshot = hub_snapshot(cfg.model, weights=False)
    if snapshot is None:
        return cfg
    if snapshot.commit != snapshot.revision:
        log.info(
            "%s: revision %s is commit %s", snapshot.repo_id, snapshot.revision, snapshot.commit
        )
    model = dataclasses.replace(cfg.model, revision=snapshot.commit)
    return dataclasses.replace(cfg, model=model)


def fetch_checkpoint(model: ModelConfig) -> WanCheckpoint:
    """Every part of the checkpoint, checked (``models.checkpoint.locate_checkpoint``); a hub
    checkpoint's files a run reads downloaded first, with huggingface_hub's progress bar.

    Raises:
        ValueError: no checkpoint for a Wan preset; ``CheckpointError``: a missing or unreadable
            part (named, with the download that completes a hub cache), or a hub failure.
    """
    if model.seeded:
        raise ValueError(f"model={model.name} with {model.checkpoint=} reads no checkpoint")
    shipped = shipped_checkpoint(model.name)
    if not model.checkpoint and shipped is not None:
        return locate_checkpoint(shipped)
    if not model.checkpoint:
        raise ValueError(
            f"model={model.name} needs its weights: set model.checkpoint=/path/to/"
            "Wan2.1-T2V-*-Diffusers (a diffusers-format folder) or a hub repository id "
            "(model.checkpoint=Wan-AI/Wan2.1-T2V-1.3B-Diffusers), or model.checkpoint=random "
            "(its real shapes on random weights: real speed, no quality), or use model=tiny "
            "(shipped with the package)"
        )
    snapshot = hub_snapshot(model, weights=True)
    if snapshot is None:
        return locate_checkpoint(model.checkpoint)
    return locate_snapshot(snapshot)


def checkpoint_tags(model: ModelConfig) -> dict[str, str]:
    """MLflow tags of a hub checkpoint: the repository and the commit; none for a folder."""
    if model.seeded or not model.checkpoint or not is_hub_id(model.checkpoint):
        return {}
    return {"checkpoint_repo": model.checkpoint, "checkpoint_revision": str(model.revision)}
