"""The per-device memory plan: table arithmetic, buffer formulas against XLA, abstract 14B blocks."""

import math
import resource
import time

import jax
import jax.numpy as jnp
import pytest

from evalharness.estimates.attention_memory import (
    AttentionShape,
    exchange_buffer_bytes,
    layout_copy_bytes,
    routing_buffer_bytes,
)
from evalharness.estimates.block_memory import block_memory
from evalharness.estimates.memory_estimate import ExecutorSpec, estimate_memory
from evalharness.estimates.memory_table import GIB, MemoryTable, add_runtime_overhead
from kernels.masks.band import band_for_density
from kernels.masks.geometry import TokenGeometry
from kernels.policy.attention_policy import make_dense_attend
from kernels.policy.routing import route_rows
from models.config import get_transformer_config
from models.video_geometry import VideoGeometry

TINY = get_transformer_config("tiny-planted")
CPU_VIDEO = VideoGeometry(33, 192, 320)  # the default job: 2,160 tokens
ARMS = ("dense", "noise_floor", "sparse")


def _table(**rows) -> MemoryTable:
    phases = {"w": "resident", "enc": "encode", "state": "denoise", "route": "routing"}
    phases |= {"exec": "attention", "vae": "decode"}
    return MemoryTable(rows, {k: phases[k] for k in rows}, {}, device_bytes=100)


def test_peak_is_resident_plus_the_largest_phase():
    table = _table(
        w={"dense": 10, "sparse": 10},
        enc={"dense": 30, "sparse": 30},
        state={"dense": 5, "sparse": 5},
        route={"dense": 0, "sparse": 40},
        exec={"dense": 20, "sparse": 25},
        vae={"dense": 12, "sparse": 12},
    )
    assert table.arms == ("dense", "sparse")
    # routing and the executor are never live together: the larger of the two counts.
    assert table.phase_bytes("sparse") == {"encode": 40, "denoise": 55, "decode": 22}
    assert table.phase_bytes("dense") == {"encode": 40, "denoise": 35, "decode": 22}
    assert (table.peak("dense"), table.peak("sparse"), table.peak_bytes) == (40, 55, 55)
    assert table.fits and table.dominant("sparse") == "route"
    metrics = table.as_metrics()
    assert metrics["memory.route.sparse"] == 40 and metrics["memory.peak"] == 55
    assert metrics["memory.peak.dense"] == 40 and metrics["memory.fits"] == 1.0
    # The runtime's overhead: a fraction of the loop's bytes (denoise + max(routing, attention)).
    rows, phases = {c: dict(r) for c, r in table.rows.items()}, dict(table.phases)
    add_runtime_overhead(rows, phases, 0.1, ["dense", "sparse"])
    assert list(rows)[-1] == "runtime overhead" and phases["runtime overhead"] == "denoise"
    assert rows["runtime overhead"] == {"dense": 2, "sparse": 4}  # int(2.5), int(4.5)
    add_runtime_overhead(rows, phases, 0.0, ["dense"])
    assert rows["runtime overhead"] == {"dense": 2, "sparse": 4}  # no fraction, no change


@pytest.fixture(scope="module")
def tiny_plan() -> MemoryTable:
    executors = {
        "dense": ExecutorSpec("b0", 1000),
        "noise_floor": ExecutorSpec("dot_product_attention", lambda **s: 7 * s["tokens"]),
        "sparse": ExecutorSpec("b3", 500, routed=True, dense_name="b0", dense_temp_bytes=1000),
    }
    return _cpu_plan(executors)


def _cpu_plan(executors: dict[str, ExecutorSpec]) -> MemoryTable:
    """The default job's plan on one 24 GiB CPU (float32, batch 2) with these executors."""
    return estimate_memory(
        TINY,
        CPU_VIDEO,
        batch=2,
        devices=1,
        param_dtype="float32",
        dtype="float32",
        executors=executors,
        text_encoder_bytes=3 * GIB,
        vae_bytes=GIB,
        device_bytes=24 * GIB,
        device="cpu",
    )


def test_tiny_table_rows_columns_and_arithmetic(tiny_plan):
    assert tiny_plan.arms == ARMS
    rows = tiny_plan.rows
    assert {"transformer weights", "transformer", "routing", "VAE decode"} <= set(rows)
    assert all(set(r) == set(ARMS) for r in rows.values())
    assert rows["attention executor"] == {"dense": 1000, "noise_floor": 7 * 2160, "sparse": 1000}
    assert rows["routing"]["dense"] == 0 < rows["routing"]["sparse"]
    assert rows["layout copies"]["sparse"] == 4 * 2 * 2160 * 256 * 4  # q, k, v, out; f32
    assert rows["head exchange"] == dict.fromkeys(ARMS, 0)  # one device
    weights = sum(math.prod(x.shape) * 4 for x in jax.tree.leaves(_tiny_params()))
    assert rows["transformer weights"]["dense"] == weights
    for arm in ARMS:
        phases = tiny_plan.phase_bytes(arm)
        assert tiny_plan.peak(arm) == max(phases.values()) == phases["encode"]  # 3 GiB encoder
    markdown = tiny_plan.to_markdown()
    assert "| dense (b0) | noise_floor (dot_product_attention) | sparse (b3 / b0) |" in markdown
    assert "| text encoder | encode | 3.00 | 3.00 | 3.00 |" in markdown
    assert "cpu: 24.00 GiB" in markdown and "fits" in markdown


