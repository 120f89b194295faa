"""One matched dense-vs-sparse comparison, as a plain function the CLI and the tests call.

``run(cfg) -> metrics``: preflight, prompt encoding, the arms compiled once, then for every
(prompt, seed) pair (one, or a prompt suite's ``prompts`` × ``seeds``) the arms timed side by
side, decoded and measured (``evalharness.comparison.pair``), then the statistics across pairs
(``evalharness.config.pairs``), artifacts, MLflow and the gate. A suite's pairs get sub-folders and
MLflow child runs under the run's own.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
import traceback
from pathlib import Path
from typing import NoReturn

import jax
import jax.numpy as jnp
from omegaconf import DictConfig, OmegaConf

from evalharness import tracking
from evalharness.admission import Admission, admit, check_output_folders, io_hint
from evalharness.arms import PreparedArm, rebind_arm
from evalharness.assembly import (
    Components,
    build_components,
    checkpoint_tags,
    pin_revision,
    platform_choices,
)
from evalharness.comparison import (
    Comparison,
    PairInputs,
    PairOutput,
    Progress,
    compare_pair,
    reused_dense_arms,
    suite_report,
)
from evalharness.config import EvalConfig, Pair, run_pairs, to_config, to_plain_dict
from evalharness.evidence import (
    DenseArms,
    code_version,
    run_folder,
    run_status,
    suite_metrics,
)
from evalharness.exit_codes import RunFailed, Terminated
from evalharness.gate import GateResult, check_gate
from evalharness.metric_names import RunMetrics
from evalharness.refusal import PreflightRefusal
from evalharness.tracking import (
    NullTracker,
    Tracker,
    check_tracking,
    closed_on_error,
    description_tags,
    environment_tags,
    flatten,
    make_tracker,
    multihost,
    redacted,
    redacted_values,
    run_tags,
)
from kernels.parallel.mesh import describe_mesh
from models.pipeline import uses_guidance

log = logging.getLogger(__name__)

PHASES = ("preflight", "build model", "encode prompts", "compile arms")


def phases(pairs: list[Pair]) -> tuple[str, ...]:
    """The run's phases: :data:`PHASES`, one per pair (timing, routing, decode, quality,
    files), then the summary across pairs, the gate and the tracker's upload."""
    return (*PHASES, *(pair_phase(pair, len(pairs)) for pair in pairs), "summary")


def pair_phase(pair: Pair, count: int) -> str:
    """The phase name of one pair, e.g. ``pair 2/6 (p0-s1)``; ``compare`` for a single pair."""
    return "compare" if count == 1 else f"pair {pair.index + 1}/{count} ({pair.name})"


class GateFailed(RuntimeError):
    """The run finished but missed a gate threshold; ``metrics`` holds what it measured."""

    def __init__(self, message: str, metrics: RunMetrics) -> None:
        super().__init__(message)
        self.metrics = metrics


def make_run_dir(output_root: Path, name: str) -> Path:
    """A fresh run folder; ``mkdtemp`` guarantees two simultaneous runs never share one."""
    runs = output_root / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path(tempfile.mkdtemp(prefix=f"{stamp}-{name}-", dir=runs))


