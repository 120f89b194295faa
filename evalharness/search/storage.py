"""Where a study lives: its folder, Optuna's storage, and opening a new or resumed study.

The folder is ``<output_root>/searches/<study_name>`` (the front table and figure, the
recommended schedule, ``search.json``). Optuna's storage is, in this order: ``search.storage``
when set; the PostgreSQL database ``logger.tracking_uri`` names, in its own schema ``optuna``
(Optuna and MLflow both keep an ``alembic_version`` table, so they cannot share a schema); else
``optuna.db`` (sqlite) in the study's folder. Every finished trial is committed to it before the
next starts, so an interrupted search loses at most the trial that was running.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

from evalharness.refusal import PreflightRefusal
from evalharness.tracking import redacted

if TYPE_CHECKING:
    import optuna

POSTGRES_SCHEMA = "optuna"
DIRECTIONS = ("maximize", "maximize")  # speedup, PSNR


def searches_root(output_root: str | Path) -> Path:
    """The folder holding every study's folder."""
    return Path(output_root) / "searches"


def study_name_for(name: str | None, output_root: str | Path, resume: bool) -> str:
    """The study's name: ``name``; else, resuming, the latest study under ``output_root``; else a
    new ``search-<date>-<time>``.

    Raises:
        PreflightRefusal: ``resume`` without a name and no study to resume.
    """
    if name:
        return name
    if not resume:
        return time.strftime("search-%Y%m%d-%H%M%S")
    root = searches_root(output_root)
    studies = sorted(
        (p for p in root.glob("*/search.json") if p.is_file()), key=lambda p: p.stat().st_mtime
    )
    if not studies:
        raise PreflightRefusal(
            f"search.resume=true, but there is no study under {root} to resume; give "
            "search.study_name=<name>, or start a new search without search.resume"
        )
    return studies[-1].parent.name


def storage_url(explicit: str | None, tracking_uri: str | None, folder: Path) -> str:
    """Optuna's storage URL (module docstring)."""
    if explicit:
        return explicit
    if tracking_uri and tracking_uri.startswith(("postgresql", "postgres")):
        sep = "&" if "?" in tracking_uri else "?"
        return f"{tracking_uri}{sep}options=-csearch_path%3D{POSTGRES_SCHEMA}"
    return f"sqlite:///{(folder / 'optuna.db').resolve()}"


def _ensure_schema(url: str) -> None:
    """Creates the ``optuna`` schema of a PostgreSQL storage (Optuna creates its tables in it)."""
    if "search_path%3D" + POSTGRES_SCHEMA not in url:
        return
    import sqlalchemy

    engine = sqlalchemy.create_engine(url.split("?")[0])
    try:
        with engine.begin() as connection:
            connection.execute(sqlalchemy.text(f"CREATE SCHEMA IF NOT EXISTS {POSTGRES_SCHEMA}"))
    finally:
        engine.dispose()


def open_study(
    name: str, url: str, sampler: optuna.samplers.BaseSampler, *, resume: bool
) -> optuna.Study:
    """Creates the study, or loads it when resuming.

    Raises:
        PreflightRefusal: a new search whose name is taken, or a resume of a study that does
            not exist, or a storage that cannot be opened (each names the fix).
    """
    import optuna

    try:
        _ensure_schema(url)
        storage = optuna.storages.RDBStorage(url, heartbeat_interval=None)
    except Exception as err:  # noqa: BLE001 - any driver's error: refuse with the URL's scheme
        raise PreflightRefusal(
            f"Optuna's storage {url.split('://')[0]}://... cannot be opened: "
            f"{type(err).__name__}: {redacted(str(err), url)}; give a writable search.storage "
            "(an SQLAlchemy URL)"
        ) from err
    names = {s.study_name for s in optuna.get_all_study_summaries(storage)}
    if resume and name not in names:
        raise PreflightRefusal(
            f"search.resume=true, but the storage holds no study {name!r} (it has "
            f"{sorted(names) or 'none'}); drop search.resume to start it"
        )
    if not resume and name in names:
        raise PreflightRefusal(
            f"a study named {name!r} exists already; add search.resume=true to continue it, or "
            "give another search.study_name"
        )
    if resume:
        study = optuna.load_study(study_name=name, storage=storage, sampler=sampler)
        if tuple(d.name.lower() for d in study.directions) != DIRECTIONS:
            raise PreflightRefusal(f"the study {name!r} was not made by this search")
        return study
    return optuna.create_study(
        study_name=name, storage=storage, sampler=sampler, directions=list(DIRECTIONS)
    )
