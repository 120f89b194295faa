"""Structured configuration for the harness: dataclasses registered in Hydra's ConfigStore.

Every group in ``conf/`` is validated against these schemas, so a misspelt key, a value of the
wrong type or a choice outside its Enum fails when the config is composed, with OmegaConf naming
the key and listing the valid values.

Choices are ``StrEnum`` members whose names equal their values: OmegaConf reads an Enum field from a
string by member name, so ``kernel.backend=xla`` works on the command line, and the member still is
the string ``"xla"`` for comparisons, f-strings and JSON. Plain strings for YAML and MLflow come
from :func:`to_plain_dict`.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

from evalharness.config.gate_schema import GateConfig
from evalharness.config.validation import RANDOM_CHECKPOINT, check_random_weights_gate, check_values
from kernels.parallel import PLACEMENTS
from kernels.policy import DENSE_EXECUTORS, POLICY_BACKENDS, SparsitySchedule
from kernels.policy.negative_controls import NEGATIVE_CONTROLS
from models.config import SEEDED_PRESETS
from models.pipeline import GUIDANCE_PASSES
from models.samplers import SAMPLER_NAMES
from models.video_geometry import VideoGeometry


def _choices(name: str, values: tuple[str, ...], doc: str) -> type[enum.StrEnum]:
    """A StrEnum whose members are ``values`` (names equal values); where the layer below
    validates a choice, built from its tuple, so the list of valid values is written down once."""
    choices = enum.StrEnum(name, {value: value for value in values}, module=__name__)
    choices.__doc__ = doc
    return choices


KernelBackend = _choices(
    "KernelBackend",
    ("auto", *POLICY_BACKENDS),
    "Attention backend; ``auto`` is the Pallas TPU kernel on a TPU, the Pallas GPU (Triton) kernel "
    "on a GPU and XLA on a CPU.",
)
DenseExecutor = _choices(
    "DenseExecutor",
    ("auto", *(name for name in DENSE_EXECUTORS if name != "auto")),
    "Executor of a dense arm: ``auto`` (the platform's dense controls, see "
    "``evalharness.assembly.platform_choices``), ``b0`` (our tiled online softmax on the chosen backend), "
    "``splash`` (JAX's splash attention, TPU), ``cudnn`` (cuDNN flash attention, GPU), "
    "``dot_product_attention`` (plain XLA attention, N^2 memory) or ``reference`` (the oracle).",
)
SamplerName = _choices(
    "SamplerName",
    SAMPLER_NAMES,
    "Flow-matching sampler: Wan's default UniPC, or first-order Euler.",
)
GuidancePasses = _choices(
    "GuidancePasses",
    GUIDANCE_PASSES,
    "Classifier-free guidance per step: one joint batch, or two separate passes in sequence.",
)
NegativeControl = _choices(
    "NegativeControl",
    NEGATIVE_CONTROLS,
    "A deliberately broken sparse arm, to show that the gate fails it: ``none`` (the correct arm), "
    "``all_spatial`` / ``all_temporal`` (every head forced to one layout), ``inverted`` (each "
    "head routed to the layout it did not choose) or ``no_unpermute`` (temporal heads' outputs "
    "left in the temporal layout), which the PSNR gate must fail; or ``redundant_dense`` (the "
    "sparse cells also run the dense executor and discard it: same video, slower), which the "
    "speedup gate must fail.",
)
PermutePlacement = _choices(
    "PermutePlacement",
    PLACEMENTS,
    "Where sequence-parallel attention permutes temporal heads: ``head_local`` after the "
    "all-to-all (the fast one), ``before_exchange`` before it, for comparison.",
)


DType = _choices("DType", ("float32", "bfloat16"), "Parameter dtype.")
ComputeDType = _choices(
    "ComputeDType",
    ("auto", "float32", "bfloat16"),
    "Compute dtype; ``auto`` is bfloat16 for checkpoint models and on a GPU (cuDNN flash "
    "attention, the GPU's dense arm, is bfloat16-only), float32 for the tiny presets on a CPU or "
    "TPU.",
)
ChipCompileMode = _choices(
    "ChipCompileMode",
    ("step", "off"),
    "What a dry run for a TPU target compiles with the TPU compiler (libtpu, the ``tpu`` extra): "
    "``step``, the run's whole denoising loop (every layer, the sequence-parallel mesh and its "
    "all-to-all; about 1.5 CPU-minutes per arm for 14B with the layers scanned); ``off``, nothing "
    "(our model's table only, seconds).",
)


class ChipPhases(enum.StrEnum):
    """Which of the two programs a run calls outside its denoising loop a dry run also compiles
    for the chip (with ``chip_compile=step``): ``encoder``, the text encoder (UMT5-XXL: about 20
    s on a 2-core machine; the encode phase is the peak of 14B runs at 720p and 1080p);
    ``encoder_and_vae``, the VAE's tile decode too (4.5-8 minutes for a TPU on a 2-core machine,
    so not the default); ``none``, neither. A program not compiled keeps our model's row."""

    none = "none"
    encoder = "encoder"
    encoder_and_vae = "encoder_and_vae"

    @property
    def phases(self) -> tuple[str, ...]:
        """The phases compiled: ``encode``, ``decode``."""
        phases = {"none": (), "encoder": ("encode",), "encoder_and_vae": ("encode", "decode")}
        return phases[self.value]