def run(cfg: EvalConfig | DictConfig | dict) -> RunMetrics:
    """Runs one comparison and returns its metrics.

    Args:
        cfg: the configuration (Hydra's DictConfig, a dict, or an ``EvalConfig``).

    Returns:
        The metrics (also in ``metrics.json`` of the run folder and in MLflow), with ``run_dir``
        and ``mlflow_run_id`` among them.

    Raises:
        preflight.PreflightRefusal: the run would exceed ``max_minutes`` or device memory, or
            (``tracking.TrackingUnavailable``) ``logger.tracking_uri`` names a store that
            cannot be used, or (``multihost.ConfigMismatch``) the processes of a multi-host run
            were started with different configs; nothing was allocated and no run folder or
            MLflow run was created.
        GateFailed: the run finished but missed a gate threshold.
        ValueError, FileNotFoundError: bad configuration or checkpoint, before any generation.
    """
    started = time.perf_counter()  # the whole wall time, admission included
    cfg, plan, pairs, progress = _admitted(to_config(cfg))
    primary = multihost.is_primary()
    run_dir, tracker = _open_run(cfg, primary)
    try:
        with closed_on_error(tracker):
            _record_start(cfg, plan, run_dir, tracker)
            components = _build_model(cfg, plan, progress)
            inputs, text_encode_s = _encode_prompts(cfg, plan, components, progress, pairs)
            comparison = Comparison(
                cfg, plan, progress, run_dir, tracker, components, text_encode_s
            )
            measured, per_pair = _compare(comparison, inputs)
            measured = measured.with_values(
                plan.flops.as_metrics(), total_wall_s=time.perf_counter() - started
            )
            metrics, gate = _finish(comparison, measured, per_pair)
            if primary:
                run_status.end_status(run_dir, run_status.FINISHED, gate_passed=gate.passed)
    except BaseException as err:
        if primary:
            _end_badly(err, cfg, run_dir)
        raise
    finally:
        progress.close()
        if not primary:  # the other processes' files were scratch: the primary wrote the run's
            shutil.rmtree(run_dir, ignore_errors=True)
    return _verdict(metrics, gate, run_dir, tracker.run_id)


def _admitted(cfg: EvalConfig) -> tuple[EvalConfig, Admission, list[Pair], Progress]:
    """The config with every ``auto`` pinned, admitted on every process together (a refusal on
    one process is a refusal on all), its pairs, and the progress display (the primary's)."""
    # A multi-process run joins before anything else touches JAX (platform_choices reads the platform).
    multihost.join(cfg.parallel.distributed)
    # Every ``auto`` becomes this platform's concrete choice here, so the recorded config, the cache
    # key and the MLflow params name the tiles, executors and dtype that were actually run.
    cfg = pin_revision(platform_choices.resolve(cfg))  # a hub checkpoint's revision: its commit
    # Several processes must run one program: a mismatch fails on all of them, before any work.
    if jax.process_count() > 1:
        versions = {"code": code_version(), "jax": jax.__version__}
        multihost.same_config({**to_plain_dict(cfg), "code and jax version": versions})
    pairs = run_pairs(cfg.prompt, cfg.seed, cfg.prompts, cfg.seeds)
    primary = multihost.is_primary()
    progress = Progress(phases(pairs), enabled=cfg.progress.enabled if primary else False)
    progress.phase("preflight")
    refusal = plan = None
    try:
        if primary:  # only the primary logs; a wrong URI is refused before the probe compiles
            logger = cfg.logger
            check_tracking(
                logger.kind, logger.tracking_uri, logger.experiment_name, cfg.output_root
            )
            check_output_folders(cfg, len(pairs))
        plan = admit(cfg)  # nothing is allocated before this passes
    except PreflightRefusal as error:
        refusal = error
    multihost.refuse_together(refusal)
    return cfg, plan, pairs, progress


def _verdict(
    metrics: RunMetrics, gate: GateResult, run_dir: Path, run_id: str | None
) -> RunMetrics:
    """Every process returns (or raises ``GateFailed``) as the primary's gate says; the
    primary's metrics gain the run folder and MLflow run and are summarised on screen."""
    passed = multihost.from_primary(gate.passed)  # timings differ a little between processes
    if not multihost.is_primary():
        metrics = RunMetrics.of({"gate_passed": passed, "process_index": jax.process_index()})
        if not passed:
            raise GateFailed("gate failed (process 0's verdict; its log names the metric)", metrics)
        return metrics
    metrics = metrics.with_values(run_dir=str(run_dir), mlflow_run_id=run_id)
    print(run_folder.summary_lines(metrics), flush=True)
    if not passed:
        raise GateFailed("gate failed: " + "; ".join(gate.failures), metrics)
    return metrics


