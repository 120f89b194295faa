"""The one redaction rule: a tracking URI's password (and a secret query parameter) never reaches
a text the harness writes down, while the real URI still connects; MLflow params and tags, the
run's description, log records and a closed stale run all go through it."""

import io
import logging
from types import SimpleNamespace

import pytest

from evalharness.comparison.sweep import redact_file
from evalharness.tracking import ended
from evalharness.tracking.mlflow_client import MlflowTracker
from evalharness.tracking.redaction import redact_logs, redacted, redacted_values
from evalharness.tracking.ui_view import description_tags, experiment_link

PW = "s3cr3t-Planted"


@pytest.mark.parametrize(
    ("uri", "shown"),
    [
        (
            f"postgresql+psycopg://ana:{PW}@db:5432/mlflow",
            "postgresql+psycopg://ana:***@db:5432/mlflow",
        ),
        (f"http://ana:{PW}@host:5000", "http://ana:***@host:5000"),
        # An unencoded '@' or ':' in the password: hidden up to the authority's last '@'.
        (f"https://ana:{PW}@x:y@host/api?a=1", "https://ana:***@host/api?a=1"),
        (
            f"postgresql://db/mlflow?user=ana&password={PW}&sslmode=require",
            "postgresql://db/mlflow?user=ana&password=***&sslmode=require",
        ),
        (f"https://host/?access_token={PW}#top", "https://host/?access_token=***#top"),
        ("sqlite:////tmp/outputs/mlflow.db", "sqlite:////tmp/outputs/mlflow.db"),
        ("http://ana@host:5000", "http://ana@host:5000"),  # a user, no password: nothing hidden
        ("http://[::1]:5000/x", "http://[::1]:5000/x"),
        ("postgresql://ana:***@db/mlflow", "postgresql://ana:***@db/mlflow"),  # idempotent
        # As Hydra's launcher logs an override: every ':' escaped.
        (f"postgresql\\://ana\\:{PW}@db\\:5432/m", "postgresql\\://ana\\:***@db\\:5432/m"),
    ],
)
def test_a_uri_is_shown_without_its_password(uri, shown):
    assert redacted(uri) == shown


def test_every_uri_in_a_text_is_redacted_and_none_stays_none():
    text = f"error: at http://a:{PW}@h:1 (x)\n  use postgresql://b:{PW}2@db/m now"
    assert redacted(text) == "error: at http://a:***@h:1 (x)\n  use postgresql://b:***@db/m now"
    assert redacted(None) is None


def test_a_password_quoted_alone_is_hidden_in_both_spellings():
    uri = "postgresql://ana:p%2Fw%40rd@db/mlflow"  # the password p/w@rd, percent-encoded
    message = "auth failed for 'p/w@rd' (given as p%2Fw%40rd)"
    assert redacted(message, uri) == "auth failed for '***' (given as ***)"
    assert redacted("steps=2", "postgresql://ana@db/m") == "steps=2"  # no password: no change


def test_nested_values_are_redacted_and_others_kept():
    config = {
        "logger": {"tracking_uri": f"http://a:{PW}@h", "tags": {"k": "v"}},
        "seeds": [0, 1],
        "pair": ("x", f"postgresql://b:{PW}@db/m"),
        "steps": 2,
        "off": None,
    }
    shown = redacted_values(config)
    assert PW not in repr(shown)
    assert shown["logger"]["tracking_uri"] == "http://a:***@h"
    assert shown["pair"] == ("x", "postgresql://b:***@db/m")
    assert (shown["seeds"], shown["steps"], shown["off"]) == ([0, 1], 2, None)


def test_the_connection_uri_comes_back_only_for_the_same_store(monkeypatch):
    connected = []
    monkeypatch.setattr(ended, "mark_run_ended", lambda uri, *args: connected.append(uri))
    real = f"postgresql://ana:{PW}@db:5432/mlflow"
    other = "postgresql://ana:***@db:5433/mlflow"
    ended.stale_run_closer(real)(redacted(real), "run1", "KILLED", "gone")
    ended.stale_run_closer(real)(other, "run1", "KILLED", "gone")  # its credentials from the env
    ended.stale_run_closer(None)(other, "run1", "KILLED", "gone")
    assert connected == [real, other, other]


