"""How a user finds the harness's runs in MLflow's UI: the run kind tag, the shared view of the
runs table with the headline columns, the link that opens it, and the run's description."""

from __future__ import annotations

import json
from typing import Any

from evalharness.metric_names import Metric
from evalharness.tracking.redaction import redacted

# Tells harness, benchmark, report and search runs apart in one experiment (``tags.run_kind``).
RUN_KIND_TAG = "run_kind"
SEARCH_KIND = "search"  # the parent run of ``python -m evalharness.search``
# MLflow 3 opens an experiment in the view its ``workflowType`` URL parameter names (else the
# browser's last, GenAI on a fresh profile), its runs table without metrics. A shared view (the
# experiment tag ``mlflow.sharedViewState.<key>``, opened by ``viewStateShareKey=<key>``, with no
# other search parameter or MLflow ignores it) carries the filter, the sort and the columns.
SHARED_VIEW_TAG = "mlflow.sharedViewState."
HEADLINE_VIEW = "harness-headline"
HEADLINE_VIEW_TAG = SHARED_VIEW_TAG + HEADLINE_VIEW
HEADLINE_COLUMNS = (
    Metric.SPEEDUP,
    Metric.PSNR_DB,
    Metric.PSNR_WORST_FRAME_DB,
    Metric.GAP_TO_NOISE_FLOOR_DB,
    Metric.SSIM_FRAMES,
    Metric.LPIPS,
    "dense_median_s",
    "sparse_median_s",
)
UI_QUERY = f"workflowType=machine_learning&viewStateShareKey={HEADLINE_VIEW}"
# The same view in chart mode (a display mode, not a search parameter): its first section holds
# the scatter charts below instead of MLflow's generated charts.
CHART_QUERY = f"{UI_QUERY}&compareRunsMode=CHART"
# (x, y) metrics of the headline section's scatter charts: quality against speed, a point per run.
HEADLINE_SCATTERS = ((Metric.SPEEDUP, Metric.PSNR_DB), (Metric.SPEEDUP, Metric.PSNR_WORST_FRAME_DB))
_HEADLINE_SECTION = "harness-headline-section"


def headline_view_state() -> str:
    """The shared view's state: harness runs, best speedup first, the headline metrics and the
    gate, schedule and resolution tags as columns (in this order)."""
    columns = [f"metrics.`{m}`" for m in HEADLINE_COLUMNS]
    columns += [f"tags.`{t}`" for t in ("gate", "schedule", "resolution")]
    state = {
        "searchFilter": f"tags.{RUN_KIND_TAG} = 'harness'",
        "orderByKey": "metrics.`speedup`",
        "orderByAsc": False,
        "selectedColumns": columns,
        "columnOrder": columns,
        # MLflow chart cards (its ``RunsChartsScatterCardConfig`` fields).
        "compareRunCharts": [
            {
                "uuid": f"harness-{x}-vs-{y}",
                "type": "SCATTER",
                "metricSectionId": _HEADLINE_SECTION,
                "runsCountToCompare": 100,
                "deleted": False,
                "isGenerated": False,
                "displayName": f"{y} vs {x}",
                "xaxis": {"key": x, "type": "METRIC"},
                "yaxis": {"key": y, "type": "METRIC"},
            }
            for x, y in HEADLINE_SCATTERS
        ],
        "compareRunSections": [
            {
                "uuid": _HEADLINE_SECTION,
                "name": "Quality vs speed",
                "display": True,
                "isReordered": False,
                "deleted": False,
                "isGenerated": False,
            }
        ],
        "isAccordionReordered": True,  # keep the headline section first
    }
    return json.dumps(state)


def description_tags(tracker: Any, gate_outcome: str, headline: str) -> dict[str, str]:
    """The run's description on its MLflow page (``mlflow.note.content``): the gate's outcome,
    the headline line, and the link that compares the experiment's harness runs."""
    experiment_id = getattr(tracker, "experiment_id", None)
    link = experiment_link(tracker.tracking_uri, experiment_id)
    note = f"**gate {gate_outcome}**: {headline}"
    if link:
        chart = experiment_link(tracker.tracking_uri, experiment_id, charts=True)
        note += f"\n\nCompare runs: {link}\n\nSpeedup vs PSNR chart: {chart}"
    return {"mlflow.note.content": note}


def experiment_link(
    tracking_uri: str | None, experiment_id: str | None, *, charts: bool = False
) -> str | None:
    """Where the experiment's harness runs open in the MLflow UI: a URL for a server, else the
    page's path after ``mlflow ui``'s address (None without an experiment). ``charts`` opens the
    chart mode, whose first section plots PSNR against speedup, a point per run."""
    if not experiment_id:
        return None
    page = f"#/experiments/{experiment_id}/runs?{CHART_QUERY if charts else UI_QUERY}"
    if tracking_uri and tracking_uri.startswith(("http://", "https://")):
        return f"{redacted(tracking_uri).rstrip('/')}/{page}"
    # The command names the store with its password hidden: the reader supplies their own
    # credentials (PGPASSWORD, PGPASSFILE), never the ones of whoever ran the harness.
    store = redacted(tracking_uri)
    return f"http://127.0.0.1:5000/{page} (after mlflow ui --backend-store-uri {store})"
