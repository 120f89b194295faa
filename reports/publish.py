"""Logs a built report back to MLflow as its own run (tag ``report=true``), so that the UI's
artifact viewer opens ``report.html``."""

from __future__ import annotations

import json

from evalharness.tracking import RUN_KIND_TAG, MlflowTracker, closed_on_error, environment_tags
from reports.build import Report
from reports.sources import REPORT_TAG


def publish(report: Report, tracking_uri: str, experiment: str) -> str:
    """Uploads the report folder as a finished run of ``experiment``; returns its run id.

    Params name the source runs; metrics count them by kind and count what was drawn, so that two
    reports can be compared in the UI.
    """
    stamp = report.folder.name if report.folder.name.startswith("report") else "report"
    tracker = MlflowTracker(tracking_uri, experiment, f"{stamp}-{len(report.runs)}-runs")
    with closed_on_error(tracker):
        tracker.set_tags({**environment_tags(), REPORT_TAG: "true", RUN_KIND_TAG: "report"})
        ids = [r.run_id for r in report.runs]
        tracker.log_params({"source_runs": json.dumps(ids), "source_run_count": len(ids)})
        kinds: dict[str, int] = {}
        for run in report.runs:
            key = "runs." + run.kind.replace(":", ".")
            kinds[key] = kinds.get(key, 0) + 1
        tracker.log_metrics(
            {
                **kinds,
                "figures": len(report.figures),
                "tables": len(report.tables),
                "missing": len(report.missing),
            }
        )
        tracker.log_artifacts(report.folder)
    tracker.finish("FINISHED")
    return str(tracker.run_id)
