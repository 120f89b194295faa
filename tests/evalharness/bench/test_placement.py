"""The placement benchmark's settings come from the run's own config: its defaults are the composed
run config's, an override stands, and settings it cannot run are refused naming the setting.
Nothing is timed or compiled here (``_rows`` with a recording timer is in test_timing)."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import pytest

from evalharness.admission.run_timing import samples_per_call
from evalharness.assembly import platform_choices
from evalharness.assembly.attention_setup import sequence_devices
from evalharness.bench import placement
from evalharness.config import compose_run_config, to_config, token_geometry
from kernels.masks.geometry import TokenGeometry
from kernels.plans.block_sizes import BlockSizes
from models.config import get_transformer_config
from models.video_geometry import VideoGeometry


def _unresolved(overrides=()):
    """The run's config with ``overrides``, not resolved (as the placement benchmark reads it)."""
    return to_config(compose_run_config(overrides))


def test_defaults_are_the_composed_run_config():
    run = platform_choices.resolve(to_config(compose_run_config()))
    s = placement.settings(_unresolved())
    res = run.resolution
    assert s.geometry == token_geometry(VideoGeometry(res.frames, res.height, res.width))
    tcfg = get_transformer_config(run.model.name)
    assert (s.heads, s.head_dim) == (tcfg.num_attention_heads, tcfg.attention_head_dim)
    assert s.batch == samples_per_call(run)
    assert s.runs == run.warm_runs
    assert s.devices == sequence_devices(run)
    assert s.block_sizes == BlockSizes(run.kernel.block_q, run.kernel.block_kv)
    assert s.dtype == jnp.dtype(run.dtype.value)
    assert s.cfg.kernel.backend == run.kernel.backend
    policy = placement._policy(s)
    # The run's schedule, every cell sparse: the band the run targets at this geometry.
    assert policy.dense_steps == policy.dense_layers == 0
    target = run.schedule.target_density(s.geometry)
    assert policy.schedule.target_density(s.geometry) == target
    assert policy.plan.density == pytest.approx(target, abs=0.05)


def test_overrides_stand():
    cfg = _unresolved(
        [
            "resolution=720p",
            "model=wan2.1-t2v-14b",
            "parallel.sequence=8",
            "warm_runs=7",
            "guidance_passes=separate",
            "kernel.block_q=256",
            "schedule=aggressive",
        ]
    )
    s = placement.settings(cfg)
    assert s.geometry == TokenGeometry(21, 45, 80)
    assert (s.heads, s.head_dim, s.devices, s.runs, s.batch) == (40, 128, 8, 7, 1)
    assert s.block_sizes.block_q == 256 and s.dtype == jnp.bfloat16
    assert s.cfg.schedule.name == "aggressive"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["parallel.sequence=3"], r"4 heads, which do not divide by parallel.sequence=3"),
        (["parallel.sequence=3"], r"set parallel.sequence to one of 1, 2, 4"),
        (["schedule=dense"], r"schedule=dense is dense"),
    ],
)
def test_settings_it_cannot_run_are_refused(overrides, message):
    with pytest.raises(ValueError, match=message):
        placement.settings(_unresolved(overrides))


def test_main_refuses_with_exit_status_2(capsys):
    jax.devices()  # JAX started: the benchmark leaves this process's devices as they are
    assert placement.main(["parallel.sequence=3"]) == 2
    assert "error: model=tiny has 4 heads" in capsys.readouterr().err


def test_host_devices_follow_parallel_sequence(monkeypatch):
    calls = []
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    monkeypatch.setattr(placement.jax.config, "update", lambda *a: calls.append(a))
    assert placement.expose_host_devices(_unresolved()) == 4
    assert placement.expose_host_devices(_unresolved(["parallel.sequence=2"])) == 2
    assert calls == [("jax_num_cpu_devices", 4), ("jax_num_cpu_devices", 2)]
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
    assert placement.expose_host_devices(_unresolved()) is None
    assert len(calls) == 2


def test_main_prints_the_run_config_as_json(monkeypatch, capsys):
    jax.devices()  # JAX started: the benchmark leaves this process's devices as they are

    def record(fns, runs):
        return {name: {"median_ms": 1.0, "runs": runs} for name in fns}

    monkeypatch.setattr(placement, "time_warm_ms", record)
    assert placement.main(["--json", "parallel.sequence=1", "warm_runs=2"]) == 0
    result = json.loads(capsys.readouterr().out)
    config = result["config"]
    run = to_config(compose_run_config())
    expected = placement.settings(_unresolved(["parallel.sequence=1"]))
    assert config["model"] == run.model.name and config["resolution"] == run.resolution.name
    assert config["schedule"] == run.schedule.name
    assert (config["tokens"], config["batch"]) == (expected.geometry.tokens, expected.batch)
    assert (config["heads"], config["head_dim"]) == (expected.heads, expected.head_dim)
    assert (config["devices"], config["runs"], config["host_devices"]) == (1, 2, None)
    assert [row["variant"] for row in result["rows"]][1:] == [
        "1 devices, head_local",
        "1 devices, before_exchange",
    ]
