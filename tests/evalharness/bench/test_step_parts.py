"""The step-parts benchmark's arithmetic and which parts it times (the timings need a chip)."""

from __future__ import annotations

import numpy as np
import pytest

from evalharness.bench import step_parts
from evalharness.bench.run_config import AttentionCall
from evalharness.config import compose_run_config, to_config
from kernels.masks.sta import from_tile_order
from tests.helpers.harness_config import resolved_run_config

_PARTS_MS = {
    "dense block": 500.0,
    "sparse block": 280.0,
    "block without self-attention": 80.0,
    "dense attention": 400.0,
    "sparse attention": 160.0,
    "routing": 10.0,
    "layout in": 20.0,
    "band kernel": 120.0,
    "layout out": 10.0,
    "layout in (gather)": 15.0,
    "layout out (gather)": 5.0,
}


def _result(parts_ms: dict[str, float]) -> dict:
    parts = {n: {"median_ms": ms, "min_ms": ms, "max_ms": ms} for n, ms in parts_ms.items()}
    return {
        "machine": None,  # this machine
        "model": "m",
        "resolution": "r",
        "tokens": 1,
        "batch": 2,
        "heads": 12,
        "dtype": "bfloat16",
        "schedule": "aggressive",
        "sparse_density": 0.25,
        "block_sizes": [128, 128],
        "backend": "pallas_tpu",
        "dense_executor": "splash",
        "runs": 5,
        "parts": parts,
        "summary": step_parts.summarize(parts),
    }


def test_the_heads_leading_comparison_is_summarized_only_where_it_was_timed():
    plain = _result(_PARTS_MS)
    assert plain["summary"]["ideal_sparse_block_ms"] == pytest.approx(220.0)
    assert plain["summary"]["fraction_of_ideal"] == pytest.approx(220.0 / 280.0)
    assert "in_place_saves_ms" not in plain["summary"]
    assert "heads-leading" not in step_parts.format_table(plain)

    compared = _result(
        {**_PARTS_MS, "sparse block (heads-leading)": 285.5, "band kernel (heads-leading)": 110.0}
    )
    assert compared["summary"]["in_place_saves_ms"] == pytest.approx(5.5)
    table = step_parts.format_table(compared)
    assert "| band kernel (heads-leading) | 110.00 (110.00-110.00) | 39.3% |" in table
    assert "operands in place save 5.50 ms a sparse block" in table


def _call(*overrides: str) -> tuple:
    cfg = to_config(compose_run_config(["schedule=aggressive", *overrides]))
    return cfg, AttentionCall(cfg)


@pytest.mark.parametrize(
    ("overrides", "compared"),
    [
        (("kernel.backend=pallas_tpu", "model=wan2.1-t2v-1.3b"), True),  # 12 heads x 128
        (("kernel.backend=pallas_tpu", "model=tiny"), False),  # 4 heads x 64: copied anyway
        (("kernel.backend=xla", "model=wan2.1-t2v-1.3b"), False),  # no Pallas TPU operands
    ],
)
def test_heads_leading_operands_are_timed_beside_in_place_ones_on_pallas_tpu(overrides, compared):
    tiles = ("kernel.block_q=128", "kernel.block_kv=128", "kernel.dense_executor=b0")
    cfg, call = _call(*overrides, *tiles)
    copied = step_parts._heads_leading_policy(cfg, call)
    assert (copied is not None) is compared
    assert step_parts._policy(cfg, call).options.in_place is None  # the run's own rule
    if compared:
        assert copied.options.in_place is False
        assert copied.plan.tokens == step_parts._policy(cfg, call).plan.tokens


def test_a_trace_folder_without_profile_is_refused_before_anything_runs(capsys):
    with pytest.raises(SystemExit) as exit_:
        step_parts.main(["--trace-dir", "traces", "model=tiny", "schedule=aggressive"])
    assert exit_.value.code == 2
    assert "--trace-dir keeps --profile's traces: add --profile" in capsys.readouterr().err


def test_a_profile_that_could_not_be_read_is_said_below_the_timings():
    result = {**_result(_PARTS_MS), "profile_error": "the trace holds no executed operation"}
    text = step_parts.format_table(result)
    assert "no profile: the trace holds no executed operation" in text
    assert "| sparse block | 280.00 (280.00-280.00) | - |" in text


