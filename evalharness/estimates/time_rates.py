"""How fast each kind of work runs on a target (``workload.estimate_time``'s components), and where
each figure comes from.

TPU v6e, from the seed's measurements (``evalharness.estimates.seed_measurements``):

- dense attention: the seed's dense splash kernel, 78.70 ms at 75,600 tokens x 10 heads x 128 in
  bf16, i.e. its fraction of the chip's peak (40.5%);
- a sparse variant: its kernel time over the ideal (dense time x executed pairs): B3 32.76 ms at
  38.87% of pairs, 93.4% of ideal; B2 56.5%, B1 31.8%; our B0 is taken as dense splash;
- the matmuls: fitted to the seed's dense 720p loop (153.50 s for 40 steps) minus its 40 x 40
  dense attention calls and the all-to-all;
- the sparse overhead, per element of a sparse call's q (routing and permutation are linear in
  it): fitted to the seed's aggressive 720p loop (119.86 s);
- ICI: 3,584 Gbps per chip (Google Cloud's v6e figure), 448 GB/s, for the all-to-all and gathers.

The seed contradicts itself on the attention share: 40 layers x 78.70 ms is 82% of its 3.84 s
dense step, while its Table 1 says 55.5% of a block at 720p. These rates follow the kernel table
and the end-to-end loops (what a user times). The 1080p and 1440p loops fit nothing: they are the
check (``python -m evalharness.bench.seed_calibration``).

TPU v5e, from our own measurements on a lent chip (``evalharness.estimates.v5e_measurements``),
fractions of its stated 197 TFLOP/s bf16 peak:

- dense attention: the splash control timed alone at Wan 1.3B's 720p call (437.5 ms);
- B3: the aggressive band kernel timed alone in the same run, over its ideal (dense time x kept
  pairs); B2 and B1 from B3 by the kernel table's ratios at the seed's call;
- the matmuls: fitted to the dense 720p loop (2 steps) minus its dense attention calls;
- the sparse overhead, per element of a sparse call's q: fitted to the aggressive 720p loop.
The 480p loops (5 steps) fit nothing: they are the check.

Other targets: every rate is the target's stated ``efficiency`` of peak (an assumption: no GPU run
has calibrated it), sparse variants at the ideal, no sparse overhead, nothing exchanged.
"""

from __future__ import annotations

import functools

from evalharness.estimates.seed_measurements import (
    SEED_DENSE_LOOP_S,
    SEED_KERNEL,
    SEED_KERNEL_MS,
    SEED_SCHEDULE,
    SEED_SPARSE_LOOP_S,
)
from evalharness.estimates.targets import DeviceTarget, get_target
from evalharness.estimates.v5e_measurements import (
    V5E_KERNEL_MS,
    V5E_SCHEDULES_720P,
)
from evalharness.estimates.workload import StepWork, TimeRates, step_work
from kernels.executors.tpu_generation import generation_of
from kernels.policy.schedule import SPARSE_VARIANTS
from models.config import get_transformer_config
from models.video_geometry import VideoGeometry

# Google Cloud's TPU v6e interchip interconnect: 3,584 Gbps per chip.
V6E_ICI_BYTES_PER_S = 3584e9 / 8
# The seed's end-to-end loops: 40 denoising steps.
_SEED_STEPS = 40


def rates_for(target: DeviceTarget) -> TimeRates:
    """The rates of ``target``: our measured ones for a TPU v5e, the seed's for other TPUs (v6e),
    the stated efficiency elsewhere."""
    if target.platform == "tpu":
        return _v5e_rates() if tpu_generation(target) == "v5e" else _v6e_rates()
    efficiency = target.efficiency
    assumed = f"assumed {efficiency:.0%} of {target.name}'s peak (unmeasured)"
    return TimeRates(
        matmul_efficiency=efficiency,
        attention_efficiency=efficiency,
        variant_efficiency={},
        sparse_overhead_s_per_element=0.0,
        interconnect_bytes_per_s=None,
        sources={
            "matmuls": assumed,
            "attention": assumed,
            "sparse": "sparse variants at the ideal (dense time x executed pairs), no overhead",
            "exchange": "one device: nothing exchanged",
        },
    )


@functools.cache
def _v6e_rates() -> TimeRates:
    peak = get_target("tpu-v6e-8").peak_flops["bfloat16"]
    dense_s = SEED_KERNEL_MS["b0"] / 1e3
    tokens, heads, head_dim = SEED_KERNEL["tokens"], SEED_KERNEL["heads"], SEED_KERNEL["head_dim"]
    flops = 4.0 * tokens * tokens * head_dim * heads  # q k^T and p v, 2 N^2 d each per head
    attention = flops / (peak * dense_s)
    ideal = dense_s * SEED_KERNEL["kept"]
    variants = {v: ideal / (SEED_KERNEL_MS[v] / 1e3) for v in SPARSE_VARIANTS}
    variants["b0"] = 1.0
    matmul, overhead, per_call_ms = _fit_seed_loops(peak, attention, variants["b3"])
    return TimeRates(
        matmul_efficiency=matmul,
        attention_efficiency=attention,
        variant_efficiency=variants,
        sparse_overhead_s_per_element=max(0.0, overhead),
        interconnect_bytes_per_s=V6E_ICI_BYTES_PER_S,
        sources={
            "matmuls": (
                f"{matmul:.1%} of peak: fitted to the seed's dense 720p loop (153.50 s) minus its "
                "dense attention and all-to-all"
            ),
            "attention": (
                f"{attention:.1%} of peak: the seed's dense splash, 78.70 ms at 75,600 tokens x 10 "
                "heads x 128"
            ),
            "sparse": (
                f"B3 {variants['b3']:.1%}, B2 {variants['b2']:.1%}, B1 {variants['b1']:.1%} of "
                "ideal over executed pairs (the seed's kernel table at 38.87% of pairs); overhead "
                f"{per_call_ms:.1f} ms per sparse call at the seed's 720p shape (batch 2 x 75,600 "
                "tokens x 5 heads x 128 per chip), linear in the call's q, fitted to the seed's "
                "aggressive 720p loop (119.86 s)"
            ),
            "exchange": "ICI 448 GB/s per chip (Google Cloud's v6e figure: 3,584 Gbps)",
        },
    )


