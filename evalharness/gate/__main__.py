"""``python -m evalharness.gate``: see :mod:`evalharness.gate.cli`."""

import sys

from evalharness.gate.cli import main

sys.exit(main())
