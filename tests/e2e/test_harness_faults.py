"""Faults: interrupted and failed runs are marked in MLflow, bad checkpoints stop before work."""

import json

import jax.numpy as jnp
import pytest
from flax import nnx
from mlflow.tracking import MlflowClient

from evalharness.arms.arm import NonFiniteLatents, prepare_arm
from evalharness.exit_codes import RunFailed
from evalharness.run import make_run_dir, run
from evalharness.tracking.mlflow_client import default_tracking_uri
from models.checkpoint import CheckpointError
from models.samplers import make_sampler
from tests.helpers.harness_config import small_config


def _latest(tmp_path):
    client = MlflowClient(default_tracking_uri(tmp_path / "outputs"))
    exp = client.get_experiment_by_name("evalharness")
    (latest,) = client.search_runs(
        [exp.experiment_id], order_by=["attributes.start_time DESC"], max_results=1
    )
    return latest


@pytest.mark.slow
def test_ctrl_c_marks_the_run_killed(tmp_path, monkeypatch):
    import evalharness.run as run_module

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(run_module, "build_components", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run(small_config(tmp_path))
    latest = _latest(tmp_path)
    assert latest.info.status == "KILLED"
    assert "interrupted" in latest.data.tags["error"]


def test_a_tracker_that_fails_to_open_ends_the_run_naming_its_folder(tmp_path, monkeypatch):
    import evalharness.run as run_module

    def broken(*args, **kwargs):
        raise RuntimeError("the store went away")

    monkeypatch.setattr(run_module, "make_tracker", broken)
    with pytest.raises(RunFailed) as failure:
        run(small_config(tmp_path))
    (folder,) = (tmp_path / "outputs" / "runs").iterdir()
    assert failure.value.run_dir == str(folder)
    assert f"its folder: {folder} (status.json, error.log)" in str(failure.value)
    status = json.loads((folder / "status.json").read_text())
    assert status["status"] == "failed" and "the store went away" in status["error"]
    assert "RuntimeError: the store went away" in (folder / "error.log").read_text()


def test_simultaneous_runs_get_distinct_folders(tmp_path):
    folders = {make_run_dir(tmp_path, "same-name") for _ in range(20)}
    assert len(folders) == 20 and all(f.is_dir() for f in folders)


class _NaNModel(nnx.Module):
    def __init__(self):
        self.scale = nnx.Param(jnp.ones(()))

    def __call__(self, latents, timestep, context, attend=None, step=0):
        return latents * self.scale[...] * jnp.nan


def test_nan_latents_are_a_clear_error():
    latents = jnp.ones((1, 16, 1, 2, 2))
    context = jnp.ones((1, 4, 8))
    with pytest.raises(NonFiniteLatents, match="NaN or Inf"):
        prepare_arm(
            "sparse",
            _NaNModel(),
            make_sampler("euler", 2, 3.0),
            guidance_scale=1.0,
            attend=None,
            noise=latents,
            context=context,
            negative_context=None,
        )


def test_missing_checkpoint_folder_fails_before_any_run(tmp_path):
    cfg = small_config(tmp_path, "model=wan2.1-t2v-1.3b", f"model.checkpoint={tmp_path}/nope")
    with pytest.raises(CheckpointError, match="does not exist"):
        run(cfg)
    assert not (tmp_path / "outputs").exists()


def test_checkpoint_without_vae_names_the_folder(tmp_path):
    root = tmp_path / "Wan2.1-T2V-1.3B-Diffusers"
    for part in ("transformer", "text_encoder", "tokenizer"):
        (root / part).mkdir(parents=True)
    cfg = small_config(tmp_path, "model=wan2.1-t2v-1.3b", f"model.checkpoint={root}")
    with pytest.raises(CheckpointError, match=r"missing sub-folder vae/"):
        run(cfg)
    assert not (tmp_path / "outputs").exists()


def test_model_preset_needs_a_checkpoint(tmp_path):
    with pytest.raises(ValueError, match="model.checkpoint"):
        run(small_config(tmp_path, "model=wan2.1-t2v-1.3b", "model.checkpoint=null"))