def _end_badly(err: BaseException, cfg: EvalConfig, run_dir: Path) -> NoReturn:
    """Marks the folder ``killed`` (Ctrl-C, SIGTERM: the same exception goes on) or ``failed``
    (the traceback in ``error.log``; raises ``RunFailed`` saying in one line what failed, where,
    and for an I/O error which setting names the place)."""
    if isinstance(err, KeyboardInterrupt | Terminated):
        what = "interrupted (Ctrl-C)" if isinstance(err, KeyboardInterrupt) else "terminated"
        run_status.end_status(run_dir, run_status.KILLED, error=what)
        raise err
    if not isinstance(err, Exception):  # SystemExit and the like: not the run's failure
        raise err
    line = redacted(f"{type(err).__name__}: {err}", cfg.logger.tracking_uri).splitlines()[0][:500]
    hint = io_hint(err, cfg)
    details = redacted("".join(traceback.format_exception(err)), cfg.logger.tracking_uri)
    try:
        run_status.end_status(run_dir, run_status.FAILED, error=line, details=details)
        where = f"{run_dir} (status.json, error.log)"
    except OSError:  # the folder itself cannot be written (a full disk): say so, keep the error
        where = f"{run_dir} (could not be written: the traceback follows)"
        log.error("%s", details)
    message = f"the run failed while running: {line}{hint}; its folder: {where}"
    raise RunFailed(message, str(run_dir)) from err


def _open_run(cfg: EvalConfig, primary: bool = True) -> tuple[Path, Tracker]:
    """Creates the run folder and the tracker's run; on a process other than the primary, a
    scratch folder (removed when the run ends) and no tracker."""
    if not primary:
        scratch = tempfile.mkdtemp(prefix=f"evalharness-process{jax.process_index()}-")
        return Path(scratch), NullTracker()
    output_root = Path(cfg.output_root)
    run_status.recover_stale_runs(output_root, tracking.stale_run_closer(cfg.logger.tracking_uri))
    run_dir = make_run_dir(
        output_root, f"{cfg.model.name}-{cfg.resolution.name}-{cfg.schedule.name}"
    )
    # The folder says "running" before anything else can fail, so no end leaves it unmarked.
    run_status.start_status(run_dir, mlflow_run_id=None, tracking_uri=None)
    try:
        tracker = make_tracker(
            cfg.logger.kind,
            tracking_uri=cfg.logger.tracking_uri,
            experiment_name=cfg.logger.experiment_name,
            # model-resolution-schedule-id: the folder's name without its time stamp, which
            # MLflow shows as the start time anyway (the list cuts long names).
            run_name=run_dir.name.split("-", 2)[-1],
            output_root=output_root,
        )
    except BaseException as err:  # the folder exists: it says how the run ended, and so do we
        _end_badly(err, cfg, run_dir)
    run_status.write_status(
        run_dir, run_status.RUNNING, mlflow_run_id=tracker.run_id, tracking_uri=tracker.tracking_uri
    )
    return run_dir, tracker


