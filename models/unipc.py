"""Flow-matching UniPC multistep sampler (order 2, B(h) = expm1, predictor-corrector).

Numerically follows diffusers' ``UniPCMultistepScheduler`` as Wan 2.1 configures it:
``prediction_type="flow_prediction"``, ``use_flow_sigmas=True``, ``solver_order=2``,
``solver_type="bh2"``, ``lower_order_final=True``, ``predict_x0=True``, ``final_sigmas_type="zero"``,
``num_train_timesteps=1000``.

Every scalar of the update (sigma ratios, ``alpha_t * expm1(-h)``, the corrector weights ``rho``)
depends only on the step index, so it is computed once on the host in float64 from the float32 sigmas
the reference uses and stored as a per-step table. The device update then reads the tables at a traced
step index, which lets the whole denoising loop be one ``lax.fori_loop`` compiled once.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from models.sampler_args import check_sampler_args

NUM_TRAIN_TIMESTEPS = 1000
SOLVER_ORDER = 2

# diffusers nudges a first sigma of exactly 1 down by this much so log(alpha) = log(1 - sigma) stays
# finite in the first UniP update.
_FIRST_SIGMA_EPS = 1e-6


class UniPCState(NamedTuple):
    """Carry of the UniPC loop; every field has the latents' shape [B, C, F, H, W], float32.

    Attributes:
        x: the sample the model evaluates next (the output of the last predictor step).
        last_sample: the sample the last predictor started from (after its corrector); the next
            corrector restarts from it.
        prev_x0: data prediction (x0) of the previous step.
        prev2_x0: data prediction of the step before that.
    """

    x: jax.Array
    last_sample: jax.Array
    prev_x0: jax.Array
    prev2_x0: jax.Array


def _flow_sigmas(num_steps: int, shift: float) -> tuple[np.ndarray, np.ndarray]:
    """Shifted flow sigmas and integer-valued timesteps as diffusers' ``set_timesteps`` makes them.

    Returns:
        ``(sigmas, timesteps)``: sigmas float32 [num_steps + 1] ending in 0; timesteps float32
        [num_steps] holding the truncated integers ``int(sigma * 1000)`` the reference feeds the model.
    """
    sigmas = np.linspace(1.0, 1.0 / NUM_TRAIN_TIMESTEPS, num_steps + 1)[:-1]
    sigmas = shift * sigmas / (1.0 + (shift - 1.0) * sigmas)
    if abs(sigmas[0] - 1.0) < _FIRST_SIGMA_EPS:
        sigmas[0] -= _FIRST_SIGMA_EPS
    # The reference casts to int64 (truncation toward zero) before the model sees the timestep.
    timesteps = (sigmas * NUM_TRAIN_TIMESTEPS).astype(np.int64).astype(np.float32)
    sigmas = np.concatenate([sigmas, [0.0]]).astype(np.float32)
    return sigmas, timesteps


def _lambdas(sigmas: np.ndarray) -> np.ndarray:
    """Half log-SNR ``log(alpha) - log(sigma)`` with alpha = 1 - sigma; +inf where sigma = 0.

    Args:
        sigmas: float32 [n].

    Returns:
        float64 [n].
    """
    s = sigmas.astype(np.float64)
    out = np.full_like(s, np.inf)
    pos = s > 0
    out[pos] = np.log(1.0 - s[pos]) - np.log(s[pos])
    return out


def _b_vector(hh: float, order: int) -> np.ndarray:
    """Right-hand side ``b`` of the UniPC order conditions for B(h) = expm1(hh) (bh2).

    Args:
        hh: ``-h`` (the data-prediction sign convention), finite and non-zero.
        order: number of entries.

    Returns:
        float64 [order].
    """
    b_h = math.expm1(hh)
    h_phi_k = math.expm1(hh) / hh - 1.0
    factorial = 1
    out = []
    for i in range(1, order + 1):
        out.append(h_phi_k * factorial / b_h)
        factorial *= i + 1
        h_phi_k = h_phi_k / hh - 1.0 / factorial
    return np.asarray(out)


class _Tables(NamedTuple):
    """Per-step scalar coefficients, each float32 [num_steps]; see ``UniPCSampler.step``."""

    sigma: np.ndarray  # sigma_k, converts velocity to the x0 prediction
    use_corrector: np.ndarray  # bool: step > 0
    c_ratio: np.ndarray  # sigma_k / sigma_{k-1}
    c_x0: np.ndarray  # alpha_k * expm1(-h)
    c_res: np.ndarray  # alpha_k * B(h)
    c_rk: np.ndarray  # r_1 of the corrector (1 when order 1)
    c_rho_hist: np.ndarray  # corrector weight of the older difference (0 when order 1)
    c_rho_new: np.ndarray  # corrector weight of the new difference
    p_ratio: np.ndarray  # sigma_{k+1} / sigma_k
    p_x0: np.ndarray  # alpha_{k+1} * expm1(-h)
    p_res: np.ndarray  # alpha_{k+1} * B(h)
    p_rk: np.ndarray  # r_1 of the predictor (1 when order 1)
    p_rho: np.ndarray  # predictor weight (0.5 for order 2, 0 for order 1)


def _predictor_orders(num_steps: int) -> list[int]:
    """UniP order per step: warm-up from 1, and ``lower_order_final`` drops to 1 on the last step."""
    return [min(SOLVER_ORDER, num_steps - k, k + 1) for k in range(num_steps)]


def _build_tables(sigmas: np.ndarray) -> _Tables:
    """Host-side float64 coefficients of every corrector and predictor update.

    Args:
        sigmas: float32 [num_steps + 1], decreasing, last entry 0.
    """
    n = sigmas.shape[0] - 1
    sig = sigmas.astype(np.float64)
    alpha = 1.0 - sig
    lam = _lambdas(sigmas)
    orders = _predictor_orders(n)
    cols = {name: np.zeros(n) for name in _Tables._fields}
    cols["sigma"] = sig[:n]
    cols["use_corrector"] = np.arange(n) > 0
    cols["c_rk"] = np.ones(n)
    cols["p_rk"] = np.ones(n)
    for k in range(n):
        # UniC at step k corrects the predictor that went from sigma_{k-1} to sigma_k, at that
        # predictor's order, using the fresh model output at sigma_k.
        if k > 0:
            order = orders[k - 1]
            h = lam[k] - lam[k - 1]
            hh = -h
            cols["c_ratio"][k] = sig[k] / sig[k - 1]
            cols["c_x0"][k] = alpha[k] * math.expm1(hh)
            cols["c_res"][k] = alpha[k] * math.expm1(hh)
            if order == 1:
                cols["c_rho_new"][k] = 0.5
            else:
                rk = (lam[k - 2] - lam[k - 1]) / h
                r_mat = np.array([[1.0, 1.0], [rk, 1.0]])
                rho = np.linalg.solve(r_mat, _b_vector(hh, 2))
                cols["c_rk"][k] = rk
                cols["c_rho_hist"][k] = rho[0]
                cols["c_rho_new"][k] = rho[1]
        # UniP from sigma_k to sigma_{k+1}. When sigma_{k+1} = 0, h = +inf and expm1(-h) = -1, so the
        # update collapses to x_{k+1} = x0 prediction (order is always 1 there).
        order = orders[k]
        h = lam[k + 1] - lam[k]
        em1 = -1.0 if math.isinf(h) else math.expm1(-h)
        cols["p_ratio"][k] = sig[k + 1] / sig[k]
        cols["p_x0"][k] = alpha[k + 1] * em1
        cols["p_res"][k] = alpha[k + 1] * em1
        if order == 2:
            cols["p_rk"][k] = (lam[k - 1] - lam[k]) / h
            cols["p_rho"][k] = 0.5
    return _Tables(
        **{
            name: (col if name == "use_corrector" else col.astype(np.float32))
            for name, col in cols.items()
        }
    )


class UniPCSampler:
    """UniPC (order 2, bh2) for flow-matching velocity models, as Wan 2.1 samples.

    Attributes:
        name: ``"unipc"``.
        num_steps: number of model evaluations.
        shift: flow shift (Wan: 5.0 from 720p up, 3.0 at 480p).
        timesteps: float32 [num_steps], the timestep fed to the model at each step (0..1000).
        sigmas: float32 [num_steps + 1], noise level before each step, ending in 0.
    """

    name = "unipc"

    def __init__(self, num_steps: int, shift: float) -> None:
        """Builds the schedule and the per-step coefficient tables on the host.

        Args:
            num_steps: number of denoising steps, an int >= 1.
            shift: flow shift, a finite float > 0.

        Raises:
            ValueError: on a bad ``num_steps`` or ``shift``.
        """
        self.num_steps, self.shift = check_sampler_args(num_steps, shift)
        self.sigmas, self.timesteps = _flow_sigmas(self.num_steps, self.shift)
        self._tables = _build_tables(self.sigmas)

    def __repr__(self) -> str:
        return f"UniPCSampler(num_steps={self.num_steps}, shift={self.shift})"

    def init(self, x: jax.Array) -> UniPCState:
        """Starts the loop from pure noise.

        Args:
            x: initial latents [B, C, F, H, W] (any float dtype; the state is float32).

        Returns:
            The initial state; the history fields are zeros and are never read at step 0.
        """
        x = jnp.asarray(x, jnp.float32)
        zeros = jnp.zeros_like(x)
        return UniPCState(x=x, last_sample=zeros, prev_x0=zeros, prev2_x0=zeros)

    def step(self, state: UniPCState, model_output: jax.Array, i: jax.Array | int) -> UniPCState:
        """One UniC correction (from step 1 on) followed by one UniP prediction.

        Args:
            state: the carry; ``state.x`` is the sample the model was evaluated on.
            model_output: the velocity at ``state.x`` and ``timesteps[i]``, [B, C, F, H, W].
            i: the step index, a Python int or a traced int32 scalar in ``[0, num_steps)``.

        Returns:
            The next state; ``state.x`` is the next sample (the final latents after the last step).
        """
        t = jax.tree.map(lambda a: jnp.asarray(a)[i], self._tables)
        x = state.x
        v = jnp.asarray(model_output, jnp.float32)
        # Flow prediction: x = (1 - sigma) x0 + sigma noise, v = noise - x0  =>  x0 = x - sigma v.
        x0 = x - t.sigma * v

        # UniC: redo the previous predictor with the new x0 (the model output at the predicted point).
        m0 = state.prev_x0
        d1_hist = (state.prev2_x0 - m0) / t.c_rk
        d1_new = x0 - m0
        corrected = (
            t.c_ratio * state.last_sample
            - t.c_x0 * m0
            - t.c_res * (t.c_rho_hist * d1_hist + t.c_rho_new * d1_new)
        )
        x = jnp.where(t.use_corrector, corrected, x)

        # UniP from the corrected sample; the model is evaluated next on this (uncorrected) point.
        d1 = (state.prev_x0 - x0) / t.p_rk
        x_next = t.p_ratio * x - t.p_x0 * x0 - t.p_res * (t.p_rho * d1)
        return UniPCState(x=x_next, last_sample=x, prev_x0=x0, prev2_x0=state.prev_x0)

    def sample(self, state: UniPCState) -> jax.Array:
        """The current latents [B, C, F, H, W] (float32) held by ``state``."""
        return state.x
