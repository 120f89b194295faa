"""The 1.3B model at 720p on random weights is admitted by a dry run on this CPU for an
accelerator, with no checkpoint, hub or network looked up, and planned with the checkpoint's own
weight bytes."""

import re

import pytest

from evalharness.admission.dry_run_report import plan_dry_run
from tests.helpers.harness_config import small_config

LEAD_RUN = ("model=wan2.1-t2v-1.3b", "resolution=720p", "steps=4", "target=h200")


@pytest.fixture(autouse=True)
def nothing_to_fetch(monkeypatch):
    """Our model only (no chip compile), and any checkpoint or hub look-up fails the test."""
    monkeypatch.setattr("evalharness.estimates.tpu_compiler.libtpu_installed", lambda: False)
    monkeypatch.setattr("evalharness.estimates.gpu_compiler.cuda_plugin_installed", lambda: False)

    def looked_up(*args, **kwargs):
        raise AssertionError(f"a checkpoint was looked up: {args}")

    for name in ("fetch_snapshot", "locate_checkpoint", "locate_snapshot"):
        monkeypatch.setattr(f"evalharness.assembly.checkpoint_source.{name}", looked_up)
    monkeypatch.setattr("models.hub.fetch_snapshot", looked_up)


def _row(report: str, component: str) -> list[str]:
    match = re.search(rf"^\| {re.escape(component)} \|.*$", report, re.MULTILINE)
    assert match, f"no {component!r} row in the memory table"
    return [cell.strip() for cell in match.group(0).split("|")[3:-1]]


def test_the_lead_run_on_random_weights_is_admitted_with_real_weight_bytes(tmp_path):
    cfg = small_config(tmp_path, "dry_run=true", *LEAD_RUN, "model.checkpoint=random", small=False)
    planned = plan_dry_run(cfg)
    assert "## Verdict: FITS" in planned.report, planned.report
    assert "- weights: random at wan2.1-t2v-1.3b's real shapes and dtype" in planned.report
    assert "model.seed=0" in planned.report
    # The same shapes and dtype as the checkpoint: the same weights in the memory table (the
    # checkpoint's own dry run reads no weight either, only its config), for the same arms (random
    # weights run no noise-floor arm: their quality figures mean nothing).
    preset = small_config(tmp_path, "dry_run=true", *LEAD_RUN, "noise_floor=false", small=False)
    real = plan_dry_run(preset).report
    for component in ("transformer weights", "VAE decode", "transformer"):
        assert _row(planned.report, component) == _row(real, component)
    assert [float(x) for x in _row(planned.report, "transformer weights")] == [2.65] * 2