def test_a_stale_run_is_closed_with_the_starting_runs_credentials(monkeypatch):
    closed = []
    monkeypatch.setattr(ended, "mark_run_ended", lambda *args: closed.append(args) or True)
    real = f"postgresql://ana:{PW}@db/mlflow"
    close = ended.stale_run_closer(real)
    assert close(redacted(real), "run1", "KILLED", "gone")
    assert close("sqlite:////x/mlflow.db", "run2", "KILLED", "gone")
    assert closed == [
        (real, "run1", "KILLED", "gone"),
        ("sqlite:////x/mlflow.db", "run2", "KILLED", "gone"),
    ]


def test_log_records_are_redacted_whichever_handler_prints_them(caplog):
    redact_logs()
    redact_logs()  # a second call wraps nothing twice
    with caplog.at_level(logging.INFO):
        logging.getLogger("hydra.launcher").info(
            "\t#0 : logger.tracking_uri=%s", f"http://a:{PW}@h"
        )
        logging.getLogger("x").info("100%% of %d", 3)  # untouched: no URI
    assert [r.getMessage() for r in caplog.records] == [
        "\t#0 : logger.tracking_uri=http://a:***@h",
        "100% of 3",
    ]


def test_a_logged_traceback_is_redacted():
    redact_logs()
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    logger = logging.getLogger("evalharness.test_traceback")
    logger.addHandler(handler)
    try:
        try:
            raise ConnectionError(f"cannot reach postgresql://ana:{PW}@db/mlflow")
        except ConnectionError:
            logger.exception("the run failed before its folder was created")
    finally:
        logger.removeHandler(handler)
    shown = stream.getvalue()
    assert "ConnectionError: cannot reach postgresql://ana:***@db/mlflow" in shown
    assert "Traceback (most recent call last)" in shown and PW not in shown


class _RecordingClient:
    """What ``MlflowTracker`` sends to MLflow's client (the store's own tests are elsewhere)."""

    def __init__(self) -> None:
        self.params: dict[str, str] = {}
        self.tags: dict[str, str] = {}

    def create_run(self, experiment_id, run_name=None, tags=None):
        return SimpleNamespace(info=SimpleNamespace(run_id="r"))

    def log_batch(self, run_id, metrics=(), params=(), tags=()):
        self.params.update({p.key: p.value for p in params})
        self.tags.update({t.key: t.value for t in tags})


def test_mlflow_params_tags_and_the_description_never_hold_the_password():
    tracker = object.__new__(MlflowTracker)  # its client, without a store
    tracker.client, tracker.run_id, tracker.experiment_id = _RecordingClient(), "r", "7"
    tracker.tracking_uri = f"postgresql://a:{PW}@db/m"  # as a caller might set it, unredacted
    tracker.log_params({"logger.tracking_uri": f"postgresql://a:{PW}@db/m", "steps": 2})
    tracker.set_tags({"error": f"MlflowException: API request to http://a:{PW}@h failed"})
    tracker.set_tags(description_tags(tracker, "passed", "speedup 2x"))
    sent = tracker.client
    assert sent.params == {"logger.tracking_uri": "postgresql://a:***@db/m", "steps": "2"}
    assert PW not in repr(sent.tags)
    note = sent.tags["mlflow.note.content"]
    assert "mlflow ui --backend-store-uri postgresql://a:***@db/m" in note


def test_a_tracker_names_its_store_without_the_password(monkeypatch):
    from evalharness.tracking import mlflow_client

    monkeypatch.setattr(mlflow_client, "open_client", lambda uri: _RecordingClient())
    monkeypatch.setattr(mlflow_client, "ensure_experiment", lambda *args: "7")
    tracker = MlflowTracker(f"postgresql://a:{PW}@db/m", "e", "r")
    assert tracker.tracking_uri == "postgresql://a:***@db/m"  # what status.json records


def test_a_server_link_hides_the_password():
    link = experiment_link(f"https://a:{PW}@mlflow.example", "7")
    assert link.startswith("https://a:***@mlflow.example/#/experiments/7/runs?")


def test_a_written_file_is_redacted_in_place(tmp_path):
    path = tmp_path / "multirun.yaml"
    path.write_text(f"task:\n- logger.tracking_uri=http://a:{PW}@h\n- seed=0\n")
    redact_file(path)
    assert path.read_text() == "task:\n- logger.tracking_uri=http://a:***@h\n- seed=0\n"
    redact_file(tmp_path / "absent.yaml")  # nothing to redact: no error, no file
    assert not (tmp_path / "absent.yaml").exists()
