"""Every arm's attention compiled at the run's real shapes (this host), or lowered with
``jax.export`` for a target's platform seen from another one, weights unread.

A checkpoint takes minutes to read (28.6 GB for 14B in bf16); a Pallas lowering error, a VMEM
overflow or an executor that cannot run on this platform would otherwise surface inside the first
arm's compile, after all of it. Each arm's ``attend`` (the dense arm, the noise floor's second
dense control and the sparse policy, whose program holds both branches of its dense/sparse
``lax.cond``) is compiled on abstract inputs, so a failure stops the run in seconds with the arm,
the executor, the shapes and the setting to change. Nothing falls back to another executor: that
would change what is timed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp

from evalharness.admission.run_timing import arm_executors
from evalharness.config import EvalConfig
from evalharness.estimates import DeviceTarget
from evalharness.refusal import PreflightRefusal
from kernels.policy.attention_policy import AttentionPolicy
from kernels.registry import PLATFORMS

log = logging.getLogger(__name__)

# jax.export platform names of the targets' platforms (those a plan is lowered for from here).
EXPORT_PLATFORMS = {p.name: p.export_platform for p in PLATFORMS.values() if p.export_platform}
# Executors that cannot be lowered for their platform from a machine without that device, and why.
NEEDS_THE_DEVICE_TO_LOWER = {
    "cudnn": (
        "JAX asks the CUDA plugin for cuDNN's version and the GPU's compute capability while "
        "tracing cuDNN flash attention, so it does not lower without a CUDA GPU; a checkpoint run "
        "compiles it on the GPU before reading any weight"
    ),
}


class CompileRefusal(PreflightRefusal):
    """An arm's attention does not compile at the run's shapes; nothing was loaded."""


def first_sparse_layer(schedule: Any, layers: int) -> int:
    """The first layer that can run sparse: its call site holds both branches of the policy."""
    return min(schedule.dense_layers(layers), layers - 1)


def check_attention_paths(
    arms: dict[str, Any],
    qkv: jax.ShapeDtypeStruct,
    layer: int,
    executors: dict[str, str],
    platform: str | None = None,
    disabled_checks: Sequence[jax.export.DisabledSafetyCheck] = (),
) -> dict[str, float]:
    """Compiles on this host (``platform`` None), or exports for ``platform``, each arm's attend.

    Exporting (``jax.export`` for ``"tpu"``) runs the whole lowering, Pallas-to-Mosaic included, on
    any machine, but not Mosaic's own compile (VMEM allocation): the dry run's VMEM arithmetic
    covers that. For ``"cuda"`` the Pallas GPU kernel lowers to its Triton custom call, whose own
    compile (shared memory, registers) runs on the GPU: the shared-memory arithmetic covers it.

    Args:
        arms: arm name -> ``attend(q, k, v, *, step, layer)`` (None entries are skipped).
        qkv: the abstract q (= k = v) of one call.
        layer: the layer index to call with (a sparse one, so both policy branches lower).
        executors: arm -> a description for messages.
        platform: None to compile here, else a ``jax.export`` platform ("tpu", "cuda").
        disabled_checks: ``jax.export`` safety checks to disable when exporting (custom calls
            that are not on JAX's list of stable ones, such as Triton's).

    Returns:
        ``{"aot_compile_<arm>_s": seconds}`` (``aot_export_<arm>_s`` when exporting).

    Raises:
        CompileRefusal: an arm failed; the message names the arm, executor, shapes and the fix.
    """
    step = jax.ShapeDtypeStruct((), jnp.int32)
    kind = "compile" if platform is None else "export"
    seconds: dict[str, float] = {}
    for arm, attend in arms.items():
        if attend is None:
            continue

        def call(q, k, v, step, attend=attend):
            return attend(q, k, v, step=step, layer=layer)

        start = time.perf_counter()
        try:
            if platform is None:
                jax.jit(call).lower(qkv, qkv, qkv, step).compile()
            else:
                checks = tuple(disabled_checks)
                jax.export.export(jax.jit(call), platforms=[platform], disabled_checks=checks)(
                    qkv, qkv, qkv, step
                )
        except Exception as error:  # noqa: BLE001 - any compile failure becomes one clear refusal
            message = _message(arm, executors.get(arm, arm), qkv, platform, error)
            raise CompileRefusal(message) from error
        key = f"aot_{kind}_{arm}_s"
        seconds[key] = time.perf_counter() - start
        log.info("ahead-of-time %s of the %s attention: %.2f s", kind, arm, seconds[key])
    return seconds


def lower_for_target(
    cfg: EvalConfig,
    target: DeviceTarget,
    attends: dict[str, Any],
    qkv: jax.ShapeDtypeStruct,
    policy: AttentionPolicy,
    lower: bool,
    problems: list[str],
    notes: list[str],
) -> dict[str, float]:
    """Exports every arm's attention for an accelerator target seen from another platform (on a
    GPU target, all but cuDNN: :func:`exportable_arms`); a refusal goes to ``problems``."""
    host = jax.devices()[0].platform
    platform = EXPORT_PLATFORMS.get(target.platform)
    if not lower or platform is None or target.platform == host or problems:
        if lower and problems and platform is not None:
            notes.append("lowering skipped: the plan already does not fit")
        return {}
    executors = arm_executors(cfg)
    describe = {**executors, "sparse": f"schedule {cfg.schedule.name}"}
    arms = exportable_arms(attends, executors, policy, notes)
    try:
        return check_attention_paths(
            arms,
            qkv,
            first_sparse_layer(policy.schedule, policy.num_layers),
            describe,
            platform=platform,
            disabled_checks=_disabled_checks(cfg.kernel.backend.value, platform),
        )
    except CompileRefusal as refusal:
        problems.append(f"lowering: {refusal}")
        return {}


def _disabled_checks(backend: str, platform: str) -> tuple[jax.export.DisabledSafetyCheck, ...]:
    """The export checks the Pallas GPU kernel's Triton custom call needs disabled for "cuda"."""
    if backend != "pallas_gpu" or platform != "cuda":
        return ()
    try:
        from kernels.executors.pallas_gpu import CUDA_EXPORT_DISABLED_CHECKS
    except ImportError:  # the export itself then fails with the dispatch's message
        return ()
    return tuple(CUDA_EXPORT_DISABLED_CHECKS)


