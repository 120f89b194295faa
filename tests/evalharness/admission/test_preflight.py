"""Preflight refuses runs that cannot fit, before anything is allocated."""

import pytest

from evalharness.admission.preflight import PreflightRefusal, check
from evalharness.estimates import (
    JobKey,
    JobWork,
    count_flops,
    estimate_job,
    flop_model_phases,
    parameter_count,
)
from evalharness.estimates.targets import get_target
from evalharness.estimates.time_rates import rates_for
from evalharness.estimates.workload import estimate_time, step_work
from evalharness.run import run
from models.config import get_transformer_config
from models.video_geometry import VideoGeometry
from tests.helpers.harness_config import small_config


def test_parameter_count_matches_wan_sizes():
    assert parameter_count(get_transformer_config("wan2.1-t2v-1.3b")) == pytest.approx(
        1.42e9, rel=0.03
    )
    assert parameter_count(get_transformer_config("wan2.1-t2v-14b")) == pytest.approx(
        14.3e9, rel=0.03
    )


def _flops_14b(height: int, width: int):
    """14B, 81 frames, 40 guided steps, 3 warm runs, kept fraction 0.4."""
    return count_flops(
        get_transformer_config("wan2.1-t2v-14b"),
        VideoGeometry(81, height, width),
        steps=40,
        guidance_batch=2,
        warm_runs=3,
        kept_fraction=0.4,
        noise_floor=True,
    )


def _time_14b_720p(target: str = "tpu-v6e-8"):
    """The time model's estimate of that run at 720p on ``target``."""
    return estimate_time(
        get_transformer_config("wan2.1-t2v-14b"),
        VideoGeometry(81, 720, 1280),
        get_target(target),
        steps=40,
        guidance_batch=2,
        warm_runs=3,
        noise_floor=True,
        param_dtype="bfloat16",
        dtype="bfloat16",
        rates=rates_for(get_target(target)),
    )


def test_attention_share_grows_with_resolution():
    shares = [
        _flops_14b(h, w).attention_share for h, w in ((720, 1280), (1088, 1920), (1440, 2560))
    ]
    assert shares == sorted(shares) and shares[0] > 0.5 and shares[-1] > 0.85


def test_flop_count_adds_up_every_loop():
    flops = _flops_14b(720, 1280)
    assert flops.tokens == 75_600
    dense, sparse = flops.total_flops_per_step, flops.sparse_flops_per_step
    assert sparse == pytest.approx(dense - 0.6 * flops.attention_flops_per_step)
    # two dense arms and the sparse arm, each warm-up + 3 timed runs of 40 steps
    assert flops.total_flops == pytest.approx(40 * 4 * (2 * dense + sparse))
    metrics = flops.as_metrics()
    assert metrics["preflight.attention_share"] == pytest.approx(flops.attention_share)
    assert set(metrics) == {
        "preflight.tokens",
        "preflight.attention_flops_per_step",
        "preflight.total_flops_per_step",
        "preflight.sparse_flops_per_step",
        "preflight.total_flops",
        "preflight.attention_share",
    }


@pytest.mark.slow  # about 20 s on a 2-core machine
def test_headline_1440p_on_cpu_is_refused_without_allocating(tmp_path, monkeypatch):
    import evalharness.run as run_module

    def no_build(*args, **kwargs):
        raise AssertionError("preflight must refuse before any model is built")

    monkeypatch.setattr(run_module, "build_components", no_build)
    cfg = small_config(tmp_path, "resolution=1440p", "schedule=aggressive", small=False)
    with pytest.raises(PreflightRefusal, match="302,400 tokens"):
        run(cfg)
    assert not (tmp_path / "outputs").exists()  # no run folder, no MLflow database


def test_config_dtypes_are_accepted_and_unknown_dtypes_named():
    from evalharness.config.schemas import DType

    tcfg, geometry = get_transformer_config("wan2.1-t2v-14b"), VideoGeometry(81, 720, 1280)
    sizes = dict(guidance_batch=2, forwards=1, devices=8, gathers=True)
    by_enum = step_work(tcfg, geometry, param_dtype=DType.bfloat16, dtype=DType.bfloat16, **sizes)
    assert by_enum == step_work(tcfg, geometry, param_dtype="bfloat16", dtype="bfloat16", **sizes)
    # bf16 weights and activations take half float32's bytes.
    as_f32 = step_work(tcfg, geometry, param_dtype="float32", dtype="float32", **sizes)
    assert as_f32.hbm_bytes == 2 * by_enum.hbm_bytes
    with pytest.raises(ValueError, match="param_dtype='float64'"):
        step_work(tcfg, geometry, param_dtype="float64", dtype="bfloat16", **sizes)


