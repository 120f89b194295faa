"""Front door to the flow-matching samplers: a common protocol, a factory and Wan's default shift.

A sampler holds a host-side NumPy schedule (``timesteps``, ``sigmas``) and a pure JAX update
``step(state, model_output, i)`` whose step index ``i`` may be traced, so a ``lax.fori_loop`` over
the steps compiles once. The state is a NamedTuple of fixed-shape arrays (a pytree).
"""

from __future__ import annotations

from typing import Any, Protocol

import jax
import numpy as np

from models.euler import EulerSampler
from models.unipc import UniPCSampler

SAMPLERS: dict[str, type] = {"unipc": UniPCSampler, "euler": EulerSampler}
SAMPLER_NAMES: tuple[str, ...] = tuple(SAMPLERS)

# Wan 2.1 samples 480p with flow shift 3.0 and 720p and larger with 5.0.
_SHIFT_480P = 3.0
_SHIFT_ABOVE_480P = 5.0
_SHORT_SIDE_480P = 480


class Sampler(Protocol):
    """What the denoising loop needs from a sampler.

    Attributes:
        name: registry name.
        num_steps: number of model evaluations.
        shift: flow shift.
        timesteps: float32 [num_steps], model timestep per step (0..1000).
        sigmas: float32 [num_steps + 1], noise level before each step, ending in 0.
    """

    name: str
    num_steps: int
    shift: float
    timesteps: np.ndarray
    sigmas: np.ndarray

    def init(self, x: jax.Array) -> Any:
        """Initial state (a pytree of float32 arrays shaped like ``x`` [B, C, F, H, W])."""
        ...

    def step(self, state: Any, model_output: jax.Array, i: jax.Array | int) -> Any:
        """Next state from the velocity at ``sample(state)`` and step ``i`` (traced int32 allowed)."""
        ...

    def sample(self, state: Any) -> jax.Array:
        """Current latents [B, C, F, H, W] float32."""
        ...


def make_sampler(name: str, num_steps: int, shift: float) -> Sampler:
    """Builds a flow-matching sampler.

    Args:
        name: ``"unipc"`` (Wan's default, diffusers ``UniPCMultistepScheduler``) or ``"euler"``
            (diffusers ``FlowMatchEulerDiscreteScheduler``).
        num_steps: number of denoising steps, an int >= 1.
        shift: flow shift > 0; see ``default_flow_shift``.

    Returns:
        The sampler.

    Raises:
        ValueError: unknown name, ``num_steps`` < 1 or ``shift`` <= 0.
    """
    if name not in SAMPLERS:
        raise ValueError(f"unknown sampler {name!r}; choose one of {list(SAMPLER_NAMES)}")
    return SAMPLERS[name](num_steps, shift)


def default_flow_shift(height: int, width: int) -> float:
    """Wan 2.1's flow shift for a video size: 3.0 at 480p and below, 5.0 above.

    The class of a size is its short side (832x480 and 480x832 are both 480p).

    Args:
        height: frame height in pixels, > 0.
        width: frame width in pixels, > 0.

    Raises:
        ValueError: non-positive or non-integer sizes.
    """
    for label, value in (("height", height), ("width", width)):
        if isinstance(value, bool) or not isinstance(value, int | np.integer) or value <= 0:
            raise ValueError(f"{label} must be a positive int number of pixels, got {value!r}")
    return _SHIFT_480P if min(height, width) <= _SHORT_SIDE_480P else _SHIFT_ABOVE_480P
