"""The run's folders, checked before any work: ``output_root`` and ``cache_dir`` writable, the
folders the run writes under them too (the compilation cache's among them), and the disk under
``output_root`` with room for what the run writes.

A run writes each arm's video twice (a lossless FFV1 ``.mkv`` to measure, a CRF ``.mp4`` to
watch), a side-by-side video, and caches the dense arm's frames. FFV1 on smooth generated video
takes about half its raw size, so the raw size of every arm's frames twice over (videos and cache)
plus any saved latents is a bound with margin: a run is refused in seconds rather than failing
with a full disk after an hour. :func:`io_hint` names the setting when an I/O error happens anyway.
"""

from __future__ import annotations

import errno
import math
import os
import shutil
import tempfile
from pathlib import Path

from evalharness import compile_cache
from evalharness.config import EvalConfig
from evalharness.refusal import PreflightRefusal


def run_bytes(cfg: EvalConfig, pairs: int) -> int:
    """Bytes the run writes under ``output_root`` (module docstring)."""
    res = cfg.resolution
    video = res.video
    raw = res.frames * res.height * res.width * 3
    arms = 3 if cfg.noise_floor else 2
    # latents.npz: each arm's float32 latents.
    latents = arms * 4 * math.prod(video.latent_shape()) if cfg.save_latents else 0
    return pairs * (2 * arms * raw + latents)


def _existing(folder: Path) -> Path:
    """``folder`` or its nearest ancestor that exists (where the run would create it)."""
    folder = folder.absolute()
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return folder


def check_writable(folder: Path, setting: str) -> None:
    """Refuses, naming the setting, a folder the run could not create or write; what it
    creates to find out is removed (a refused run leaves no trace).

    Raises:
        PreflightRefusal: naming the setting, the folder, why, and a folder to give instead.
    """
    problem = _write_problem(folder)
    if problem:
        raise PreflightRefusal(
            f"{setting}={folder} cannot be written: {problem}; set {setting} to a folder this "
            f"user can write, e.g. {setting}=/tmp/evalharness. Nothing was computed."
        )


def check_compile_cache(cfg: EvalConfig) -> None:
    """Refuses a run whose compilation cache (``compile_cache``: ``<cache_dir>/jax_compile``, or
    the folder ``JAX_COMPILATION_CACHE_DIR`` names) cannot be written: JAX would warn once and
    compile every program, every time.

    Raises:
        PreflightRefusal: naming ``cache_dir`` (or the environment variable), the folder, why,
            and ``compile_cache=false``.
    """
    if not cfg.compile_cache:
        return
    folder = compile_cache.cache_folder(cfg.cache_dir)
    problem = _write_problem(folder)
    if not problem:
        return
    named = os.environ.get(compile_cache.ENV_FOLDER)
    if named:
        setting = f"{compile_cache.ENV_FOLDER}={named}"
        fix = f"unset {compile_cache.ENV_FOLDER} or name a folder this user can write"
    else:
        setting, fix = f"cache_dir={cfg.cache_dir}", "set cache_dir to a folder this user can write"
    raise PreflightRefusal(
        f"{setting}: the compilation cache's folder {folder} cannot be written: {problem}; "
        f"{fix}, or run without the cache (compile_cache=false). Nothing was computed."
    )


def _write_problem(folder: Path) -> str | None:
    """Why ``folder`` could not be created or written (None when it can); checked on it or on
    its nearest existing ancestor, where the run would create it."""
    there = _existing(folder)
    if not there.is_dir():
        return f"{there} is not a folder"
    if not os.access(there, os.W_OK | os.X_OK):
        return f"{there} is not writable by this user" + (
            " (read-only file system)" if _read_only_mount(there) else ""
        )
    return _creation_problem(there)


