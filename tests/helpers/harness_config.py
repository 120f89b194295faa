"""Composes harness configs the way the CLI does, at sizes small enough for unit tests."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from evalharness.assembly import platform_choices
from evalharness.config import EvalConfig, compose_run_config, to_config
from evalharness.config.schemas import register_configs
from tests.helpers.paths import REPO_ROOT

CONF_DIR = str(REPO_ROOT / "conf")

# 33 frames at 64x64 px: 9 latent frames x 4x4 tokens = 144 tokens (enough for an 8-token band
# at the aggressive density); 2 steps; one timed run.
SMALL = [
    "resolution.name=test",
    "resolution.frames=33",
    "resolution.height=64",
    "resolution.width=64",
    "steps=2",
    "warm_runs=1",
    "kernel.block_q=8",
    "kernel.block_kv=8",
    "schedule.routing_samples=8",
]


def small_config(tmp_path: Path, *overrides: str, small: bool = True) -> DictConfig:
    """The default config with small sizes (unless ``small`` is False), outputs under
    ``tmp_path``, and ``overrides`` last."""
    register_configs()
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        return compose(
            "config",
            overrides=[
                *(SMALL if small else []),
                f"output_root={tmp_path / 'outputs'}",
                f"cache_dir={tmp_path / 'cache'}",
                *overrides,
            ],
        )


def resolved_run_config(overrides: Sequence[str] = ()) -> EvalConfig:
    """The run's config with Hydra ``overrides``, resolved for this host (backend, tiles, dense
    executors, dtype), as ``python -m evalharness`` composes it.

    Raises:
        hydra.errors.HydraException: an unknown key or preset.
        ValueError: a value the run refuses (e.g. a Pallas backend off its platform).
    """
    return platform_choices.resolve(to_config(compose_run_config(overrides)))
