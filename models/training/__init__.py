"""Training the tiny Wan on moving-shapes clips: ``python -m models.training`` (see ``__main__``).

The package's first import keeps libtpu off a machine without TPU chips before JAX loads
(``models.accelerator_env``), as the harness's does.
"""

from models.accelerator_env import guard_libtpu
from models.interruption import handle_signals_if_command

guard_libtpu()
handle_signals_if_command()  # a command notes Ctrl-C from here on, before its heavy imports