def _record_start(cfg: EvalConfig, plan: Admission, run_dir: Path, tracker: Tracker) -> None:
    """``config.yaml``, then the config as params, the mesh, environment tags and the estimate."""
    resolved = redacted_values(to_plain_dict(cfg))  # logger.tracking_uri's password
    (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(resolved))
    tracker.log_params(flatten(resolved))
    if plan.attention.mesh is not None:
        tracker.log_params(describe_mesh(plan.attention.mesh))
    tags = {
        **cfg.logger.tags,  # the user's (and a multirun's sweep tags); the harness's own win
        **environment_tags(),
        **run_tags(cfg),
        **checkpoint_tags(cfg.model),
        "run_dir": str(run_dir.resolve()),
    }
    if cfg.prompts is not None or cfg.seeds is not None:
        tags["suite"] = f"prompts={cfg.prompts or 'prompt'} seeds={cfg.seeds or [cfg.seed]}"
    if cfg.negative_control.value != "none":
        # A deliberately broken sparse arm: the run must never be read as a schedule's result.
        tags["negative_control"] = cfg.negative_control.value
    tracker.set_tags(tags)
    tracker.log_metrics(plan.flops.as_metrics())
    sizing = plan.sizing
    tracker.log_metrics(sizing.as_metrics())
    sizing_md = sizing.memory.to_markdown() + "\n\n" + sizing.budget_markdown()
    (run_dir / "memory_plan.md").write_text(sizing_md.rstrip() + "\n")
    # The estimate beside what the run will measure (its loops' medians, decode_s, wall).
    (run_dir / "time_plan.md").write_text(sizing.timing.to_markdown().rstrip() + "\n")


def _finish(
    comparison: Comparison, measured: RunMetrics, per_pair: list[RunMetrics]
) -> tuple[RunMetrics, GateResult]:
    """Checks the gate, writes ``metrics.json`` and ``report.md``, and closes the tracker's run;
    returns the metrics with the gate's verdict among them, and the verdict."""
    cfg, run_dir, tracker = comparison.cfg, comparison.run_dir, comparison.tracker
    gate = check_gate(
        measured,
        min_psnr_db=cfg.gate.min_psnr_db,
        min_speedup=cfg.gate.min_speedup,
        min_worst_frame_psnr_db=cfg.gate.min_worst_frame_psnr_db,
        on=cfg.gate.on.value,
    )
    metrics = measured.with_values(gate_passed=gate.passed)
    run_folder.write_metrics(run_dir, metrics)
    if len(per_pair) == 1:
        run_folder.write_report(run_dir, cfg, metrics, gate.failures)
    else:
        suite_report.write_suite_report(run_dir, cfg, metrics, per_pair, gate.failures)
    tracker.log_metrics(metrics.numeric())
    headline = run_folder.summary_lines(metrics).splitlines()[0]
    tracker.set_tags({"gate": gate.outcome, **description_tags(tracker, gate.outcome, headline)})
    # A suite's pairs upload their own folders to their child runs.
    exclude = (() if cfg.logger.log_videos else run_folder.VIDEO_PATTERNS) + ("pairs/*",)
    tracker.log_artifacts(run_dir, exclude=exclude)
    tracker.finish("FINISHED")
    return metrics, gate


def _compare(
    comparison: Comparison, inputs: list[PairInputs]
) -> tuple[RunMetrics, list[RunMetrics]]:
    """The comparison proper: the arms compiled once on the first pair's inputs, then each
    pair compared (``evalharness.comparison.pair.compare_pair``) on the same compiled loops.

    Returns:
        (the run's metrics, each pair's metrics): for one pair, its metrics plus the statistics
        of :func:`evalharness.evidence.statistics.suite_metrics`; for a suite, the statistics across pairs
        (``evalharness.comparison.suite_report.parent_metrics``).
    """
    pairs = [item.pair for item in inputs]
    for pair in pairs:  # a damaged dense-cache entry is set aside now, before anything compiles
        comparison.cache.check(comparison.dense_key(pair))
    cached = reused_dense_arms(comparison, pairs)
    comparison.progress.phase("compile arms")
    compiled = _prepare_arms(comparison, inputs[0], dense=cached is None)
    per_pair = []
    for item in inputs:
        comparison.progress.phase(pair_phase(item.pair, len(pairs)))
        arms = compiled
        if item is not inputs[0]:
            event = comparison.progress.event
            arms = {k: rebind_arm(arm, item.args, on_event=event) for k, arm in compiled.items()}
        reused = None if cached is None else cached[item.pair.index]
        per_pair.append(_run_pair(comparison, item, arms, len(pairs), reused))
    comparison.progress.phase("summary")
    if len(pairs) == 1:
        return per_pair[0].with_values(suite_metrics(per_pair)), per_pair
    return suite_report.parent_metrics(per_pair), per_pair


