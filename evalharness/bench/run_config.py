"""The benchmarks' command line: ``--json`` and the run's Hydra overrides, composed and resolved
as ``python -m evalharness`` does (a benchmark has no defaults of its own); and the attention
call such a config makes (``AttentionCall``)."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Sequence

import jax.numpy as jnp
from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException

from evalharness import compile_cache
from evalharness.admission import check_compile_cache, samples_per_call
from evalharness.assembly import platform_choices, run_block_sizes, sequence_devices
from evalharness.bench.mlflow_record import add_tracking_args
from evalharness.config import (
    EvalConfig,
    check_overrides,
    compose_run_config,
    load_resolution,
    resolution_names,
    to_config,
    token_geometry,
)
from evalharness.refusal import PreflightRefusal
from evalharness.tracking import check_tracking
from kernels.masks.geometry import TokenGeometry
from kernels.plans.block_sizes import BlockSizes
from models.config import WanTransformerConfig, get_transformer_config
from models.dtypes import dtype_of
from models.video_geometry import VideoGeometry

MIN_RUNS = 3  # a median of fewer runs is one run's noise


def config_or_exit(
    parser: argparse.ArgumentParser,
    overrides: Sequence[str],
    *,
    resolve: bool = True,
    platform: str | None = None,
    mlflow: bool = False,
    median: bool = False,
) -> EvalConfig:
    """The run's config from ``overrides``, or exit 2 through ``parser`` with the run's own
    message (unknown setting and the closest one, missing group choice, refused value).

    ``resolve=False`` leaves it unresolved (resolving starts JAX's backends); ``platform``
    ("tpu", "gpu", "cpu") resolves it for that platform instead of this host's. ``mlflow`` also
    checks the config's tracking store as the run does, so an unusable store exits 2 before
    minutes of measurement are lost. ``median`` refuses fewer than ``MIN_RUNS`` warm runs.
    JAX's persistent compilation cache is turned on as a run turns it on (``compile_cache``
    under ``cache_dir``; a folder it cannot write exits 2), so a benchmark loads what a run or
    an earlier benchmark compiled.
    """
    problem = check_overrides(list(overrides))
    if problem:
        parser.error(problem)
    try:
        cfg = to_config(compose_run_config(overrides))
        if mlflow:
            logger = cfg.logger
            check_tracking("mlflow", logger.tracking_uri, logger.experiment_name, cfg.output_root)
        check_compile_cache(cfg)
        compile_cache.enable(cfg.cache_dir, on=cfg.compile_cache)
        cfg = platform_choices.resolve(cfg, platform) if resolve else cfg
    except (HydraException, OmegaConfBaseException, ValueError) as error:
        parser.error(str(error))
    except PreflightRefusal as refusal:  # an unusable tracking store or compilation cache
        parser.exit(2, f"error: {refusal}\n")
    if median and cfg.warm_runs < MIN_RUNS:
        parser.error(f"warm_runs={cfg.warm_runs}: use at least {MIN_RUNS} for a median")
    return cfg


def bench_parser(
    module: str, doc: str | None, example: str, *, mlflow: bool = False
) -> argparse.ArgumentParser:
    """A benchmark's parser: ``python -m <module>`` with ``doc`` as help, ``--json``, the run's
    overrides (``example`` shows one) and, with ``mlflow``, ``--mlflow``."""
    parser = argparse.ArgumentParser(
        prog=f"python -m {module}",
        description=doc,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("overrides", nargs="*", help=f"the run's Hydra overrides, e.g. {example}")
    if mlflow:
        add_tracking_args(parser)
    return parser


@dataclasses.dataclass(frozen=True)
class AttentionCall:
    """One self-attention call of the run, read from ``cfg`` (resolved by
    ``platform_choices.resolve``): what a benchmark times."""

    cfg: EvalConfig

    @property
    def model(self) -> WanTransformerConfig:
        """The transformer's shapes (``cfg.model.name``)."""
        return get_transformer_config(self.cfg.model.name)

    @property
    def video(self) -> VideoGeometry:
        """The video size (``cfg.resolution``)."""
        return self.cfg.resolution.video

    @property
    def geometry(self) -> TokenGeometry:
        """The token grid of ``cfg.resolution`` (latent frames x Hp x Wp)."""
        return token_geometry(self.video)

    @property
    def target_density(self) -> float:
        """The band's kept fraction the run's schedule targets at ``geometry``."""
        return self.cfg.schedule.target_density(self.geometry)

    @property
    def label(self) -> str:
        """The resolution preset's name, or ``<frames>x<height>x<width>px`` off the preset."""
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
    def parallel_setting(self) -> str:
        """``parallel.sequence=N``, with P where N is 0 (every local device)."""
        setting = f"parallel.sequence={self.cfg.parallel.sequence}"
        if self.cfg.parallel.sequence == 0:
            setting += f" (every local device: {self.devices})"
        return setting

    @property
    def device_heads(self) -> int:
        """Heads of one device's call: sequence parallelism exchanges tokens for heads, so each
        of the P devices attends over the whole sequence with H / P heads.

        Raises:
            ValueError: heads that do not divide by P (naming the P that do).
        """
        heads = self.heads
        if heads % self.devices:
            divisors = ", ".join(str(d) for d in range(1, heads + 1) if heads % d == 0)
            raise ValueError(
                f"model={self.cfg.model.name} has {heads} heads, which do not divide by "
                f"{self.parallel_setting}; set parallel.sequence to one of {divisors}, or pick "
                "another model"
            )
        return heads // self.devices

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
