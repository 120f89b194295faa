"""The operation profile: its arithmetic, and a real trace of the CPU backend read back."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from evalharness.bench import op_profile, step_parts


def test_events_are_summed_per_operation_and_per_call_slowest_first():
    events = [("copy.3", 2e6), ("fusion.1", 5e6), ("copy.3", 2e6), ("copy.7", 1e6)] * 2
    profile = op_profile.summarize_events(events, calls=2)
    assert [(t.op, t.ms, t.count) for t in profile.ops] == [
        ("fusion.1", 5.0, 1.0),
        ("copy.3", 4.0, 2.0),
        ("copy.7", 1.0, 1.0),
    ]
    assert profile.total_ms == pytest.approx(10.0)
    assert profile.by_kind() == {"copy": 5.0, "fusion": 5.0}
    assert profile.to_json(top=1)["ops"] == [
        {"op": "fusion.1", "kind": "fusion", "ms": 5.0, "count": 1.0}
    ]


def test_a_loops_body_is_counted_once_in_the_total():
    events = [("while.3", 12e6), ("fusion.176", 7e6), ("copy.2", 5e6), ("fusion.9", 1e6)]
    profile = op_profile.summarize_events(events, calls=1)
    assert profile.total_ms == pytest.approx(13.0)  # the while's 12 ms are its body's 7 + 5
    assert profile.ops[0].op == "while.3"  # listed, with its whole duration


def test_an_empty_trace_or_no_call_is_refused_not_read_as_free():
    with pytest.raises(ValueError, match="no executed operation"):
        op_profile.summarize_events([], calls=1)
    with pytest.raises(ValueError, match="calls=0"):
        op_profile.summarize_events([("copy.1", 1.0)], calls=0)


@pytest.mark.parametrize(
    ("op", "kind"),
    [("copy.113", "copy"), ("pad.5", "pad"), ("convolution_add_fusion", "convolution_add_fusion")],
)
def test_an_operations_kind_is_its_name_without_the_number(op, kind):
    assert op_profile.op_kind(op) == kind


@pytest.mark.parametrize(
    ("event", "name"),
    [
        ("%copy.29 = bf16[2,3600,21,12,128]{4,3,2,1,0} copy(bf16[2,21,3600,12,128] %x)", "copy.29"),
        (
            "%blocksparse_attention_b3.1 = bf16[2,8]{1,0} custom-call(s32[161] %a)",
            "blocksparse_attention_b3.1",
        ),
        ("fusion.54", "fusion.54"),
    ],
)
def test_a_device_event_named_by_its_hlo_text_gives_the_instructions_name(event, name):
    assert op_profile.op_name(event) == name


def test_a_real_trace_names_the_traced_computations_operations(tmp_path):
    x = jnp.arange(256 * 384, dtype=jnp.float32).reshape(256, 384)
    transposed = jax.jit(lambda a: jnp.sin(a).T @ a)
    transposed(x).block_until_ready()  # warm, as profile_ops asks
    profiles = op_profile.profile_ops({"sin-matmul": lambda: transposed(x)}, 2, tmp_path)
    profile = profiles["sin-matmul"]
    assert profile.calls == 2
    assert profile.total_ms > 0
    assert all(t.count >= 1 for t in profile.ops)
    assert any("sin" in t.op or "dot" in t.op for t in profile.ops), profile.ops
    assert list(tmp_path.glob("00-sin-matmul/**/*.xplane.pb"))  # the trace was kept


def test_the_profile_is_printed_per_kind_side_by_side_with_the_slowest_ops():
    ops = [{"op": "pad.5", "kind": "pad", "ms": 7.0, "count": 1.0}]
    profile = {
        "dense block": {"total_ms": 10.0, "kinds_ms": {"fusion": 10.0}, "ops": []},
        "sparse block": {"total_ms": 12.0, "kinds_ms": {"fusion": 5.0, "pad": 7.0}, "ops": ops},
    }
    profile["sparse block"]["kinds_ms"]["constant"] = 0.001  # too small to show
    text = step_parts.format_profile(profile)
    assert "| constant |" not in text
    assert "| pad | 0.00 | 7.00 |" in text
    assert "| all operations (a while loop's body counted once) | 10.00 | 12.00 |" in text
    assert "| pad.5 | 7.00 | 1 |" in text


def test_a_profile_that_cannot_be_read_keeps_the_timings(monkeypatch):
    def unreadable(*args, **kwargs):
        raise ValueError("the trace holds no executed operation")

    monkeypatch.setattr(step_parts, "profile_ops", unreadable)
    assert step_parts._profiles({"dense block": lambda: None}, None) == {
        "profile_error": "the trace holds no executed operation"
    }
