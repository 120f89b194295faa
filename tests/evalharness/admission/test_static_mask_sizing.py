"""The run's plan sizes a static-mask schedule (``sta``, ``radial``) by its own policy: no routing
buffers, a layout copy only where the mask moves tokens (STA's tile order), and the routed
schedule's rows unchanged."""

from __future__ import annotations

import pytest

from evalharness.admission import sizing
from evalharness.config import token_geometry
from evalharness.estimates import attention_shape
from kernels.policy.static_policy import StaticMaskPolicy
from models.config import get_transformer_config
from models.dtypes import dtype_of
from tests.helpers.harness_config import resolved_run_config


@pytest.mark.parametrize(
    ("schedule", "static", "routing_samples", "layout_change"),
    [("balanced", False, 64, True), ("sta", True, 0, True), ("radial", True, 0, False)],
)
def test_the_sparse_arms_spec_follows_its_policy(schedule, static, routing_samples, layout_change):
    cfg = resolved_run_config([f"schedule={schedule}", "kernel.backend=xla"])
    tcfg = get_transformer_config(cfg.model.name)
    attends, policy = sizing._single_device_attends(cfg, tcfg)
    assert isinstance(policy, StaticMaskPolicy) is static
    shape = attention_shape(
        tcfg,
        batch=2,
        tokens=token_geometry(cfg.resolution.video).tokens,
        devices=1,
        dtype_bytes=dtype_of(cfg.dtype).itemsize,
    )
    spec = sizing._executor_specs(cfg, policy, attends, shape.abstract(dtype_of(cfg.dtype)), ())
    sparse = spec["sparse"]
    assert sparse.routed and sparse.name == "b3"
    assert (sparse.routing_samples, sparse.layout_change) == (routing_samples, layout_change)
