"""Sparse attention kernels for video diffusion, one subpackage per stage of the data path.

masks → plans → executors → policy → parallel:

- ``kernels.masks``: token geometry, frame-major ↔ temporal-major layouts, the band masks (the
  ``Mask`` protocol) and the tile-grid arithmetic masks count their kept pairs with.
- ``kernels.plans``: block sizes, tile plans (which tiles to visit, with or without a mask) and the
  B3 rounding of a mask to whole tiles.
- ``kernels.executors``: run a plan: the dispatch, the dense reference oracle, the XLA block-sparse
  scans and the Pallas TPU kernel with its visit slots.
- ``kernels.policy``: the sparsity schedule, head routing and its statistics, and the attention
  policy that turns them into the model's ``attend``.
- ``kernels.parallel``: sequence parallelism: the mesh, the all-to-all exchange, sharded routing and
  the sequence-parallel ``attend``.

Each subpackage imports only those before it, and none imports the model or the harness. This
package's ``__init__`` imports nothing, so ``import kernels.masks`` loads masks alone.
"""
