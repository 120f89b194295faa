"""The run's configuration composed as ``python -m evalharness`` composes it, for the tools that
share the run's configuration surface and defaults (the benchmarks) instead of keeping their own."""

from __future__ import annotations

from collections.abc import Sequence

from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from evalharness.config.conf_dir import CONF_DIR
from evalharness.config.schemas import register_configs


def compose_run_config(overrides: Sequence[str] = ()) -> DictConfig:
    """The run's config with Hydra ``overrides`` (``conf/config.yaml``, its defaults and the
    schemas that validate them), unresolved for any platform.

    Args:
        overrides: command-line style overrides, e.g. ``("resolution=720p",)``.

    Returns:
        Hydra's composed config (``to_config`` turns it into an ``EvalConfig``).
    """
    register_configs()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose("config", overrides=list(overrides))
