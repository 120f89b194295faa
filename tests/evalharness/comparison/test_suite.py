"""Prompt suites: pairs, statistics with bootstrap intervals, child runs, the gate on lcb/worst."""

import math

import numpy as np
import pytest
from mlflow.tracking import MlflowClient

from evalharness.config import EvalConfig
from evalharness.config.pairs import BUILT_IN_SUITES, load_prompts, run_pairs
from evalharness.evidence.statistics import statistic_name, suite_metrics, summarize
from evalharness.gate.verdict import check_gate
from models.shapes_data import held_out_specs


def test_pairs_of_a_built_in_suite_and_seeds_are_prompt_major():
    pairs = run_pairs("unused", 42, "smoke", [3, 5])
    assert [(p.prompt_index, p.seed) for p in pairs] == [
        (0, 3),
        (0, 5),
        (1, 3),
        (1, 5),
        (2, 3),
        (2, 5),
    ]
    assert [p.index for p in pairs] == list(range(6))
    assert pairs[0].prompt == BUILT_IN_SUITES["smoke"][0] and pairs[3].name == "p1-s5"
    (single,) = run_pairs("a fox", 42)
    assert (single.prompt, single.seed, single.name) == ("a fox", 42, "p0-s42")
    assert len(BUILT_IN_SUITES["varied"]) >= 4


@pytest.mark.parametrize("suite", ["smoke", "varied"])
def test_the_default_models_suites_hold_only_prompts_it_never_trained_on(suite):
    held_out = {spec.prompt for spec in held_out_specs()}
    assert set(BUILT_IN_SUITES[suite]) <= held_out


def test_the_default_prompt_is_held_out_from_the_default_models_training():
    assert EvalConfig().prompt in {spec.prompt for spec in held_out_specs()}


def test_prompt_file_skips_blank_and_comment_lines(tmp_path):
    path = tmp_path / "prompts.txt"
    path.write_text("# my suite\nfirst prompt\n\n  second prompt  \n")
    assert load_prompts(str(path)) == ["first prompt", "second prompt"]


@pytest.mark.parametrize(
    ("prompts", "seeds", "message"),
    [
        ("no-such-suite", None, "neither a built-in suite"),
        ("EMPTY", None, "holds no prompt"),
        ("REPEATED", None, "repeats"),
        (None, [], "at least one seed"),
        (None, [1, 1], "repeats a seed"),
        (None, [1, "2"], "is not an int"),
    ],
)
def test_bad_suites_and_seeds_are_refused_with_the_fix(tmp_path, prompts, seeds, message):
    if prompts == "EMPTY":
        prompts = str(tmp_path / "empty.txt")
        (tmp_path / "empty.txt").write_text("# nothing\n\n")
    elif prompts == "REPEATED":
        prompts = str(tmp_path / "repeated.txt")
        (tmp_path / "repeated.txt").write_text("a\nb\na\n")
    with pytest.raises(ValueError, match=message):
        run_pairs("p", 0, prompts, seeds)


def test_summary_statistics_and_a_reproducible_bootstrap_interval():
    values = [30.0, 32.0, 31.0, 29.0, 35.0, 33.0]
    s = summarize(values)
    assert s.mean == pytest.approx(np.mean(values), rel=1e-12)
    assert s.std == pytest.approx(np.std(values, ddof=1), rel=1e-12)
    assert s.worst == 29.0
    assert s.lcb < s.mean < s.ucb
    # A percentile interval of the mean sits inside the data's range and well within its spread.
    assert min(values) < s.lcb and s.ucb < max(values)
    assert summarize(values) == s  # seeded: the same run reports the same interval
    wide = summarize([20.0, 32.0, 31.0, 29.0, 45.0, 33.0])
    assert wide.ucb - wide.lcb > s.ucb - s.lcb


def test_bootstrap_interval_covers_the_true_mean_about_95_percent_of_the_time():
    rng = np.random.default_rng(1)
    trials = 200
    hits = 0
    for i in range(trials):
        s = summarize(rng.normal(40.0, 2.0, size=12).tolist(), seed=i)
        hits += s.lcb <= 40.0 <= s.ucb
    # Percentile intervals undercover a little at n=12; far from 95% would be a broken formula.
    assert 0.85 <= hits / trials <= 0.99


def test_one_pair_identical_values_and_infinite_psnr():
    one = summarize([31.5])
    assert (one.mean, one.std, one.worst, one.lcb, one.ucb) == (31.5, 0.0, 31.5, 31.5, 31.5)
    same = summarize([30.0, 30.0, 30.0])
    assert (same.lcb, same.ucb, same.std) == (30.0, 30.0, 0.0)
    exact = summarize([30.0, math.inf, 31.0])  # identical frames give an infinite PSNR
    assert exact.mean == math.inf and exact.worst == 30.0 and exact.ucb == math.inf
    assert exact.lcb >= 30.0
    with pytest.raises(ValueError, match="not measured"):
        summarize([30.0, float("nan")])
    with pytest.raises(ValueError, match="no pair"):
        summarize([])


