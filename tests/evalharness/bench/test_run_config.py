"""The benchmarks on the run's configuration refuse a bad override as the run does: exit 2 with
the run's own message (the closest setting, the choices of a group), before any work."""

from __future__ import annotations

import pytest

from evalharness.bench import __main__ as kernel_bench
from evalharness.bench import (
    attention_share,
    head_mass,
    host_side,
    memory,
    negative_controls,
    placement,
    routing_spectrum,
    schedules,
    shapes_fidelity,
)
from evalharness.config import compose_run_config, to_config
from evalharness.tracking.postgres import free_port
from tests.helpers.harness_config import resolved_run_config

BENCHMARKS = [
    kernel_bench,
    attention_share,
    head_mass,
    host_side,
    negative_controls,
    placement,
    routing_spectrum,
    schedules,
    shapes_fidelity,
]


@pytest.mark.parametrize("bench", BENCHMARKS, ids=lambda m: m.__name__.rsplit(".", 1)[1])
@pytest.mark.parametrize(
    ("override", "says"),
    [
        ("warm_runz=3", "did you mean warm_runs?"),
        ("resolution=4k", "no resolution named '4k'; the choices are 1080p"),
        ("steps=many", "steps='many' is not a valid value"),
    ],
)
def test_a_bad_override_exits_2_with_the_runs_message(bench, override, says, capsys):
    with pytest.raises(SystemExit) as refused:
        bench.main([override])
    assert refused.value.code == 2
    assert says in capsys.readouterr().err


def test_the_resolved_config_is_the_runs_for_this_host():
    cfg = resolved_run_config(["resolution=720p"])
    assert cfg.resolution == to_config(compose_run_config(["resolution=720p"])).resolution
    assert cfg.kernel.block_q is not None and cfg.kernel.backend.value != "auto"


LOGGING = [kernel_bench, attention_share, memory, placement, schedules]


@pytest.mark.parametrize("bench", LOGGING, ids=lambda m: m.__name__.rsplit(".", 1)[1])
def test_mlflow_checks_the_configs_store_as_the_run_does_password_hidden(bench, capsys):
    # Overrides on both sides of --mlflow are all the run's.
    uri = f"http://team:s3cret@127.0.0.1:{free_port()}"
    with pytest.raises(SystemExit) as refused:
        bench.main(["logger.experiment_name=bench", "--mlflow", f"logger.tracking_uri={uri}"])
    assert refused.value.code == 2
    err = capsys.readouterr().err
    assert "error: MLflow tracking store http://team:***@127.0.0.1:" in err
    assert "cannot be used for experiment 'bench'" in err and "s3cret" not in err


@pytest.mark.parametrize("bench", LOGGING, ids=lambda m: m.__name__.rsplit(".", 1)[1])
def test_mlflow_checks_the_default_store_under_output_root(bench, tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(SystemExit) as refused:
        bench.main(["--mlflow", f"output_root={blocker}/outputs"])
    assert refused.value.code == 2
    assert "the default tracking database" in capsys.readouterr().err


@pytest.mark.parametrize("gone", ["--tracking-uri", "--experiment", "--output-root"])
def test_the_store_is_the_run_configs_not_a_flag(gone, capsys):
    with pytest.raises(SystemExit) as refused:
        placement.main(["--mlflow", gone, "x"])
    assert refused.value.code == 2 and "unrecognized arguments" in capsys.readouterr().err


def test_the_memory_benchmark_takes_only_the_logging_overrides(capsys):
    with pytest.raises(SystemExit) as refused:
        memory.main(["logger.experiment_name=bench", "resolution=720p"])
    assert refused.value.code == 2
    assert "resolution=720p: the shapes are the benchmark's own" in capsys.readouterr().err
