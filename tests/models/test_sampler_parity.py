"""Samplers against diffusers' schedulers configured as Wan 2.1 uses them (PyTorch reference)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from models.samplers import make_sampler
from tests.helpers.numerics import assert_allclose

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")

pytestmark = pytest.mark.parity

SHAPE = (2, 4, 2, 3, 3)
STEPS_AND_SHIFTS = [(1, 5.0), (2, 3.0), (3, 5.0), (10, 1.0), (25, 3.0), (40, 5.0), (50, 5.0)]
TOL = 1e-5


def _reference(name: str, steps: int, shift: float):
    if name == "unipc":
        ref = diffusers.UniPCMultistepScheduler(
            num_train_timesteps=1000,
            prediction_type="flow_prediction",
            use_flow_sigmas=True,
            flow_shift=shift,
            solver_order=2,
            solver_type="bh2",
            lower_order_final=True,
        )
    else:
        ref = diffusers.FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=shift)
    ref.set_timesteps(steps)
    return ref


@pytest.mark.parametrize("name", ["unipc", "euler"])
@pytest.mark.parametrize(("steps", "shift"), STEPS_AND_SHIFTS)
def test_schedule_matches_diffusers(name: str, steps: int, shift: float) -> None:
    ref = _reference(name, steps, shift)
    ours = make_sampler(name, steps, shift)
    ref_t = ref.timesteps.numpy().astype(np.float64)
    np.testing.assert_allclose(ours.timesteps, ref_t, atol=TOL, rtol=0)
    np.testing.assert_allclose(ours.sigmas, ref.sigmas.numpy(), atol=TOL, rtol=0)


def _jitted_step(sampler):
    # One compilation serves every step: the index is traced.
    return jax.jit(lambda state, v, i: sampler.step(state, v, i))


@pytest.mark.parametrize("name", ["unipc", "euler"])
@pytest.mark.parametrize(("steps", "shift"), STEPS_AND_SHIFTS)
def test_whole_trajectory_matches_diffusers(name: str, steps: int, shift: float) -> None:
    # Both follow their own trajectory from the same noise with the same model outputs.
    rng = np.random.default_rng(steps)
    x_init = rng.standard_normal(SHAPE).astype(np.float32)
    outputs = rng.standard_normal((steps, *SHAPE)).astype(np.float32)
    ref = _reference(name, steps, shift)
    ours = make_sampler(name, steps, shift)
    step = _jitted_step(ours)
    state, sample = ours.init(x_init), torch.from_numpy(x_init)
    for k in range(steps):
        sample = ref.step(torch.from_numpy(outputs[k]), ref.timesteps[k], sample).prev_sample
        state = step(state, outputs[k], jnp.int32(k))
        assert_allclose(ours.sample(state), sample.numpy(), atol=TOL, rtol=TOL, err_msg=f"step {k}")


@pytest.mark.parametrize(("steps", "shift"), [(4, 3.0), (40, 5.0)])
def test_each_unipc_update_matches_diffusers(steps: int, shift: float) -> None:
    # Re-sync our state from the reference's before every step, so each single predictor-corrector
    # update is compared on its own rather than through an accumulated trajectory.
    rng = np.random.default_rng(7)
    sample = torch.from_numpy(rng.standard_normal(SHAPE).astype(np.float32))
    ref = _reference("unipc", steps, shift)
    ours = make_sampler("unipc", steps, shift)
    step = _jitted_step(ours)
    state = ours.init(sample.numpy())
    for k in range(steps):
        if k > 0:
            older, newer = ref.model_outputs
            zeros = np.zeros(SHAPE, np.float32)
            state = state._replace(
                x=jnp.asarray(sample.numpy()),
                last_sample=jnp.asarray(ref.last_sample.numpy()),
                prev_x0=jnp.asarray(newer.numpy()),
                prev2_x0=jnp.asarray(zeros if older is None else older.numpy()),
            )
        v = rng.standard_normal(SHAPE).astype(np.float32)
        sample = ref.step(torch.from_numpy(v), ref.timesteps[k], sample).prev_sample
        state = step(state, v, jnp.int32(k))
        assert_allclose(ours.sample(state), sample.numpy(), atol=TOL, rtol=TOL, err_msg=f"step {k}")
        # The corrected sample and the x0 history must match too, not only the prediction.
        assert_allclose(state.last_sample, ref.last_sample.numpy(), atol=TOL, rtol=TOL)
        assert_allclose(state.prev_x0, ref.model_outputs[-1].numpy(), atol=TOL, rtol=TOL)


@pytest.mark.parametrize("name", ["unipc", "euler"])
def test_single_step_schedule_matches_diffusers(name: str) -> None:
    rng = np.random.default_rng(3)
    x_init = rng.standard_normal(SHAPE).astype(np.float32)
    v = rng.standard_normal(SHAPE).astype(np.float32)
    ref = _reference(name, 1, 5.0)
    ours = make_sampler(name, 1, 5.0)
    expected = ref.step(torch.from_numpy(v), ref.timesteps[0], torch.from_numpy(x_init)).prev_sample
    got = ours.sample(ours.step(ours.init(x_init), v, 0))
    assert_allclose(got, expected.numpy(), atol=TOL, rtol=TOL)
