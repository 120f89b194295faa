"""Flow-matching samplers without a PyTorch reference: schedules, exactness, order, bad input."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from models.samplers import SAMPLER_NAMES, default_flow_shift, make_sampler
from tests.helpers.numerics import assert_allclose

SHAPE = (2, 4, 2, 3, 3)


def _run(sampler, x_init: np.ndarray, velocity) -> np.ndarray:
    """Eager loop: ``velocity(x)`` is a function of the current sample only."""
    state = sampler.init(x_init)
    for k in range(sampler.num_steps):
        state = sampler.step(state, velocity(sampler.sample(state)), k)
    return np.asarray(sampler.sample(state))


@pytest.mark.parametrize("name", SAMPLER_NAMES)
@pytest.mark.parametrize("steps", [1, 2, 7, 40])
@pytest.mark.parametrize("shift", [1.0, 3.0, 5.0])
def test_schedule_shape_and_range(name: str, steps: int, shift: float) -> None:
    s = make_sampler(name, steps, shift)
    assert s.name == name and s.num_steps == steps and s.shift == shift
    assert s.timesteps.shape == (steps,) and s.timesteps.dtype == np.float32
    assert s.sigmas.shape == (steps + 1,) and s.sigmas.dtype == np.float32
    assert s.sigmas[-1] == 0.0
    assert np.all(np.diff(s.sigmas) < 0), s.sigmas
    assert 0.99 <= s.sigmas[0] <= 1.0
    assert np.all((s.timesteps >= 0) & (s.timesteps <= 1000))
    if name == "unipc":
        # The reference feeds int64 timesteps to the model.
        np.testing.assert_array_equal(s.timesteps, np.floor(s.timesteps))


def test_larger_shift_keeps_more_steps_at_high_noise() -> None:
    low, high = make_sampler("unipc", 20, 3.0), make_sampler("unipc", 20, 5.0)
    assert np.all(high.sigmas[1:-1] > low.sigmas[1:-1])


@pytest.mark.parametrize("name", SAMPLER_NAMES)
@pytest.mark.parametrize("steps", [1, 2, 5, 20])
def test_straight_flow_lands_exactly_on_data(name: str, steps: int) -> None:
    # x_sigma = (1 - sigma) x0 + sigma n has the constant velocity n - x0; every step of a consistent
    # flow solver (both are exact for it) moves along that line, ending at x0.
    rng = np.random.default_rng(0)
    x0 = rng.standard_normal(SHAPE).astype(np.float32)
    noise = rng.standard_normal(SHAPE).astype(np.float32)
    s = make_sampler(name, steps, 5.0)
    sigma0 = float(s.sigmas[0])
    x_init = (1 - sigma0) * x0 + sigma0 * noise
    out = _run(s, x_init, lambda x: jnp.asarray(noise - x0))
    assert_allclose(out, x0, atol=1e-5, rtol=1e-5)


def _linear_ode_error(name: str, steps: int) -> float:
    # dx/dsigma = c x has the closed form x(0) = x(sigma0) exp(-c sigma0): a curved flow whose exact
    # end point is known, to check the solver's convergence order.
    c = 1.5
    x_init = np.random.default_rng(1).standard_normal(SHAPE).astype(np.float32)
    s = make_sampler(name, steps, 3.0)
    out = _run(s, x_init, lambda x: c * x)
    exact = x_init.astype(np.float64) * math.exp(-c * float(s.sigmas[0]))
    return float(np.abs(out - exact).max())


def test_unipc_converges_faster_than_euler() -> None:
    e_euler = [_linear_ode_error("euler", n) for n in (10, 20)]
    e_unipc = [_linear_ode_error("unipc", n) for n in (10, 20)]
    # Euler is first order (halving the step halves the error); UniPC-2 with its corrector at least
    # second order, and far more accurate at equal cost.
    assert 1.6 < e_euler[0] / e_euler[1] < 2.4, e_euler
    assert e_unipc[0] / e_unipc[1] > 3.5, e_unipc
    assert e_unipc[1] < e_euler[1] / 5, (e_unipc, e_euler)


@pytest.mark.parametrize("name", SAMPLER_NAMES)
def test_traced_step_index_matches_python_index(name: str) -> None:
    s = make_sampler(name, 6, 5.0)
    rng = np.random.default_rng(2)
    outputs = rng.standard_normal((6, *SHAPE)).astype(np.float32)
    x_init = rng.standard_normal(SHAPE).astype(np.float32)

    def body(i, state):
        return s.step(state, jnp.asarray(outputs)[i], i)

    traced = jax.jit(lambda x: s.sample(jax.lax.fori_loop(0, 6, body, s.init(x))))(x_init)
    eager = s.init(x_init)
    for k in range(6):
        eager = s.step(eager, outputs[k], k)
    assert_allclose(traced, s.sample(eager), atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("name", SAMPLER_NAMES)
def test_state_is_float32_and_keeps_shape(name: str) -> None:
    s = make_sampler(name, 3, 3.0)
    state = s.init(jnp.ones(SHAPE, jnp.bfloat16))
    for leaf in jax.tree.leaves(state):
        assert leaf.shape == SHAPE and leaf.dtype == jnp.float32
    state = s.step(state, jnp.ones(SHAPE, jnp.bfloat16), 0)
    assert s.sample(state).dtype == jnp.float32


def test_euler_step_is_sigma_difference_times_velocity() -> None:
    s = make_sampler("euler", 4, 3.0)
    x = np.full(SHAPE, 2.0, np.float32)
    v = np.full(SHAPE, -0.5, np.float32)
    out = s.sample(s.step(s.init(x), v, 2))
    expected = 2.0 + (float(s.sigmas[3]) - float(s.sigmas[2])) * -0.5
    assert_allclose(out, np.full(SHAPE, expected, np.float32), atol=1e-6)


@pytest.mark.parametrize(
    ("height", "width", "shift"),
    [(480, 832, 3.0), (832, 480, 3.0), (256, 256, 3.0), (720, 1280, 5.0), (1088, 1920, 5.0)],
)
def test_default_flow_shift(height: int, width: int, shift: float) -> None:
    assert default_flow_shift(height, width) == shift


@pytest.mark.parametrize("bad", [(0, 832), (480, -1), (480.0, 832), (True, 832)])
def test_default_flow_shift_rejects_bad_sizes(bad: tuple) -> None:
    with pytest.raises(ValueError, match="height|width"):
        default_flow_shift(*bad)


def test_unknown_sampler_name() -> None:
    with pytest.raises(ValueError, match="unknown sampler 'ddim'.*unipc"):
        make_sampler("ddim", 10, 5.0)


@pytest.mark.parametrize("name", SAMPLER_NAMES)
@pytest.mark.parametrize("steps", [0, -3, 2.5, True, "10"])
def test_bad_step_count(name: str, steps) -> None:
    with pytest.raises(ValueError, match="num_steps"):
        make_sampler(name, steps, 5.0)


@pytest.mark.parametrize("name", SAMPLER_NAMES)
@pytest.mark.parametrize("shift", [0.0, -1.0, math.nan, math.inf, "5", None])
def test_bad_shift(name: str, shift) -> None:
    with pytest.raises(ValueError, match="shift"):
        make_sampler(name, 10, shift)
