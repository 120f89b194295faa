"""``python -m evalharness dry_run=true target=tpu-v6e-8 model=wan2.1-t2v-14b resolution=1440p``.

Answers "will it fit, and how long will it take" on a machine without the hardware: the config is
resolved for the target's platform, the transformer built from abstract weights (of a set
``model.checkpoint``, a folder or a hub repository id, only the transformer's config is read), and
:func:`evalharness.admission.sizing.size_run` gives the memory table, the Pallas kernels' limits,
the lowering and the time estimate; in the seed's setting (14B on ``tpu-v6e-8`` at a seed
resolution) the seed's measured figures stand beside ours. Fitting and time are separate
verdicts: exit 0 when it fits within ``max_minutes``, 2 when it does not fit (whatever the time),
3 when it fits but the estimate exceeds ``max_minutes``. A sweep of dry runs prints one line per
job (:func:`dry_run_table`).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import Any, TypeVar

import jax
from omegaconf import DictConfig, OmegaConf, open_dict

from evalharness import exit_codes
from evalharness.admission.advice import checked_advice
from evalharness.admission.compile_check import EXPORT_PLATFORMS
from evalharness.admission.phase_compile import PHASE_ROWS
from evalharness.admission.sizing import RunSizing, quadratic_arms, size_run
from evalharness.assembly import pin_revision, platform_choices, transformer_config_for
from evalharness.config import ChipCompileMode, EvalConfig, to_config
from evalharness.estimates import (
    CONTRADICTION,
    get_target,
    in_seed_setting,
    rates_for,
    seed_prediction,
    seed_row,
    seed_table,
)
from evalharness.formatting import markdown_table
from kernels.executors.pallas_gpu_budget import DEFAULT_NUM_STAGES, default_num_warps
from models.config import WanTransformerConfig, get_transformer_config

# A dry run's exit codes (``evalharness.exit_codes``): fitting and time are separate verdicts.
FITS, DOES_NOT_FIT, OVER_TIME = exit_codes.OK, exit_codes.REFUSED, exit_codes.OVER_TIME


@dataclasses.dataclass(frozen=True)
class DryRunPlan:
    """A dry run's outcome.

    Attributes:
        code: ``FITS`` (0), ``DOES_NOT_FIT`` (2) or ``OVER_TIME`` (3).
        report: the Markdown report.
        row: its line in a dry-run sweep's table (:func:`dry_run_table`).
        error: the command's one ``error:`` line when it does not fit or is over time, else None.
    """

    code: int
    report: str
    row: dict[str, Any]
    error: str | None = None


def dry_run(cfg: EvalConfig | DictConfig | dict) -> tuple[int, str]:
    """Plans the run on its target and returns (exit code, report).

    Args:
        cfg: the configuration; ``target`` names the device (None: this host, ``cpu``).

    Returns:
        The report and ``FITS`` (0) when the run fits within ``max_minutes``, ``DOES_NOT_FIT`` (2)
        with the reasons and settings that would fit, or ``OVER_TIME`` (3) when it fits but
        the time estimate exceeds ``max_minutes``.
    """
    planned = plan_dry_run(cfg)
    return planned.code, planned.report


def plan_dry_run(cfg: EvalConfig | DictConfig | dict) -> DryRunPlan:
    """:func:`dry_run`, with the plan's line for a sweep's table."""
    started = time.perf_counter()
    # A hub checkpoint: its configs fetched (or read from the cache), the revision pinned.
    requested = pin_revision(to_config(checkpoint_optional(cfg)))
    target = get_target(requested.target or "cpu")
    cfg = platform_choices.resolve(requested, target.platform)
    if cfg.model.checkpoint:  # read config.json only: the architecture must match the preset
        tcfg = transformer_config_for(cfg.model)
    else:
        tcfg = get_transformer_config(cfg.model.name)
    devices = cfg.parallel.sequence or target.devices
    host = jax.devices()[0].platform
    on_host = target.platform == host == "cpu"
    # On its own platform a dry run plans exactly as the run's preflight would.
    arms = quadratic_arms(cfg) if on_host else ()
    exit_codes.stop_if_signalled()  # safe points: a dry run has nothing to save
    sizing = size_run(cfg, tcfg, target, devices=devices, compile_arms=arms)
    exit_codes.stop_if_signalled()
    problems = [p for p in (sizing.memory.problem(), *sizing.problems) if p]
    advice = []
    if not sizing.memory.fits:
        advice = checked_advice(requested, sizing, lambda c: _replan(c, tcfg, target, arms))
    plan_s = time.perf_counter() - started
    report = _report(cfg, tcfg, sizing, problems, plan_s, advice)
    if problems:
        code = DOES_NOT_FIT
    else:
        code = OVER_TIME if _over_time(cfg, sizing) else FITS
    row = summary_row(cfg, tcfg, sizing, code, plan_s)
    return DryRunPlan(code, report, row, _error_line(cfg, sizing, problems, code))


def _error_line(cfg: EvalConfig, sizing: RunSizing, problems: list[str], code: int) -> str | None:
    """The one ``error:`` line of a plan that does not fit (its reasons) or is over time."""
    what = f"model={cfg.model.name} resolution={cfg.resolution.name} on {sizing.target.name}"
    if code == DOES_NOT_FIT:
        reasons = "; ".join(p.splitlines()[0] for p in problems)
        return f"{what} does not fit: {reasons} (the report above names settings that fit)"
    if code == OVER_TIME:
        return (
            f"{what} fits, but its estimated {sizing.estimate.total_minutes:,.1f} minutes exceed "
            f"max_minutes={cfg.max_minutes:g}: raise max_minutes, or lower steps, warm_runs or "
            "the resolution"
        )
    return None


def _replan(requested: EvalConfig, tcfg: Any, target: Any, arms: tuple[str, ...]) -> RunSizing:
    """A requested config planned on ``target`` with our model only (no chip compile, no
    lowering): what each piece of advice is checked with."""
    cfg = platform_choices.resolve(requested, target.platform)
    cfg = dataclasses.replace(cfg, chip_compile=ChipCompileMode.off)
    devices = cfg.parallel.sequence or target.devices
    return size_run(cfg, tcfg, target, devices=devices, lower=False, compile_arms=arms)


def _over_time(cfg: EvalConfig, sizing: RunSizing) -> bool:
    return sizing.estimate.total_minutes > cfg.max_minutes


def _time_verdict(cfg: EvalConfig, sizing: RunSizing, fits: bool) -> str:
    """The time line of the verdict: the estimate against ``max_minutes``, apart from fitting."""
    minutes = sizing.estimate.total_minutes
    if _over_time(cfg, sizing):
        code = f" (exit {OVER_TIME})" if fits else ""
        return (
            f"- Time: OVER max_minutes: an estimated {minutes:,.1f} minutes exceeds "
            f"max_minutes={cfg.max_minutes:g}{code}; raise max_minutes, or lower steps, "
            "warm_runs or the resolution"
        )
    return f"- Time: within max_minutes: an estimated {minutes:,.1f} of {cfg.max_minutes:g} minutes"


_Config = TypeVar("_Config", DictConfig, dict, EvalConfig)


def checkpoint_optional(cfg: _Config) -> _Config:
    """A dry run reads no weights: an unset (``???``) checkpoint of a Hydra config becomes None
    (a plain dict or an ``EvalConfig`` comes back as it is)."""
    if isinstance(cfg, DictConfig) and OmegaConf.is_missing(cfg.model, "checkpoint"):
        with open_dict(cfg):
            cfg.model.checkpoint = None
    return cfg


def _report(
    cfg: EvalConfig,
    tcfg: Any,
    sizing: RunSizing,
    problems: list[str],
    seconds: float,
    advice: list[str],
) -> str:
    kernel = cfg.kernel
    lines = [
        f"# Dry run: {cfg.model.name} at {cfg.resolution.name} on {sizing.target.name} "
        f"({sizing.devices} device(s) for the sequence)",
        "",
        f"- {cfg.resolution.video.tokens:,} tokens per sample ({cfg.resolution.frames} frames, "
        f"{cfg.resolution.width}x{cfg.resolution.height})",
        f"- schedule {cfg.schedule.name} ({cfg.schedule.variant}), {cfg.steps} steps, "
        f"{cfg.warm_runs} warm runs, batch {sizing.batch} per forward, dtype {cfg.dtype.value}, "
        f"params {cfg.model.param_dtype.value}",
        f"- attention: backend {kernel.backend.value}, tiles {kernel.block_q} x {kernel.block_kv}; "
        f"dense controls {kernel.dense_executor.value} (dense arm) and "
        f"{kernel.noise_floor_executor.value} (noise floor)",
        f"- device: {sizing.target.source}",
        *_checkpoint_line(cfg),
        "",
        "## Memory per device",
        "",
        _memory_source(sizing),
        "",
        sizing.memory.to_markdown(),
        *_compiler_beside_model(sizing),
        *(["", "## Host memory", "", sizing.host.to_markdown()] if sizing.host else []),
        "",
        *_time_section(sizing),
        *_against_the_seed(cfg, tcfg, sizing),
    ]
    if sizing.budgets:
        lines += ["", "## Pallas TPU SMEM / VMEM", "", sizing.budget_markdown()]
    if sizing.gpu_shared_memory is not None:
        lines += ["", _shared_memory_line(cfg, tcfg, sizing)]
    if sizing.lowering:
        lowered = ", ".join(
            f"{k.split('_', 2)[-1][:-2]} {v:.1f} s" for k, v in sizing.lowering.items()
        )
        platform = EXPORT_PLATFORMS[sizing.target.platform]
        lines += ["", f"Lowered for {platform} with jax.export: {lowered}."]
    lines += [f"Note: {note}" for note in sizing.notes]
    verdict = "FITS" if not problems else "DOES NOT FIT"
    source = _verdict_source(sizing)
    lines += ["", f"## Verdict: {verdict} (planned in {seconds:.1f} s, nothing allocated{source})"]
    if not problems:
        lines += ["- Fits: memory, SMEM/VMEM, shared memory and the compile all pass"]
    lines += [f"- {p}" for p in problems]
    lines += [_time_verdict(cfg, sizing, fits=not problems)]
    if advice:
        lines += ["", "To fit (each setting applied and planned again):"]
        lines += [f"- {a}" for a in advice]
    return "\n".join(lines)


def _time_section(sizing: RunSizing) -> list[str]:
    """The whole job's estimate phase by phase, then the FLOP model's loops and rows."""
    return [
        "## Time",
        "",
        "The whole job, phase by phase:",
        "",
        sizing.estimate.to_markdown(),
        "The FLOP model's loops and rows:",
        "",
        sizing.timing.to_markdown(),
    ]


def _checkpoint_line(cfg: EvalConfig) -> list[str]:
    """Which checkpoint the architecture was read from (a dry run reads no weight), or that the
    run is on random weights."""
    model = cfg.model
    if model.random_weights:
        return [
            f"- weights: random at {model.name}'s real shapes and dtype (model.checkpoint=random, "
            f"model.seed={model.seed}): no checkpoint; speed figures real, quality meaningless"
        ]
    if not model.checkpoint:
        return []
    commit = f" at commit {model.revision}" if model.revision else ""
    return [f"- checkpoint {model.checkpoint}{commit}: its transformer config read, no weight"]


def _against_the_seed(cfg: EvalConfig, tcfg: Any, sizing: RunSizing) -> list[str]:
    """The seed's measured figures beside ours, when the seed measured this setting."""
    if not in_seed_setting(cfg.model.name, sizing.target.name, cfg.resolution.name):
        return []
    ours = seed_prediction(sizing.timing, sizing.sparse, tcfg, rates_for(sizing.target))
    return [
        "",
        "## Against the seed's measurements",
        "",
        "The seed's figures (Wan 2.1 14B, 81 frames, 40 steps, 8 x v6e, its aggressive schedule "
        "at 38.87% of pairs) / this run's estimate; they compare only when this run's schedule, "
        "steps and tiles are the seed's (``experiment=seed_" + cfg.resolution.name + "``).",
        "",
        seed_table([seed_row(cfg.resolution.name, ours)]),
        "",
        CONTRADICTION,
    ]