def test_suite_metrics_names_follow_the_gate():
    per_pair = [{"psnr_db": 30.0, "speedup": 1.2}, {"psnr_db": 34.0, "speedup": 1.4}]
    metrics = suite_metrics(per_pair)
    assert metrics["pairs"] == 2
    assert metrics["psnr_db_mean"] == pytest.approx(32.0) and metrics["psnr_db_worst"] == 30.0
    assert "ssim_frames_mean" not in metrics  # not measured by every pair
    assert statistic_name("psnr_db", "lcb") == "psnr_db_lcb"
    with pytest.raises(ValueError, match="mean, lcb or worst"):
        statistic_name("psnr_db", "median")


def test_gate_on_lcb_and_worst_can_fail_where_the_mean_passes():
    per_pair = [{"psnr_db": v, "speedup": 1.3} for v in (24.0, 31.0, 33.0, 30.0, 32.0, 34.0)]
    metrics = suite_metrics(per_pair)
    threshold = (metrics["psnr_db_lcb"] + metrics["psnr_db_mean"]) / 2
    assert check_gate(metrics, min_psnr_db=threshold, min_speedup=None, on="mean").passed
    lcb = check_gate(metrics, min_psnr_db=threshold, min_speedup=None, on="lcb")
    assert not lcb.passed and "psnr_db_lcb" in lcb.failures[0]
    worst = check_gate(metrics, min_psnr_db=25, min_speedup=None, on="worst")
    assert worst.failures == ("psnr_db_worst = 24 is below the threshold 25",)
    assert check_gate(metrics, min_psnr_db=20, min_speedup=1.2, on="lcb").passed
    with pytest.raises(ValueError, match="gate.on"):
        check_gate(metrics, min_psnr_db=20, min_speedup=None, on="median")


def test_gate_refuses_a_speedup_on_reused_dense_timing():
    metrics = {"psnr_db": 40.0, "speedup": 3.0, "dense_timing_reused": 1}
    assert check_gate(metrics, min_psnr_db=30, min_speedup=None).passed
    result = check_gate(metrics, min_psnr_db=30, min_speedup=1.1)
    assert not result.passed and "reuse_dense_timing" in result.failures[0]


@pytest.fixture(scope="module")
def suite_run(tmp_path_factory):
    """A 2-prompt × 2-seed suite at the toy size, counting how often a loop is compiled."""
    from evalharness.run import run
    from models.pipeline import DenoiseLoop
    from tests.helpers.harness_config import small_config

    tmp = tmp_path_factory.mktemp("suite")
    prompts = tmp / "prompts.txt"
    prompts.write_text("a lighthouse in a storm | waves\na cat asleep on a windowsill\n")
    compiled = []
    original = DenoiseLoop.compile

    def counting(self, *args, **kwargs):
        compiled.append(self)
        return original(self, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(DenoiseLoop, "compile", counting)
        metrics = run(small_config(tmp, f"prompts={prompts}", "seeds=[0,1]"))
    return tmp, metrics, len(compiled)


@pytest.mark.slow  # end to end: run by .ci/run's second step (pytest -m slow)
def test_suite_compiles_once_and_reports_every_pair(suite_run):
    from pathlib import Path

    _, metrics, compiles = suite_run
    # dense, sparse (its warm-up records the routing) and noise floor: once each for all four pairs.
    assert compiles == 3
    assert metrics["pairs"] == 4
    run_dir = Path(metrics["run_dir"])
    folders = sorted(p.name for p in (run_dir / "pairs").iterdir())
    assert folders == ["p0-s0", "p0-s1", "p1-s0", "p1-s1"]
    for name in folders:
        assert (run_dir / "pairs" / name / "sparse.mp4").is_file()
        assert (run_dir / "pairs" / name / "metrics.json").is_file()
    rows = (run_dir / "pairs.csv").read_text().splitlines()
    assert len(rows) == 5 and rows[0].startswith("pair,seed,psnr_db")
    report = (run_dir / "report.md").read_text()
    assert "95% bootstrap CI" in report and "storm \\| waves" in report
    assert metrics["psnr_db"] == pytest.approx(metrics["psnr_db_mean"])
    assert metrics["psnr_db_lcb"] <= metrics["psnr_db_mean"] <= metrics["psnr_db_ucb"]
    assert metrics["psnr_worst_frame_db"] == metrics["psnr_worst_frame_db_worst"]
    assert metrics["speedup_lcb"] <= metrics["speedup_mean"]
    assert metrics["tokens"] == 144  # what every pair shares is kept


@pytest.mark.slow  # end to end: run by .ci/run's second step (pytest -m slow)
def test_suite_logs_child_runs_under_one_parent(suite_run):
    from evalharness.tracking.mlflow_client import default_tracking_uri, finished_runs

    tmp, metrics, _ = suite_run
    client = MlflowClient(default_tracking_uri(tmp / "outputs"))
    parent = client.get_run(metrics["mlflow_run_id"])
    assert parent.data.metrics["psnr_db_lcb"] == pytest.approx(metrics["psnr_db_lcb"])
    assert "suite" in parent.data.tags
    # The UI's compare view groups by these, and opens the experiment in its model view.
    grouping = {
        "model": "tiny",
        "resolution": "test",
        "schedule": "balanced",
        "backend": "xla",
    }
    assert grouping.items() <= parent.data.tags.items()
    experiment_tags = client.get_experiment(parent.info.experiment_id).tags
    assert experiment_tags["mlflow.experimentKind"] == "custom_model_development"
    parent_files = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"report.md", "pairs.csv", "metrics.json"} <= parent_files
    assert "pairs" not in parent_files  # each pair's files are in its own child run
    children = client.search_runs(
        [parent.info.experiment_id],
        filter_string=f"tags.mlflow.parentRunId = '{parent.info.run_id}'",
    )
    assert len(children) == 4
    for child in children:
        assert child.info.status == "FINISHED"
        assert child.data.params["seed"] in {"0", "1"}
        assert grouping.items() <= child.data.tags.items()
        assert "psnr_db" in child.data.metrics and "speedup" in child.data.metrics
        assert "sparse.mp4" in {a.path for a in client.list_artifacts(child.info.run_id)}
    values = sorted(c.data.metrics["psnr_db"] for c in children)
    assert metrics["psnr_db_worst"] == pytest.approx(values[0])
    experiment = client.get_experiment(parent.info.experiment_id).name
    assert [r.info.run_id for r in finished_runs(client, experiment, 10)] == [parent.info.run_id]


