"""``pad_conv_channels``: give a tensor-core convolution's input a multiple of
``multiple`` channels, with zeros.

The tensor-core convolutions run NHWC as an implicit GEMM whose A tile is gathered from the
input along its channels, in copies as wide as the channel count allows
(:func:`~ptxforge.ops.schedules.gemm.rules.copy_vectors`). A network's first
convolution reads 3 channels (an RGB image): one 2-byte element per copy and no
``cp.async``, which makes ResNet's 7x7 stem slow. With the channels padded to 4 the copies
are 8 bytes (16 in TF32), to 8 they are 16 bytes; the reduction grows from ``KH*KW*3`` to
``KH*KW*4`` (or ``*8``) columns, which costs far less than the narrow copies did.

Each ``nn.conv2d`` that:

- is NHWC (kernel HWIO) with ``groups=1`` (grouped and depthwise convolutions run on CUDA
  cores and are left alone);
- runs on tensor cores: float16 or bfloat16 inputs, or float32 inputs with
  ``precision="tf32"``;
- has a constant weight (a weight that is a network input is left alone: padding it would
  cost a kernel at every run);
- and has a channel count that is not a multiple of ``multiple``,

reads ``nn.pad(data)`` with zero channels appended on the last axis, and a weight with as
many zero rows appended on its input-channel axis (axis 2), folded here into a new
constant. Each added channel multiplies zeros by zeros, so the result is exactly the
unpadded one (the sums add exact zeros). One padded copy is made per value, however many
convolutions read it. ``nn.pad`` is injective: ``fuse_ops`` puts it into the kernel that
produces the input (the cast to float16, or the transpose from NCHW), so it costs no kernel
of its own there; a convolution that reads a graph input directly, or the output of a
reduction, gets a small padding kernel.

The build pipeline runs this pass after the precision passes, so it sees the dtypes the
convolutions run in (:func:`~ptxforge.graph.passes.optimization_pipeline`, option
``pad_channels`` of ``graph.build``: 4 by default, 8 for 16-byte copies in 16 bits, 1 for
none). In a float32 network (``precision="float32"``) no convolution runs on tensor cores,
and the pass changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import opdefs as G
from ..ir import Call, Constant, Graph, GraphError, Node, rewrite
from .base import GraphPass, register_graph_pass
from .fold_constant import fold_call

TENSOR_CORE_DTYPES = ("float16", "bfloat16")
"""Input dtypes of convolutions that run on tensor cores (float32 only in TF32)."""


def runs_on_tensor_cores(call: Call) -> bool:
    """True for an ``nn.conv2d`` the tensor-core conv schedules take: NHWC, one group,
    float16 / bfloat16 inputs or float32 inputs asked to run in TF32."""
    if not (isinstance(call.op, str) and call.op == "nn.conv2d"):
        return False
    a = call.attrs
    if a["data_layout"] != "NHWC" or a["groups"] != 1:
        return False
    dtype = call.args[0].dtype
    return dtype in TENSOR_CORE_DTYPES or (dtype == "float32" and a["precision"] == "tf32")


@register_graph_pass
@dataclass(frozen=True)
class PadConvChannels(GraphPass):
    """Pad the input channels of tensor-core convolutions with zeros to a multiple of
    ``multiple`` (see the module's docstring).

    Parameters:
        multiple: the channel multiple (4: 8-byte copies of 16-bit inputs; 8: 16-byte
            copies; 1: the pass does nothing).
    """

    name = "pad_conv_channels"
    multiple: int = 4

    def apply(self, graph: Graph, ctx) -> Graph:
        m = self.multiple
        if isinstance(m, bool) or not isinstance(m, int) or m < 1:
            raise GraphError(f"pad_conv_channels: multiple must be a positive int, got {m!r}")
        if m == 1:
            return graph
        padded_data: dict[int, Node] = {}

        def pad_axis(node: Node, extra: int, axis: int) -> Node:
            width = [(0, 0)] * node.ty.ndim
            width[axis] = (0, extra)
            call = G.pad(node, width)
            folded = fold_call(call, call.args)
            return folded if folded is not None else call

        def pad(call: Call, args: tuple) -> Node | None:
            if not runs_on_tensor_cores(call):
                return None
            data, weight = args
            channels = data.shape[3]
            if channels % m == 0 or not isinstance(weight, Constant):
                return None
            extra = -channels % m  # zero channels up to the next multiple
            if id(data) not in padded_data:
                padded_data[id(data)] = pad_axis(data, extra, 3)
            return Call(call.op, [padded_data[id(data)], pad_axis(weight, extra, 2)],
                        call.attrs)

        return rewrite(graph, pad)
