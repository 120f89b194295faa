"""The structured config: typed choices fail at composition, values reach files and params as the
plain strings they always were, and the schedule group composes into ``SparsitySchedule``."""

from __future__ import annotations

import dataclasses
import enum
import json
import re

import pytest
import yaml
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf
from omegaconf.errors import ValidationError

from evalharness.assembly import platform_choices
from evalharness.config.schemas import (
    ChipPhases,
    DenseExecutor,
    DType,
    EvalConfig,
    KernelBackend,
    LoggerKind,
    PermutePlacement,
    ProgressMode,
    SamplerName,
    to_config,
    to_plain_dict,
)
from evalharness.tracking.mlflow_client import flatten
from kernels.parallel.attend import PLACEMENTS
from kernels.plans.tiles import VARIANTS
from kernels.policy.schedule import SparseVariant, SparsitySchedule
from kernels.registry import DENSE_EXECUTORS, POLICY_BACKENDS
from models.samplers import SAMPLER_NAMES
from tests.helpers.harness_config import small_config
from tests.helpers.schedules import SCHEDULE_NAMES, load_schedule

CHOICES = (
    ChipPhases,
    DType,
    KernelBackend,
    DenseExecutor,
    SamplerName,
    ProgressMode,
    LoggerKind,
    PermutePlacement,
    SparseVariant,
    ChipPhases,
)

# (dotted key, a value outside its choices, the valid values in the error message)
BAD_CHOICES = [
    ("kernel.backend", "gpu", "[auto, xla, pallas_tpu, pallas_gpu, reference]"),
    (
        "kernel.dense_executor",
        "b1",
        "[auto, b0, splash, cudnn, dot_product_attention, reference, xla_flash]",
    ),
    (
        "kernel.noise_floor_executor",
        "flash",
        "[auto, b0, splash, cudnn, dot_product_attention, reference, xla_flash]",
    ),
    ("schedule.variant", "b0", "[b1, b2, b3]"),
    ("sampler", "ddim", "[unipc, euler]"),
    ("dtype", "float16", "[auto, float32, bfloat16]"),
    ("model.param_dtype", "fp8", "[float32, bfloat16]"),
    ("progress", "maybe", "[auto, on, off]"),
    ("logger.kind", "wandb", "[mlflow, none]"),
    ("parallel.permute_placement", "after", "[head_local, before_exchange]"),
    # The setting was a boolean; ``True`` is refused with the three values that replace it.
    ("chip_compile_phases", "True", "[none, encoder, encoder_and_vae]"),
]


def _expected_params(tmp_path) -> dict:
    """The flattened params of the default config as the string-typed config logged them."""
    return {
        "model.name": "tiny",
        "model.checkpoint": None,
        "model.revision": None,
        "model.param_dtype": "float32",
        "model.seed": 0,
        "model.scan_layers": False,
        "resolution.name": "cpu",
        "resolution.frames": 33,
        "resolution.height": 192,
        "resolution.width": 320,
        "resolution.flow_shift": None,
        "resolution.default_steps": 10,
        "schedule.name": "balanced",
        "schedule.first_times_fp": 0.2,
        "schedule.first_layers_fp": 0.03,
        "schedule.density": 0.35,
        "schedule.variant": "b3",
        "schedule.routing_samples": 64,
        "schedule.sparse": True,
        "schedule.svg_sparsity": None,
        "schedule.method": "svg",
        "schedule.sta_window": None,
        "schedule.sta_tile": [6, 8, 8],
        "schedule.radial_decay_factor": None,
        "kernel.backend": "xla",
        "kernel.block_q": 128,
        "kernel.block_kv": 128,
        "kernel.block_kv_compute": None,
        "kernel.vmem_limit_bytes": None,
        "kernel.num_warps": None,
        "kernel.num_stages": None,
        "kernel.dense_executor": "xla_flash",  # the CPU's dense control
        "kernel.noise_floor_executor": "dot_product_attention",
        "logger.kind": "mlflow",
        "logger.tracking_uri": None,
        "logger.experiment_name": "evalharness",
        "logger.log_videos": True,
        "gate.min_psnr_db": None,
        "gate.min_worst_frame_psnr_db": None,
        "gate.max_lpips": None,
        "gate.min_speedup": None,
        "gate.on": "mean",
        "gate.psnr": "video",
        "parallel.sequence": 0,
        "parallel.permute_placement": "head_local",
        "parallel.distributed": None,
        "prompt": "a red circle moves quickly up on a dark blue background",
        "prompts": None,
        "prompt_filter.dimension": None,
        "prompt_filter.limit": None,
        "negative_prompt": "blurry, low quality, static, distorted",
        "seed": 42,
        "seeds": None,
        "steps": 10,
        "sampler": "unipc",
        "guidance_scale": 5.0,
        "guidance_passes": "joint",
        "dtype": "float32",
        "warm_runs": 3,
        "noise_floor": True,
        "routing_stats": True,
        "save_latents": False,
        "reuse_dense_timing": False,
        "negative_control": "none",
        "max_minutes": 30.0,
        "output_root": str(tmp_path / "outputs"),
        "cache_dir": str(tmp_path / "cache"),
        "compile_cache": True,
        "fps": 16,
        "crf": 18,
        "progress": "auto",
        "dry_run": False,
        "target": None,
        "chip_compile": "step",
        "chip_compile_phases": "encoder",
    }


