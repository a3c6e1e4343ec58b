"""``convert_layout``: run an NCHW network's convolutions and pools in NHWC.

Every ``nn.conv2d`` (weights OIHW -> HWIO) and pool in NCHW is rewritten to NHWC, and the
layout change propagates through the operators that do not care about it (element-wise,
broadcast, bias and batch norm along the channel axis, concatenation, padding, softmax),
so transposes appear only where the data enters the converted region and where an
operator needs the original layout (reshape, flatten, dense, the graph outputs). A
transpose that only moves dimensions of size 1 becomes a reshape, which costs nothing at
run time. Constant weights are transposed at compile time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import opdefs as G
from ..ir import Call, Constant, Graph, GraphError, Node
from ..op import OpPattern, get_op
from .base import GraphPass, register_graph_pass
from .fold_constant import fold_call

TO_NHWC = (0, 2, 3, 1)
TO_NCHW = (0, 3, 1, 2)
AXIS_TO_NHWC = {0: 0, 1: 3, 2: 1, 3: 2}
_POOLS = ("nn.max_pool2d", "nn.avg_pool2d", "nn.global_avg_pool2d", "nn.global_max_pool2d")
_BROADCAST = ("add", "subtract", "multiply", "divide", "maximum", "minimum", "power")


def permute(node: Node, axes: tuple) -> Node:
    """``transpose(node, axes)``: folded for constants, a reshape when only dimensions of
    size 1 move."""
    if isinstance(node, Constant):
        return Constant(np.ascontiguousarray(node.value.transpose(axes)), node.name)
    shape = node.shape
    moved = [a for a in axes if shape[a] != 1]
    if moved == sorted(moved):
        return G.reshape(node, [shape[a] for a in axes])
    return G.transpose(node, axes)


def _broadcast_nhwc(node: Node) -> Node:
    """A tensor that broadcasts against an NCHW tensor, made to broadcast against NHWC."""
    if node.ty.size == 1 or node.ndim > 4:
        return node
    if node.ndim < 4:
        shape = (1,) * (4 - node.ndim) + node.shape
        node = (Constant(node.value.reshape(shape), node.name) if isinstance(node, Constant)
                else G.reshape(node, shape))
    return permute(node, TO_NHWC)


class _Converter:
    def __init__(self):
        self.new: dict[int, Node] = {}
        self.nhwc: dict[int, bool] = {}
        self.plain: dict[int, Node] = {}

    def nchw(self, orig: Node) -> Node:
        """The new node of ``orig`` in its original layout."""
        node = self.new[id(orig)]
        if not self.nhwc[id(orig)]:
            return node
        if id(orig) not in self.plain:
            self.plain[id(orig)] = permute(node, TO_NCHW)
        return self.plain[id(orig)]

    def as_nhwc(self, orig: Node) -> Node:
        node = self.new[id(orig)]
        return node if self.nhwc[id(orig)] else permute(node, TO_NHWC)

    def convert(self, call: Call) -> tuple[Node, bool]:
        op, attrs, args = call.op, dict(call.attrs), call.args
        if isinstance(op, Graph):
            raise GraphError("convert_layout runs before operator fusion; this graph is fused")
        if op == "nn.conv2d" and attrs["data_layout"] == "NCHW":
            attrs.update(data_layout="NHWC", kernel_layout="HWIO")
            w = permute(self.new[id(args[1])], (2, 3, 1, 0))
            return Call(op, [self.as_nhwc(args[0]), w], attrs), True
        if op == "nn.conv2d_winograd" and attrs["data_layout"] == "NCHW":
            attrs["data_layout"] = "NHWC"
            return Call(op, [self.as_nhwc(args[0]), self.new[id(args[1])]], attrs), True
        if op in _POOLS and attrs["layout"] == "NCHW":
            attrs["layout"] = "NHWC"
            return Call(op, [self.as_nhwc(args[0])], attrs), True
        converted = [self.nhwc[id(a)] for a in args]
        if not any(converted):
            return Call(op, [self.new[id(a)] for a in args], attrs), False
        pattern = get_op(op).pattern_of(attrs)
        if len(args) == 1 and pattern == OpPattern.ELEMWISE:
            return Call(op, [self.new[id(args[0])]], attrs), True
        if op in _BROADCAST and call.ndim == 4:
            new_args = [self.new[id(a)] if self.nhwc[id(a)]
                        else _broadcast_nhwc(self.new[id(a)]) for a in args]
            return Call(op, new_args, attrs), True
        if op in ("nn.bias_add", "nn.batch_norm") and attrs["axis"] % 4 == 1:
            attrs["axis"] = 3
            return Call(op, [self.as_nhwc(args[0])] + [self.new[id(a)] for a in args[1:]],
                        attrs), True
        if op == "concatenate" and all(a.ndim == 4 for a in args):
            attrs["axis"] = AXIS_TO_NHWC[attrs["axis"] % 4]
            return Call(op, [self.as_nhwc(a) for a in args], attrs), True
        if op == "nn.pad":
            width = attrs["pad_width"]
            attrs["pad_width"] = tuple(width[a] for a in TO_NHWC)
            return Call(op, [self.as_nhwc(args[0])], attrs), True
        if op == "nn.softmax":
            attrs["axis"] = AXIS_TO_NHWC[attrs["axis"] % 4]
            return Call(op, [self.as_nhwc(args[0])], attrs), True
        return Call(op, [self.nchw(a) for a in args], attrs), False


@register_graph_pass
@dataclass(frozen=True)
class ConvertLayout(GraphPass):
    """Convert NCHW convolutions and pools to ``layout`` and propagate it.

    Parameters:
        layout: the layout to convert to; only ``"NHWC"`` is supported.
    """

    name = "convert_layout"
    layout: str = "NHWC"

    def apply(self, graph: Graph, ctx) -> Graph:
        if self.layout != "NHWC":
            raise GraphError(f"convert_layout converts NCHW to NHWC; got layout={self.layout!r}")
        cv = _Converter()
        for node in graph.nodes():
            if isinstance(node, Call):
                new, nhwc = cv.convert(node)
                folded = fold_call(new, new.args) if isinstance(new, Call) else None
                cv.new[id(node)] = folded if folded is not None else new
                cv.nhwc[id(node)] = nhwc
            else:
                cv.new[id(node)] = node
                cv.nhwc[id(node)] = False
        outputs = [cv.nchw(o) for o in graph.outputs]
        return Graph(graph.params, outputs, graph.name, graph.attrs)
