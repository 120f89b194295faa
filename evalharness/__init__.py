"""The evaluation harness: ``python -m evalharness`` (see README.md and docs/architecture.md).

Importing it first keeps libtpu off a machine without TPU chips (``models.accelerator_env``): every
command of the harness sets ``JAX_PLATFORMS`` and ``TPU_SKIP_MDS_QUERY`` before JAX loads.
"""

from models.accelerator_env import guard_libtpu
from models.interruption import handle_signals_if_command

guard_libtpu()
handle_signals_if_command()  # a command notes Ctrl-C from here on, before its heavy imports
