"""Graph passes: inference simplification, constant folding, folding scales into weights,
combining parallel dense layers, layout conversion, mixed precision (float16/bfloat16, TF32),
folding output casts into softmax and layer norm, Winograd convolution, padding the input
channels of tensor-core convolutions and operator fusion, on the infrastructure of
:mod:`ptxforge.graph.passes.base`."""

from ..ir import GraphError
from .base import (
    GRAPH_PASSES,
    GraphPass,
    GraphPassContext,
    GraphPipeline,
    GraphVerify,
    register_graph_pass,
)
from .canonicalize_arith import CanonicalizeArith
from .canonicalize_norms import CanonicalizeNorms
from .canonicalize_products import CanonicalizeProducts
from .cast_before_view import CastBeforeView
from .combine_parallel_dense import CombineParallelDense
from .convert_layout import ConvertLayout
from .decompose_attention import DecomposeAttention
from .eliminate_common_subexpr import EliminateCommonSubexpr
from .fold_constant import FoldConstant
from .fold_nan_guard import FoldNanGuard
from .fold_output_cast import FoldOutputCast
from .fold_scale_axis import FoldScaleAxis
from .fuse_ops import FuseOps
from .pad_conv_channels import PadConvChannels
from .recompose_attention import RecomposeAttention
from .simplify_inference import SimplifyInference
from .sink_layout_ops import SinkLayoutOps
from .to_mixed_precision import MIXED_PRECISION_POLICY, MixedPolicy, ToMixedPrecision
from .use_tf32 import UseTF32
from .winograd import Winograd

PRECISIONS = ("float32", "tf32", "float16", "bfloat16")
"""The precisions a network is built in (``graph.build(..., precision=)``)."""

PAD_CHANNELS = 4
"""The default channel multiple of ``pad_conv_channels`` in the build pipeline
(``pad_channels=None``)."""

__all__ = [
    "GRAPH_PASSES", "MIXED_PRECISION_POLICY", "PAD_CHANNELS", "PRECISIONS", "CanonicalizeArith",
    "CanonicalizeNorms", "CanonicalizeProducts", "CastBeforeView", "CombineParallelDense",
    "ConvertLayout",
    "DecomposeAttention", "EliminateCommonSubexpr", "FoldConstant", "FoldNanGuard",
    "FoldOutputCast", "FoldScaleAxis", "FuseOps", "GraphPass", "GraphPassContext",
    "GraphPipeline", "GraphVerify", "MixedPolicy", "PadConvChannels", "RecomposeAttention",
    "SimplifyInference",
    "SinkLayoutOps", "ToMixedPrecision", "UseTF32", "Winograd", "canonicalization_pipeline",
    "check_pad_channels", "check_precision", "optimization_pipeline", "register_graph_pass",
]


def check_precision(precision: str | None, winograd: bool = False) -> str:
    """``precision`` (None: ``"float32"``) after checking it is one of :data:`PRECISIONS`."""
    precision = precision or "float32"
    if precision not in PRECISIONS:
        raise GraphError(f"precision must be one of {', '.join(PRECISIONS)}, got "
                         f"{precision!r}")
    if winograd and precision in ("float16", "bfloat16"):
        raise GraphError(f"winograd=True with precision={precision!r}: Winograd's transforms "
                         "lose too much accuracy in 16 bits; build without winograd")
    return precision


def check_pad_channels(pad_channels: int | None) -> int:
    """The channel multiple of ``pad_channels`` (None: :data:`PAD_CHANNELS`) after
    checking it is a positive int."""
    if pad_channels is None:
        return PAD_CHANNELS
    if isinstance(pad_channels, bool) or not isinstance(pad_channels, int) or pad_channels < 1:
        raise GraphError(f"pad_channels must be a positive int (1: no padding), got "
                         f"{pad_channels!r}")
    return pad_channels


