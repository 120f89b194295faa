"""``python -m evalharness.bench.negative_controls``: does the gate fail a broken sparse arm?

Runs the default job (``python -m evalharness``'s config) once dense, then once per sparse arm:
the correct one and each negative control of ``kernels.policy.negative_controls`` (every head
spatial, every head temporal, every head given the other layout, temporal heads' outputs left in
the temporal layout). Each is measured against the one dense arm with the gate's metric
(``psnr_db``: raw-frame PSNR of the whole video), the worst frame, SSIM and LPIPS, and gets the gate's
verdict at ``gate.min_psnr_db`` (28 dB, the CI gate's, where the config sets none). A sound
harness passes the correct row and fails every other. Nothing is timed; each sparse arm runs its
routing-recording policy (the sparse arm's latents), so each row also reports the fraction of
heads that ran in the temporal layout.

Usage:
    python -m evalharness.bench.negative_controls [--controls ...] [--json] [OVERRIDE ...]
    python -m evalharness.bench.negative_controls gate.min_psnr_db=30   # the gate's threshold
    python -m evalharness.bench.negative_controls schedule=aggressive   # Hydra overrides
    python -m evalharness.bench.negative_controls model=tiny-random     # random weights pass all
    python -m evalharness.bench.negative_controls model=tiny-planted    # the planted heads

The default model ``tiny`` (trained here on moving shapes, ``python -m models.training``) shows
what a wrong mask costs a model that learned its attention; ``tiny-planted`` (heads planted
spatial or temporal, ``models.planted_heads``) shows whether the harness detects attention errors
on a construction built to expose them.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from evalharness.assembly import (
    Components,
    build_attention,
    build_components,
    encode_contexts,
    run_sampler,
    transformer_config_for,
)
from evalharness.bench.mlflow_record import emit
from evalharness.bench.report import report_markdown
from evalharness.bench.run_config import bench_parser, config_or_exit
from evalharness.config import EvalConfig, NegativeControl
from evalharness.evidence import frame_quality, lpips_frames
from evalharness.formatting import markdown_table
from evalharness.gate import check_gate
from evalharness.machine import machine_info
from evalharness.metric_names import Metric
from kernels.policy import QUALITY_CONTROLS
from models.pipeline import DenoiseLoop

DEFAULT_MIN_PSNR_DB = 28.0  # the CI gate's threshold (.ci/run)
ROW_NAMES = {"none": "correct"}
COLUMNS = (
    ("arm", "arm", "{}"),
    ("psnr_db (gated)", Metric.PSNR_DB, "{:.2f}"),
    ("worst frame dB", Metric.PSNR_WORST_FRAME_DB, "{:.2f}"),
    ("mean frame dB", "psnr_frames_db", "{:.2f}"),
    ("SSIM", Metric.SSIM_FRAMES, "{:.4f}"),
    ("LPIPS", Metric.LPIPS, "{:.4f}"),
    ("heads temporal", "temporal_fraction", "{:.3f}"),
    ("gate", "gate", "{}"),
)


def _job_loop(cfg: EvalConfig) -> tuple[Components, Callable[[Any], np.ndarray]]:
    """The run's components, and the job's (prompt, seed) denoised with an attention function
    into its final latents (refusing NaN or Inf)."""
    components = build_components(cfg.model, cfg.dtype, cfg.cache_dir)
    contexts, negative = encode_contexts(cfg, components, [cfg.prompt])
    shape = (1, *cfg.resolution.video.latent_shape())
    noise = jax.random.normal(jax.random.key(cfg.seed), shape, jnp.float32)
    sampler = run_sampler(cfg)

    def latents_of(attend: Any) -> np.ndarray:
        loop = DenoiseLoop(
            components.transformer, sampler, guidance_scale=cfg.guidance_scale, attend=attend
        )
        out = loop(noise, contexts[cfg.prompt], negative)
        if not bool(out.finite):
            raise RuntimeError("the denoising loop produced NaN or Inf latents")
        return np.asarray(out.latents)

    return components, latents_of


def measure_controls(
    cfg: EvalConfig,
    controls: Sequence[str] = QUALITY_CONTROLS,
    *,
    min_psnr_db: float = DEFAULT_MIN_PSNR_DB,
    on_event: Callable[[str], None] = lambda message: None,
) -> list[dict[str, Any]]:
    """One dense arm, then one row per sparse arm of ``controls`` (``QUALITY_CONTROLS``;
    ``none`` is the correct arm) against it, judged at ``min_psnr_db``; ``cfg``'s own
    ``negative_control`` is ignored; ``on_event`` gets one line per phase.

    Returns:
        Per control: ``arm``, ``control``, ``psnr_db``, ``psnr_worst_frame_db``,
        ``psnr_frames_db``, ``ssim_frames``, ``lpips``, ``temporal_fraction`` (heads run in the temporal
        layout over sparse cells; None when no cell is sparse), ``max_abs_latent_diff``,
        ``gate_passed``, ``gate`` and ``seconds``.

    Raises:
        ValueError: an unknown control, or a schedule that is not sparse.
    """
    if not cfg.schedule.sparse:
        raise ValueError(f"schedule={cfg.schedule.name} is dense; pick a sparse schedule")
    for control in controls:
        NegativeControl(control)  # unknown names fail before any work
    started = time.perf_counter()
    tcfg, video = transformer_config_for(cfg.model), cfg.resolution.video
    components, latents_of = _job_loop(cfg)
    setup = build_attention(cfg, video, tcfg)
    on_event(f"dense arm ({cfg.kernel.dense_executor.value})")
    dense_latents = latents_of(setup.dense)
    dense_frames = components.decode(dense_latents)
    on_event(f"dense arm done in {time.perf_counter() - started:.1f} s")
    rows = []
    for control in controls:
        start = time.perf_counter()
        arm_cfg = dataclasses.replace(cfg, negative_control=NegativeControl(control))
        arm = build_attention(arm_cfg, video, tcfg)
        # The recording twin computes the sparse arm's latents and also keeps its routing.
        latents = latents_of(arm.recording if arm.recording is not None else arm.sparse)
        frames = components.decode(latents)
        quality = frame_quality(dense_frames, frames)
        metrics = {
            Metric.PSNR_DB: quality.video_psnr_db,
            Metric.PSNR_WORST_FRAME_DB: quality.worst_psnr_db,
            "psnr_frames_db": quality.mean_psnr_db,
            Metric.SSIM_FRAMES: quality.mean_ssim,
            Metric.LPIPS: float(np.mean(lpips_frames(dense_frames, frames)[0])),
        }
        gate = check_gate(metrics, min_psnr_db=min_psnr_db, min_speedup=None)
        fraction = None
        if arm.recording is not None:
            fraction = arm.collect_stats().overall_temporal_fraction()
        rows.append(
            {
                "arm": ROW_NAMES.get(control, control),
                "control": control,
                **metrics,
                "temporal_fraction": fraction,
                "max_abs_latent_diff": float(np.max(np.abs(latents - dense_latents))),
                "gate_passed": gate.passed,
                "gate": "pass" if gate.passed else "FAIL",
                "seconds": time.perf_counter() - start,
            }
        )
        on_event(f"{rows[-1]['arm']}: psnr_db {metrics['psnr_db']:.2f} ({rows[-1]['gate']})")
    return rows


def sound(rows: Sequence[dict[str, Any]]) -> bool:
    """True when the correct arm passes the gate and every broken arm fails it."""
    return all(row["gate_passed"] == (row["control"] == "none") for row in rows)


def format_report(result: dict[str, Any]) -> str:
    """The result as Markdown: setup line, machine, the table and the verdict."""
    verdict = (
        "sound: the correct arm passes and every broken arm fails"
        if result["sound"]
        else "NOT SOUND: a broken arm passes the gate, or the correct arm fails it"
    )
    return report_markdown(
        "Negative controls against the gate",
        result["setup"],
        markdown_table(result["rows"], COLUMNS),
        f"Gate: psnr_db >= {result['min_psnr_db']:g} dB. Verdict: {verdict}.",
        result["machine"],
    )


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; exit status 1 when the verdict is not sound."""
    parser = bench_parser("evalharness.bench.negative_controls", __doc__, "schedule=aggressive")
    parser.add_argument(
        "--controls",
        nargs="+",
        default=list(QUALITY_CONTROLS),
        choices=QUALITY_CONTROLS,
        help="arms to run (none is the correct arm); default: all the quality controls (the "
        "speed control, redundant_dense, changes no frame: the main job's speedup gate fails it)",
    )
    args = parser.parse_args(argv)
    cfg = config_or_exit(parser, args.overrides)
    min_psnr_db = DEFAULT_MIN_PSNR_DB if cfg.gate.min_psnr_db is None else cfg.gate.min_psnr_db
    rows = measure_controls(
        cfg,
        args.controls,
        min_psnr_db=min_psnr_db,
        on_event=lambda message: print(message, file=sys.stderr, flush=True),
    )
    result = {
        "setup": {
            "model": cfg.model.name,
            "resolution": f"{cfg.resolution.name} ({cfg.resolution.frames}x"
            f"{cfg.resolution.height}x{cfg.resolution.width})",
            "schedule": cfg.schedule.name,
            "steps": cfg.steps,
            "backend": cfg.kernel.backend.value,
            "dtype": cfg.dtype.value,
        },
        "machine": machine_info(),
        "min_psnr_db": min_psnr_db,
        "rows": rows,
        "sound": sound(rows),
    }
    emit(args, result, format_report(result))
    return 0 if result["sound"] else 1


if __name__ == "__main__":
    sys.exit(main())
