"""What a run shows in MLflow's lists: its kind, its description, the link to compare runs."""

import json
from types import SimpleNamespace
from urllib.parse import parse_qs, urlsplit

from mlflow.tracking import MlflowClient

from evalharness.tracking import RUN_KIND_TAG, description_tags, ensure_experiment, experiment_link
from evalharness.tracking.ui_view import HEADLINE_VIEW, SHARED_VIEW_TAG


def test_the_link_opens_the_shared_headline_view_of_the_runs_table():
    link = experiment_link("http://mlflow.internal:5000/", "7")
    assert link.startswith("http://mlflow.internal:5000/#/experiments/7/runs?")
    query = parse_qs(urlsplit(link.split("#", 1)[1]).query)
    # MLflow 3 reads the view from workflowType (a fresh browser would open the GenAI view), and
    # ignores a shared view when any search parameter is in the URL beside its key.
    assert query == {"workflowType": ["machine_learning"], "viewStateShareKey": [HEADLINE_VIEW]}


def test_the_shared_view_filters_sorts_and_shows_the_headline(tmp_path):
    client = MlflowClient(f"sqlite:///{tmp_path / 'm.db'}")
    experiment_id = ensure_experiment(client, "e")
    tags = client.get_experiment(experiment_id).tags
    state = json.loads(tags[SHARED_VIEW_TAG + HEADLINE_VIEW])
    assert state["searchFilter"] == f"tags.{RUN_KIND_TAG} = 'harness'"
    assert state["orderByKey"] == "metrics.`speedup`" and state["orderByAsc"] is False
    assert state["selectedColumns"][:3] == [
        "metrics.`speedup`",
        "metrics.`psnr_db`",
        "metrics.`psnr_worst_frame_db`",
    ]
    assert "tags.`gate`" in state["selectedColumns"]
    assert ensure_experiment(client, "e") == experiment_id  # idempotent


def test_the_shared_view_charts_psnr_against_speedup_first(tmp_path):
    client = MlflowClient(f"sqlite:///{tmp_path / 'm.db'}")
    experiment_id = ensure_experiment(client, "e")
    state = json.loads(client.get_experiment(experiment_id).tags[SHARED_VIEW_TAG + HEADLINE_VIEW])
    (section,) = state["compareRunSections"]
    charts = state["compareRunCharts"]
    assert [(c["type"], c["xaxis"]["key"], c["yaxis"]["key"]) for c in charts] == [
        ("SCATTER", "speedup", "psnr_db"),
        ("SCATTER", "speedup", "psnr_worst_frame_db"),
    ]
    assert {c["metricSectionId"] for c in charts} == {section["uuid"]}
    assert section["display"] and not section["deleted"] and state["isAccordionReordered"]


def test_the_chart_link_opens_the_same_view_in_chart_mode():
    query = parse_qs(
        urlsplit(experiment_link("http://h:1", "7", charts=True)).fragment.split("?")[1]
    )
    assert query == {
        "workflowType": ["machine_learning"],
        "viewStateShareKey": [HEADLINE_VIEW],
        "compareRunsMode": ["CHART"],
    }


def test_a_local_store_gets_the_page_after_mlflow_ui():
    link = experiment_link("sqlite:////data/mlflow.db", "1")
    assert link.startswith("http://127.0.0.1:5000/#/experiments/1/runs?")
    assert "mlflow ui --backend-store-uri sqlite:////data/mlflow.db" in link
    assert experiment_link("sqlite:///x.db", None) is None


def test_the_description_leads_with_the_gate_outcome():
    tracker = SimpleNamespace(tracking_uri="http://h:1", experiment_id="3")
    note = description_tags(tracker, "not gated", "dense 1 s | sparse 0.5 s")["mlflow.note.content"]
    assert note.startswith("**gate not gated**: dense 1 s | sparse 0.5 s")
    assert "Compare runs: http://h:1/#/experiments/3/runs?" in note
    assert "Speedup vs PSNR chart: http://h:1/#/experiments/3/runs?" in note
    assert note.endswith("compareRunsMode=CHART")


def test_a_tag_another_process_set_first_is_not_an_error(tmp_path):
    """Two jobs on one server tag a fresh experiment at once: the second insert of the key fails
    in the store; the loser finds the tag set (same value) or sets it again (an update)."""
    from evalharness.tracking.mlflow_client import _set_experiment_tag

    client = MlflowClient(f"sqlite:///{tmp_path / 'm.db'}")
    experiment_id = client.create_experiment("e")
    real = client.set_experiment_tag
    calls = []

    def racing(eid, key, value):
        calls.append(value)
        if len(calls) == 1:  # the other process's insert lands first, then ours collides
            real(eid, key, "other" if value == "ours-2" else value)
            raise RuntimeError("duplicate key value violates unique constraint")
        real(eid, key, value)

    client.set_experiment_tag = racing
    _set_experiment_tag(client, experiment_id, "k", "ours")  # same value: read back, done
    assert calls == ["ours"] and client.get_experiment(experiment_id).tags["k"] == "ours"
    calls.clear()
    _set_experiment_tag(client, experiment_id, "k2", "ours-2")  # another value: set again
    assert calls == ["ours-2", "ours-2"]
    assert client.get_experiment(experiment_id).tags["k2"] == "ours-2"