def _shared_memory_line(cfg: EvalConfig, tcfg: Any, sizing: RunSizing) -> str:
    kernel, limit = cfg.kernel, sizing.target.shared_memory_bytes or 0
    stages = kernel.num_stages or DEFAULT_NUM_STAGES
    warps = kernel.num_warps or default_num_warps(kernel.block_q, tcfg.attention_head_dim)
    return (
        f"Pallas GPU shared memory: ~{sizing.gpu_shared_memory / 1024:,.0f} KiB per program "
        f"(tiles {kernel.block_q} x {kernel.block_kv}, head_dim {tcfg.attention_head_dim}, "
        f"{stages} K/V stages, {warps} warps) of {limit / 1024:,.0f} KiB per block on "
        f"{sizing.target.name}."
    )


_OUR_MODEL = "Our model (XLA:CPU's plan of the blocks, our executor arithmetic)"


def _memory_source(sizing: RunSizing) -> str:
    """Whose plan the memory table is."""
    chip = sizing.chip
    if chip.compiled_by and sizing.model_memory is None:
        return f"{_OUR_MODEL}: the compile for {chip.compiled_by} was refused (see the verdict)."
    if chip.compiled_by:
        seconds = ", ".join(f"{arm} {s.program.compile_s:,.0f} s" for arm, s in chip.steps.items())
        where = (
            f"{sizing.devices} chips on the sequence mesh with its all-to-all"
            if sizing.devices > 1
            else "one chip"
        )
        compilers = (
            "XLA's GPU compiler, Triton (Pallas GPU) and cuDNN"
            if sizing.target.platform == "gpu"
            else "XLA's TPU compiler and Mosaic"
        )
        return (
            f"Compiled for {chip.compiled_by}: each arm's whole denoising loop (every layer, "
            f"{where}, the run's weight placement), planned by {compilers}; "
            f"{_phases_source(sizing)}. Compile time on this machine: {seconds}."
        )
    if chip.not_compiled:
        return f"{_OUR_MODEL}; {chip.not_compiled}."
    return "Planned by this host's compiler (XLA) on abstract weights."


