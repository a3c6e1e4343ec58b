"""Graph passes: inference simplification, constant folding, folding scales into weights,
layout conversion, Winograd convolution and operator fusion, on the infrastructure of
:mod:`ptxforge.graph.passes.base`."""

from .base import (
    GRAPH_PASSES,
    GraphPass,
    GraphPassContext,
    GraphPipeline,
    GraphVerify,
    register_graph_pass,
)
from .convert_layout import ConvertLayout
from .fold_constant import FoldConstant
from .fold_scale_axis import FoldScaleAxis
from .fuse_ops import FuseOps
from .simplify_inference import SimplifyInference
from .winograd import Winograd

__all__ = [
    "GRAPH_PASSES", "ConvertLayout", "FoldConstant", "FoldScaleAxis", "FuseOps", "GraphPass",
    "GraphPassContext", "GraphPipeline", "GraphVerify", "SimplifyInference", "Winograd",
    "optimization_pipeline", "register_graph_pass",
]


def optimization_pipeline(layout: str | None = None, winograd: bool = False,
                          fuse: bool = True) -> GraphPipeline:
    """The passes a network goes through before compilation::

        simplify_inference, fold_constant, [convert_layout, fold_constant,]
        fold_scale_axis, fold_constant, [winograd, fold_constant,] fuse_ops
    """
    passes: list[GraphPass] = [SimplifyInference(), FoldConstant()]
    if layout:
        passes += [ConvertLayout(layout), FoldConstant()]
    passes += [FoldScaleAxis(), FoldConstant()]
    if winograd:
        passes += [Winograd(), FoldConstant()]
    if fuse:
        passes.append(FuseOps())
    return GraphPipeline(passes)