@pytest.mark.parametrize("choice", CHOICES, ids=lambda c: c.__name__)
def test_choice_names_equal_values(choice):
    # OmegaConf parses an Enum field from a string by member name and writes the name back, so
    # names equal to values keep config files, overrides and logged params the plain values.
    assert issubclass(choice, enum.StrEnum)
    assert [m.name for m in choice] == [m.value for m in choice]


def test_choices_match_what_kernels_and_models_accept():
    assert {m.value for m in KernelBackend} == {"auto", *POLICY_BACKENDS}
    assert {m.value for m in DenseExecutor} == set(DENSE_EXECUTORS)
    assert {m.value for m in PermutePlacement} == set(PLACEMENTS)
    assert {m.value for m in SamplerName} == set(SAMPLER_NAMES)
    assert {m.value for m in SparseVariant} == set(VARIANTS) - {"b0"}


@pytest.mark.parametrize(("key", "value", "valid"), BAD_CHOICES)
def test_a_bad_choice_fails_at_composition_with_the_valid_values(tmp_path, key, value, valid):
    with pytest.raises(ConfigCompositionException, match=key) as info:
        small_config(tmp_path, f"{key}={value}")
    cause = str(info.value.__cause__)
    assert f"Invalid value '{value}'" in cause and f"expected one of {valid}" in cause


@pytest.mark.parametrize(("key", "value", "valid"), BAD_CHOICES)
def test_a_bad_choice_fails_in_to_config_with_the_valid_values(tmp_path, key, value, valid):
    cfg = OmegaConf.to_container(small_config(tmp_path))
    node = cfg
    *parents, leaf = key.split(".")
    for part in parents:
        node = node[part]
    node[leaf] = value
    with pytest.raises(ValidationError, match=re.escape(f"expected one of {valid}")):
        to_config(cfg)


def test_choices_are_enum_members_that_compare_as_strings(tmp_path):
    cfg = to_config(small_config(tmp_path, "kernel=xla", "progress=off", "logger=none"))
    assert cfg.kernel.backend is KernelBackend.xla and cfg.kernel.backend == "xla"
    assert cfg.progress is ProgressMode.off and cfg.progress.enabled is False
    assert ProgressMode.on.enabled is True and ProgressMode.auto.enabled is None
    assert cfg.logger.kind is LoggerKind.none
    assert f"{cfg.sampler}/{cfg.dtype}" == "unipc/auto"


def test_default_params_and_config_yaml_keep_their_string_values(tmp_path):
    # What a run logs: the config resolved for its platform (here a CPU).
    cfg = platform_choices.resolve(to_config(small_config(tmp_path, small=False)), "cpu")
    plain = to_plain_dict(cfg)
    params = flatten(plain)
    assert params == _expected_params(tmp_path)
    # Equal is not enough: a StrEnum equals its value but would log and dump differently.
    assert all(type(v) is str for v in params.values() if isinstance(v, str))
    assert yaml.safe_load(OmegaConf.to_yaml(plain)) == plain


