"""The evaluation harness: ``python -m evalharness`` (see README.md and docs/architecture.md).

Importing it first keeps libtpu off a machine without TPU chips (``models.accelerator_env``): every
command of the harness sets ``JAX_PLATFORMS`` and ``TPU_SKIP_MDS_QUERY`` before JAX loads.
"""

from models.accelerator_env import guard_libtpu

guard_libtpu()
