"""A hub repository id as a checkpoint: ``Wan-AI/Wan2.1-T2V-1.3B-Diffusers`` → its snapshot folder.

``model.checkpoint`` may name a Hugging Face hub repository instead of a folder, as diffusers'
``from_pretrained`` does. :func:`fetch_snapshot` resolves it through ``huggingface_hub``'s own
cache (``HF_HOME`` / ``HF_HUB_CACHE``, shared with diffusers and transformers), downloading only
the files a run reads (:data:`RUN_FILES`: transformer shards, VAE, text encoder, tokenizer,
configs; a dry run only :data:`CONFIG_FILES`), with huggingface_hub's progress bar. A revision
(branch, tag or commit) pins it; the resolved commit hash is what the run records. With
``HF_HUB_OFFLINE=1`` nothing is looked up: the cache must hold the files.

Every failure is a :class:`models.checkpoint.CheckpointError` that says what is missing and how
to get it (a missing file in the cache, a revision that does not exist or is not cached, a
repository that does not exist or is gated, no network with nothing cached).
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path

from models.checkpoint import (
    TRANSFORMER_WEIGHT_STEMS,
    CheckpointError,
    WanCheckpoint,
    locate_checkpoint,
)
from models.text_encoder import TEXT_ENCODER_WEIGHT_STEMS
from models.vae import VAE_WEIGHT_STEMS

# The hub's rule for a repository id: ``owner/name`` of letters, digits, ``-``, ``_`` and ``.``.
_REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")
_COMMIT = re.compile(r"[0-9a-f]{40}")
DEFAULT_REVISION = "main"
_TRUE = {"1", "on", "yes", "true"}
# huggingface_hub's IncompleteSnapshotError: "... 2 file(s) are missing (a, b). ..."
_MISSING = re.compile(r"(\d+ file\(s\)) are missing \((.*?)\)\. ")


def _weights(part: str, stems: tuple[str, ...]) -> tuple[str, ...]:
    """One weights file, its shards and their index, per stem (``models.safetensors_reader``).
    Shards are named, not globbed, so another precision's files (``*.fp16.safetensors``) stay
    on the hub."""
    return tuple(
        pattern
        for stem in stems
        for pattern in (
            f"{part}/{stem}.safetensors",
            f"{part}/{stem}-*-of-*.safetensors",
            f"{part}/{stem}.safetensors.index.json",
        )
    )


# What a dry run reads: the configs (the transformer's architecture is checked against the preset).
CONFIG_FILES = ("transformer/config.json", "vae/config.json", "text_encoder/config.json")
# What a run reads (``models.checkpoint.locate_checkpoint`` and the loaders); nothing else of the
# repository (``scheduler/``, ``model_index.json``, examples) is downloaded.
RUN_FILES = (
    *CONFIG_FILES,
    *_weights("transformer", TRANSFORMER_WEIGHT_STEMS),
    *_weights("vae", VAE_WEIGHT_STEMS),
    *_weights("text_encoder", TEXT_ENCODER_WEIGHT_STEMS),
    "tokenizer/*",
)


@dataclasses.dataclass(frozen=True)
class HubSnapshot:
    """A repository's files at one commit, in the hub cache.

    Attributes:
        repo_id: e.g. ``Wan-AI/Wan2.1-T2V-1.3B-Diffusers``.
        revision: the revision asked for (a branch, tag or commit).
        commit: the commit hash it resolved to (40 hex digits).
        folder: ``<cache>/models--Org--Name/snapshots/<commit>``.
        cache: the hub cache folder.
    """

    repo_id: str
    revision: str
    commit: str
    folder: Path
    cache: Path

    @property
    def source(self) -> str:
        """``repo@commit``, the checkpoint's name in logs and errors."""
        return f"{self.repo_id}@{self.commit}"


def is_hub_id(checkpoint: str | Path) -> bool:
    """Whether ``model.checkpoint`` names a hub repository: ``owner/name`` and no such folder here
    (a local folder always wins, so ``models/wan`` that exists stays a folder)."""
    text = str(checkpoint)
    if Path(text).expanduser().exists() or ".." in text:
        return False
    return _REPO_ID.fullmatch(text) is not None


