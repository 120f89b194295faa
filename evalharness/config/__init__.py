"""Configuration: the structured schemas Hydra composes into, the resolution presets, and
the (prompt, seed) pairs a run compares. Imports nothing else of the harness.
"""

from evalharness.config.compose import compose_run_config
from evalharness.config.conf_dir import CONF_DIR
from evalharness.config.limits import limit_problem
from evalharness.config.overrides import check_overrides, group_options, multirun_first
from evalharness.config.pairs import BUILT_IN_SUITES, Pair, load_prompts, run_pairs
from evalharness.config.resolutions import (
    RESOLUTION_DIR,
    Resolution,
    load_resolution,
    resolution_names,
    token_geometry,
)
from evalharness.config.schemas import (
    ChipCompileMode,
    ChipPhases,
    ComputeDType,
    DenseExecutor,
    DType,
    EvalConfig,
    GateConfig,
    GateOn,
    GuidancePasses,
    KernelBackend,
    KernelConfig,
    LoggerConfig,
    LoggerKind,
    ModelConfig,
    NegativeControl,
    ParallelConfig,
    PermutePlacement,
    ProgressMode,
    ResolutionConfig,
    SamplerName,
    register_configs,
    schema,
    to_config,
    to_plain_dict,
)

__all__ = [
    "CONF_DIR",
    "compose_run_config",
    "check_overrides",
    "multirun_first",
    "BUILT_IN_SUITES",
    "ComputeDType",
    "DType",
    "DenseExecutor",
    "EvalConfig",
    "GateConfig",
    "GateOn",
    "GuidancePasses",
    "KernelBackend",
    "KernelConfig",
    "LoggerConfig",
    "LoggerKind",
    "ModelConfig",
    "NegativeControl",
    "Pair",
    "ParallelConfig",
    "PermutePlacement",
    "ChipCompileMode",
    "ChipPhases",
    "ProgressMode",
    "RESOLUTION_DIR",
    "Resolution",
    "ResolutionConfig",
    "SamplerName",
    "limit_problem",
    "load_prompts",
    "load_resolution",
    "register_configs",
    "resolution_names",
    "group_options",
    "run_pairs",
    "schema",
    "to_config",
    "to_plain_dict",
    "token_geometry",
]
