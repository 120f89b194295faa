"""How long a comparison takes on a target: its loops and the work outside them.

:func:`time_of` puts together what the sizing knows of a run (its schedule's sparse work, its
pairs, its model's text encoder and VAE) and ``evalharness.estimates``' rates: the per-step table
of ``workload.estimate_time`` and the whole-run rows of ``run_time`` (loading, text encoding, VAE
decodes, the host side).
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

from evalharness.config import EvalConfig, config_pairs
from evalharness.estimates import (
    SHIPPED,
    VAE_EFFICIENCY,
    DeviceTarget,
    JobEstimate,
    JobKey,
    JobWork,
    MeasuredJob,
    RunWork,
    SparseWork,
    TimeEstimate,
    cpu_calibration,
    estimate_job,
    estimate_time,
    flop_model_phases,
    load_history,
    parameter_count,
    rates_for,
    run_rows,
    run_work,
    tpu_generation,
)
from evalharness.phases import PhaseTimes
from kernels.policy.attention_policy import AttentionPolicy
from models.config import TINY_PRESETS, WanTransformerConfig, get_transformer_config
from models.dtypes import dtype_of
from models.peak_memory import umt5_parameter_count, vae_parameter_count
from models.pipeline import forward_batch, uses_guidance
from models.random_weights import preset_vae_config, random_text_config
from models.text_encoder import UMT5Config
from models.tiny_components import TINY_UMT5_CONFIG
from models.vae import WanVAEConfig, decode_tiling
from models.vae_tiling import tile_windows

# Wan 2.1's text encoder (``text_encoder/config.json`` of the diffusers checkpoints).
UMT5_XXL = UMT5Config(
    vocab_size=256384, d_model=4096, d_kv=64, d_ff=10240, num_layers=24, num_heads=64
)


def text_encoder_config(cfg: EvalConfig) -> UMT5Config:
    """The run's text encoder: the tiny UMT5 for the tiny presets, UMT5-XXL for Wan, the small
    seeded one of ``models.random_weights`` on random weights."""
    if cfg.model.random_weights:
        return random_text_config(get_transformer_config(cfg.model.name).text_dim)
    return TINY_UMT5_CONFIG if cfg.model.name in TINY_PRESETS else UMT5_XXL


def vae_config(cfg: EvalConfig) -> WanVAEConfig:
    """The run's VAE: the tiny one for the tiny presets, Wan's for Wan (random weights too)."""
    return preset_vae_config(cfg.model.name)


def decode_tiles(cfg: EvalConfig) -> tuple[tuple[int, int], float]:
    """The latent ``(h, w)`` the VAE decoder runs on and how many times one decode runs it: the
    whole latent once (the tiny presets, or a latent within one tile), else every distinct tile
    window of ``models.vae_tiling.tile_windows`` (all of one full size)."""
    latent_h, latent_w = cfg.resolution.video.latent_shape()[-2:]
    tiling = decode_tiling(cfg.model.name)
    scale = vae_config(cfg).scale_factor_spatial
    if tiling is None or (
        latent_h <= tiling.tile_sample_min_height // scale
        and latent_w <= tiling.tile_sample_min_width // scale
    ):
        return (latent_h, latent_w), 1.0
    windows = tile_windows(tiling, latent_h, latent_w, scale)
    return windows.window_hw, float(len(windows.row_starts) * len(windows.col_starts))


def arm_executors(cfg: EvalConfig) -> dict[str, str]:
    """Arm -> its executor (dense, noise_floor, sparse: its schedule's variant); the noise floor's
    is named even when it does not run."""
    kernel = cfg.kernel
    return {
        "dense": kernel.dense_executor.value,
        "noise_floor": kernel.noise_floor_executor.value,
        "sparse": cfg.schedule.variant,
    }


def samples_per_step(cfg: EvalConfig) -> int:
    """Samples the model computes per denoising step: 2 with classifier-free guidance, else 1
    (the FLOPs, whether the passes run jointly or separately)."""
    return 2 if uses_guidance(cfg.guidance_scale, cfg.negative_prompt) else 1


def samples_per_call(cfg: EvalConfig) -> int:
    """Samples in one model call (the activations' batch): 2 only with joint guidance passes."""
    guided = uses_guidance(cfg.guidance_scale, cfg.negative_prompt)
    return forward_batch(guided, cfg.guidance_passes.value)


def time_of(
    cfg: EvalConfig,
    tcfg: WanTransformerConfig,
    target: DeviceTarget,
    devices: int,
    sparse: SparseWork | None,
    compiled: CompiledWork | None = None,
) -> TimeEstimate:
    """The time estimate of every arm on ``target``: the loops from what the schedule and plan
    execute (``sparse``: :func:`sparse_work`), the work outside them with ``compiled``'s FLOPs and
    compile seconds where the chip's compiler ran."""
    pairs = len(config_pairs(cfg))
    rate_source = None
    if target.platform == "cpu":  # the rate the CPU factors were measured against, on that VM
        target, rate_source = cpu_calibration.calibrated_target(target)
    rates = rates_for(target)
    loops = estimate_time(
        tcfg,
        cfg.resolution.video,
        target,
        steps=cfg.steps,
        guidance_batch=samples_per_step(cfg),
        warm_runs=cfg.warm_runs,
        noise_floor=cfg.noise_floor,
        param_dtype=cfg.model.param_dtype.value,
        dtype=cfg.dtype.value,
        devices=devices,
        sparse=sparse,
        forwards=samples_per_step(cfg) // samples_per_call(cfg),
        gathers=devices > 1 and cfg.model.name not in TINY_PRESETS,
        rates=rates,
        pairs=pairs,
    )
    dtype = cfg.dtype.value
    work = _run_work(cfg, tcfg, pairs)
    if compiled is not None:  # a phase not compiled, or counted as nothing, leaves ours
        prompts = samples_per_step(cfg)
        counted = {"text_flops": compiled.encode_flops and prompts * compiled.encode_flops,
                   "decode_flops": compiled.decode_flops}  # fmt: skip
        work = dataclasses.replace(work, **{k: v for k, v in counted.items() if v})
    once, sources = run_rows(
        work,
        loops.runs,
        flops_per_s=target.peak_flops[dtype] * rates.matmul_efficiency,
        float32_flops_per_s=target.peak_flops["float32"],
        **_vae_rate(target),
    )
    if target.platform == "cpu":
        return _cpu_calibrated(cfg, loops, once, sources, rate_source)
    if compiled is not None:
        once, sources = compiled.rows(once, sources, [*loops.runs, "shared"])
    return dataclasses.replace(loops, once=once, once_sources=sources)


@dataclasses.dataclass(frozen=True)
class CompiledWork:
    """What compiling for the target's chip measured of the work outside the loops.

    Attributes:
        encode_flops: XLA's cost analysis of encoding one prompt on the chip; None when the
            text encoder was not compiled (``chip_compile_phases``), 0 when the compiler counts
            none (XLA's GPU compiler does not here); our count stands for both.
        decode_flops: of one arm's whole decode (every tile) on the chip (None and 0 likewise).
        compile_s: column (an arm, or ``shared``) -> seconds its compiles took on this machine.
        compiled_on: this machine, in words (cores, load).
        compiled_by: the chip's compiler, in words.
    """

    encode_flops: float | None
    decode_flops: float | None
    compile_s: dict[str, float]
    compiled_on: str
    compiled_by: str

    def rows(
        self, once: dict[str, dict[str, float]], sources: dict[str, str], columns: list[str]
    ) -> tuple[dict[str, dict[str, float]], dict[str, str]]:
        """``once`` with a ``compile`` row, and the sources naming the compiler's FLOPs."""
        compiling = {c: self.compile_s.get(c, 0.0) for c in columns}
        by = f"XLA's cost analysis by {self.compiled_by}"
        none = f"ours: {by} counts no FLOPs in this program"
        # The setting that compiles each row's program (ChipPhases).
        setting = {"text encoding": "encoder", "VAE decode": "encoder_and_vae"}

        def source(row: str, flops: float | None) -> str:
            absent = (
                f"ours: not compiled for the chip; chip_compile_phases={setting[row]} compiles it"
            )
            return f"{sources[row]} ({absent if flops is None else by if flops > 0 else none})"

        return {**once, "compile": compiling}, {
            **sources,
            "text encoding": source("text encoding", self.encode_flops),
            "VAE decode": source("VAE decode", self.decode_flops),
            "compile": (
                f"the programs the run compiles (each arm's loop; the text encoder and VAE "
                f"under shared), seconds measured on {self.compiled_on} (a program kept in "
                "<cache_dir>/chip_programs/ from an earlier dry run keeps its first compile's "
                "seconds); the target's host "
                "compiles the same programs in a time not known here (a VAE decode's compile "
                "kept 1.8 of a 2-core machine's cores busy, so more and faster cores compile "
                "faster), so this machine's figure stands in"
            ),
        }


def reusable_seconds(
    timing: TimeEstimate, arms: tuple[str, ...] = ("dense", "noise_floor")
) -> float:
    """Seconds of ``timing``'s run that a later run in the same process, whose ``arms`` are the
    same programs on the same inputs (a schedule search's later trials), does not spend again:
    compiling those arms' loops and the VAE decoder (each loaded from JAX's persistent cache in
    ``cpu_calibration.CACHED_LOAD_S`` instead), decoding their videos (the dense-arm cache) and
    encoding the prompts (the text encoder's cache)."""
    once = timing.once
    compiled = once.get("compile", {})
    present = [arm for arm in arms if arm in timing.runs]
    saved = sum(compiled.get(arm, 0.0) for arm in present) + compiled.get("shared", 0.0)
    if compiled:
        saved -= cpu_calibration.CACHED_LOAD_S * (len(present) + 1)
    saved += sum(once.get("VAE decode", {}).get(arm, 0.0) for arm in present)
    saved += once.get("text encoding", {}).get("shared", 0.0)
    return max(saved, 0.0)


def _cpu_calibrated(
    cfg: EvalConfig,
    loops: TimeEstimate,
    once: dict[str, dict[str, float]],
    sources: dict[str, str],
    rate_source: str | None,
) -> TimeEstimate:
    """A CPU's estimate with what the FLOP model leaves out, measured (``cpu_calibration``): the
    loops' non-matmul work, the slower second control, and every loop's and the VAE's compile."""
    executors = {arm: name for arm, name in arm_executors(cfg).items() if arm in loops.runs}
    seconds = {
        **loops.seconds,
        cpu_calibration.OVERHEAD_ROW: cpu_calibration.overhead_row(loops.step_seconds, executors),
    }
    compile_row = cpu_calibration.compile_row(loops.runs)
    columns = [*loops.runs, "shared"]
    once = {**once, "compile": {c: compile_row.get(c, 0.0) for c in columns}}
    sources = {
        **sources,
        "compile": (
            "each loop once per run, the VAE "
            f"decoder once: seconds measured for the tiny preset on {cpu_calibration.MEASURED_ON}"
        ),
    }
    return dataclasses.replace(
        loops,
        seconds=seconds,
        sources={
            **loops.sources,
            cpu_calibration.OVERHEAD_ROW: cpu_calibration.source(executors),
            "rate": rate_source or "this host's probe",
        },
        once=once,
        once_sources=sources,
    )


def _vae_rate(target: DeviceTarget) -> dict[str, Any]:
    """The VAE's rate: a CPU target's measured matmul efficiency, else the stated one."""
    if target.platform == "cpu":
        efficiency = target.efficiency * cpu_calibration.VAE_EFFICIENCY
        source = (
            f"{cpu_calibration.VAE_EFFICIENCY:.0%} of this host's measured matmul rate (measured "
            "decodes, evalharness.estimates.cpu_calibration)"
        )
    else:
        efficiency, source = VAE_EFFICIENCY, f"{VAE_EFFICIENCY:.0%} of peak (stated, unmeasured)"
    return {"vae_efficiency": efficiency, "vae_rate": source}


def _run_work(cfg: EvalConfig, tcfg: WanTransformerConfig, pairs: int) -> RunWork:
    """What the run does besides its loops: seeded weights (the seeded presets, random weights)
    are drawn on the devices, the others read from a checkpoint; the tiny presets decode whole,
    Wan models tile by tile."""
    seeded = cfg.model.seeded
    text_config, vae = text_encoder_config(cfg), vae_config(cfg)
    weight = dtype_of(cfg.model.param_dtype).itemsize
    load = 0.0
    if not seeded:
        text_params = sum(umt5_parameter_count(text_config))
        vae_bytes = vae_parameter_count(vae) * 4  # the VAE runs in float32
        load = (parameter_count(tcfg) + text_params) * weight + vae_bytes
    return run_work(
        load_bytes=load,
        text_config=text_config,
        text_tokens=tcfg.text_len,
        prompts=samples_per_step(cfg),
        vae_config=vae,
        latent_shape=cfg.resolution.video.latent_shape()[1:],
        tiling=decode_tiling(cfg.model.name),
        pairs=pairs,
    )


def sparse_work(
    cfg: EvalConfig, tcfg: WanTransformerConfig, policy: AttentionPolicy
) -> SparseWork | None:
    """What the sparse arm executes: its sparse (step, layer) share and the plan's executed pairs
    (None for a dense schedule)."""
    schedule = cfg.schedule
    if policy.plan is None or not schedule.runs_sparse(cfg.steps, tcfg.num_layers):
        return None
    layers = tcfg.num_layers
    sparse_steps = cfg.steps - schedule.dense_steps(cfg.steps)
    cells = sparse_steps * (layers - schedule.dense_layers(layers)) / (cfg.steps * layers)
    return SparseWork(cells, policy.plan.executed_pairs_fraction, policy.plan.variant)


def job_arms(cfg: EvalConfig) -> tuple[str, ...]:
    """The arms a run compiles and times, in the order it runs them."""
    return ("dense", "sparse", "noise_floor") if cfg.noise_floor else ("dense", "sparse")


def job_key(cfg: EvalConfig, target: DeviceTarget, devices: int) -> JobKey:
    """What a measurement must share to stand for ``cfg``'s phases on ``target``: the kind of
    device (a TPU by its generation, so a dry run for ``tpu-v5e-1`` and a run on a ``TPU v5
    lite`` read the same measurements), the device count, the model and the video."""
    if target.platform == "tpu":
        device = f"tpu-{tpu_generation(target) or target.name.lower()}"
    else:
        device = "cpu" if target.platform == "cpu" else target.name.lower()
    video = cfg.resolution.video
    return JobKey(device, devices, cfg.model.name, (video.frames, video.height, video.width))


def job_work(cfg: EvalConfig) -> JobWork:
    """The work units of ``cfg``'s job (``phase_estimate.phase_units``)."""
    pairs = config_pairs(cfg)
    return JobWork(
        steps=cfg.steps,
        warm_runs=cfg.warm_runs,
        pairs=len(pairs),
        prompts=len({pair.prompt for pair in pairs}),
        arms=job_arms(cfg),
        frames=cfg.resolution.video.frames,
    )


def job_estimate(
    cfg: EvalConfig, target: DeviceTarget, devices: int, timing: TimeEstimate
) -> JobEstimate:
    """The whole job's estimate, phase by phase (``phase_estimate``): the latest measurement of
    each phase of the same job (shipped with the package, or made with this ``cache_dir``),
    scaled by its work, else the FLOP model's ``timing``. The compiles are expected warm when
    this ``cache_dir`` measured the same job before with the compilation cache on."""
    key, work = job_key(cfg, target, devices), job_work(cfg)
    own = load_history([Path(cfg.cache_dir) / "phases"])
    done_before = any(j.key == key and j.schedule == cfg.schedule.name for j in own)
    return estimate_job(
        key,
        work,
        flop_model_phases(timing, work),
        [*load_history([SHIPPED]), *own],
        flops_per_s=target.peak_flops.get(cfg.dtype.value, 0.0),
        warm_cache=cfg.compile_cache and done_before,
    )


def measured_job(
    cfg: EvalConfig, target: DeviceTarget, devices: int, timing: TimeEstimate, times: PhaseTimes
) -> MeasuredJob:
    """What a finished run measured, for the history later estimates read (``job_estimate``):
    its phases beside the FLOP model's figures for the same job, which scale it to another."""
    work = job_work(cfg)
    return MeasuredJob(
        key=job_key(cfg, target, devices),
        work=work,
        phases=times.seconds(),
        model_phases={p.value: s for p, s in flop_model_phases(timing, work).items()},
        wall_s=times.wall_s,
        created_at=time.time(),
        flops_per_s=target.peak_flops.get(cfg.dtype.value, 0.0),
        cache_hits=times.cache_hits or 0,
        schedule=cfg.schedule.name,
    )
