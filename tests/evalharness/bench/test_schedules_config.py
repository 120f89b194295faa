"""The schedule benchmark takes the run's own configuration: its defaults are the composed run
config's, Hydra overrides stand, bad overrides exit 2 naming the problem, and every
``conf/schedule`` preset is an arm. Nothing here compiles a model: ``run`` is replaced by a
recorder where ``main`` is called."""

from __future__ import annotations

import json

import pytest

from evalharness.admission import samples_per_call
from evalharness.assembly import platform_choices, run_block_sizes
from evalharness.bench import schedules
from evalharness.config import CONF_DIR, compose_run_config, to_config, token_geometry
from tests.helpers.harness_config import resolved_run_config


def _main(monkeypatch, argv: list[str]) -> tuple[dict, dict]:
    """Runs ``main`` with ``run`` recording its arguments and returning a synthetic result."""
    seen: dict = {}

    def fake_run(cfg, chosen):
        seen.update(cfg=cfg, schedules=chosen)
        return _result(cfg)

    monkeypatch.setattr(schedules, "run", fake_run)
    assert schedules.main(argv) == 0
    return seen, _result(seen["cfg"])


def _result(cfg) -> dict:
    """What ``run`` returns, with made-up timings, for ``cfg``."""
    arms = [
        {
            "schedule": name,
            "kept_fraction": 1.0,
            "dense_steps": 0,
            "dense_layers": 0,
            "median_ms": ms,
            "min_ms": ms,
            "max_ms": ms,
            "cpu_median_ms": ms,
            "speedup_vs_dense": 10.0 / ms,
            "routing_flops_fraction": 0.0,
            "compile_and_warm_s": 1.0,
        }
        for name, ms in (("dense", 10.0), ("aggressive", 5.0))
    ]
    return {
        "machine": {},
        **schedules._describe(cfg),
        "routing_flops_fraction_720p": {"aggressive": 0.01},
        "arms": arms,
    }


def test_defaults_are_the_composed_run_configs(monkeypatch, capsys):
    seen, _ = _main(monkeypatch, [])
    run = platform_choices.resolve(to_config(compose_run_config()))
    cfg = seen["cfg"]
    for field in ("resolution", "steps", "dtype", "warm_runs", "kernel", "model", "seed"):
        assert getattr(cfg, field) == getattr(run, field), field
    for field in ("guidance_scale", "guidance_passes", "sampler", "negative_prompt"):
        assert getattr(cfg, field) == getattr(run, field), field
    header = capsys.readouterr().out.splitlines()[0]
    res = run.resolution
    assert f"resolution {res.name} ({res.frames} frames x {res.height}x{res.width} px" in header
    assert f"{run.model.name} (random weights)" in header and run.dtype.value in header
    assert f"backend {run.kernel.backend.value}" in header and f"{run.steps} steps" in header
    assert f"median of {run.warm_runs} interleaved warm runs" in header


def test_overrides_stand(monkeypatch, capsys):
    argv = [
        "resolution=480p",
        "model=wan2.1-t2v-1.3b",
        "dtype=bfloat16",
        "steps=4",
        "warm_runs=5",
        "seed=7",
        "kernel.block_q=256",
        "kernel.block_kv=128",
        "guidance_passes=separate",
    ]
    seen, _ = _main(monkeypatch, argv)
    cfg = seen["cfg"]
    assert (cfg.resolution.name, cfg.resolution.frames, cfg.resolution.width) == ("480p", 81, 832)
    assert cfg.model.name == "wan2.1-t2v-1.3b" and cfg.dtype.value == "bfloat16"
    assert (cfg.steps, cfg.warm_runs, cfg.seed) == (4, 5, 7)
    assert (cfg.kernel.block_q, cfg.kernel.block_kv) == (256, 128)
    assert samples_per_call(cfg) == 1
    header = capsys.readouterr().out.splitlines()[0]
    assert "wan2.1-t2v-1.3b (random weights), resolution 480p (81 frames x 480x832 px" in header
    assert "bfloat16" in header and "4 steps" in header and "tiles 256 x 128" in header
    assert "CFG in two passes" in header and "median of 5 interleaved" in header