class ProgressMode(enum.StrEnum):
    """Progress bars: ``auto`` draws them only when stderr is a terminal."""

    auto = "auto"
    on = "on"
    off = "off"

    @property
    def enabled(self) -> bool | None:
        """``Progress(enabled=...)``: None lets the terminal decide."""
        return None if self is ProgressMode.auto else self is ProgressMode.on


LoggerKind = _choices(
    "LoggerKind",
    ("mlflow", "none"),
    "Result tracking: MLflow, or nothing (files in the run folder only).",
)


@dataclass
class ModelConfig:
    """Which transformer (plus VAE and text encoder) to run.

    Attributes:
        name: preset name: ``tiny`` (trained on moving shapes, its weights shipped in the
            package, ``models.shipped_weights``), ``tiny-planted`` (seeded weights with planted
            spatial and temporal heads, no checkpoint, ``models.planted_heads``),
            ``tiny-random`` (the planted model's architecture, purely random),
            ``wan2.1-t2v-1.3b`` or ``wan2.1-t2v-14b``.
        checkpoint: a diffusers-format ``Wan2.1-T2V-*-Diffusers`` folder, or a hub repository id
            (``Wan-AI/Wan2.1-T2V-1.3B-Diffusers``, fetched into the huggingface_hub cache;
            ``models.hub``); required for Wan presets; for ``tiny``, a folder exported by
            ``python -m models.training`` instead of the shipped weights; ``random``
            (:data:`RANDOM_CHECKPOINT`): no checkpoint, the preset's real shapes with weights
            drawn from ``seed`` (``models.random_weights``): real speed, meaningless quality.
        revision: a hub checkpoint's branch, tag or commit (None: ``main``); a run replaces it
            with the commit it resolved to, which the config, MLflow and the cache key record.
        param_dtype: dtype of the weights.
        seed: seed of the weights of the seeded presets (``tiny-planted``, ``tiny-random``)
            and of ``checkpoint=random``.
        scan_layers: ``true`` runs the transformer's blocks as one scanned layer over stacked
            weights (compile time independent of depth), ``false`` as an unrolled loop, ``auto``
            per platform (``evalharness.assembly.platform_choices.scan_layers_for``).
    """

    name: str = "tiny"
    checkpoint: str | None = None
    revision: str | None = None
    param_dtype: DType = DType.float32
    seed: int = 0
    scan_layers: str | bool = "auto"

    def __post_init__(self) -> None:
        """Refuses a ``scan_layers`` other than true, false or auto (a quoted "true" or "false"
        counts as the bool), and an empty ``checkpoint`` (an unset variable in
        ``model.checkpoint=$DIR`` would otherwise run the shipped or seeded weights)."""
        self.scan_layers = {"true": True, "false": False}.get(self.scan_layers, self.scan_layers)
        if not isinstance(self.scan_layers, bool) and self.scan_layers != "auto":
            raise ValueError(
                f"model.scan_layers={self.scan_layers!r}: expected true, false or auto"
            )
        if self.checkpoint is not None and not self.checkpoint.strip():
            raise ValueError(
                f"model.checkpoint={self.checkpoint!r} names no checkpoint (an unset variable?): "
                "give a folder or a hub repository id, or leave model.checkpoint out (null) for "
                "the preset's own weights"
            )

    @property
    def random_weights(self) -> bool:
        """Whether the run is on random weights (``model.checkpoint=random``): real speed only."""
        return self.checkpoint == RANDOM_CHECKPOINT

    @property
    def seeded(self) -> bool:
        """Whether the weights are drawn from ``seed`` (a seeded preset, random weights), not read."""
        return self.name in SEEDED_PRESETS or self.random_weights


