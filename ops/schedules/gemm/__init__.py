"""The tensor-core GEMM template, built from shared pieces.

:mod:`.pieces` holds what every tensor-core schedule of a product does the same way: the
fragment staging before each mma (:func:`~.pieces.stage_fragments`, its plans from the
instruction kind, :func:`~.pieces.fragment_plans`) and the warps' stores of their
accumulator tiles (:func:`~.pieces.store_warp_tiles`). :mod:`.choice` is the one place that
picks wgmma or mma.sync for a product.
"""

from .pieces import fragment_plans, stage_fragments, store_warp_tiles

__all__ = ["fragment_plans", "stage_fragments", "store_warp_tiles"]
