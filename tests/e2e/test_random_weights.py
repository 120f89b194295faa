"""``model=tiny model.checkpoint=random`` end to end: the run draws its weights (nothing read),
times both arms, and says everywhere that its quality is meaningless; the gate CLI then refuses
a quality threshold on it and still judges its speed."""

import json

import pytest

from evalharness.gate.cli import main as gate
from evalharness.run import run
from evalharness.tracking import open_client
from tests.helpers.harness_config import small_config


@pytest.fixture(scope="module")
def random_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("random-weights")
    metrics = run(small_config(tmp, "model.checkpoint=random", "gate.min_speedup=0.01"))
    return tmp, metrics


@pytest.mark.slow  # end to end: run by .ci/run's second step (pytest -m slow)
def test_a_run_on_random_weights_labels_its_quality_everywhere(random_run, capsys):
    tmp, metrics = random_run
    assert metrics["gate_passed"] and metrics["speedup"] > 0
    (folder,) = list((tmp / "outputs" / "runs").iterdir())
    stored = json.loads((folder / "metrics.json").read_text())
    assert stored["weights"] == "random" and stored["quality"].startswith("meaningless")
    assert "**Random weights**" in (folder / "report.md").read_text()
    uri = f"sqlite:///{tmp / 'outputs' / 'mlflow.db'}"
    tags = open_client(uri).get_run(metrics["mlflow_run_id"]).data.tags
    assert tags["weights"] == "random" and "random weights" in tags["mlflow.note.content"]


@pytest.mark.slow
def test_the_gate_cli_refuses_quality_and_judges_speed_on_it(random_run, capsys):
    tmp, metrics = random_run
    which = ["--run-id", metrics["mlflow_run_id"], "--output-root", str(tmp / "outputs")]
    assert gate([*which, "--min-psnr-db", "20"]) == 2
    assert "drop --min-psnr-db" in capsys.readouterr().err
    assert gate([*which, "--min-speedup", "0.01"]) == 0
    assert gate([*which, "--min-speedup", "1000"]) == 1