def hub_cache_dir() -> Path:
    """The cache huggingface_hub uses, read from the environment now: ``HF_HUB_CACHE``, else
    ``HF_HOME/hub``, else ``$XDG_CACHE_HOME/huggingface/hub`` (default ``~/.cache``)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.path.expandvars(os.environ["HF_HUB_CACHE"])).expanduser()
    home = os.environ.get("HF_HOME")
    if not home:
        xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache")
        home = os.path.join(xdg, "huggingface")
    return Path(os.path.expandvars(home)).expanduser() / "hub"


def offline() -> bool:
    """``HF_HUB_OFFLINE`` (or ``TRANSFORMERS_OFFLINE``), read now: nothing is looked up online."""
    value = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return value.strip().lower() in _TRUE


def fetch_snapshot(
    repo_id: str, revision: str | None = None, *, weights: bool = True
) -> HubSnapshot:
    """The repository's snapshot in the hub cache, with the files a run (or a dry run) reads.

    Args:
        repo_id: a hub repository id, e.g. ``Wan-AI/Wan2.1-T2V-14B-Diffusers``.
        revision: a branch, tag or commit hash; None is ``main``.
        weights: True: every file of :data:`RUN_FILES`; False: the configs only (a dry run).

    Returns:
        The snapshot, its folder holding the requested files (downloaded unless cached).

    Raises:
        CheckpointError (a ValueError): the repository or revision does not exist or is not
            cached (offline), the cached snapshot lacks a file, or the hub cannot be reached.
    """
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    asked = revision or DEFAULT_REVISION
    cache = hub_cache_dir()
    patterns = list(RUN_FILES if weights else CONFIG_FILES)
    where = f"{repo_id} at revision {asked!r}"
    try:
        folder = snapshot_download(
            repo_id,
            revision=asked,
            cache_dir=cache,
            allow_patterns=patterns,
            # Read from the environment now (huggingface_hub reads it once, at import).
            local_files_only=offline(),
        )
    except GatedRepoError as err:
        raise CheckpointError(
            f"{repo_id} is gated: accept its terms at https://huggingface.co/{repo_id}, then "
            "log in (`hf auth login`) or set HF_TOKEN"
        ) from err
    except RepositoryNotFoundError as err:
        raise CheckpointError(
            f"model.checkpoint={repo_id}: no such repository on the hub (or a private one: log "
            "in with `hf auth login` or set HF_TOKEN), and no such folder here; e.g. "
            "Wan-AI/Wan2.1-T2V-1.3B-Diffusers or /path/to/Wan2.1-T2V-1.3B-Diffusers"
        ) from err
    except RevisionNotFoundError as err:
        raise CheckpointError(
            f"model.revision={asked}: no such branch, tag or commit in {repo_id}; see "
            f"https://huggingface.co/{repo_id}/commits/main, or drop model.revision for main"
        ) from err
    except LocalEntryNotFoundError as err:
        raise CheckpointError(_not_in_cache(repo_id, asked, cache, err)) from err
    except (HfHubHTTPError, OSError) as err:
        raise CheckpointError(
            f"{where}: the hub could not be reached ({type(err).__name__}: {err}); check the "
            "network, or download on a machine that has one and point HF_HOME at that cache"
        ) from err
    folder = Path(folder)
    return HubSnapshot(repo_id, asked, folder.name, folder, cache)


def locate_snapshot(snapshot: HubSnapshot) -> WanCheckpoint:
    """:func:`models.checkpoint.locate_checkpoint` of a snapshot, its errors saying how to
    complete the cache.

    Raises:
        CheckpointError: a part is missing or unreadable, named, with the download that fills it.
    """
    try:
        return locate_checkpoint(snapshot.folder)
    except CheckpointError as err:
        raise CheckpointError(
            f"{snapshot.source} in the hub cache {snapshot.cache}: {err}\n"
            f"{_completion_hint(snapshot.repo_id, snapshot.commit)}"
        ) from err


def _download_command(repo_id: str, revision: str) -> str:
    includes = " ".join(f"--include '{p}'" for p in RUN_FILES)
    return f"hf download {repo_id} --revision {revision} {includes}"


def _completion_hint(repo_id: str, revision: str) -> str:
    """How to get the files: online the run downloads them; offline, with network elsewhere."""
    if offline():
        return (
            "HF_HUB_OFFLINE=1 forbids downloading: unset it (the run downloads only the files it "
            f"reads), or fetch them where there is network: {_download_command(repo_id, revision)}"
        )
    return (
        f"Is {repo_id} a diffusers-layout repository (transformer/, vae/, text_encoder/, "
        "tokenizer/)? Wan's are the *-Diffusers ones, e.g. Wan-AI/Wan2.1-T2V-1.3B-Diffusers."
    )


def cached_revisions(repo_id: str, cache: Path) -> dict[str, str]:
    """``{ref or commit: commit}`` of the revisions of ``repo_id`` in the cache (refs files,
    then snapshot folders by their commit)."""
    root = cache / ("models--" + repo_id.replace("/", "--"))
    found: dict[str, str] = {}
    refs = root / "refs"
    if refs.is_dir():
        for ref in sorted(p for p in refs.rglob("*") if p.is_file()):
            found[ref.relative_to(refs).as_posix()] = ref.read_text().strip()
    snapshots = root / "snapshots"
    if snapshots.is_dir():
        for folder in sorted(snapshots.iterdir()):
            if _COMMIT.fullmatch(folder.name) and folder.name not in found.values():
                found[folder.name] = folder.name
    return found


def _not_in_cache(repo_id: str, asked: str, cache: Path, err: Exception) -> str:
    """The message for a snapshot the cache lacks (entirely, at this revision, or some files)."""
    missing = getattr(err, "snapshot_path", None)
    if missing is not None:  # huggingface_hub's cached file list shows files absent
        commit = Path(missing).name
        found = _MISSING.search(str(err))
        reason = f"{found[1]}: {found[2]}" if found else str(err).splitlines()[0]
        return (
            f"{repo_id}@{commit} in the hub cache {cache} lacks files the run reads ({reason}). "
            f"{_completion_hint(repo_id, commit)}"
        )
    why = (
        "HF_HUB_OFFLINE=1 forbids looking it up"
        if offline()
        else f"the hub could not be reached ({str(err).splitlines()[0][:300]})"
    )
    revisions = cached_revisions(repo_id, cache)
    if not revisions:
        return (
            f"model.checkpoint={repo_id}: not in the hub cache {cache} (nor a folder here), and "
            f"{why}. Download it where there is network (unset HF_HUB_OFFLINE: the run fetches "
            f"only the files it reads, or `{_download_command(repo_id, asked)}`), point HF_HOME "
            "at a cache that holds it, or pass a local folder"
        )
    listed = ", ".join(
        name if name == commit else f"{name} -> {commit[:12]}" for name, commit in revisions.items()
    )
    return (
        f"model.revision={asked}: {repo_id} has no such revision in the hub cache {cache} "
        f"(cached: {listed}), and {why}. Set model.revision to a cached one, or download it "
        "where there is network"
    )
