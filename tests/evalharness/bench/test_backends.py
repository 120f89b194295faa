"""The kernel benchmark per backend: platform refusal, interpret mode, the GPU tile sweep, checks.

Everything here runs on a CPU: the Pallas GPU kernel in interpret mode on a 128-token grid.
"""

import json

import jax
import jax.numpy as jnp
import pytest

from evalharness.bench.__main__ import main as bench_main
from evalharness.bench.backends import Backend
from evalharness.bench.checks import acceptance_checks, gpu_checks
from evalharness.bench.run_config import AttentionCall
from evalharness.bench.sweep import tile_sweep
from kernels.executors import pallas_gpu_budget
from kernels.masks.geometry import TokenGeometry
from tests.helpers.harness_config import resolved_run_config

# One call of [1, 128, 1, 64]: 2 x 8 x 8 = 128 tokens (5 frames of 128 x 128 pixels), the tiny
# model's 4 heads over 4 sequence devices, one sample (no guidance). The interpreter handles it
# in about a second per kernel.
TINY = [
    "resolution.frames=5",
    "resolution.height=128",
    "resolution.width=128",
    "model=tiny-random",
    "parallel.sequence=4",
    "guidance_scale=1",
]
TINY_RUN = [*TINY, "warm_runs=1", "kernel.block_q=32", "kernel.block_kv=32", "--plot", ""]
NOTHING = ["--skip", "table,sweep,temporal,memory"]


@pytest.mark.parametrize(("backend", "device"), [("pallas_gpu", "a GPU"), ("pallas_tpu", "a TPU")])
def test_pallas_backend_off_its_platform_exits_2_as_the_run_does(backend, device, capsys):
    with pytest.raises(SystemExit) as refused:
        bench_main([f"kernel={backend}", *TINY_RUN])
    assert refused.value.code == 2
    captured = capsys.readouterr()
    assert (
        f"kernel.backend={backend} needs {device}" in captured.err and "kernel=xla" in captured.err
    )
    assert captured.out == ""  # nothing timed, no table that could be mistaken for the kernel's


def test_a_part_that_fails_keeps_the_parts_that_finished(monkeypatch, capsys, tmp_path):
    """A compile refused in a later part (a TPU's scoped VMEM, say) does not lose the kernel
    table measured before it: it is printed and written with a note, then the error stands."""
    from evalharness.bench import __main__ as bench

    def refused(*args, **kwargs):
        raise RuntimeError("RESOURCE_EXHAUSTED: Ran out of memory in memory space vmem\n...")

    monkeypatch.setattr(bench, "temporal_comparison", refused)
    out_json = tmp_path / "bench.json"
    argv = [*TINY_RUN, "--skip", "memory,sweep", "--json-out", str(out_json)]
    with pytest.raises(RuntimeError, match="RESOURCE_EXHAUSTED"):
        bench_main(argv)
    out = capsys.readouterr().out
    assert "## Kernel table (XLA backend)" in out and "## Temporal heads" not in out
    assert "note: stopped early by RuntimeError: RESOURCE_EXHAUSTED: Ran out of memory" in out
    written = json.loads(out_json.read_text())
    assert [r["variant"] for r in written["kernel_table"]][:1] == ["b0"]
    assert "temporal" not in written and written["checks"]


def test_interpret_on_xla_exits_2(capsys):
    with pytest.raises(SystemExit) as refused:
        bench_main(["--interpret", *TINY_RUN])
    assert refused.value.code == 2
    assert "add kernel=pallas_tpu or kernel=pallas_gpu" in capsys.readouterr().err


def test_pallas_gpu_interpret_prints_b0_b3_and_drops_cudnn(capsys, tmp_path):
    out_json = tmp_path / "bench.json"
    argv = ["--interpret", "kernel=pallas_gpu", *TINY_RUN, "--skip", "memory,temporal,sweep"]
    assert bench_main([*argv, "--json-out", str(out_json)]) == 0
    out = capsys.readouterr().out
    assert "## Kernel table (Pallas GPU (Triton) backend, interpret mode)" in out
    for variant in ("b0", "b1", "b2", "b3"):
        assert f"\n| {variant} |" in out
    assert "| cudnn |" not in out
    assert "cudnn row dropped" in out and "needs a GPU" in out

    result = json.loads(out_json.read_text())
    config = result["config"]
    assert (config["backend"], config["interpret"], config["dense_control"]) == (
        "pallas_gpu",
        True,
        None,
    )
    assert (config["num_warps"], config["num_stages"]) == (4, pallas_gpu_budget.DEFAULT_NUM_STAGES)
    assert config["machine"]["jax_backend"] == "cpu"
    assert [r["variant"] for r in result["kernel_table"]] == ["b0", "b1", "b2", "b3"]
    # Without cuDNN, B0 is the only dense row and so the baseline of the fraction of ideal.
    for row in result["kernel_table"]:
        assert row["fastest_dense"] == "b0"
        assert row["fraction_of_ideal"] == pytest.approx(
            row["speedup_vs_fastest_dense"] * row["mask_density"]
        )
        assert row["executed_pairs_fraction"] >= row["density"]
        assert "cpu_fraction_of_ideal" not in row  # host CPU time is not judged on a GPU
    assert "| executed pairs % |" in out and "| flag |" in out
    checks = result["checks"]
    assert isinstance(checks["b3_at_least_0.90_of_ideal_vs_b0"], bool)
    # Without a cuDNN row its checks are shown as not evaluated, not dropped or passed.
    assert checks["b0_within_1.25x_of_cudnn"] is None
    assert checks["b3_vs_cudnn_at_least_0.8_of_ideal"] is None
    assert not any(name.endswith("_cpu") for name in checks)  # host CPU time means nothing on GPU


