"""What a run shows in MLflow's lists: its kind, its description, the link to compare runs."""

from types import SimpleNamespace
from urllib.parse import parse_qs, urlsplit

from evalharness.tracking import RUN_KIND_TAG, description_tags, experiment_link


def test_the_link_opens_the_runs_table_of_harness_runs_best_speedup_first():
    link = experiment_link("http://mlflow.internal:5000/", "7")
    assert link.startswith("http://mlflow.internal:5000/#/experiments/7/runs?")
    query = parse_qs(urlsplit(link.split("#", 1)[1]).query)
    # MLflow 3 reads the view from workflowType (a fresh browser would open the GenAI view).
    assert query["workflowType"] == ["machine_learning"]
    assert query["searchFilter"] == [f"tags.{RUN_KIND_TAG} = 'harness'"]
    assert query["orderByKey"] == ["metrics.`speedup`"] and query["orderByAsc"] == ["false"]


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
