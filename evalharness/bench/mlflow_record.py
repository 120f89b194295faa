"""Benchmarks as MLflow runs: one finished run per benchmark table, with ``--mlflow``.

The store is the run's config (``logger.tracking_uri``, else ``<output_root>/mlflow.db``;
experiment ``logger.experiment_name``, beside the harness's own runs so ``python -m reports``
finds both); ``logger.kind`` is not read. A run holds tags ``bench=<name>``, the environment
(``evalharness.tracking.environment_tags``) and ``model`` / ``resolution`` / ``backend`` where
they apply; params: the benchmark's settings and ``version.*``; metrics ``<row>.<column>`` (e.g.
``b3.median_ms``) in MLflow's allowed characters; artifacts ``<name>.md`` (the printed table),
``<name>.json`` (``{"config", "rows"}``, what ``reports`` reads) and any figure.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalharness.config import EvalConfig
from evalharness.tracking import RUN_KIND_TAG, closed_on_error, environment_tags, make_tracker

BENCH_TAG = "bench"
_UNSAFE = re.compile(r"[^A-Za-z0-9_\-. /]")


@dataclass(frozen=True)
class BenchRecord:
    """One benchmark table as it goes to MLflow.

    Attributes:
        bench: the ``bench`` tag and artifact file stem, e.g. ``kernel_table``.
        config: what was benchmarked; logged as params and as the JSON artifact's ``config``.
        rows: the table's rows; ``row_key`` names each row in metric names.
        markdown: the table as printed.
        tags: ``model``, ``resolution``, ``backend`` where they apply.
        files: figures to upload beside the table.
    """

    bench: str
    config: Mapping[str, Any]
    rows: Sequence[Mapping[str, Any]]
    row_key: str
    markdown: str
    tags: Mapping[str, str] = field(default_factory=dict)
    files: Sequence[Path] = ()

    def metrics(self) -> dict[str, float]:
        """``<row>.<column>`` for every finite number of every row (bools left out)."""
        out: dict[str, float] = {}
        for row in self.rows:
            name = metric_name(str(row[self.row_key]))
            for key, value in row.items():
                if key == self.row_key or not _finite_number(value):
                    continue
                out[f"{name}.{metric_name(key)}"] = float(value)
        return out


def metric_name(text: str) -> str:
    """``text`` with every character MLflow refuses in a metric or param name replaced by ``_``."""
    return _UNSAFE.sub("_", text).strip() or "_"


def _finite_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def add_tracking_args(parser: argparse.ArgumentParser) -> None:
    """Adds ``--mlflow``: log each table as an MLflow run in the store the run's config names."""
    parser.add_argument(
        "--mlflow",
        action="store_true",
        help="log each table as an MLflow run: logger.tracking_uri (default: sqlite under "
        "output_root), experiment logger.experiment_name",
    )


def emit(
    args: argparse.Namespace,
    result: Any,
    markdown: str,
    records: Iterable[BenchRecord] = (),
    cfg: EvalConfig | None = None,
) -> None:
    """Prints ``result`` as JSON with ``args.json`` (NumPy scalars as floats), else
    ``markdown``; writes the JSON to ``args.json_out`` where the command has that option and it
    is set; then, with ``args.mlflow``, logs ``records`` where ``cfg`` says."""
    print(json.dumps(result, indent=1, default=float) if args.json else markdown)
    if getattr(args, "json_out", None):
        with open(args.json_out, "w") as handle:
            json.dump(result, handle, indent=1, default=float)
    if getattr(args, "mlflow", False):
        log_records(cfg, records)


def version_params() -> dict[str, str]:
    """``version.*``: Python and the numerical libraries that produced a result."""
    import flax
    import jax
    import jaxlib
    import numpy

    return {
        "version.python": platform.python_version(),
        "version.jax": jax.__version__,
        "version.jaxlib": jaxlib.__version__,
        "version.flax": flax.__version__,
        "version.numpy": numpy.__version__,
    }


def _flat_params(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    params: dict[str, Any] = {}
    for key, value in config.items():
        name = metric_name(f"{prefix}{key}")
        if isinstance(value, Mapping):
            params.update(_flat_params(value, f"{name}."))
        else:
            params[name] = json.dumps(value) if isinstance(value, list | tuple) else value
    return params


def write_record_files(record: BenchRecord, folder: Path) -> list[Path]:
    """``<bench>.md``, ``<bench>.json`` and copies of the figures in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    md = folder / f"{record.bench}.md"
    md.write_text(record.markdown.rstrip() + "\n")
    data = folder / f"{record.bench}.json"
    payload = {"bench": record.bench, "config": record.config, "rows": list(record.rows)}
    data.write_text(json.dumps(payload, indent=1, default=str))
    copies = [md, data]
    for path in record.files:
        if Path(path).is_file():
            copies.append(Path(shutil.copy(path, folder / Path(path).name)))
    return copies


def log_record(cfg: EvalConfig, record: BenchRecord) -> str:
    """Logs one table as a finished MLflow run in ``cfg``'s store; returns its run id.

    Raises:
        Whatever MLflow raises; the run is then closed as FAILED with an ``error`` tag.
    """
    stamp = time.strftime("%Y%m%d-%H%M%S")
    tracker = make_tracker(
        "mlflow",
        tracking_uri=cfg.logger.tracking_uri,
        experiment_name=cfg.logger.experiment_name,
        run_name=f"bench-{record.bench}-{stamp}",
        output_root=Path(cfg.output_root),
    )
    with closed_on_error(tracker):
        kind = {RUN_KIND_TAG: "benchmark"}
        tracker.set_tags({**environment_tags(), BENCH_TAG: record.bench, **kind, **record.tags})
        tracker.log_params({**_flat_params(record.config), **version_params()})
        tracker.log_metrics(record.metrics())
        with tempfile.TemporaryDirectory(prefix=f"bench-{record.bench}-") as tmp:
            write_record_files(record, Path(tmp))
            tracker.log_artifacts(Path(tmp))
    tracker.finish("FINISHED")
    return str(tracker.run_id)


def log_records(cfg: EvalConfig, records: Iterable[BenchRecord]) -> list[str]:
    """Logs each record (:func:`log_record`) and says where on stderr; returns the run ids."""
    ids = []
    for record in records:
        ids.append(log_record(cfg, record))
        experiment = cfg.logger.experiment_name
        print(
            f"mlflow: bench={record.bench} run {ids[-1]} in experiment {experiment!r}",
            file=sys.stderr,
            flush=True,
        )
    return ids
