"""What the FLOP model leaves out of a run on a CPU, measured: the loops' non-matmul work, the
second dense control's slower executor, the VAE's convolutions, and compiling.

On a CPU the time model's rate is this host's matmul rate (``targets.measure_matmul_flops``). A
whole loop of the seeded presets runs slower than its FLOPs at that rate (norms, rotary
embeddings, softmax and the sampler are memory-bound, and a shared host's other jobs take turns on
its cores), the noise floor's ``dot_product_attention`` materialises the whole ``[B, H, N, N]``
scores where ``xla_flash`` tiles them, and the VAE's 3-D convolutions reach a fraction of the
matmul rate. Each factor is the mean of measured runs over the FLOP model at this VM's 150
GFLOP/s float32 (the model: ``tiny-planted`` at ``cpu``, 2,160 tokens, 10 steps, a 2.11 s dense
loop, 1.67 s for ``conservative``'s sparse loop, 1.26 s for ``aggressive``'s, 2.88 s for a
decode at 14%):

| figure | value | measured (medians of 3 interleaved runs, per pair) |
|---|---|---|
| dense loop (``xla_flash``) | x1.4 | 13 pairs: 2.19 to 4.57 s, mean 2.96 s |
| sparse loop (any variant) | x1.8 | aggressive, 9 pairs: 1.80 to 3.06 s, mean 2.31 s (x1.84); conservative, 4 pairs: mean 2.94 s (x1.76) |
| ``dot_product_attention`` over ``xla_flash`` | x2.3 | the noise floor's median over the dense arm's, same rounds, 13 pairs: 1.4 to 3.2, mean 2.28 |
| VAE decode | 14% of the matmul rate | ``decode_<arm>_s``, 13 decodes after the first: 3.3 to 6.7 s, mean 4.2 s for 86.5 GFLOP |

Compiling once (``compile_<arm>_s`` and the log's ``compiled in``, same runs; seconds, not
factors: it is the compiler's own work): dense loop 2.0 to 2.7 s, sparse 3.8 to 6.1 s, noise floor
1.4 to 2.4 s, routing recording 5.1 to 12.8 s, VAE decoder about 4 s. A loop loaded from JAX's
persistent compilation cache (a search's later trials) takes 0.1 to 0.8 s.

Measured on this workplace's 2-core x86_64 CI VM, 2026-12-02, under a load of 1.5 to 5 (an idle
host runs the loops up to 1.3x faster); elsewhere the figures move, and the run's
``time_plan.md`` sits beside what it measured. Accelerators are not calibrated here
(``evalharness.estimates.time_rates``; compile time is the dry run's chip compile).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from evalharness.estimates.targets import DeviceTarget
from evalharness.machine import cpu_count, cpu_model

MEASURED_ON = "this workplace's 2-core x86_64 CI VM, 2026-12-02 (tiny preset, load 1.5-5)"
# The host the figures were measured on (``/proc/cpuinfo``'s model name, cores) and the float32
# matmul rate they are relative to (its probe read 140 to 257 GFLOP/s while runs were going; 150
# typically). On that host the planner uses this rate, not the probe (which moves 2x with load).
CALIBRATED_HOST = ("Intel(R) Xeon(R) Processor", 2)
REFERENCE_FLOPS = 150e9
# A whole loop's seconds over the FLOP model's at the reference matmul rate.
LOOP_FACTOR = {"dense": 1.4, "sparse": 1.8}
# The noise floor's executor over the dense arm's, same rounds (applies to ``dot_product_attention``
# as the second control of an ``xla_flash`` dense arm, the CPU's default pair).
SLOW_CONTROL = "dot_product_attention"
SLOW_CONTROL_FACTOR = 2.3
# The VAE decoder's share of the probed matmul rate.
VAE_EFFICIENCY = 0.14
# Seconds of compiling each program once (the tiny preset; the upper half of what was measured).
COMPILE_S = {
    "dense": 2.5,
    "noise_floor": 2.0,
    "sparse": 6.0,
    "VAE decoder": 4.0,
}
# Seconds of loading one loop from JAX's persistent compilation cache instead.
CACHED_LOAD_S = 0.5
# The row a loop's extra time is charged to, in ``TimeEstimate.seconds``.
OVERHEAD_ROW = "non-matmul work"


def loop_factors(arms: Mapping[str, str]) -> dict[str, float]:
    """Each arm's measured factor over the FLOP model, from arm -> its executor."""
    out = {}
    for arm, executor in arms.items():
        factor = LOOP_FACTOR["sparse" if arm == "sparse" else "dense"]
        if arm != "sparse" and executor == SLOW_CONTROL:
            factor *= SLOW_CONTROL_FACTOR
        out[arm] = factor
    return out


def overhead_row(step_seconds: Mapping[str, float], arms: Mapping[str, str]) -> dict[str, float]:
    """Seconds per step each arm spends beyond the FLOP model (``(factor - 1) x step``)."""
    factors = loop_factors(arms)
    return {arm: (factors[arm] - 1.0) * step_seconds[arm] for arm in step_seconds}


def compile_row(arms: Mapping[str, int]) -> dict[str, float]:
    """Seconds of compiling each of ``arms``' loops once per run (the sparse loop records its
    routing in its warm-up: no second loop), the VAE decoder charged to ``shared``."""
    row = {arm: COMPILE_S[arm] for arm in arms if arm in COMPILE_S}
    row["shared"] = COMPILE_S["VAE decoder"]
    return row


def source(arms: Mapping[str, str]) -> str:
    """The overhead row's source, in words."""
    factors = ", ".join(f"{arm} x{f:.1f}" for arm, f in loop_factors(arms).items())
    return f"whole loops over the FLOP model at the probed matmul rate: {factors}; measured on {MEASURED_ON}"


def host_cpu() -> tuple[str, int]:
    """This host's CPU model name and core count."""
    return cpu_model(), cpu_count()


def calibrated_target(target: DeviceTarget) -> tuple[DeviceTarget, str]:
    """The CPU ``target`` at the rate the factors were measured against, and the rate's source.

    On the calibrated host its float32 rate is :data:`REFERENCE_FLOPS` (every dtype scaled by the
    same ratio); elsewhere the probe stands and the factors are applied to it as they are.
    """
    probed = target.peak_flops["float32"] * target.devices
    if host_cpu() != CALIBRATED_HOST or probed <= 0:
        return target, f"this host's probe, {probed / 1e9:,.0f} GFLOP/s float32"
    scale = REFERENCE_FLOPS / probed
    peak = {dtype: rate * scale for dtype, rate in target.peak_flops.items()}
    source = (
        f"the calibrated VM's {REFERENCE_FLOPS / 1e9:,.0f} GFLOP/s float32 (this host is that "
        f"VM; its probe read {probed / 1e9:,.0f} now)"
    )
    return dataclasses.replace(target, peak_flops=peak), source
