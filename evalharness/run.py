"""One matched dense-vs-sparse comparison, as a plain function the CLI and the tests call.

``run(cfg) -> metrics`` is a chain of stages, each a value complete when created and passed on:

1. admitted: the config with every ``auto`` pinned for this platform (and the same on every
   process of a multi-host run), its pairs, and preflight's :class:`Admission`;
2. the run folder (``status.json`` says ``running``) and the tracker's run, with the config,
   tags and the memory and time plans recorded;
3. the model (:class:`Components`) and every pair's inputs (prompt embeddings, noise);
4. :class:`Comparison` -> :func:`measure_pairs`: the arms compiled once, every (prompt, seed)
   pair (one, or a prompt suite's ``prompts`` x ``seeds``) timed side by side, decoded and
   measured; a suite's pairs get sub-folders and MLflow child runs under the run's own;
5. :func:`conclude`: the gate, ``metrics.json`` and ``report.md``, the tracker's upload, the
   folder marked ``finished``; then every process returns (or raises) as the primary's gate says.
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

from evalharness import compile_cache, exit_codes, tracking
from evalharness.admission import (
    Admission,
    admit,
    check_output_folders,
    compile_refusal,
    io_hint,
)
from evalharness.assembly import (
    Components,
    build_components,
    checkpoint_tags,
    encode_contexts,
    pin_revision,
    platform_choices,
)
from evalharness.comparison import (
    Comparison,
    Outcome,
    PairInputs,
    Progress,
    conclude,
    finish_phases,
    measure_pairs,
    run_phases,
    write_time_plan,
)
from evalharness.config import EvalConfig, Pair, config_pairs, to_config, to_plain_dict
from evalharness.evidence import code_version, run_status, video
from evalharness.exit_codes import RunFailed, Terminated, as_interruption, stop_if_signalled
from evalharness.metric_names import RunMetrics
from evalharness.phases import Phase, PhaseLedger
from evalharness.refusal import PreflightRefusal
from evalharness.tracking import (
    NullTracker,
    Tracker,
    check_tracking,
    closed_on_error,
    flatten,
    make_tracker,
    multihost,
    redacted,
    redacted_values,
    start_tags,
)
from kernels.parallel.mesh import describe_mesh

log = logging.getLogger(__name__)


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
    ledger = PhaseLedger()  # the whole wall time, admission included, phase by phase
    with ledger.timed(Phase.PREFLIGHT):
        cfg, plan, pairs, progress = _admitted(to_config(cfg), ledger)
    # A signal during admission ends the run here, before its folder or tracking run exists:
    # nothing had started, so nothing is marked killed.
    stop_if_signalled()
    primary = multihost.is_primary()
    with ledger.timed(Phase.TRACKING):
        run_dir, tracker = _open_run(cfg, primary)
    try:
        with closed_on_error(tracker):
            with ledger.timed(Phase.TRACKING):
                _record_start(cfg, plan, run_dir, tracker)
            progress.phase("build model")
            with progress.timed(Phase.WEIGHTS):
                # On a mesh the weights are placed (or, for checkpoints, streamed) onto it
                # here, before any DenoiseLoop captures them.
                mesh = plan.attention.mesh
                components = build_components(cfg.model, cfg.dtype, cfg.cache_dir, mesh)
            with progress.timed(Phase.PROMPTS):
                inputs, text_encode_s = _encode_prompts(cfg, plan, components, progress, pairs)
            comparison = Comparison(
                cfg, plan, progress, run_dir, tracker, components, text_encode_s
            )
            measured = measure_pairs(comparison, inputs)
            with progress.timed(Phase.LOGGING):
                outcome = conclude(comparison, measured)
            if primary:
                finish_phases(comparison)
    except BaseException as err:
        if primary:
            _end_badly(err, cfg, run_dir)
        raise
    finally:
        progress.close()
        if not primary:  # the other processes' files were scratch: the primary wrote the run's
            shutil.rmtree(run_dir, ignore_errors=True)
    return _verdict(outcome)


def _admitted(
    cfg: EvalConfig, ledger: PhaseLedger
) -> tuple[EvalConfig, Admission, list[Pair], Progress]:
    """The config with every ``auto`` pinned, admitted on every process together (a refusal on
    one process is a refusal on all), its pairs, and the progress display (the primary's, over
    the run's phase ledger)."""
    # A multi-process run joins before anything else touches JAX (platform_choices reads the platform).
    multihost.join(cfg.parallel.distributed)
    # Every ``auto`` becomes this platform's concrete choice here, so the recorded config, the cache
    # key and the MLflow params name the tiles, executors and dtype that were actually run.
    cfg = pin_revision(platform_choices.resolve(cfg))  # a hub checkpoint's revision: its commit
    # Several processes must run one program: a mismatch fails on all of them, before any work.
    multihost.same_config(to_plain_dict(cfg), code_version)
    pairs = config_pairs(cfg)
    primary = multihost.is_primary()
    enabled = cfg.progress.enabled if primary else False
    progress = Progress(run_phases(pairs), enabled=enabled, ledger=ledger)
    progress.phase("preflight")
    refusal = plan = None
    try:
        if primary:  # only the primary logs; a wrong URI is refused before the probe compiles
            logger = cfg.logger
            check_tracking(
                logger.kind, logger.tracking_uri, logger.experiment_name, cfg.output_root
            )
            stop_if_signalled()  # safe points between the preflight's checks
            check_output_folders(cfg, len(pairs))
            check_video_encoder()
            stop_if_signalled()
        compile_cache.enable(cfg.cache_dir, on=cfg.compile_cache)  # before admit's compiles
        plan = admit(cfg)  # nothing is allocated before this passes
    except PreflightRefusal as error:
        refusal = error
        if primary and isinstance(error, tracking.TrackingUnavailable):
            _mark_stale_runs(cfg)
    multihost.refuse_together(refusal)
    return cfg, plan, pairs, progress


def _mark_stale_runs(cfg: EvalConfig) -> None:
    """Marks ``killed`` the run folders under ``output_root`` whose process is gone: a run
    refused for its tracking store would otherwise leave the folder of a run killed while
    creating that store ``running``, since no later run gets past the store to mark it."""
    closer = tracking.stale_run_closer(cfg.logger.tracking_uri)
    try:
        run_status.recover_stale_runs(Path(cfg.output_root), closer)
    except OSError as err:  # the refusal says what is wrong; this is bookkeeping beside it
        log.warning("could not mark the stale run folders under %s: %s", cfg.output_root, err)


def check_video_encoder() -> None:
    """Refuses the run, before any model is built, when FFmpeg cannot write its videos."""
    try:
        video.check_encoder()
    except video.VideoError as err:
        raise PreflightRefusal(f"{err}. Nothing was computed.") from err


def _verdict(outcome: Outcome) -> RunMetrics:
    """Every process returns (or raises ``GateFailed``) as the primary's gate says; the
    primary's summary is printed."""
    # Timings differ a little between processes: the primary's verdict is everyone's.
    passed = multihost.from_primary(outcome.gate.passed)
    if not multihost.is_primary():
        metrics = RunMetrics.of({"gate_passed": passed, "process_index": jax.process_index()})
        if not passed:
            raise GateFailed("gate failed (process 0's verdict; its log names the metric)", metrics)
        return metrics
    print(outcome.summary, flush=True)
    if not passed:
        raise GateFailed("gate failed: " + "; ".join(outcome.gate.failures), outcome.metrics)
    return outcome.metrics


def _end_badly(err: BaseException, cfg: EvalConfig, run_dir: Path) -> NoReturn:
    """Marks the folder ``killed`` (Ctrl-C, SIGTERM: the same exception goes on) or ``failed``
    (the traceback in ``error.log``; raises ``RunFailed`` saying in one line what failed, where,
    and for an I/O error which setting names the place). A failure after a signal is the
    signal's: Ctrl-C in a terminal stops FFmpeg too, whose broken pipe then fails the run."""
    signalled = as_interruption(err)
    if isinstance(signalled, KeyboardInterrupt | Terminated):
        ctrl_c = isinstance(signalled, KeyboardInterrupt)
        what = "interrupted (Ctrl-C)" if ctrl_c else "terminated"
        run_status.end_status(run_dir, run_status.KILLED, error=what)
        if signalled is err:
            raise err
        raise signalled from err
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
    refused = compile_refusal(err, cfg)
    if refused is not None:  # the chip's compiler refused the tiles: a setting to change
        raise RunFailed(
            f"{refused}; its folder: {where}", str(run_dir), exit_codes.REFUSED
        ) from err
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
    tracker.set_tags(start_tags(cfg, run_dir, checkpoint_tags(cfg.model)))
    tracker.log_metrics(plan.flops.as_metrics())
    sizing = plan.sizing
    tracker.log_metrics(sizing.as_metrics())
    sizing_md = sizing.memory.to_markdown() + "\n\n" + sizing.budget_markdown()
    (run_dir / "memory_plan.md").write_text(sizing_md.rstrip() + "\n")
    # The whole job's estimate, phase by phase; rewritten at the end with the measured phases.
    write_time_plan(run_dir, sizing)


def _encode_prompts(
    cfg: EvalConfig, plan: Admission, components: Components, progress: Progress, pairs: list[Pair]
) -> tuple[list[PairInputs], float]:
    """Every pair's prompt embeddings (each prompt encoded once) and its initial noise, and the
    seconds the encoding took."""
    progress.phase("encode prompts")
    start = time.perf_counter()
    contexts, negative = encode_contexts(cfg, components, [pair.prompt for pair in pairs])
    text_encode_s = time.perf_counter() - start
    shape = (1, *plan.geometry.latent_shape())
    noise = lambda seed: jax.random.normal(jax.random.key(seed), shape, jnp.float32)
    inputs = [PairInputs(p, noise(p.seed), contexts[p.prompt], negative) for p in pairs]
    return inputs, text_encode_s
