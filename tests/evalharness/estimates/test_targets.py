"""Device targets and the roofline time estimate built on them."""

import dataclasses

import pytest

from evalharness.estimates.flops import parameter_count, step_flops
from evalharness.estimates.targets import (
    GIB,
    TARGET_NAMES,
    cpu_target,
    get_target,
    gpu_allocator_bytes,
    host_memory_bytes,
)
from evalharness.estimates.time_rates import rates_for
from evalharness.estimates.workload import SparseWork, estimate_time, roofline, step_work
from models.config import get_transformer_config
from models.video_geometry import VideoGeometry


def test_table_states_the_published_figures():
    v6e = get_target("tpu-v6e-8")
    assert (v6e.platform, v6e.devices) == ("tpu", 8)
    assert v6e.hbm_bytes == int(31.25 * GIB)
    assert v6e.peak_flops["bfloat16"] == 918e12 and v6e.hbm_bytes_per_s == 1640e9
    assert (v6e.smem_bytes, v6e.vmem_bytes) == (1 << 20, 128 << 20)
    assert get_target("tpu-v6e-1").devices == 1
    h200 = get_target("h200")
    # JAX's default preallocation: 75% of 141 GB is what a run may use.
    assert h200.platform == "gpu" and h200.hbm_bytes == int(0.75 * 143_771 * 2**20)
    assert h200.smem_bytes is None and h200.vmem_bytes is None
    assert h200.shared_memory_bytes == 227 * 1024  # Hopper's opt-in shared memory per block
    assert v6e.shared_memory_bytes is None
    assert all(get_target(n).source for n in ("tpu-v6e-1", "tpu-v6e-8", "h200"))


def test_unknown_target_lists_the_known_ones():
    with pytest.raises(ValueError, match="unknown target 'tpu-v9'") as info:
        get_target("tpu-v9")
    assert all(name in str(info.value) for name in TARGET_NAMES)


def test_device_count_override_and_frozen():
    target = get_target("tpu-v6e-8", devices=4)
    assert target.devices == 4 and get_target("tpu-v6e-8").devices == 8
    with pytest.raises(dataclasses.FrozenInstanceError):
        target.devices = 2


def test_cpu_target_is_this_host():
    target = cpu_target({"float32": 1e11, "bfloat16": 5e10})
    assert target.platform == "cpu" and target.efficiency == 1.0
    assert target.hbm_bytes * target.devices <= host_memory_bytes()
    assert target.peak_flops["float32"] == pytest.approx(1e11 / target.devices)
    measured = get_target("cpu")  # measures a matmul now
    assert measured.peak_flops["float32"] > 1e8


def test_roofline_takes_the_slower_side():
    rates = dict(flops_per_s=989e12 * 0.45, bytes_per_s=4.8e12)
    assert roofline(989e12 * 0.45, 4.8e12 / 2, **rates) == (pytest.approx(1.0), "compute")
    assert roofline(989e12 * 0.45 / 2, 4.8e12 * 2, **rates) == (pytest.approx(2.0), "memory")


def test_14b_720p_on_v6e_8_takes_minutes_per_arm():
    cfg = get_transformer_config("wan2.1-t2v-14b")
    geometry = VideoGeometry(81, 720, 1280)
    timing = estimate_time(
        cfg,
        geometry,
        get_target("tpu-v6e-8"),
        steps=40,
        guidance_batch=2,
        warm_runs=3,
        noise_floor=True,
        param_dtype="bfloat16",
        dtype="bfloat16",
        sparse=SparseWork(cells=0.9, executed=0.4, variant="b3"),
        gathers=True,
        rates=rates_for(get_target("tpu-v6e-8")),
    )
    # One 40-step run of an arm: minutes, not seconds and not hours.
    per_run = {arm: timing.minutes[arm] / timing.runs[arm] for arm in timing.minutes}
    assert all(1.0 < minutes < 60.0 for minutes in per_run.values()), per_run
    assert per_run["sparse"] < per_run["dense"] == pytest.approx(per_run["noise_floor"])
    assert set(timing.bound.values()) == {"compute"}
    assert timing.runs == {"dense": 4, "noise_floor": 4, "sparse": 4}  # both dense controls timed
    # The matmul rate is fitted to the seed's dense 720p loop: this is that setting.
    assert timing.step_seconds["dense"] == pytest.approx(153.50 / 40, rel=1e-9)
    rows = timing.seconds
    assert rows["sparse overhead"]["dense"] == 0.0 < rows["sparse overhead"]["sparse"]
    assert rows["exchange"]["dense"] == rows["exchange"]["sparse"] > 0.0
    assert timing.as_metrics()["time.total_minutes"] == pytest.approx(timing.total_minutes)
    assert timing.as_metrics()["time.self_attention.sparse"] == rows["self-attention"]["sparse"]
    table = timing.to_markdown()
    assert "tpu-v6e-8" in table and "| **step** (s) |" in table and "fitted to the seed" in table