@pytest.mark.slow  # end to end: run by .ci/run's second step (pytest -m slow)
def test_suite_gate_reads_the_chosen_statistic(suite_run):
    from evalharness.run import GateFailed, run
    from tests.helpers.harness_config import small_config

    tmp, metrics, _ = suite_run
    # Post hoc on the measured suite: a threshold between the lower bound and the mean.
    threshold = (metrics["psnr_db_lcb"] + metrics["psnr_db_mean"]) / 2
    if metrics["psnr_db_lcb"] < metrics["psnr_db_mean"]:
        assert check_gate(metrics, min_psnr_db=threshold, min_speedup=None, on="mean").passed
        assert not check_gate(metrics, min_psnr_db=threshold, min_speedup=None, on="lcb").passed
    # Through the run itself: the gate names the statistic it read. Seed 5 was never cached, so
    # reuse_dense_timing cannot apply and every arm is timed afresh, side by side.
    with pytest.raises(GateFailed, match="psnr_db_worst") as info:
        run(
            small_config(
                tmp,
                "seeds=[5]",
                "gate.on=worst",
                "gate.min_psnr_db=1000",
                "reuse_dense_timing=true",
                "logger=none",
            )
        )
    assert info.value.metrics["dense_timing_reused"] == 0
    assert info.value.metrics["dense_cache"] == "miss"


@pytest.mark.slow  # end to end: run by .ci/run's second step (pytest -m slow)
def test_reused_dense_timing_is_tagged_and_refused_by_a_speedup_gate(suite_run):
    import json
    from pathlib import Path

    from evalharness.run import GateFailed, run
    from tests.helpers.harness_config import small_config

    tmp, metrics, _ = suite_run
    pair = json.loads((Path(metrics["run_dir"]) / "pairs" / "p1-s1" / "metrics.json").read_text())
    with pytest.raises(GateFailed, match="reuse_dense_timing") as info:
        run(
            small_config(
                tmp,
                f"prompt='{pair['prompt']}'",
                "seed=1",
                "reuse_dense_timing=true",
                "gate.min_speedup=0.01",
            )
        )
    reused = info.value.metrics
    assert reused["dense_timing_reused"] == 1 and reused["dense_cache"] == "hit"
    # The dense medians are the suite pair's; only the sparse arm was timed again.
    assert reused["dense_median_s"] == pair["dense_median_s"]
    assert reused["sparse_median_s"] != pair["sparse_median_s"]
    client = MlflowClient(f"sqlite:///{tmp / 'outputs' / 'mlflow.db'}")
    tags = client.get_run(reused["mlflow_run_id"]).data.tags
    assert "reused" in tags["timing"] and tags["gate"] == "failed"