def _phases_source(sizing: RunSizing) -> str:
    """Whose figures the text encoder and VAE rows are."""
    if not sizing.phases:
        return "the text encoder and VAE rows are our arithmetic (our model)"
    compiled = [f"the {PHASE_ROWS[phase]}" for phase in sizing.phases]
    seconds = ", ".join(
        f"{phase} {p.program.compile_s:,.0f} s" for phase, p in sizing.phases.items()
    )
    ours = [f"the {row}" for phase, row in PHASE_ROWS.items() if phase not in sizing.phases]
    rest = f"; {' and '.join(ours)} row is our arithmetic (our model)" if ours else ""
    it = "them" if len(compiled) > 1 else "it"
    return (
        f"{' and '.join(compiled)} compiled too, as the run calls {it}, on the chip that runs "
        f"{it} ({seconds}){rest}"
    )


def _compiler_beside_model(sizing: RunSizing) -> list[str]:
    """Each arm's peak from the chip's compiler beside our model's, with the difference."""
    compiled, model = sizing.memory, sizing.model_memory
    if model is None:
        return []
    gib = 2**30
    rows = [
        {
            "arm": arm,
            "compiler GiB": compiled.peak(arm) / gib,
            "model GiB": model.peak(arm) / gib,
            "model - compiler GiB": (model.peak(arm) - compiled.peak(arm)) / gib,
            **{
                f"{phase} phase: compiler / model GiB": (
                    f"{compiled.phase_bytes(arm)[phase] / gib:,.2f} / "
                    f"{model.phase_bytes(arm)[phase] / gib:,.2f}"
                )
                for phase in ("encode", "denoise", "decode")
            },
            "peak phase: compiler / model": f"{_peak_phase(compiled, arm)} / "
            f"{_peak_phase(model, arm)}",
        }
        for arm in compiled.arms
    ]
    columns = [(k, k, "{:,.2f}" if k.endswith(" GiB") and "/" not in k else "{}") for k in rows[0]]
    return [
        "",
        f"Peak per device, the {sizing.target.platform.upper()} compiler beside our model:",
        "",
        markdown_table(rows, columns),
    ]


