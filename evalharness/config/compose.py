"""Where the Hydra config groups live, and the run's configuration composed from them as
``python -m evalharness`` composes it (for the tools that share the run's configuration surface
and defaults, the benchmarks, instead of keeping their own)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from evalharness.config.pairs import prompt_aliases
from evalharness.config.schemas import register_configs

# ``evalharness/conf``, inside the package, so an installed wheel carries the groups and the app
# runs from any folder. In the repository that folder is a link to the top-level ``conf/``, the
# one copy to edit.
CONF_DIR = (Path(__file__).resolve().parents[1] / "conf").resolve()


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
        return compose("config", overrides=prompt_aliases(overrides))