def test_what_is_not_given_comes_from_the_runs_defaults(capsys):
    # The run's default job: one call of its model at resolution cpu (9 x 12 x 20 = 2,160
    # tokens), the guided batch, schedule balanced's band density there, the run's tiles and
    # dense controls on this host.
    assert bench_main([*NOTHING, "--json"]) == 0
    config = json.loads(capsys.readouterr().out)["config"]
    call = AttentionCall(resolved_run_config())
    assert config["tokens"] == call.geometry.tokens == 2_160
    assert config["target_density"] == call.target_density
    assert (config["block_q"], config["block_kv"]) == (128, 128)
    assert (config["batch"], config["heads"], config["head_dim"], config["dtype"]) == (
        2,
        4,
        64,
        "float32",
    )
    assert (config["backend"], config["num_warps"], config["dense_control"]) == (
        "xla",
        None,
        "xla_flash",
    )
    # What is given stands.
    argv = [*NOTHING, "--json", "schedule.density=0.5", "kernel.block_q=256"]
    assert bench_main(argv) == 0
    config = json.loads(capsys.readouterr().out)["config"]
    assert (config["target_density"], config["block_q"], config["tokens"]) == (0.5, 256, 2_160)

    # The seed's 720p call on a GPU, checked here in interpret mode: 40 heads over 8 devices.
    argv = ["experiment=seed_720p", "kernel=pallas_gpu", "--interpret", *NOTHING, "--json"]
    assert bench_main(argv) == 0
    config = json.loads(capsys.readouterr().out)["config"]
    assert (config["tokens"], config["block_q"], config["block_kv"]) == (75_600, 128, 64)
    assert (config["batch"], config["heads"], config["head_dim"]) == (2, 5, 128)
    assert (config["num_warps"], config["dtype"], config["target_density"]) == (
        8,
        "bfloat16",
        0.3887,
    )


def test_launch_options_belong_to_pallas_gpu(capsys):
    with pytest.raises(SystemExit):
        bench_main(["kernel.num_warps=4", *NOTHING])
    assert "kernel.num_warps=4 applies to kernel.backend=pallas_gpu only" in capsys.readouterr().err
    assert Backend("pallas_gpu", num_warps=2, num_stages=3).launch(128, 128) == {
        "num_warps": 2,
        "num_stages": 3,
    }


def test_tile_sweep_records_refused_tiles(monkeypatch):
    seen = []

    def refuse_wide_kv(block_q, block_kv, head_dim, dtype, num_stages=None):
        seen.append((block_q, block_kv, head_dim, jnp.dtype(dtype), num_stages))
        if block_kv > 32:
            raise ValueError(f"tiles {block_q} x {block_kv} overflow shared memory (test)")

    monkeypatch.setattr(pallas_gpu_budget, "check_gpu_tiles", refuse_wide_kv)
    rows = tile_sweep(
        TokenGeometry(2, 8, 8),
        0.39,
        (32, 256),
        (32, 64),
        heads=1,
        head_dim=64,
        dtype=jnp.float32,
        runs=1,
        backend=Backend("pallas_gpu", interpret=True),
    )
    assert [(r["block_q"], r["block_kv"]) for r in rows] == [
        (32, 32),
        (32, 64),
        (256, 32),
        (256, 64),
    ]
    timed, too_wide, too_long, _ = rows
    assert timed["refused"] is None
    assert timed["b3_median_ms"] > 0 and timed["b2_min_ms"] <= timed["b2_max_ms"]
    assert timed["b3_fraction_of_ideal"] > 0 and "b2_fraction_of_ideal" in timed
    # 32 x 32 tiles divide 128 tokens: no padding, so executed pairs = visited tiles.
    assert timed["b3_executed_pairs_fraction"] == pytest.approx(timed["b3_tiles_visited_fraction"])
    above = max(timed["b2_fraction_of_ideal"], timed["b3_fraction_of_ideal"]) > 1.0
    assert timed["ideal_flag"] == ("baseline likely slow" if above else None)
    assert "overflow shared memory (test)" in too_wide["refused"]
    assert "b3_median_ms" not in too_wide
    assert "exceeds the 128-token sequence" in too_long["refused"]  # tile granularity, too
    # The budget saw the run's stage count, and only tiles that passed the granularity check.
    assert seen == [(32, 32, 64, jnp.dtype(jnp.float32), 2), (32, 64, 64, jnp.dtype("float32"), 2)]