def _creation_problem(folder: Path) -> str | None:
    """Why a folder and a file cannot be created in ``folder`` (what the run does there), or
    None; both are removed again. ``access(2)`` alone passes folders that refuse new entries
    (a virtual file system such as ``/proc``)."""
    try:
        probe = Path(tempfile.mkdtemp(prefix=".evalharness-write-probe-", dir=folder))
    except OSError as err:
        return f"a folder cannot be created in {folder} ({err.strerror or err})"
    try:
        (probe / "probe").write_bytes(b"")
    except OSError as err:
        return f"a file cannot be created in {folder} ({err.strerror or err})"
    finally:
        shutil.rmtree(probe, ignore_errors=True)
    return None


def _read_only_mount(folder: Path) -> bool:
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):
        return False


def written_folders(cfg: EvalConfig) -> dict[str, tuple[str, ...]]:
    """The folders a run writes under each setting's folder (``runs/``: the run folders;
    ``mlartifacts/``: the default tracking store's artifacts; ``prompts/``: the prompt
    embeddings; ``dense_arms/``: the dense-arm cache; ``phases/``: the measured phase times)."""
    under_root = ("runs", "mlartifacts") if cfg.logger.kind == "mlflow" else ("runs",)
    return {"output_root": under_root, "cache_dir": ("prompts", "dense_arms", "phases")}


def check_subfolder(root: Path, name: str, setting: str) -> None:
    """Refuses a run whose folder ``name`` under ``setting``'s ``root`` (or, where it does not
    exist yet, the folder it would be created in) cannot be written.

    Raises:
        PreflightRefusal: naming the folder, the setting, why, and the fix.
    """
    folder = root / name
    if not folder.exists():
        return  # created in ``root``, whose check covers it
    problem = _write_problem(folder)
    if problem:
        fix = f"make it writable by this user (chmod -R u+w {folder})"
        if _read_only_mount(_existing(folder)):
            fix = "mount its file system writable"
        raise PreflightRefusal(
            f"{folder} (the {name}/ folder the run writes under {setting}={root}) cannot be "
            f"written: {problem}; {fix} or set {setting} to another folder. Nothing was computed."
        )


def check_output_folders(cfg: EvalConfig, pairs: int) -> None:
    """Refuses a run whose ``output_root``, ``cache_dir``, a folder the run writes under them
    (:func:`written_folders`) or compilation cache cannot be written, or whose disk has less
    free space than :func:`run_bytes`.

    Raises:
        PreflightRefusal: naming the folder, the setting and the bytes.
    """
    root = Path(cfg.output_root)
    roots = {"output_root": root, "cache_dir": Path(cfg.cache_dir)}
    for setting, names in written_folders(cfg).items():
        check_writable(roots[setting], setting)
        for name in names:
            check_subfolder(roots[setting], name, setting)
    check_compile_cache(cfg)
    need, free = run_bytes(cfg, pairs), shutil.disk_usage(_existing(root)).free
    if free < need:
        raise PreflightRefusal(
            f"output_root={root} has {_size(free)} free; this run writes up to "
            f"{_size(need)} (videos and the dense cache, {pairs} pair(s)); free space "
            "or set output_root (and cache_dir) to a larger disk. Nothing was computed."
        )


def _size(n: int) -> str:
    """``1.23 GB`` or ``45.6 MB``."""
    return f"{n / 1e9:,.2f} GB" if n >= 1e9 else f"{n / 1e6:,.1f} MB"


def io_hint(err: BaseException, cfg: EvalConfig) -> str:
    """For an I/O error during a run, the path and the setting that names it ('' otherwise)."""
    if not isinstance(err, OSError):
        return ""
    path = err.filename or ""
    setting = "cache_dir" if path and _under(path, cfg.cache_dir) else "output_root"
    where = f" ({path})" if path else ""
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"; the disk{where} is full: free space or set {setting} to a larger disk"
    if err.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return f"; {where.strip(' ()') or setting} cannot be written: set {setting} to a writable folder"
    return ""


def _under(path: str, folder: str) -> bool:
    try:
        return Path(os.path.abspath(path)).is_relative_to(os.path.abspath(folder))
    except (TypeError, ValueError):
        return False