@pytest.mark.slow  # two blocks compiled: about 7 s on a 2-core machine
def test_the_gather_layout_block_is_the_sparse_block_exactly():
    """The block timed with the layout change as a gather computes what the run's block does:
    a permutation either way, so the outputs are equal bit for bit."""
    tiles = ("kernel.block_q=64", "kernel.block_kv=64", "kernel.dense_executor=b0")
    small = (
        "resolution.frames=17",
        "resolution.height=192",
        "resolution.width=320",
    )  # 1,200 tokens
    cfg, call = _call("model=tiny", "kernel.backend=xla", "dtype=float32", *tiles, *small)
    policy = step_parts._policy(cfg, call)
    x = step_parts._inputs(call)
    assert bool(x["temporal"].any()) and not bool(x["temporal"].all())  # both layouts run
    blocks = step_parts._block_fns(call, policy, x, None)
    sparse = np.asarray(blocks["sparse block"]())
    np.testing.assert_array_equal(np.asarray(blocks["sparse block (gather layout)"]()), sparse)


def test_the_transposes_saving_over_the_gather_is_summarized_where_it_was_timed():
    result = _result({**_PARTS_MS, "sparse block (gather layout)": 284.0})
    assert result["summary"]["transpose_saves_ms"] == pytest.approx(4.0)
    table = step_parts.format_table(result)
    assert "| sparse block (gather layout) | 284.00 (284.00-284.00) | 101.4% |" in table
    assert "the layout change by transpose saves 4.00 ms a sparse block against the gather" in table
    assert "transpose_saves_ms" not in _result(_PARTS_MS)["summary"]


def test_the_run_s_cross_attention_saving_is_summarized_where_it_was_timed():
    result = _result(
        {
            **_PARTS_MS,
            "dense block (model's cross-attention)": 510.0,
            "cross-attention (run's)": 2.5,
            "cross-attention (model's)": 12.5,
        }
    )
    assert result["summary"]["cross_attention_saves_ms"] == pytest.approx(10.0)
    table = step_parts.format_table(result)
    assert "| cross-attention (run's) | 2.50 (2.50-2.50) | 0.5% |" in table
    assert "the run's cross-attention saves 10.00 ms a block against the model's own" in table
    assert "cross_attention_saves_ms" not in _result(_PARTS_MS)["summary"]


@pytest.mark.parametrize(("backend", "timed"), [("pallas_tpu", True), ("xla", False)])
def test_cross_attention_parts_are_timed_where_the_backend_brings_its_own(backend, timed):
    tiles = ("kernel.block_q=128", "kernel.block_kv=128", "kernel.dense_executor=b0")
    cfg, call = _call(f"kernel.backend={backend}", "model=tiny", "dtype=float32", *tiles)
    policy = step_parts._policy(cfg, call)
    x = step_parts._inputs(call)
    assert x["text_k"].shape == (call.batch, call.model.text_len, call.heads, call.head_dim)
    blocks = step_parts._block_fns(call, policy, x, None)
    parts = step_parts._attention_fns(call, policy, x, None)
    assert (step_parts.CROSS_PARTS[0] in blocks) is timed
    assert all((name in parts) is timed for name in step_parts.CROSS_PARTS[1:])


@pytest.mark.slow  # four attention calls compiled per schedule: about 10 s on a 2-core machine
@pytest.mark.parametrize(("schedule", "layout_parts"), [("sta", True), ("radial", False)])
def test_a_static_masks_parts_compose_into_its_sparse_call_exactly(schedule, layout_parts):
    """A static mask's sparse call is its layout change, the band kernel and the change back:
    the parts timed for it, run one after the other, give the sparse call's output bit for bit;
    there is no routing part, and a mask without a layout change has no layout parts."""
    cfg = resolved_run_config([f"schedule={schedule}", "model=tiny", "kernel.backend=xla"])
    call = AttentionCall(cfg)
    policy = step_parts._policy(cfg, call)
    x = step_parts._inputs(call)
    parts = step_parts._attention_fns(call, policy, x, None)
    expected = {"dense attention", "sparse attention", "band kernel"}
    assert set(parts) == expected | ({"layout in", "layout out"} if layout_parts else set())
    band = np.asarray(parts["band kernel"]())
    if layout_parts:
        moved = parts["layout in"]()
        out = policy.execute_band(*moved)
        np.testing.assert_array_equal(np.asarray(out), band)
        band = np.asarray(from_tile_order(out, policy.layout))
    np.testing.assert_array_equal(np.asarray(parts["sparse attention"]()), band)
    blocks = step_parts._block_fns(call, policy, x, None)
    assert "sparse block (gather layout)" not in blocks  # routed heads' layout change only
