"""``winograd``: compute 3x3 stride-1 convolutions with Winograd's algorithm.

Each eligible ``nn.conv2d`` (3x3 kernel, stride 1, no dilation, no groups) becomes
``nn.conv2d_winograd`` over a kernel transformed by ``nn.winograd_weight_transform``; with
constant weights the transform is folded at compile time. The tile size follows TVM: 4x4
output tiles where the output height is a multiple of 8, else 2x2, unless ``tile_size``
fixes it. The pass is not part of the default build: it pays off where its schedules beat
the direct convolution's (``graph.build(..., winograd=True)`` turns it on). A convolution
asked to run in TF32 (``precision="tf32"``) is left alone: the Winograd convolution has no
TF32 form, and replacing it would compute in float32 against the user's explicit choice (the
direct convolution keeps TF32, on tensor cores in NHWC).
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import opdefs as G
from ..ir import Call, Graph, rewrite
from ..opdefs.conv import conv_dims
from ..opdefs.winograd import tile_size_for
from .base import GraphPass, register_graph_pass
from .fold_constant import fold_call


def eligible(call: Call) -> bool:
    """True for a conv2d Winograd can compute: 3x3, stride 1, no dilation, one group, not
    in TF32."""
    if call.op != "nn.conv2d":
        return False
    a = call.attrs
    if a.get("precision") == "tf32":
        return False
    _, _, _, _, _, _, kh, kw = conv_dims(call.args[0].ty, call.args[1].ty, a)
    return ((kh, kw) == (3, 3) and a["strides"] == (1, 1) and a["dilation"] == (1, 1)
            and a["groups"] == 1)


@register_graph_pass
@dataclass(frozen=True)
class Winograd(GraphPass):
    """Replace eligible 3x3 convolutions by Winograd convolutions.

    Parameters:
        tile_size: output tile size m of F(m x m, 3 x 3); 0 picks 4 or 2 by the output
            height.
        min_channels: leave convolutions with fewer input channels alone (the transforms
            cost more than they save there).
    """

    name = "winograd"
    tile_size: int = 0
    min_channels: int = 8

    def apply(self, graph: Graph, ctx) -> Graph:
        def fn(call: Call, args: tuple):
            if not eligible(call):
                return None
            a = call.attrs
            layout = a["data_layout"]
            out_h = call.shape[1] if layout == "NHWC" else call.shape[2]
            channels = call.args[0].shape[3 if layout == "NHWC" else 1]
            if channels < self.min_channels:
                return None
            tile = self.tile_size or tile_size_for(out_h)
            wt = G.winograd_weight_transform(args[1], tile, a["kernel_layout"])
            folded = fold_call(wt, wt.args)
            return G.conv2d_winograd(args[0], folded if folded is not None else wt, tile,
                                     a["padding"], layout, a["out_dtype"])

        return rewrite(graph, fn)