def _table(b0: float, b3: float, cudnn: float | None, density: float = 0.4) -> list[dict]:
    rows = [{"variant": "b0", "median_ms": b0}]
    if cudnn is not None:
        rows.append({"variant": "cudnn", "median_ms": cudnn})
    rows += [{"variant": v, "median_ms": b3 * 1.2} for v in ("b1", "b2")]
    rows.append({"variant": "b3", "median_ms": b3, "mask_density": density})
    return rows


def test_gpu_checks_from_a_synthetic_table():
    # Density 0.4: ideal speedup 2.5, so B3 needs b0/b3 >= 2.25 and cudnn/b3 >= 2.0.
    assert gpu_checks(_table(b0=10.0, b3=4.2, cudnn=9.0)) == {
        "b3_at_least_0.90_of_ideal_vs_b0": True,  # 2.38 >= 2.25
        "b0_within_1.25x_of_cudnn": True,  # 10 <= 11.25
        "b3_vs_cudnn_at_least_0.8_of_ideal": True,  # 2.14 >= 2.0
    }
    assert gpu_checks(_table(b0=10.0, b3=5.0, cudnn=7.0)) == {
        "b3_at_least_0.90_of_ideal_vs_b0": False,  # 2.0 < 2.25
        "b0_within_1.25x_of_cudnn": False,  # 10 > 8.75
        "b3_vs_cudnn_at_least_0.8_of_ideal": False,  # 1.4 < 2.0
    }
    # Each check on its own: B3 at ideal over B0 while B0 itself lags cuDNN.
    assert list(gpu_checks(_table(b0=10.0, b3=4.2, cudnn=7.0)).values()) == [True, False, False]
    no_cudnn = acceptance_checks(_table(b0=10.0, b3=4.2, cudnn=None), [], "pallas_gpu")
    assert no_cudnn["b3_at_least_0.90_of_ideal_vs_b0"] is True
    assert no_cudnn["b0_within_1.25x_of_cudnn"] is None
    assert no_cudnn["b3_fastest_of_b1_b3"] is True


def test_xla_checks_are_unchanged():
    rows = _table(b0=10.0, b3=4.2, cudnn=None)
    for row in rows:
        row["cpu_median_ms"] = row["median_ms"]
    rows.insert(1, {"variant": "dot_product_attention", "median_ms": 12.0, "cpu_median_ms": 8.0})
    memory = [
        {"variant": "b3", "peak_gib": 1.0},
        {"variant": "dot_product_attention", "peak_gib": 9},
    ]
    checks = acceptance_checks(rows, memory)
    assert list(checks) == [
        "b3_at_least_0.95_of_ideal",
        "b3_fastest_of_b1_b3",
        "b2_not_slower_than_b1",
        "b0_not_slower_than_dpa",
        "b3_at_least_0.95_of_ideal_cpu",
        "b3_fastest_of_b1_b3_cpu",
        "b2_not_slower_than_b1_cpu",
        "b0_not_slower_than_dpa_cpu",
        "blocksparse_peak_under_4gib",
    ]
    assert checks["b3_at_least_0.95_of_ideal"] is True  # 2.38 >= 2.375
    assert (
        checks["b0_not_slower_than_dpa"] is True and checks["b0_not_slower_than_dpa_cpu"] is False
    )
    assert checks["blocksparse_peak_under_4gib"] is True  # the dense control's peak is not judged


def test_schedule_benchmark_refuses_pallas_gpu_off_a_gpu_and_knows_the_1p3b_shapes(capsys):
    from evalharness.bench.schedules import main as schedules_main
    from tests.helpers.harness_config import resolved_run_config

    if jax.default_backend() == "gpu":
        pytest.skip("on a GPU the kernel runs")
    with pytest.raises(SystemExit) as exit_info:
        schedules_main(["kernel=pallas_gpu", "model=wan2.1-t2v-1.3b"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "kernel.backend=pallas_gpu needs a GPU" in err and "kernel=xla" in err
    with pytest.raises(SystemExit):
        schedules_main(["model=wan2.1-t2v-2b"])
    err = capsys.readouterr().err
    assert "wan2.1-t2v-2b" in err and "wan2.1-t2v-1.3b" in err  # the presets it knows
    assert resolved_run_config(["model=wan2.1-t2v-1.3b"]).model.name == "wan2.1-t2v-1.3b"