def _run_pair(
    comparison: Comparison,
    inputs: PairInputs,
    arms: dict[str, PreparedArm],
    count: int,
    cached: DenseArms | None,
) -> RunMetrics:
    """One pair: in the run itself for a single pair, else in its own folder and child run."""
    if count == 1:
        out = PairOutput(comparison.run_dir, comparison.tracker)
        return compare_pair(comparison, inputs, arms, out, cached)
    pair, cfg = inputs.pair, comparison.cfg
    folder = comparison.run_dir / "pairs" / pair.name
    folder.mkdir(parents=True)
    child = comparison.tracker.child(f"{comparison.run_dir.name}/{pair.name}")
    out = PairOutput(folder, child, f"{pair.name}: ")
    with closed_on_error(child):
        child.log_params({"prompt": pair.prompt, "seed": pair.seed, "pair": pair.index})
        child.set_tags({**run_tags(cfg), "pair": pair.name})
        measured = compare_pair(comparison, inputs, arms, out, cached)
        metrics = measured.with_values(prompt=pair.prompt, seed=pair.seed, pair=pair.name)
        run_folder.write_metrics(folder, metrics)
        child.log_metrics(metrics.numeric())
        exclude = () if cfg.logger.log_videos else run_folder.VIDEO_PATTERNS
        child.log_artifacts(folder, exclude=exclude)
    child.finish("FINISHED")
    return metrics


def _build_model(cfg: EvalConfig, plan: Admission, progress: Progress) -> Components:
    """Transformer, prompt encoder and VAE, on the mesh when there is one."""
    progress.phase("build model")
    # On a mesh the weights are placed (or, for checkpoints, streamed) onto it here, before any
    # DenoiseLoop captures them.
    return build_components(cfg.model, cfg.dtype, cfg.cache_dir, plan.attention.mesh)


def _encode_prompts(
    cfg: EvalConfig,
    plan: Admission,
    components: Components,
    progress: Progress,
    pairs: list[Pair],
) -> tuple[list[PairInputs], float]:
    """Every pair's prompt embeddings (each prompt encoded once) and its initial noise, and the
    seconds the encoding took."""
    progress.phase("encode prompts")
    texts = list(dict.fromkeys(pair.prompt for pair in pairs))
    start = time.perf_counter()
    # One encoder load (on a cache miss) for every prompt, released before the denoising loop.
    with components.prompt_encoder.session():
        contexts = {text: jnp.asarray(components.encode([text])) for text in texts}
        negative = None
        if uses_guidance(cfg.guidance_scale, cfg.negative_prompt):
            negative = jnp.asarray(components.encode([cfg.negative_prompt]))
    text_encode_s = time.perf_counter() - start
    shape = (1, *plan.geometry.latent_shape())
    inputs = [
        PairInputs(
            pair,
            jax.random.normal(jax.random.key(pair.seed), shape, jnp.float32),
            contexts[pair.prompt],
            negative,
        )
        for pair in pairs
    ]
    return inputs, text_encode_s


def _prepare_arms(
    comparison: Comparison, inputs: PairInputs, *, dense: bool = True
) -> dict[str, PreparedArm]:
    """Every timed arm compiled and run once on the first pair, in the order the timing rounds
    take them (only the sparse arm when ``dense`` is False: the dense timings are reused)."""
    attention = comparison.plan.attention
    arms = {}
    if dense:
        arms["dense"] = comparison.prepare_arm("dense", attention.dense, inputs)
    arms["sparse"] = comparison.prepare_arm("sparse", attention.sparse, inputs)
    if dense and comparison.cfg.noise_floor:
        # Timed like the dense arm: it is the second dense control the headline speedup uses.
        arms["noise_floor"] = comparison.prepare_arm("noise_floor", attention.noise_floor, inputs)
    return arms
