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


def _storage(url: str) -> optuna.storages.RDBStorage:
    """Opens Optuna's storage.

    Raises:
        PreflightRefusal: it cannot be opened (the message names the URL's scheme and the fix).
    """
    import optuna

    try:
        _ensure_schema(url)
        return optuna.storages.RDBStorage(url, heartbeat_interval=None)
    except Exception as err:  # noqa: BLE001 - any driver's error: refuse with the URL's scheme
        raise PreflightRefusal(
            f"Optuna's storage {url.split('://')[0]}://... cannot be opened: "
            f"{type(err).__name__}: {redacted(str(err), url)}; give a writable search.storage "
            "(an SQLAlchemy URL)"
        ) from err


def _study_names(url: str) -> set[str]:
    """The studies the storage holds; an sqlite file that does not exist holds none (and is not
    created by asking)."""
    import optuna

    if url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).is_file():
        return set()
    return {s.study_name for s in optuna.get_all_study_summaries(_storage(url))}


def refuse_taken(name: str, url: str) -> None:
    """Refuses a new study whose name the storage holds already (creating nothing).

    Raises:
        PreflightRefusal: the name is taken, or the storage cannot be opened.
    """
    if name in _study_names(url):
        raise PreflightRefusal(
            f"a study named {name!r} exists already; add search.resume=true to continue it, or "
            "give another search.study_name"
        )


def create_study(name: str, url: str, sampler: optuna.samplers.BaseSampler) -> optuna.Study:
    """Creates a new study (:func:`refuse_taken` first: a taken name is refused)."""
    import optuna

    refuse_taken(name, url)
    return optuna.create_study(
        study_name=name, storage=_storage(url), sampler=sampler, directions=list(DIRECTIONS)
    )


def load_study(name: str, url: str) -> optuna.Study:
    """Loads the study to resume, creating nothing when it is not there.

    Raises:
        PreflightRefusal: the storage holds no such study, holds one this search did not make,
            or cannot be opened.
    """
    import optuna

    names = _study_names(url)
    if name not in names:
        raise PreflightRefusal(
            f"search.resume=true, but the storage holds no study {name!r} (it has "
            f"{sorted(names) or 'none'}); drop search.resume to start it"
        )
    study = optuna.load_study(study_name=name, storage=_storage(url))
    if tuple(d.name.lower() for d in study.directions) != DIRECTIONS:
        raise PreflightRefusal(f"the study {name!r} was not made by this search")
    return study
