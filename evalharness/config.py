"""Structured configuration for the harness: dataclasses registered in Hydra's ConfigStore.

Every group in ``conf/`` is validated against these schemas, so a misspelt key or a value of the
wrong type fails before any work starts, with Hydra naming the key.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf


@dataclass
class ModelConfig:
    """Which transformer (plus VAE and text encoder) to run.

    Attributes:
        name: preset name: ``tiny`` (seeded random weights, no checkpoint), ``wan2.1-t2v-1.3b`` or
            ``wan2.1-t2v-14b``.
        checkpoint: a diffusers-format ``Wan2.1-T2V-*-Diffusers`` folder (required for Wan presets).
        param_dtype: ``float32`` or ``bfloat16``.
        seed: seed of the random weights of the ``tiny`` preset.
    """

    name: str = "tiny"
    checkpoint: str | None = None
    param_dtype: str = "float32"
    seed: int = 0


@dataclass
class ResolutionConfig:
    """Video size in pixels; frames must be 4k+1 and height/width multiples of 16."""

    name: str = MISSING
    frames: int = MISSING
    height: int = MISSING
    width: int = MISSING
    flow_shift: float | None = None  # None: Wan's rule (3.0 at 480p and below, 5.0 above)
    default_steps: int = 40  # denoising steps when the top-level ``steps`` is not set


@dataclass
class ScheduleConfig:
    """When attention stays dense and how sparse it is otherwise (Sparse VideoGen knobs).

    Attributes:
        name: schedule name, for reports.
        first_times_fp: dense while ``step < floor(first_times_fp * steps)``.
        first_layers_fp: dense while ``layer < floor(first_layers_fp * layers)``.
        density: kept fraction of query-key pairs of the sparse masks (sink counted).
        variant: sparse executor variant: ``b1``, ``b2`` or ``b3`` (tile-aligned, the default).
        routing_samples: query rows sampled per head to route spatial vs temporal.
        sparse: False for the dense control schedule.
    """

    name: str = MISSING
    first_times_fp: float = 1.0
    first_layers_fp: float = 0.0
    density: float = 1.0
    variant: str = "b3"
    routing_samples: int = 64
    sparse: bool = True


@dataclass
class KernelConfig:
    """Attention executors and tile sizes.

    Attributes:
        backend: ``auto`` (Pallas on TPU, XLA elsewhere), ``xla``, ``pallas_tpu`` or ``reference``.
        block_q: query tile size.
        block_kv: key/value tile size.
        dense_executor: executor of the dense arm: ``b0`` (tiled online softmax on ``backend``) or
            ``dot_product_attention``.
        noise_floor_executor: the other dense executor, used for the dense-vs-dense noise floor.
    """

    backend: str = "auto"
    block_q: int = 128
    block_kv: int = 128
    dense_executor: str = "b0"
    noise_floor_executor: str = "dot_product_attention"


@dataclass
class LoggerConfig:
    """Where results are tracked: ``mlflow`` (local sqlite by default) or ``none``."""

    kind: str = "mlflow"
    tracking_uri: str | None = None  # None: sqlite database under output_root
    experiment_name: str = "evalharness"
    log_videos: bool = True


@dataclass
class GateConfig:
    """Thresholds that turn a run into a CI exit code; None disables a check."""

    min_psnr_db: float | None = None
    min_speedup: float | None = None


@dataclass
class ParallelConfig:
    """Sequence parallelism: devices the token sequence is split over (0 = all local devices,
    1 = off); ``permute_placement`` is where temporal heads are permuted: ``head_local`` (after
    the all-to-all, the fast one) or ``before_exchange`` (for comparison)."""

    sequence: int = 0
    permute_placement: str = "head_local"  # or "before_exchange"


@dataclass
class EvalConfig:
    """The whole run; see ``conf/config.yaml`` for the defaults list."""

    model: ModelConfig = field(default_factory=ModelConfig)
    resolution: ResolutionConfig = field(default_factory=ResolutionConfig)
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    kernel: KernelConfig = field(default_factory=KernelConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    gate: GateConfig = field(default_factory=GateConfig)
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    prompt: str = "A red fox trotting through fresh snow in a pine forest at sunrise"
    negative_prompt: str = "blurry, low quality, static, distorted"
    seed: int = 42
    steps: int | None = None  # None: the resolution preset's default_steps
    sampler: str = "unipc"
    guidance_scale: float = 5.0
    dtype: str = "float32"
    warm_runs: int = 3
    noise_floor: bool = True
    max_minutes: float = 30.0
    output_root: str = "outputs"
    cache_dir: str = "outputs/cache"
    fps: int = 16
    crf: int = 18
    progress: str = "auto"  # auto (bars on a terminal), on, off; the step bar is a host callback


def register_configs() -> None:
    """Registers the schemas so Hydra validates ``conf/`` against them."""
    cs = ConfigStore.instance()
    cs.store(name="eval_schema", node=EvalConfig)
    cs.store(group="model", name="model_schema", node=ModelConfig)
    cs.store(group="resolution", name="resolution_schema", node=ResolutionConfig)
    cs.store(group="schedule", name="schedule_schema", node=ScheduleConfig)
    cs.store(group="kernel", name="kernel_schema", node=KernelConfig)
    cs.store(group="logger", name="logger_schema", node=LoggerConfig)


def to_config(cfg: EvalConfig | DictConfig | dict) -> EvalConfig:
    """Validates any config form against the schema and returns the dataclass."""
    if isinstance(cfg, EvalConfig):
        cfg = OmegaConf.structured(cfg)
    known = {f.name for f in dataclasses.fields(EvalConfig)}
    unknown = sorted(set(cfg.keys()) - known - {"hydra"})
    if unknown:
        raise ValueError(f"unknown config keys {unknown}; known keys: {sorted(known)}")
    schema = OmegaConf.structured(EvalConfig)
    merged = OmegaConf.merge(schema, cfg)
    if merged.steps is None:
        merged.steps = merged.resolution.default_steps
    if merged.steps < 1 or merged.warm_runs < 1:
        raise ValueError(f"steps={merged.steps} and warm_runs={merged.warm_runs} must both be >= 1")
    return OmegaConf.to_object(merged)
