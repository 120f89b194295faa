"""Kernel benchmark: ``python -m kernels.bench`` (see ``kernels/bench/__main__.py``)."""
