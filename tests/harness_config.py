"""Composes harness configs the way the CLI does, at sizes small enough for unit tests."""

from __future__ import annotations

from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from evalharness.config import register_configs

CONF_DIR = str(Path(__file__).resolve().parent.parent / "conf")

# 5 frames at 64x96 px: 2 latent frames x 4x6 tokens = 48 tokens; 2 steps; one timed run.
SMALL = [
    "resolution.name=test",
    "resolution.frames=5",
    "resolution.height=64",
    "resolution.width=96",
    "steps=2",
    "warm_runs=1",
    "kernel.block_q=8",
    "kernel.block_kv=8",
    "schedule.routing_samples=8",
]


def small_config(tmp_path: Path, *overrides: str) -> DictConfig:
    """The default config with small sizes, outputs under ``tmp_path``, and ``overrides`` last."""
    register_configs()
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        return compose(
            "config",
            overrides=[
                *SMALL,
                f"output_root={tmp_path / 'outputs'}",
                f"cache_dir={tmp_path / 'cache'}",
                *overrides,
            ],
        )