@dataclass
class ResolutionConfig:
    """Video size in pixels; frames must be 4k+1 and height/width multiples of 16."""

    name: str = MISSING
    frames: int = MISSING
    height: int = MISSING
    width: int = MISSING
    flow_shift: float | None = None  # None: Wan's rule (3.0 at 480p and below, 5.0 above)
    default_steps: int = 40  # denoising steps when the top-level ``steps`` is not set

    @property
    def video(self) -> VideoGeometry:
        """The video size (frames, height, width) the model and the kernels work from."""
        return VideoGeometry(self.frames, self.height, self.width)


@dataclass
class KernelConfig:
    """Attention executors and tile sizes; ``auto``/None values are chosen per platform and size
    by ``evalharness.assembly.platform_choices``.

    Attributes:
        backend: where the tiled executors run.
        block_q: query tile size (None: the backend's rule, e.g. the seed's 3,328 on TPU).
        block_kv: key/value tile size (None: the backend's rule, e.g. 1,536 on TPU).
        block_kv_compute: Pallas TPU key chunk per online-softmax update (None: gcd(block_kv, 512)).
        vmem_limit_bytes: Pallas TPU scoped VMEM limit (None: raised automatically when the
            kernel's estimate exceeds the default).
        num_warps: Pallas GPU (Triton) warps per program (None: picked by tile and head_dim,
            ``kernels.executors.pallas_gpu_budget.default_num_warps``); ``pallas_gpu`` only.
        num_stages: Pallas GPU software-pipelining stages of the K/V loads (None: the kernel's
            default); ``pallas_gpu`` only. More stages hold more K/V tiles in shared memory.
        dense_executor: executor of the dense arm.
        noise_floor_executor: the other dense executor (the dense-vs-dense noise floor and the
            second dense control); must differ from ``dense_executor``.
    """

    backend: KernelBackend = KernelBackend.auto
    block_q: int | None = None
    block_kv: int | None = None
    block_kv_compute: int | None = None
    vmem_limit_bytes: int | None = None
    num_warps: int | None = None
    num_stages: int | None = None
    dense_executor: DenseExecutor = DenseExecutor.auto
    noise_floor_executor: DenseExecutor = DenseExecutor.auto

    def __post_init__(self) -> None:
        """Refuses a non-positive ``num_warps``/``num_stages``; that they are set only for
        ``pallas_gpu`` is checked once ``auto`` is resolved (``evalharness.assembly.platform_choices``)."""
        for name in ("num_warps", "num_stages"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 1
            ):
                raise ValueError(
                    f"kernel.{name}={value!r}: expected a positive int, or null for the default"
                )


@dataclass
class LoggerConfig:
    """Where results are tracked.

    Attributes:
        kind: ``mlflow`` or ``none``.
        tracking_uri: MLflow tracking URI; None is a sqlite database under ``output_root``.
        experiment_name: MLflow experiment of the run.
        log_videos: upload the run folder's videos as MLflow artifacts; False keeps them in the
            run folder only (they are the largest artifacts by far).
        tags: extra tags on the run (``+logger.tags.team=video``); a multirun adds ``sweep``
            and ``sweep_job``, by which its table is read back from MLflow.
    """

    kind: LoggerKind = LoggerKind.mlflow
    tracking_uri: str | None = None
    experiment_name: str = "evalharness"
    log_videos: bool = True
    tags: dict[str, str] = field(default_factory=dict)


