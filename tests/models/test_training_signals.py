"""Ctrl-C and SIGTERM during training (``models.training.run_folder.command_main``): a real signal,
sent with ``signal.raise_signal`` at an exact step, ends the training at the next step with 130 /
143 and one error line; the checkpoint keeps what was saved, for the same command to resume."""

from __future__ import annotations

import argparse
import dataclasses
import signal

import numpy as np
import pytest

from models.training import run_folder
from models.training.checkpoints import saved_step
from models.training.flow_stage import train_flow
from models.training.loop import checkpoint_path
from models.training.settings import preset
from models.training.tracking import CallbackLogger

# test_training.py's settings, prompts and pool shapes: within one session the persistent
# compilation cache then serves this test's compile of the same training step.
SETTINGS = dataclasses.replace(preset("smoke"), transformer_steps=16, checkpoint_every=4)
PROMPTS = [
    "a red circle moves slowly to the left on a dark blue background",
    "a white square moves quickly up on a black background",
]


@pytest.fixture
def session_handlers():
    """The session's SIGINT / SIGTERM handlers put back after the command installed its own."""
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    yield
    for sig, handler in before.items():
        signal.signal(sig, handler)


def _pool() -> np.ndarray:
    rng = np.random.default_rng(0)
    base = rng.standard_normal((2, 16, 1, 4, 6)).astype(np.float32)
    return np.repeat(base, 2, axis=2).astype(np.float16)  # [N, C, F=2, h, w]


def _command(tmp_path, signal_at: dict[int, signal.Signals]):
    """``command_main`` training the flow stage into ``tmp_path``, sending itself the signal
    ``signal_at[step]`` once that step's metrics are logged; returns (code, steps logged)."""
    logged: list[int] = []

    def log(name: str, value: float, step: int) -> None:
        if not logged or logged[-1] != step:
            logged.append(step)
            if step in signal_at:
                signal.raise_signal(signal_at[step])

    def train(args: argparse.Namespace) -> None:
        train_flow(SETTINGS, tmp_path, CallbackLogger(log), _pool(), PROMPTS, progress=False)

    parser = argparse.ArgumentParser()
    run_folder.add_common_arguments(parser)
    code = run_folder.command_main(parser, ["--out", str(tmp_path), "--no-mlflow"], train)
    return code, logged


@pytest.mark.parametrize(
    ("sig", "code", "said"),
    [
        (signal.SIGINT, run_folder.EXIT_INTERRUPTED, "interrupted (Ctrl-C)"),
        (signal.SIGTERM, run_folder.EXIT_TERMINATED, "terminated (SIGTERM)"),
    ],
)
def test_a_signal_during_a_step_ends_training_before_the_next(
    tmp_path, capsys, session_handlers, sig, code, said
):
    ended, logged = _command(tmp_path, {5: sig})
    assert ended == code and logged == [0, 1, 2, 3, 4, 5]
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == f"error: {said}; run the same command again to resume"
    # Checkpointed every 4 steps: steps 0-3 are kept; steps 4-5 ran and run again on resume.
    assert saved_step(checkpoint_path(tmp_path, "transformer")) == 4