def _fitted_step_work(model: str, *, devices: int) -> StepWork:
    """One denoising step of ``model`` as the loops the rates are fitted to ran it: 81 frames at
    720p, a joint guidance batch of 2, bf16, weights gathered when sharded over ``devices``."""
    return step_work(
        get_transformer_config(model),
        VideoGeometry(81, 720, 1280),
        guidance_batch=2,
        forwards=1,
        devices=devices,
        param_dtype="bfloat16",
        dtype="bfloat16",
        gathers=devices > 1,
    )


def _fit_seed_loops(peak: float, attention: float, b3: float) -> tuple[float, float, float]:
    """What the seed's 720p loops (14B, 8 chips, batch 2, 40 steps, its aggressive schedule) leave
    for the matmuls and the sparse overhead at the kernels' rates (``attention`` of a chip's bf16
    ``peak``, B3 at ``b3`` of ideal): the matmuls' fraction of peak, the overhead's seconds per
    element of a sparse call's q and its milliseconds per call."""
    work = _fitted_step_work("wan2.1-t2v-14b", devices=8)
    attention_s = work.attention_flops / (peak * attention)
    exchange_s = (work.exchange_bytes + work.gather_bytes) / V6E_ICI_BYTES_PER_S
    dense_steps = int(SEED_SCHEDULE["first_times_fp"] * _SEED_STEPS)
    dense_step = SEED_DENSE_LOOP_S["720p"] / _SEED_STEPS
    matmul_s = dense_step - attention_s - exchange_s
    sparse_steps = _SEED_STEPS - dense_steps
    sparse_step = (SEED_SPARSE_LOOP_S["720p"] - dense_steps * dense_step) / sparse_steps
    kernel = attention_s * SEED_KERNEL["kept"] / b3
    overhead_s = sparse_step - matmul_s - exchange_s - kernel  # per sparse step
    matmul = work.matmul_flops / (peak * matmul_s)
    return matmul, overhead_s / work.qkv_elements, 1e3 * overhead_s / work.calls


def tpu_generation(target: DeviceTarget) -> str | None:
    """ "v5e", "v6e", ... of a TPU target: a named target's topology ("v5e:1x1"), or the device
    kind a real run's host target is named after ("TPU v5 lite"); None when unknown."""
    if target.topology:
        return target.topology.split(":")[0]
    return generation_of(target.name)


@functools.cache
def _v5e_rates() -> TimeRates:
    m = V5E_SCHEDULES_720P
    peak = get_target("tpu-v5e-1").peak_flops["bfloat16"]
    call_flops = 4.0 * m["batch"] * m["heads"] * m["tokens"] ** 2 * m["head_dim"]
    attention = call_flops / (peak * m["dense_attention_ms"] / 1e3)
    kept = m["aggressive_kept"]
    b3 = m["dense_attention_ms"] * kept / m["aggressive_band_kernel_ms"]
    variants = {v: b3 * V5E_KERNEL_MS["b3"] / V5E_KERNEL_MS[v] for v in SPARSE_VARIANTS}
    variants["b0"] = 1.0
    work = _fitted_step_work("wan2.1-t2v-1.3b", devices=1)
    attention_s = work.attention_flops / (peak * attention)
    matmul_s = m["dense_loop_ms"] / 1e3 / m["steps"] - attention_s
    sparse_step = m["aggressive_loop_ms"] / 1e3 / m["steps"]
    overhead_s = sparse_step - matmul_s - attention_s * kept / b3
    return TimeRates(
        matmul_efficiency=work.matmul_flops / (peak * matmul_s),
        attention_efficiency=attention,
        variant_efficiency=variants,
        sparse_overhead_s_per_element=max(0.0, overhead_s / work.qkv_elements),
        interconnect_bytes_per_s=None,
        sources={
            "matmuls": (
                f"{work.matmul_flops / (peak * matmul_s):.1%} of peak: fitted to a v5e's dense "
                f"720p loop (Wan 1.3B, {m['steps']} steps, {m['dense_loop_ms'] / 1e3:.2f} s) "
                "minus its dense attention"
            ),
            "attention": (
                f"{attention:.1%} of peak: splash on a v5e, {m['dense_attention_ms']:.1f} ms at "
                f"{m['tokens']:,} tokens x {m['heads']} heads x {m['head_dim']}, batch {m['batch']}"
            ),
            "sparse": (
                f"B3 {variants['b3']:.1%}, B2 {variants['b2']:.1%}, B1 {variants['b1']:.1%} of "
                f"ideal over executed pairs (a v5e's band kernel at {kept:.2%} of pairs; B2, B1 by "
                f"its kernel table's ratios); overhead {1e3 * overhead_s / work.calls:.1f} ms per "
                "sparse call at 720p (batch 2 x 75,600 tokens x 12 heads x 128), linear in the "
                "call's q, fitted to a v5e's aggressive 720p loop "
                f"({m['aggressive_loop_ms'] / 1e3:.2f} s)"
            ),
            "exchange": "one device: nothing exchanged",
        },
    )