def _plan_14b_720p(noise_floor_temp):
    """14B at 720p on 8 v6e chips (bf16, guided batch 2); the noise floor's executor temporaries
    given, the others a small flash-style figure."""
    from evalharness.estimates.memory_estimate import ExecutorSpec, estimate_memory
    from evalharness.estimates.targets import get_target

    target = get_target("tpu-v6e-8")
    flash = 64 * 2**20
    executors = {
        "dense": ExecutorSpec("splash", flash),
        "noise_floor": ExecutorSpec("dot_product_attention", noise_floor_temp),
        "sparse": ExecutorSpec(
            "b3", flash, routed=True, dense_name="splash", dense_temp_bytes=flash
        ),
    }
    return estimate_memory(
        get_transformer_config("wan2.1-t2v-14b"),
        VideoGeometry(81, 720, 1280),
        batch=2,
        devices=target.devices,
        param_dtype="bfloat16",
        dtype="bfloat16",
        executors=executors,
        text_encoder_bytes=11 * 10**9,
        vae_bytes=2 * 2**30,
        device_bytes=target.hbm_bytes,
        device=target.name,
        target_platform=target.platform,
    )


def test_n_squared_executor_at_720p_is_refused_with_the_table():
    def n_squared(*, batch, heads, tokens, head_dim, dtype_bytes):
        return batch * heads * tokens * tokens * 4  # float32 [B, H, N, N] logits

    table = _plan_14b_720p(n_squared)
    assert not table.fits and table.dominant("noise_floor") == "attention executor"
    assert table.peak("dense") < table.device_bytes  # the flash arms fit
    advice = ["kernel.noise_floor_executor=b0: fits, peak 20.00 GiB (checked)", "dtype=x: no"]
    with pytest.raises(PreflightRefusal) as info:
        check(
            _flops_14b(720, 1280),
            table,
            _time_14b_720p(),
            max_minutes=1e6,
            what="14B 720p",
            advice=advice,
        )
    message = str(info.value)
    assert "75,600 tokens" in message and "Nothing was allocated" in message
    assert "noise_floor arm peaks at" in message and "tpu-v6e-8's 31.25 GiB" in message
    assert "(largest part: attention executor)" in message
    assert "| attention executor | attention |" in message  # the table itself
    # The checked settings, each on its own line under the heading, in order.
    assert (
        "To fit (each setting applied and planned again):\n- kernel.noise_floor_executor=b0: "
        "fits, peak 20.00 GiB (checked)\n- dtype=x: no\n"
    ) in message
    assert "time:" not in message  # within the limit


def test_fitting_table_and_time_pass_and_time_alone_refuses():
    table = _plan_14b_720p(64 * 2**20)
    assert table.fits, table.to_markdown()
    flops, timing = _flops_14b(720, 1280), _time_14b_720p()
    work = JobWork(2, 1, 1, 1, ("dense", "sparse", "noise_floor"), 81)
    key = JobKey("tpu-v6e", 8, "wan2.1-t2v-14b", (81, 720, 1280))
    estimate = estimate_job(
        key, work, flop_model_phases(timing, work), [], flops_per_s=1.0, warm_cache=False
    )
    check(flops, table, estimate, max_minutes=60, what="14B 720p", advice=[])
    with pytest.raises(PreflightRefusal, match="the whole job: .* from the FLOP model") as info:
        check(flops, table, estimate, max_minutes=1, what="14B 720p", advice=[])
    message = str(info.value)
    assert "max_minutes=" in message and "memory:" not in message
    assert f"{estimate.total_minutes:,.1f} minutes" in message


def test_a_jax_without_a_cpu_device_is_refused_naming_jax_platforms(monkeypatch):
    # JAX_PLATFORMS=cuda alone: the routing recorder's callbacks would fail after the first compile.
    from evalharness.admission import decision

    def devices(backend=None):
        raise RuntimeError(f"Unknown backend {backend}")

    monkeypatch.setattr(decision.jax, "devices", devices)
    monkeypatch.setenv("JAX_PLATFORMS", "cuda")
    with pytest.raises(ValueError, match="JAX_PLATFORMS='cuda' leaves out the CPU.*cuda,cpu"):
        decision.require_host_device()
    monkeypatch.undo()
    decision.require_host_device()  # this machine's CPU
