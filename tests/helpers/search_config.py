"""Composes ``python -m evalharness.search`` configs the way its CLI does, on the small CPU
config and a tiny search space."""

from __future__ import annotations

from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig

from evalharness.config import register_configs
from evalharness.search import register_search_configs
from tests.helpers.harness_config import CONF_DIR, SMALL

# The small config's routing samples (8) and a grid of 2 x 2 x 1 points (first_layers_fp fixed).
SEARCH = [
    "search.routing_samples=[8]",
    "search.variant=[b3]",
    "search.reference=[]",
    "search.density.low=0.3",
    "search.density.high=0.5",
    "search.density.step=0.2",
    "search.first_times_fp.low=0.0",
    "search.first_times_fp.high=0.5",
    "search.first_times_fp.step=0.5",
    "search.first_layers_fp.high=0.0",
    "progress=off",
]
# One trial at one fixed point of the small config (every knob's low == high).
ONE_TRIAL = [
    "search.trials=1",
    "search.routing_samples=[8]",
    "search.variant=[b3]",
    "search.reference=[]",
    "search.density.low=0.5",
    "search.density.high=0.5",
    "search.first_times_fp.high=0.0",
    "search.first_layers_fp.high=0.0",
    "progress=off",
]


def compose_cfg(tmp_path: Path, *overrides: str, name: str = "search") -> DictConfig:
    """The ``name`` config (``search`` or the run's ``config``) with the small sizes, outputs
    under ``tmp_path`` and ``overrides`` last."""
    register_configs()
    register_search_configs()
    GlobalHydra.instance().clear()
    small = [o for o in SMALL if not o.startswith("schedule.")]
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        return compose(
            name,
            overrides=[
                *small,
                f"output_root={tmp_path / 'outputs'}",
                f"cache_dir={tmp_path / 'cache'}",
                *overrides,
            ],
        )
