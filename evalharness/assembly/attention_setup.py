"""The three attention functions of a comparison, built from the schedule and kernel configs.

- dense arm: the dense executor (``kernel.dense_executor``, B0 by default) on the chosen backend;
- noise floor: a second dense executor (``kernel.noise_floor_executor``), same model otherwise;
- sparse arm: the schedule's policy (routing + B1/B2/B3, or a static mask without routing), and
  for a routed schedule a recording twin for routing stats; both carry ``negative_control`` (``none``, or a deliberately broken arm the gate must fail).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax

from evalharness.config import (
    DenseExecutor,
    EvalConfig,
    KernelBackend,
    NegativeControl,
    token_geometry,
)
from kernels.executors.dispatch import KernelOptions
from kernels.executors.xla_blocksparse import visit_groups
from kernels.masks.geometry import TokenGeometry
from kernels.parallel.attend import parallelize
from kernels.parallel.mesh import make_mesh
from kernels.plans.block_sizes import BlockSizes
from kernels.policy.attention_policy import AttentionPolicy, make_dense_attend
from kernels.policy.routing import routing_flops_fraction
from kernels.policy.routing_stats import RoutingStats
from kernels.policy.schedule import SparsitySchedule
from kernels.policy.static_policy import make_policy
from models.config import WanTransformerConfig
from models.video_geometry import VideoGeometry


def sequence_devices(cfg: EvalConfig) -> int:
    """Devices the sequence is split over: ``parallel.sequence``, or every local device for 0."""
    if cfg.parallel.sequence < 0:
        raise ValueError(f"parallel.sequence={cfg.parallel.sequence}: use 0 (all devices) or >= 1")
    return cfg.parallel.sequence or len(jax.devices())


def nominal_kept_fraction(cfg: EvalConfig, video: VideoGeometry, layers: int) -> float:
    """The schedule's kept fraction with the band's target density (no tile plan built): for
    preflight."""
    density = cfg.schedule.target_density(token_geometry(video))
    return cfg.schedule.kept_fraction_at(cfg.steps, layers, density)


@dataclass
class AttentionSetup:
    """The attention functions of one comparison and what describes them."""

    schedule: SparsitySchedule
    geometry: TokenGeometry
    backend: str
    block_sizes: BlockSizes
    dense: Any
    noise_floor: Any
    sparse: Any  # an AttentionPolicy, or its sequence-parallel wrapper
    recording: Any
    kept_fraction: float
    steps: int
    layers: int
    mesh: Any = None  # the sequence-parallel mesh, or None on one device

    def describe(self) -> dict[str, float | int | str]:
        """Metrics that describe the sparse side (densities, dense cells, routing cost)."""
        sparse = self.schedule.sparse
        density = self.schedule.sparse_density(self.geometry, self.block_sizes) if sparse else 1.0
        plan = self.sparse.plan
        out: dict[str, float | int | str] = {
            "schedule_kept_fraction": self.kept_fraction,
            "mask_density": density,
            "mask_target_density": self.schedule.target_density(self.geometry),
            "dense_steps": self.schedule.dense_steps(self.steps),
            "dense_layers": self.schedule.dense_layers(self.layers),
            "attention_backend": self.backend,
        }
        if self.schedule.svg_sparsity is not None:
            out["svg_sparsity"] = self.schedule.svg_sparsity
        out.update(_method_parameters(self.schedule, self.geometry))
        if sparse and self.schedule.routes:
            out["routing_flops_fraction"] = routing_flops_fraction(
                self.geometry, density, self.schedule.routing_samples
            )
        if plan is not None:
            out.update({f"tiles.{k}": v for k, v in plan.stats().items() if _number(v)})
            if self.backend == "xla":
                # The XLA scans also step through padding entries of grouped visit lists.
                groups = visit_groups(plan)
                area = plan.block_sizes.block_q * plan.block_sizes.block_kv
                out["tiles.scan_wasted_fraction"] = groups.wasted_fraction
                out["tiles.scan_executed_pairs_fraction"] = (
                    groups.executed_visits * area / float(plan.tokens) ** 2
                )
        return out

    def collect_stats(self) -> RoutingStats:
        """Routing of the recorded run: flags and errors per (step, layer, batch, head)."""
        assert self.recording is not None
        return self.recording.stats


def _method_parameters(schedule: SparsitySchedule, geometry: TokenGeometry) -> dict[str, Any]:
    """The schedule's method and the parameters its static mask ran with (a parameter the
    density knob chose included), for the run's metrics."""
    out: dict[str, Any] = {"schedule_method": schedule.method}
    if schedule.routes or not schedule.sparse:
        return out
    mask = schedule.mask(geometry)
    if schedule.method == "sta":
        out["sta_window"] = "x".join(str(k) for k in mask.window)
        out["sta_tile"] = "x".join(str(t) for t in mask.order.tile)
    else:
        out["radial_decay_factor"] = mask.decay_factor
    return out


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def build_attention(
    cfg: EvalConfig, video: VideoGeometry, model: WanTransformerConfig
) -> AttentionSetup:
    """Builds every attention function of the run (host-side plans only; nothing is traced).

    Args:
        cfg: the run's configuration, resolved for its platform (``platform_choices.resolve``): a
            concrete backend, tiles and dense executors.
        video: the video size.
        model: the transformer architecture (its layer count).

    Returns:
        The dense, noise-floor, sparse and recording attention functions and their description.

    Raises:
        ValueError: a schedule, backend or tile size that does not suit the geometry.
    """
    geometry = token_geometry(video)
    kernel = cfg.kernel
    if kernel.backend is KernelBackend.auto or kernel.block_q is None or kernel.block_kv is None:
        raise ValueError("build_attention needs a resolved config; call platform_choices.resolve")
    backend, block_sizes = kernel.backend.value, run_block_sizes(cfg)
    schedule, layers = cfg.schedule, model.num_layers
    dense = dense_attend(cfg, kernel.dense_executor)
    noise_floor = dense_attend(cfg, kernel.noise_floor_executor)
    options = dict(
        num_steps=cfg.steps,
        num_layers=layers,
        backend=backend,
        block_sizes=block_sizes,
        dense_attend=dense,
        seed=cfg.seed,
        options=kernel_options(cfg),
        # Part of the sparse arm only: the dense arms (and their cache key) never see it.
        negative_control=NegativeControl(cfg.negative_control).value,
    )
    sparse = make_policy(schedule, geometry, **options)
    recording = None
    if schedule.sparse and schedule.routes and sparse.dense_steps < cfg.steps:
        recording = AttentionPolicy(schedule, geometry, record_stats=True, **options)
    kept = schedule.overall_kept_fraction(cfg.steps, layers, geometry, block_sizes)
    attends = (dense, noise_floor, sparse, recording)
    mesh = make_mesh(sequence_devices(cfg)) if sequence_devices(cfg) > 1 else None
    if mesh is not None and schedule.sparse and not schedule.routes:
        raise ValueError(
            f"schedule.method={schedule.method} runs on one device (sequence parallelism routes "
            "and permutes SVG's heads only); set parallel.sequence=1"
        )
    if mesh is not None:
        # Token divisibility is checked here, before any model is built or compiled (identical
        # configs on several hosts are checked by ``evalharness.run`` before any work).
        placement = cfg.parallel.permute_placement.value
        attends = tuple(
            parallelize(a, mesh, placement=placement, tokens=geometry.tokens) for a in attends
        )
    return AttentionSetup(
        schedule, geometry, backend, block_sizes, *attends, kept, cfg.steps, layers, mesh
    )


def kernel_options(cfg: EvalConfig) -> KernelOptions:
    """The kernels' backend settings apart from the tiles: the Pallas TPU kernel's VMEM limit, the
    Pallas GPU kernel's warps and pipelining stages (each ignored by the other backends)."""
    kernel = cfg.kernel
    return KernelOptions(
        vmem_limit_bytes=kernel.vmem_limit_bytes,
        num_warps=kernel.num_warps,
        num_stages=kernel.num_stages,
    )


def run_block_sizes(cfg: EvalConfig) -> BlockSizes:
    """The tiles of a config resolved by ``platform_choices.resolve``."""
    kernel = cfg.kernel
    return BlockSizes(kernel.block_q, kernel.block_kv, kernel.block_kv_compute)


def dense_attend(cfg: EvalConfig, executor: DenseExecutor) -> Callable[..., Any]:
    """A dense attention function as the run builds it: ``executor`` on the config's backend, at
    its tiles, with its kernel options (``cfg`` resolved by ``platform_choices.resolve``)."""
    return make_dense_attend(
        executor.value,
        backend=cfg.kernel.backend.value,
        block_sizes=run_block_sizes(cfg),
        options=kernel_options(cfg),
    )
