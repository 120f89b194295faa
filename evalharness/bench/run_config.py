"""The benchmarks' command line on the run's configuration: ``--json`` and the run's Hydra
overrides as positional arguments, composed and resolved for this host as ``python -m
evalharness`` does, so a benchmark has no defaults of its own; and the attention call such a
config makes (``AttentionCall``)."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Sequence

import jax.numpy as jnp
from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException

from evalharness.admission import samples_per_call
from evalharness.assembly import platform_choices, run_block_sizes, sequence_devices
from evalharness.config import (
    EvalConfig,
    check_overrides,
    compose_run_config,
    load_resolution,
    resolution_names,
    to_config,
    token_geometry,
)
from evalharness.tracking import TrackingUnavailable, check_tracking
from kernels.masks.geometry import TokenGeometry
from kernels.plans.block_sizes import BlockSizes
from models.config import WanTransformerConfig, get_transformer_config
from models.dtypes import dtype_of


def config_or_exit(
    parser: argparse.ArgumentParser,
    overrides: Sequence[str],
    *,
    resolve: bool = True,
    platform: str | None = None,
    mlflow: bool = False,
) -> EvalConfig:
    """The run's config from a command line's overrides, or exit 2 through ``parser`` with what
    the run itself would say: an unknown setting and the closest one, a group choice that does
    not exist, a value the schema or the platform refuses. ``resolve=False`` leaves it
    unresolved (resolving starts JAX's backends); ``platform`` resolves it for that platform
    ("tpu", "gpu", "cpu") instead of this host's. ``mlflow`` (the benchmark's ``--mlflow``)
    also checks the tracking store the config names (``logger.tracking_uri``, else the sqlite
    file under ``output_root``) as the run checks it, so a store that cannot be used exits 2 in
    seconds, before minutes of measurement are lost.
    """
    problem = check_overrides(list(overrides))
    if problem:
        parser.error(problem)
    try:
        cfg = to_config(compose_run_config(overrides))
        if mlflow:
            logger = cfg.logger
            check_tracking("mlflow", logger.tracking_uri, logger.experiment_name, cfg.output_root)
        return platform_choices.resolve(cfg, platform) if resolve else cfg
    except (HydraException, OmegaConfBaseException, ValueError) as error:
        parser.error(str(error))
    except TrackingUnavailable as refusal:
        parser.exit(2, f"error: {refusal}\n")


def bench_parser(module: str, doc: str | None, example: str) -> argparse.ArgumentParser:
    """A benchmark's parser: ``python -m <module>``, ``doc`` (its docstring) as the help,
    ``--json`` and the run's overrides (``example`` shows one in the help); the benchmark adds
    its own options."""
    parser = argparse.ArgumentParser(
        prog=f"python -m {module}",
        description=doc,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("overrides", nargs="*", help=f"the run's Hydra overrides, e.g. {example}")
    return parser


@dataclasses.dataclass(frozen=True)
class AttentionCall:
    """One self-attention call of the run, read from its config: what a benchmark times.

    Attributes:
        cfg: the run's config resolved by ``platform_choices.resolve`` (concrete backend, tiles,
            dense executors and compute dtype).
    """

    cfg: EvalConfig

    @property
    def model(self) -> WanTransformerConfig:
        """The transformer's shapes (``cfg.model.name``)."""
        return get_transformer_config(self.cfg.model.name)

    @property
    def geometry(self) -> TokenGeometry:
        """The token grid of ``cfg.resolution`` (latent frames x Hp x Wp)."""
        return token_geometry(self.cfg.resolution.video)

    @property
    def target_density(self) -> float:
        """The band's kept fraction the run's schedule targets at ``geometry``."""
        return self.cfg.schedule.target_density(self.geometry)

    @property
    def label(self) -> str:
        """The resolution preset's name, or ``<frames>x<height>x<width>px`` for a size that is
        not the preset's."""
        res = self.cfg.resolution
        if res.name in resolution_names() and load_resolution(res.name).video == res.video:
            return res.name
        return f"{res.frames}x{res.height}x{res.width}px"

    @property
    def batch(self) -> int:
        """Samples in one model call under the run's guidance (2 with joint guidance passes)."""
        return samples_per_call(self.cfg)

    @property
    def heads(self) -> int:
        """The model's attention heads."""
        return self.model.num_attention_heads

    @property
    def head_dim(self) -> int:
        """Channels per head."""
        return self.model.attention_head_dim

    @property
    def devices(self) -> int:
        """P, the devices of ``parallel.sequence`` (0: every local device)."""
        return sequence_devices(self.cfg)

    @property
    def device_heads(self) -> int:
        """Heads of one device's attention call: sequence parallelism exchanges tokens for heads
        before attention, so each of the P devices attends over the whole sequence with H / P
        heads.

        Raises:
            ValueError: heads that do not divide by P.
        """
        if self.heads % self.devices:
            raise ValueError(
                f"model={self.cfg.model.name} has {self.heads} heads, which do not divide by "
                f"parallel.sequence={self.cfg.parallel.sequence} ({self.devices} devices)"
            )
        return self.heads // self.devices

    @property
    def dtype(self) -> jnp.dtype:
        """The run's compute dtype (float32 for the tiny models on a CPU)."""
        return dtype_of(self.cfg.dtype)

    @property
    def block_sizes(self) -> BlockSizes:
        """The run's tiles for its backend."""
        return run_block_sizes(self.cfg)

    @property
    def runs(self) -> int:
        """Timed runs of each variant (``warm_runs``)."""
        return self.cfg.warm_runs