def _peak_phase(table: Any, arm: str) -> str:
    phases = table.phase_bytes(arm)
    return max(phases, key=phases.__getitem__)


def _verdict_source(sizing: RunSizing) -> str:
    chip = sizing.chip
    if chip.compiled_by and sizing.model_memory is None:
        return f"; memory from our model, the compile for {chip.compiled_by} was refused"
    if chip.compiled_by:
        return f"; compiled for {chip.compiled_by}"
    if chip.not_compiled:
        return f"; memory from our model, {chip.not_compiled}"
    return ""


# A dry-run sweep's table (``python -m evalharness -m dry_run=true experiment=seed_720p,...``):
# each job's line lands in the sweep's summary file and the multirun's callback
# (``evalharness.comparison.sweep.SweepSummary``) prints them as one table.
VERDICTS = {FITS: "fits", DOES_NOT_FIT: "does not fit", OVER_TIME: "fits, over max_minutes"}
# The seed's figures a row carries (``evalharness.estimates.seed_comparison``), by column.
_SEED_KEYS = ("dense_s", "sparse_s", "speedup")
COLUMNS = (
    ("job", "sweep_job", "{}"),
    ("model", "model", "{}"),
    ("resolution", "resolution", "{}"),
    ("schedule", "schedule", "{}"),
    ("target", "target", "{}"),
    ("verdict", "verdict", "{}"),
    ("peak GiB / device", "peak", "{}"),
    ("peak from", "peak_from", "{}"),
    ("our model's peak GiB", "model_peak", "{}"),
    ("est. minutes", "minutes", "{:,.1f}"),
    ("max_minutes", "max_minutes", "{:g}"),
    ("dense loop s seed / ours", "dense_s", "{}"),
    ("sparse loop s seed / ours", "sparse_s", "{}"),
    ("speedup seed / ours", "speedup", "{}"),
    ("planned in s", "plan_s", "{:,.0f}"),
)