def _tiny_params():
    from flax import nnx

    from models.transformer import abstract_transformer

    return nnx.state(abstract_transformer(TINY))


def test_compiled_attention_replaces_the_given_bytes():
    n = CPU_VIDEO.tokens
    executors = {
        "dense": ExecutorSpec("b0", 0, attend=make_dense_attend("b0")),
        "noise_floor": ExecutorSpec("dpa", 0, attend=make_dense_attend("dot_product_attention")),
    }
    table = estimate_memory(
        TINY,
        CPU_VIDEO,
        batch=2,
        devices=1,
        param_dtype="float32",
        dtype="float32",
        executors=executors,
        text_encoder_bytes=0,
        vae_bytes=0,
        device_bytes=24 * GIB,
    )
    scores = 2 * TINY.num_attention_heads * n * n * 4
    executor = table.rows["attention executor"]
    # XLA's einsum attention holds the scores and the probabilities: about two N^2 buffers.
    assert 1.5 * scores < executor["noise_floor"] < 3.5 * scores
    assert 0 < executor["dense"] < executor["noise_floor"] / 2
    assert table.executors["noise_floor"] == "dpa, compiled"


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_routing_formula_bounds_xla_plan(dtype):
    geometry = TokenGeometry(9, 12, 20)
    mask = band_for_density(geometry, 0.3)
    b, n, h, d, r = 2, geometry.tokens, 4, 64, 64
    qkv = jax.ShapeDtypeStruct((b, n, h, d), dtype)
    rows = jax.ShapeDtypeStruct((r,), jnp.int32)
    compiled = (
        jax.jit(lambda q, k, v, rows: route_rows(q, k, v, rows, mask, geometry))
        .lower(qkv, qkv, qkv, rows)
        .compile()
        .memory_analysis()
        .temp_size_in_bytes
    )
    predicted = routing_buffer_bytes(
        batch=b,
        tokens=n,
        heads=h,
        head_dim=d,
        samples=r,
        devices=1,
    )
    assert 0.75 * predicted <= compiled <= predicted * 1.05


def test_exchange_and_layout_buffers():
    # Wan 1.3B: 12 heads on 8 devices are padded to 16, 2 per device.
    shape = AttentionShape(batch=2, heads=2, tokens=75600, head_dim=128, dtype_bytes=2)
    tensor = 2 * 75600 * 2 * 128 * 2
    assert shape.tensor_bytes == tensor
    assert exchange_buffer_bytes(shape, devices=8, heads=12) == 4 * tensor + 3 * tensor
    assert exchange_buffer_bytes(shape, devices=8, heads=16) == 4 * tensor
    assert exchange_buffer_bytes(shape, devices=1, heads=2) == 0
    assert layout_copy_bytes(shape, devices=8, placement="head_local") == 4 * tensor
    assert layout_copy_bytes(shape, devices=8, placement="before_exchange") == 28 * tensor
    with pytest.raises(ValueError, match="placement='elsewhere'"):
        layout_copy_bytes(shape, devices=8, placement="elsewhere")


def test_14b_720p_block_is_compiled_in_seconds_without_weights():
    cfg = get_transformer_config("wan2.1-t2v-14b")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    start = time.perf_counter()
    block = block_memory(cfg, batch=2, tokens_per_device=75600 // 8, dtype="bfloat16")
    elapsed = time.perf_counter() - start
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
    assert elapsed < 60, f"{elapsed:.1f} s"
    # Two blocks' weights are 1.4 GB and their activations several GB: none of it was allocated.
    assert block.weight_argument_bytes == pytest.approx(2 * 351e6 * 2, rel=0.01)
    assert block.activation_bytes > 2 * GIB
    assert grown < 1.5 * GIB, f"RSS grew {grown / GIB:.2f} GiB"
    # Output and residual input are [2, 9450, 5120] bf16 each.
    assert block.output_bytes == 2 * 9450 * 5120 * 2


@pytest.mark.parametrize(
    ("routing_samples", "layout_change"),
    [(64, True), (0, True), (0, False)],  # routed; STA (tile order, no routing); Radial
)
def test_a_static_mask_holds_no_routing_and_a_layout_copy_only_where_it_moves_tokens(
    routing_samples, layout_change
):
    sparse = ExecutorSpec(
        "b3",
        500,
        routed=True,
        routing_samples=routing_samples,
        layout_change=layout_change,
        dense_name="b0",
        dense_temp_bytes=1000,
    )
    plan = _cpu_plan({"dense": ExecutorSpec("b0", 1000), "sparse": sparse})
    assert (plan.rows["routing"]["sparse"] > 0) is (routing_samples > 0)
    copies = 4 * 2 * 2160 * 256 * 4 if layout_change else 0  # q, k, v, out; f32
    assert plan.rows["layout copies"]["sparse"] == copies
    assert plan.rows["attention executor"]["sparse"] == 1000  # its dense steps' executor