def canonicalization_pipeline() -> GraphPipeline:
    """The passes that write what importers give the way the kernels expect it::

        eliminate_common_subexpr, recompose_attention, decompose_attention, canonicalize_norms,
        canonicalize_arith, fold_nan_guard, sink_layout_ops, canonicalize_products, sink_layout_ops,
        eliminate_common_subexpr, fold_constant

    A network from an ONNX file or ``torch.export`` then reaches the same fused kernels as
    the same network written with the graph operators directly. ``recompose_attention``
    writes the attention exporters spell out as products, masks and a softmax as one
    ``nn.attention``, so ``decompose_attention`` chooses for it as for ``graph.from_torch``'s
    (the fused kernel or the products)."""
    return GraphPipeline([EliminateCommonSubexpr(), RecomposeAttention(), DecomposeAttention(),
                          CanonicalizeNorms(),
                          CanonicalizeArith(), FoldNanGuard(), SinkLayoutOps(),
                          CanonicalizeProducts(),
                          SinkLayoutOps(), EliminateCommonSubexpr(), FoldConstant()])


def optimization_pipeline(layout: str | None = None, winograd: bool = False,
                          fuse: bool = True, precision: str | None = None,
                          pad_channels: int | None = None) -> GraphPipeline:
    """The passes a network goes through before compilation::

        simplify_inference, fold_constant, <canonicalization_pipeline>,
        [convert_layout, fold_constant,]
        fold_scale_axis, fold_constant, combine_parallel_dense,
        [to_mixed_precision(dtype), fold_constant | use_tf32,] cast_before_view,
        fold_output_cast,
        [winograd, fold_constant,] [pad_conv_channels(multiple),] [fuse_ops]

    The batch norm statistics and scales are folded into the weights in float32, before
    the weights are converted to a 16-bit ``precision``. Three or more dense layers of one
    input (a transformer's query, key and value projections) become one product.
    ``cast_before_view`` moves the cast that gives an output its dtype back above the
    output's reshapes, so the kernel computing it stores that dtype and the reshape is a
    view. ``fold_output_cast`` then lets a float32 softmax or layer norm whose result is only
    cast down write the 16-bit result itself, so the cast is no kernel of its own after
    fusion; in float16 and bfloat16 also one whose float32 result other element-wise
    readers (a residual add) share, which then widen the 16-bit result
    (``round_shared``).

    Without a ``layout``, a network in ``float16``, ``bfloat16`` or ``tf32`` runs its
    convolutions in NHWC (``convert_layout``, transposes only where the data enters and
    leaves the converted region): the tensor cores run NHWC convolutions as implicit GEMMs.
    ``layout="NCHW"`` keeps an NCHW network as it is.

    ``pad_conv_channels`` gives the NHWC convolutions that run on tensor cores (float16
    or bfloat16 inputs, or TF32) whose input channels are not a multiple of
    ``pad_channels`` (None: :data:`PAD_CHANNELS`, 4; 8 widens a 16-bit stem's copies to 16
    bytes; 1: the pass is left out) zero channels up to one, and their weights zero rows:
    a 3-channel image's first convolution then copies its input 8 or 16 bytes at a time
    with ``cp.async``. A float32 network has no such convolution, so the pass changes
    nothing there. It runs after ``winograd``, so only the direct convolutions are padded.
    """
    precision = check_precision(precision, winograd)
    multiple = check_pad_channels(pad_channels)
    passes: list[GraphPass] = [SimplifyInference(), FoldConstant()]
    passes += canonicalization_pipeline().passes
    if layout is None and precision in ("float16", "bfloat16", "tf32"):
        layout = "NHWC"
    if layout and layout != "NCHW":  # NCHW: the network's own layout, kept
        passes += [ConvertLayout(layout), FoldConstant()]
    passes += [FoldScaleAxis(), FoldConstant(), CombineParallelDense()]
    if precision in ("float16", "bfloat16"):
        passes += [ToMixedPrecision(precision), FoldConstant()]
    elif precision == "tf32":
        passes.append(UseTF32())
    passes.append(CastBeforeView())
    passes.append(FoldOutputCast(round_shared=precision in ("float16", "bfloat16")))
    if winograd:
        passes += [Winograd(), FoldConstant()]
    if multiple > 1:
        passes.append(PadConvChannels(multiple))
    if fuse:
        passes.append(FuseOps())
    return GraphPipeline(passes)
