"""Configuration: the structured schemas Hydra composes into, the resolution presets, and
the (prompt, seed) pairs a run compares. Imports nothing else of the harness.
"""

from evalharness.config import vbench_suite
from evalharness.config.compose import CONF_DIR, compose_run_config
from evalharness.config.gate_schema import GateConfig, GateOn, GatePSNR
from evalharness.config.overrides import check_overrides, group_options, multirun_first
from evalharness.config.pairs import Pair, config_pairs, prompt_aliases, run_pairs
from evalharness.config.resolutions import load_resolution, resolution_names, token_geometry
from evalharness.config.schemas import (
    ChipCompileMode,
    ComputeDType,
    DenseExecutor,
    DType,
    EvalConfig,
    GuidancePasses,
    KernelBackend,
    KernelConfig,
    ModelConfig,
    NegativeControl,
    register_configs,
    to_config,
    to_plain_dict,
)
from evalharness.config.validation import (
    RANDOM_CHECKPOINT,
    limit_problem,
    random_weights_gate_problem,
)

__all__ = [
    "CONF_DIR",
    "ChipCompileMode",
    "ComputeDType",
    "DType",
    "DenseExecutor",
    "EvalConfig",
    "GateConfig",
    "GateOn",
    "GatePSNR",
    "GuidancePasses",
    "KernelBackend",
    "KernelConfig",
    "ModelConfig",
    "NegativeControl",
    "Pair",
    "RANDOM_CHECKPOINT",
    "check_overrides",
    "compose_run_config",
    "config_pairs",
    "group_options",
    "limit_problem",
    "load_resolution",
    "multirun_first",
    "prompt_aliases",
    "random_weights_gate_problem",
    "register_configs",
    "resolution_names",
    "run_pairs",
    "to_config",
    "to_plain_dict",
    "token_geometry",
    "vbench_suite",
]