def summary_row(
    cfg: EvalConfig, tcfg: WanTransformerConfig, sizing: RunSizing, code: int, plan_s: float
) -> dict[str, str | float]:
    """One job's line: what was planned, the verdict, the peak and whose it is (the chip's
    compiler, with our model's beside, or ours), the loop times beside the seed's, the plan's time.

    Args:
        cfg: the job's config, resolved for the target.
        tcfg: the transformer architecture.
        sizing: the job's ``RunSizing`` on the target.
        code: the dry run's exit code.
        plan_s: the dry run's seconds on this machine.
    """
    memory, model, gib = sizing.memory, sizing.model_memory, 2**30
    row: dict[str, str | float] = {
        "model": cfg.model.name,
        "resolution": cfg.resolution.name,
        "schedule": cfg.schedule.name,
        "target": sizing.target.name,
        "verdict": VERDICTS.get(code, f"exit {code}"),
        "peak": f"{memory.peak_bytes / gib:.2f} / {memory.device_bytes / gib:.2f}",
        "peak_from": sizing.chip.compiled_by or "our model",
        "model_peak": f"{model.peak_bytes / gib:.2f}" if model else "-",
        "plan_s": plan_s,
        "minutes": sizing.estimate.total_minutes,
        "max_minutes": cfg.max_minutes,
    }
    ours = seed_prediction(sizing.timing, sizing.sparse, tcfg, rates_for(sizing.target))
    ours = {key: ours[key] for key in _SEED_KEYS}
    if in_seed_setting(cfg.model.name, sizing.target.name, cfg.resolution.name):
        cells = seed_row(cfg.resolution.name, ours)
        return row | {key: cells[key] for key in _SEED_KEYS}
    return row | {key: f"- / {value:,.2f}" for key, value in ours.items()}


def dry_run_table(rows: Sequence[dict[str, Any]]) -> str:
    """The sweep's dry runs as a Markdown table, job by job."""
    ordered = sorted(rows, key=lambda row: row.get("sweep_job", -1))
    return markdown_table(ordered, COLUMNS)
