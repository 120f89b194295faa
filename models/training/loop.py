"""The step loop every stage shares: resume, progress bar with the loss, metrics, checkpoints."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import optax
from flax import nnx
from tqdm import tqdm

from models.interruption import stop_if_signalled
from models.training.checkpoints import restore_checkpoint, save_checkpoint
from models.training.tracking import MetricLogger


def learning_rate_schedule(peak: float, warmup: int, total: int) -> optax.Schedule:
    """Linear warm-up to ``peak`` (at most ``total - 1`` steps), then cosine decay to 5% of it."""
    warmup = min(warmup, total - 1)
    return optax.warmup_cosine_decay_schedule(0.0, peak, warmup, total, peak * 0.05)


def checkpoint_path(run_dir: Path, stage: str) -> Path:
    """Where a stage's resumable checkpoint lives in the run folder."""
    return Path(run_dir) / "checkpoints" / f"{stage}.npz"


def run_steps(
    stage: str,
    total: int,
    step: Callable[[int], dict[str, float]],
    run_dir: Path,
    checkpoint_every: int,
    logger: MetricLogger,
    nodes: tuple[nnx.Module | nnx.Optimizer, ...],
    *,
    progress: bool = True,
) -> None:
    """Runs ``step(i)`` for i from the checkpoint's step (or 0) to ``total``.

    Each step's metrics go to ``logger``; the first is shown on the progress bar. The state of
    ``nodes`` (model and optimizer) is checkpointed every ``checkpoint_every`` steps and at the
    end, so an interrupted stage resumes where its last checkpoint left it, and a finished stage
    only reloads its weights.
    """
    path = checkpoint_path(run_dir, stage)
    start = restore_checkpoint(path, *nodes) if path.is_file() else 0
    if start > total:
        raise ValueError(
            f"{path} is at step {start}, past this run's {total} {stage} steps; use a new run "
            "folder or more steps"
        )
    bar = tqdm(
        range(start, total), initial=start, total=total, desc=stage, disable=not progress,
        dynamic_ncols=True,
    )  # fmt: skip
    for i in bar:
        stop_if_signalled()  # a safe point: Ctrl-C and SIGTERM stop between steps
        metrics = step(i)
        logger.log_metrics(metrics, i)
        name, value = next(iter(metrics.items()))
        bar.set_postfix({name: f"{value:.4f}"}, refresh=False)
        if (i + 1) % checkpoint_every == 0 or i + 1 == total:
            save_checkpoint(path, i + 1, *nodes)
    bar.close()