@dataclass
class PromptFilter:
    """Which prompts of the suite ``prompts`` names a run takes; on the command line also spelt
    ``prompts.dimension=`` and ``prompts.limit=`` (``evalharness.config.pairs.prompt_aliases``).

    Attributes:
        dimension: a VBench dimension (``color``, ``human_action``, ...): with ``prompts=vbench``,
            only its prompts.
        limit: at most this many prompts, a fixed sample spread evenly over the suite.
    """

    dimension: str | None = None
    limit: int | None = None


@dataclass
class ParallelConfig:
    """Sequence parallelism.

    Attributes:
        sequence: devices the token sequence is split over (0 = all local devices, 1 = off).
        permute_placement: where temporal heads are permuted.
        distributed: whether the run is one of several processes (multi-host JAX) that
            ``jax.distributed.initialize`` joins before any other JAX call: null detects it
            (``JAX_COORDINATOR_ADDRESS``, a Slurm step of several tasks, a TPU pod's worker list),
            true forces it (a cluster JAX detects by itself), false never joins.
    """

    sequence: int = 0
    permute_placement: PermutePlacement = PermutePlacement.head_local
    distributed: bool | None = None


@dataclass
class EvalConfig:
    """The whole run; see ``conf/config.yaml`` for the defaults list.

    ``schedule`` is the kernels' own ``SparsitySchedule`` (its fields and defaults are the schema of
    ``conf/schedule``); it has no default because a schedule needs a name.
    """

    model: ModelConfig = field(default_factory=ModelConfig)
    resolution: ResolutionConfig = field(default_factory=ResolutionConfig)
    schedule: SparsitySchedule = MISSING
    kernel: KernelConfig = field(default_factory=KernelConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    gate: GateConfig = field(default_factory=GateConfig)
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    # A held-out prompt of the default model (``model=tiny``, trained on moving shapes).
    prompt: str = "a red circle moves quickly up on a dark blue background"
    # A prompt suite instead of ``prompt``: a built-in suite's name (``vbench``: VBench's 946) or a
    # text file, one prompt per line (``evalharness.config.pairs``).
    prompts: str | None = None
    prompt_filter: PromptFilter = field(default_factory=PromptFilter)
    negative_prompt: str = "blurry, low quality, static, distorted"
    seed: int = 42
    seeds: list[int] | None = None  # several noise seeds per prompt instead of ``seed``
    steps: int | None = None  # None: the resolution preset's default_steps
    sampler: SamplerName = SamplerName.unipc
    guidance_scale: float = 5.0
    # joint: one batch of [cond; uncond] per step; separate: the two passes one after the other
    # (half the activations, same FLOPs: what fits 14B at 1440p on one H200).
    guidance_passes: GuidancePasses = GuidancePasses.joint
    dtype: ComputeDType = ComputeDType.auto
    warm_runs: int = 3
    # The second dense control's arm (the dense-vs-dense noise floor). None: on, except on random
    # weights (``model.checkpoint=random``), whose quality figures mean nothing; true forces it.
    noise_floor: bool | None = None
    # One more, untimed sparse run per pair that records the routing (routing_stats.npz, the
    # heatmap, ``routing_temporal_fraction``); it changes no timing or quality metric. A schedule
    # search turns it off for its trials (``search.routing_stats``).
    routing_stats: bool = True
    # latents.npz in the run folder: every arm's final float32 latents (to re-decode or compare
    # runs bit for bit; 77 MB an arm at 1440p, so off by default).
    save_latents: bool = False
    # Time only the sparse arm and take the dense medians from the dense-arm cache (an earlier
    # process): for very long runs. The run is tagged, and a speedup threshold refuses to pass.
    reuse_dense_timing: bool = False
    negative_control: NegativeControl = NegativeControl.none  # a broken sparse arm, on purpose
    max_minutes: float = 30.0
    output_root: str = "outputs"
    cache_dir: str = "${output_root}/cache"  # moves with output_root unless set
    # JAX's persistent compilation cache under ``<cache_dir>/jax_compile``: a later job loads
    # the programs an earlier one compiled (``evalharness.compile_cache``).
    compile_cache: bool = True
    fps: int = 16
    crf: int = 18
    progress: ProgressMode = ProgressMode.auto  # the phase bar (never a callback in a timed loop)
    dry_run: bool = False  # plan, check and estimate on abstract weights; exit 0 fits, 2 not
    target: str | None = None  # dry-run device (TARGET_NAMES, e.g. tpu-v5e-1); None: this host
    # What a TPU target's dry run compiles for the chip, with libtpu installed (ChipCompileMode).
    chip_compile: ChipCompileMode = ChipCompileMode.step
    # What that chip compile compiles beside the loops (ChipPhases): the text encoder by default.
    chip_compile_phases: ChipPhases = ChipPhases.encoder


def schema(node_type: type) -> DictConfig:
    """The structured config of ``node_type`` with every node writable.

    OmegaConf makes the node of a frozen dataclass (``SparsitySchedule``) read-only, which would
    refuse Hydra's merging of ``conf/schedule/*.yaml`` and of command-line overrides into it; the
    frozen dataclass is still what ``OmegaConf.to_object`` builds, and it validates itself there.
    """
    node = OmegaConf.structured(node_type)
    _make_writable(node)
    return node


def _make_writable(node: DictConfig) -> None:
    OmegaConf.set_readonly(node, None)
    for key in node:
        if isinstance(child := node._get_node(key), DictConfig):
            _make_writable(child)


def register_configs() -> None:
    """Registers the schemas so Hydra validates ``conf/`` against them."""
    cs = ConfigStore.instance()
    cs.store(name="eval_schema", node=schema(EvalConfig))
    cs.store(group="model", name="model_schema", node=ModelConfig)
    cs.store(group="resolution", name="resolution_schema", node=ResolutionConfig)
    cs.store(group="schedule", name="schedule_schema", node=schema(SparsitySchedule))
    cs.store(group="kernel", name="kernel_schema", node=KernelConfig)
    cs.store(group="logger", name="logger_schema", node=LoggerConfig)


def to_config(cfg: EvalConfig | DictConfig | dict) -> EvalConfig:
    """Validates any config form against the schema and returns the dataclass.

    Args:
        cfg: Hydra's composed config, a plain dict, or an ``EvalConfig``.

    Returns:
        The config with ``steps`` filled in, every choice an Enum member and ``schedule`` a
        validated ``SparsitySchedule``.

    Raises:
        ValueError: an unknown top-level key, a bad schedule, ``steps``/``warm_runs`` below 1,
            or a quality threshold on random weights (``model.checkpoint=random``).
        omegaconf.errors.ValidationError: a value of the wrong type or outside its choices.
    """
    if isinstance(cfg, EvalConfig):
        cfg = OmegaConf.structured(cfg)
    known = {f.name for f in dataclasses.fields(EvalConfig)}
    unknown = sorted(set(cfg.keys()) - known - {"hydra"})
    if unknown:
        close = {k: difflib.get_close_matches(k, sorted(known), n=1) for k in unknown}
        hints = "".join(f"; did you mean {c[0]} for {k}?" for k, c in close.items() if c)
        raise ValueError(f"unknown config keys {unknown}{hints} (known keys: {sorted(known)})")
    merged = OmegaConf.merge(schema(EvalConfig), cfg)
    if merged.steps is None:
        merged.steps = merged.resolution.default_steps
    check_values(merged)
    config = OmegaConf.to_object(merged)
    check_random_weights_gate(config)
    if config.noise_floor is None:
        config.noise_floor = not config.model.random_weights
    return config


def to_plain_dict(cfg: EvalConfig) -> dict[str, Any]:
    """The resolved config as nested plain dicts, every choice its string value: what
    ``config.yaml`` in the run folder and the MLflow params hold (never an Enum's repr)."""
    return OmegaConf.to_container(OmegaConf.structured(cfg), resolve=True, enum_to_str=True)