def exportable_arms(
    arms: dict[str, Any], executors: dict[str, str], policy: Any, notes: list[str]
) -> dict[str, Any]:
    """The arms' attention functions that can be exported from a machine without the device: an
    arm whose executor needs the device to lower (``NEEDS_THE_DEVICE_TO_LOWER``) is left out with a
    note; when the dense arm's executor is one, the sparse arm's policy exports its sparse branch
    alone (its dense steps and layers run that executor; a dense schedule's sparse arm is left out).

    Args:
        arms: arm name -> ``attend(q, k, v, *, step, layer)`` (None entries are kept as None).
        executors: "dense" and "noise_floor" -> their executor names.
        policy: the sparse arm's ``kernels.policy.AttentionPolicy``.
        notes: appended with one line per arm (or branch) left out.

    Returns:
        arm name -> the function to export.
    """
    out = dict(arms)
    for arm in ("dense", "noise_floor"):
        why = NEEDS_THE_DEVICE_TO_LOWER.get(executors[arm])
        if why is not None and out.get(arm) is not None:
            del out[arm]
            notes.append(f"the {arm} arm ({executors[arm]}) was not lowered: {why}")
    dense = executors["dense"]
    if dense in NEEDS_THE_DEVICE_TO_LOWER and out.get("sparse") is not None:
        if policy.plan is None:
            del out["sparse"]
            notes.append(f"the sparse arm (a dense schedule: {dense}) was not lowered either")
        else:
            out["sparse"] = policy.sparse_branch
            notes.append(
                f"the sparse arm was lowered without its dense steps and layers, which run {dense}"
            )
    return out


def _message(
    arm: str, executor: str, qkv: jax.ShapeDtypeStruct, platform: str | None, error: Exception
) -> str:
    shape = "x".join(str(n) for n in qkv.shape)
    where = platform or jax.devices()[0].platform
    return (
        f"the {arm} arm's attention ({executor}) does not lower for q/k/v [{shape}] "
        f"{qkv.dtype} on {where}: {type(error).__name__}: {str(error)[:2000]}. No checkpoint "
        "weight was read. Change the executor (kernel.dense_executor / "
        "kernel.noise_floor_executor), the tiles (kernel.block_q, kernel.block_kv), the Pallas "
        "settings (kernel.block_kv_compute, kernel.vmem_limit_bytes on TPU; kernel.num_warps, "
        "kernel.num_stages on GPU), or the schedule; `python -m evalharness dry_run=true` shows "
        "the memory and the Pallas kernels' SMEM/VMEM or shared-memory budgets."
    )