def test_every_schedule_preset_is_an_arm_dense_first_with_field_overrides(monkeypatch):
    seen, _ = _main(monkeypatch, ["schedule.routing_samples=32"])
    names = [s.name for s in seen["schedules"]]
    assert sorted(names) == sorted(p.stem for p in (CONF_DIR / "schedule").glob("*.yaml"))
    assert names[0] == "dense" and {"balanced", "aggressive", "svg_720p"} <= set(names)
    assert {s.routing_samples for s in seen["schedules"]} == {32}


def test_json_prints_the_result(monkeypatch, capsys):
    _, result = _main(monkeypatch, ["--json", "steps=3"])
    printed = json.loads(capsys.readouterr().out)
    assert printed["steps"] == 3 and printed == json.loads(json.dumps(result))
    assert printed["resolution"] == to_config(compose_run_config()).resolution.name


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["resolution=999p"], "no resolution named '999p'"),
        (["stepz=3"], "stepz"),
        (["steps=many"], "steps"),
        (["schedule=aggressive"], "every conf/schedule preset"),
        (["warm_runs=2"], "warm_runs=2: use at least 3"),
        (["--steps", "4"], "unrecognized arguments: --steps"),
        (["--model", "tiny-random"], "unrecognized arguments: --model"),
    ],
)
def test_bad_overrides_and_old_flags_exit_2_naming_the_problem(argv, named, capsys):
    with pytest.raises(SystemExit) as exit_info:
        schedules.main(argv)
    assert exit_info.value.code == 2
    assert named in capsys.readouterr().err


def test_a_schedule_that_does_not_suit_the_geometry_is_refused_before_any_compile(capsys):
    tiny = ["resolution.frames=5", "resolution.height=64", "resolution.width=64"]
    with pytest.raises(SystemExit):
        schedules.main(tiny)
    assert "routing_samples=64 exceeds the 32 tokens" in capsys.readouterr().err


def test_help_says_no_checkpoint_is_loaded(capsys):
    with pytest.raises(SystemExit):
        schedules.main(["--help"])
    out = " ".join(capsys.readouterr().out.split())  # argparse wraps the help to the terminal
    assert "never loads a" in out and "no checkpoint is ever loaded" in out


# 9 latent frames of 8 x 4 tokens (72): every preset's band is at least one 8-token tile wide.
TINY = [
    "model=tiny-random",
    "resolution.frames=33",
    "resolution.height=64",
    "resolution.width=32",
    "steps=1",
    "warm_runs=1",
    "kernel.block_q=8",
    "kernel.block_kv=8",
    "schedule.routing_samples=8",
]


def _run_arms(names: tuple[str, ...]) -> tuple:
    """The run config of ``TINY`` and ``schedules.run``'s result for the named presets."""
    cfg = resolved_run_config(TINY)
    geometry = token_geometry(cfg.resolution.video)
    chosen = schedules.load_schedules(TINY, geometry, run_block_sizes(cfg))
    return cfg, schedules.run(cfg, [s for s in chosen if s.name in names])


@pytest.mark.slow  # compiles and times two denoising loops: about 9 s on 2 cores
def test_run_times_dense_and_a_sparse_schedule_on_the_run_config(capsys):
    cfg, result = _run_arms(("dense", "aggressive"))
    assert [a["schedule"] for a in result["arms"]] == ["dense", "aggressive"]
    assert [len(a["wall_ms"]) for a in result["arms"]] == [cfg.warm_runs] * 2
    assert result["arms"][0]["speedup_vs_dense"] == 1.0
    assert result["arms"][1]["kept_fraction"] < 1.0
    assert result["geometry"]["tokens"] == 72 and result["block_sizes"] == [8, 8]
    assert result["guidance"] == {"scale": cfg.guidance_scale, "passes": "joint", "batch": 2}
    assert "| aggressive |" in schedules.format_table(json.loads(json.dumps(result)))
    # Where a run of minutes per arm is, on stderr.
    progress = capsys.readouterr().err
    assert "compiling and warming up dense (1/2) ..." in progress
    assert f"timing 2 arms round-robin, {cfg.warm_runs} rounds ..." in progress


@pytest.mark.slow  # compiles and times two denoising loops: about 10 s on 2 cores
def test_a_static_mask_schedule_runs_its_own_policy_with_no_routing():
    cfg, result = _run_arms(("dense", "radial"))
    radial = result["arms"][1]
    assert radial["schedule"] == "radial" and radial["routing_flops_fraction"] == 0.0
    assert radial["kept_fraction"] < 1.0 and len(radial["wall_ms"]) == cfg.warm_runs
