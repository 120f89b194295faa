"""From a config to the objects a run is built of: what every ``auto`` means on this platform,
the model parts (seeded preset or checkpoint), the three attention functions, the sampler and the
prompt embeddings.
"""

from evalharness.assembly import platform_choices
from evalharness.assembly.attention_setup import (
    AttentionSetup,
    build_attention,
    dense_attend,
    kernel_options,
    nominal_kept_fraction,
    run_block_sizes,
    sequence_devices,
)
from evalharness.assembly.checkpoint_source import checkpoint_tags, fetch_checkpoint, pin_revision
from evalharness.assembly.components import Components, build_components, transformer_config_for
from evalharness.assembly.platform_choices import backend_for, host_platform
from evalharness.assembly.run_inputs import encode_contexts, run_sampler

__all__ = [
    "AttentionSetup",
    "Components",
    "backend_for",
    "build_attention",
    "build_components",
    "dense_attend",
    "encode_contexts",
    "checkpoint_tags",
    "fetch_checkpoint",
    "host_platform",
    "nominal_kept_fraction",
    "kernel_options",
    "pin_revision",
    "run_block_sizes",
    "platform_choices",
    "run_sampler",
    "sequence_devices",
    "transformer_config_for",
]