def test_small_model_on_a_big_device_is_memory_bound():
    cfg = get_transformer_config("tiny-planted")
    timing = _tiny_estimate(get_target("h200"), "bfloat16")
    # 8 tokens: reading 2.2M bf16 weights (0.9 us at 4.8 TB/s) outlasts 90 MFLOPs (0.2 us).
    assert timing.bound == {"dense": "memory", "sparse": "memory"}
    assert timing.seconds["exchange"] == {"dense": 0.0, "sparse": 0.0}  # one device
    assert timing.step_seconds["dense"] >= parameter_count(cfg) * 2 / 4.8e12


def test_heads_padded_to_the_device_count_are_timed_as_computed():
    # 1.3B's 12 heads over 8 chips are padded to 16: a third more attention than 12 heads.
    cfg = get_transformer_config("wan2.1-t2v-1.3b")
    geometry = VideoGeometry(81, 1088, 1920)
    options = dict(
        guidance_batch=2, forwards=1, param_dtype="bfloat16", dtype="bfloat16", gathers=True
    )
    work = step_work(cfg, geometry, devices=8, **options)
    attention, _ = step_flops(cfg, geometry.tokens, 2)
    assert work.attention_flops == pytest.approx(attention * 16 / 12 / 8)
    assert step_work(cfg, geometry, devices=4, **options).attention_flops == pytest.approx(
        attention / 4
    )


def test_the_h200_limit_is_the_allocators_as_this_environment_sets_it(monkeypatch):
    physical = 143_771 * 2**20  # what an H200 reports
    assert gpu_allocator_bytes(physical, {})[0] == int(0.75 * physical)
    fraction = {"XLA_PYTHON_CLIENT_MEM_FRACTION": ".9", "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
    assert gpu_allocator_bytes(physical, fraction)[0] == int(0.9 * physical)
    assert gpu_allocator_bytes(physical, {"XLA_CLIENT_MEM_FRACTION": "0.5"})[0] == physical // 2
    platform = {"XLA_PYTHON_CLIENT_ALLOCATOR": "platform"}
    assert gpu_allocator_bytes(physical, platform)[0] == physical
    with pytest.raises(ValueError, match="expected a fraction in"):
        gpu_allocator_bytes(physical, {"XLA_CLIENT_MEM_FRACTION": "90"})
    monkeypatch.setenv("XLA_PYTHON_CLIENT_MEM_FRACTION", ".95")
    h200 = get_target("h200")
    assert h200.hbm_bytes == int(0.95 * physical)
    assert "XLA_PYTHON_CLIENT_MEM_FRACTION=.95" in h200.source


def _tiny_estimate(target, dtype: str):
    """The tiny preset's one-step estimate at 8 tokens on ``target``."""
    return estimate_time(
        get_transformer_config("tiny-planted"),
        VideoGeometry(5, 16, 16),
        target,
        steps=1,
        guidance_batch=1,
        warm_runs=0,
        noise_floor=False,
        param_dtype=dtype,
        dtype=dtype,
        rates=rates_for(target),
    )


def test_a_cpu_peak_below_one_tflops_is_stated_in_gflops():
    cpu = cpu_target()
    peak = cpu.peak_flops["float32"]
    assert peak < 1e12  # a CPU: the "1 x 0 TFLOP/s" the time plan used to print
    assert (
        f"1 x {peak / 1e9:,.0f} GFLOP/s float32 peak" in _tiny_estimate(cpu, "float32").assumption
    )
    assert "TFLOP/s bfloat16 peak" in _tiny_estimate(get_target("h200"), "bfloat16").assumption


def test_an_accelerator_host_has_a_float32_rate_beside_the_runs_dtype(monkeypatch):
    # The VAE decodes in float32: a bfloat16 run on a GPU needs both rates, each measured.
    from types import SimpleNamespace

    from evalharness.estimates import targets

    gpu = SimpleNamespace(platform="gpu", device_kind="NVIDIA H200")
    monkeypatch.setattr(targets.jax, "devices", lambda *a: [gpu])
    monkeypatch.setattr(targets, "device_memory_bytes", lambda d: 140 * 2**30)
    measured = []
    monkeypatch.setattr(
        targets, "measure_matmul_flops", lambda dtype, *a: measured.append(dtype) or 60e12
    )
    target = targets.host_target(700e12, dtype="bfloat16")
    assert dict(target.peak_flops) == {"bfloat16": 700e12, "float32": 60e12}
    assert measured == ["float32"] and target.shared_memory_bytes is not None
    assert dict(targets.host_target(55e12, dtype="float32").peak_flops) == {"float32": 55e12}


def test_the_v5e_target_is_the_lent_chip():
    from evalharness.estimates.targets import TARGETS

    v5e = TARGETS["tpu-v5e-1"]
    assert v5e.hbm_bytes == int(15.75 * 1024**3) and v5e.topology == "v5e:1x1"
    assert v5e.peak_flops["bfloat16"] == 197e12 and v5e.devices == 1
