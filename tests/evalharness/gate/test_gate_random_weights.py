"""The gate CLI on a run on random weights (tag ``weights=random``): a quality threshold is
refused with exit 2 and one ``error:`` line naming the flag to drop; the speed is judged."""

import pytest

from evalharness.gate.cli import main
from evalharness.tracking.mlflow_client import MlflowTracker, default_tracking_uri

METRICS = {"speedup": 1.3, "psnr_db": 9.0, "psnr_worst_frame_db": 7.0}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    uri = default_tracking_uri(tmp_path_factory.mktemp("random-weights-store"))
    ids = {}
    for weights in ("random", None):
        tracker = MlflowTracker(uri, "ci", f"run-{weights}")
        tags = {"run_kind": "harness", **({"weights": weights} if weights else {})}
        tracker.set_tags(tags)
        tracker.log_metrics(METRICS)
        tracker.finish("FINISHED")
        ids[weights] = tracker.run_id
    return uri, ids


@pytest.mark.parametrize(
    ("flags", "dropped"),
    [
        (["--min-psnr-db", "20"], "drop --min-psnr-db ("),
        (["--min-worst-frame-psnr-db", "5", "--min-speedup", "1"], "drop --min-worst-frame"),
    ],
)
def test_a_quality_threshold_on_random_weights_is_refused(store, capsys, flags, dropped):
    uri, ids = store
    assert main(["--run-id", ids["random"], "--tracking-uri", uri, *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: gate: ") and err.count("\n") == 1
    assert dropped in err and "random weights" in err and "--min-speedup still gates" in err


def test_the_speed_of_a_run_on_random_weights_is_still_gated(store, capsys):
    uri, ids = store
    assert main(["--run-id", ids["random"], "--tracking-uri", uri, "--min-speedup", "1.2"]) == 0
    assert main(["--run-id", ids["random"], "--tracking-uri", uri, "--min-speedup", "2"]) == 1
    assert "speedup" in capsys.readouterr().err


def test_a_run_on_real_weights_is_gated_on_quality(store):
    uri, ids = store
    assert main(["--run-id", ids[None], "--tracking-uri", uri, "--min-psnr-db", "20"]) == 1