def test_dense_arm_key_fields_serialise_as_before(tmp_path):
    cfg = platform_choices.resolve(to_config(small_config(tmp_path)), "cpu")
    fields = {
        "param_dtype": cfg.model.param_dtype,
        "dtype": cfg.dtype,
        "sampler": cfg.sampler,
        "kernel": dataclasses.asdict(cfg.kernel),
        "parallel": dataclasses.asdict(cfg.parallel),
    }
    assert json.dumps(fields, sort_keys=True) == json.dumps(
        {
            "param_dtype": "float32",
            "dtype": "float32",
            "sampler": "unipc",
            "kernel": {
                "backend": "xla",
                "block_q": 8,
                "block_kv": 8,
                "block_kv_compute": None,
                "vmem_limit_bytes": None,
                "num_warps": None,
                "num_stages": None,
                "dense_executor": "xla_flash",  # the CPU's dense control
                "noise_floor_executor": "dot_product_attention",
            },
            "parallel": {"sequence": 0, "permute_placement": "head_local", "distributed": None},
        },
        sort_keys=True,
    )


@pytest.mark.parametrize("name", SCHEDULE_NAMES)
def test_schedule_group_composes_into_the_kernels_schedule(tmp_path, name):
    cfg = to_config(small_config(tmp_path, f"schedule={name}", small=False))
    assert isinstance(cfg.schedule, SparsitySchedule)
    assert cfg.schedule == load_schedule(name)


def test_schedule_fields_can_be_overridden_and_are_validated(tmp_path):
    cfg = to_config(small_config(tmp_path, "schedule.density=0.4", "schedule.variant=b2"))
    assert cfg.schedule.density == 0.4 and cfg.schedule.variant is SparseVariant.b2
    with pytest.raises(ValueError, match="density"):
        to_config(small_config(tmp_path, "schedule.density=1.5"))


def test_svg_sparsity_can_be_set_on_any_schedule(tmp_path):
    cfg = to_config(small_config(tmp_path, "schedule.svg_sparsity=0.25"))
    assert cfg.schedule.name == "balanced" and cfg.schedule.svg_sparsity == 0.25
    with pytest.raises(ValueError, match="svg_sparsity"):
        to_config(small_config(tmp_path, "schedule.svg_sparsity=1.0"))


def test_schedule_defaults_fill_what_a_schedule_leaves_out():
    cfg = to_config(
        {
            "resolution": {"name": "r", "frames": 5, "height": 16, "width": 16},
            "schedule": {"name": "s", "first_times_fp": 0.2, "density": 0.5},
        }
    )
    assert cfg.schedule == SparsitySchedule("s", 0.2, 0.0, 0.5, "b3", 64, True)
    with pytest.raises(Exception, match="schedule"):
        to_config({"resolution": {"name": "r", "frames": 5, "height": 16, "width": 16}})


def test_to_config_round_trips_a_config_dataclass(tmp_path):
    cfg = to_config(small_config(tmp_path, "schedule=aggressive", "kernel=reference"))
    assert isinstance(cfg, EvalConfig)
    assert to_config(cfg) == cfg


def test_pallas_gpu_kernel_group_and_its_launch_settings(tmp_path):
    cfg = to_config(small_config(tmp_path, "kernel=pallas_gpu", "kernel.num_stages=3", small=False))
    assert cfg.kernel.backend is KernelBackend.pallas_gpu
    assert (cfg.kernel.block_q, cfg.kernel.block_kv) == (128, 64)
    assert (cfg.kernel.num_warps, cfg.kernel.num_stages) == (None, 3)


@pytest.mark.parametrize("setting", ["num_warps", "num_stages"])
@pytest.mark.parametrize("value", [0, -4])
def test_launch_settings_must_be_positive(tmp_path, setting, value):
    with pytest.raises(ValueError, match=f"kernel.{setting}={value}: expected a positive int"):
        to_config(small_config(tmp_path, "kernel=pallas_gpu", f"kernel.{setting}={value}"))


def test_the_tools_compose_the_runs_config_and_defaults():
    from evalharness.config import compose_run_config

    composed = compose_run_config()
    assert (composed.model.name, composed.schedule.name, composed.resolution.name) == (
        "tiny",
        "balanced",
        "cpu",
    )
    assert to_config(compose_run_config(["schedule=aggressive"])).schedule.name == "aggressive"
    with pytest.raises(ConfigCompositionException, match="schedule"):
        compose_run_config(["schedule=nonexistent"])


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ((), True),
        (("model=wan2.1-t2v-1.3b", "model.checkpoint=random"), False),
        (("model=wan2.1-t2v-1.3b", "model.checkpoint=random", "noise_floor=true"), True),
        (("noise_floor=false",), False),
    ],
)
def test_the_noise_floor_arm_runs_unless_the_weights_are_random_or_it_is_turned_off(
    tmp_path, overrides, expected
):
    assert to_config(small_config(tmp_path, *overrides)).noise_floor is expected
