"""Flow-matching Euler sampler with a static shift.

Numerically follows diffusers' ``FlowMatchEulerDiscreteScheduler(shift=shift)`` with its defaults
(``num_train_timesteps=1000``, no dynamic shifting, no Karras/exponential/beta sigmas, deterministic).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from models.sampler_args import check_sampler_args

NUM_TRAIN_TIMESTEPS = 1000


class EulerState(NamedTuple):
    """Carry of the Euler loop.

    Attributes:
        x: the current sample [B, C, F, H, W], float32.
    """

    x: jax.Array


def _shift_f32(sigmas: np.ndarray, shift: float) -> np.ndarray:
    """``shift * s / (1 + (shift - 1) * s)`` evaluated in float32, as the reference's constructor does."""
    s = sigmas.astype(np.float32)
    one = np.float32(1.0)
    return (np.float32(shift) * s) / (one + np.float32(shift - 1.0) * s)


def _euler_schedule(num_steps: int, shift: float) -> tuple[np.ndarray, np.ndarray]:
    """Sigmas and timesteps as diffusers' ``set_timesteps`` makes them.

    The reference shifts the 1000 training sigmas once in its constructor (float32) and takes the
    end points of that table as its range, then spaces ``num_steps`` points linearly in float64 and
    shifts them again. The double shift of the lower end point is part of its behaviour, so it is
    reproduced here.

    Returns:
        ``(sigmas, timesteps)``: sigmas float32 [num_steps + 1] ending in 0; timesteps float32
        [num_steps] = sigma * 1000.
    """
    train_t = np.linspace(1, NUM_TRAIN_TIMESTEPS, NUM_TRAIN_TIMESTEPS, dtype=np.float32)[::-1]
    train_sigmas = _shift_f32(train_t / np.float32(NUM_TRAIN_TIMESTEPS), shift)
    sigma_max = float(train_sigmas[0])
    sigma_min = float(train_sigmas[-1])
    t = np.linspace(sigma_max * NUM_TRAIN_TIMESTEPS, sigma_min * NUM_TRAIN_TIMESTEPS, num_steps)
    s = t / NUM_TRAIN_TIMESTEPS
    s = (shift * s / (1.0 + (shift - 1.0) * s)).astype(np.float32)
    timesteps = s * np.float32(NUM_TRAIN_TIMESTEPS)
    sigmas = np.concatenate([s, np.zeros(1, np.float32)])
    return sigmas, timesteps


class EulerSampler:
    """First-order flow-matching Euler: ``x <- x + (sigma_{k+1} - sigma_k) * v``.

    Attributes:
        name: ``"euler"``.
        num_steps: number of model evaluations.
        shift: flow shift.
        timesteps: float32 [num_steps], the timestep fed to the model at each step (0..1000).
        sigmas: float32 [num_steps + 1], noise level before each step, ending in 0.
    """

    name = "euler"

    def __init__(self, num_steps: int, shift: float) -> None:
        """Builds the schedule on the host.

        Args:
            num_steps: number of denoising steps, an int >= 1.
            shift: flow shift, a finite float > 0.

        Raises:
            ValueError: on a bad ``num_steps`` or ``shift``.
        """
        self.num_steps, self.shift = check_sampler_args(num_steps, shift)
        self.sigmas, self.timesteps = _euler_schedule(self.num_steps, self.shift)
        # The reference subtracts the float32 sigmas, so the step sizes are float32 differences.
        self._dt = self.sigmas[1:] - self.sigmas[:-1]

    def __repr__(self) -> str:
        return f"EulerSampler(num_steps={self.num_steps}, shift={self.shift})"

    def init(self, x: jax.Array) -> EulerState:
        """Starts the loop from pure noise ``x`` [B, C, F, H, W] (any float dtype; state is float32)."""
        return EulerState(x=jnp.asarray(x, jnp.float32))

    def step(self, state: EulerState, model_output: jax.Array, i: jax.Array | int) -> EulerState:
        """One Euler step.

        Args:
            state: the carry; ``state.x`` is the sample the model was evaluated on.
            model_output: the velocity at ``state.x`` and ``timesteps[i]``, [B, C, F, H, W].
            i: the step index, a Python int or a traced int32 scalar in ``[0, num_steps)``.

        Returns:
            The next state.
        """
        dt = jnp.asarray(self._dt)[i]
        return EulerState(x=state.x + dt * jnp.asarray(model_output, jnp.float32))

    def sample(self, state: EulerState) -> jax.Array:
        """The current latents [B, C, F, H, W] (float32) held by ``state``."""
        return state.x
