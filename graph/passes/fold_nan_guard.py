"""``fold_nan_guard``: a softmax's NaN guard as part of the softmax.

PyTorch's decomposition of a masked ``scaled_dot_product_attention`` (the dynamo exporter
writes it so) follows the softmax with ``where(isnan(p), 0, p)``: a row whose keys are all
masked is minus infinity throughout, its softmax is 0 / 0, and the guard makes it 0. As
written, the guard is one more element-wise kernel per attention, reading and writing the
whole score matrix. ``nn.softmax(..., nan_to_zero=True)`` writes the zeros itself; this
pass gives the softmax that attribute where the guard is the softmax's only reader.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..ir import Call, Constant, Graph, Node, consumers, rewrite
from .base import GraphPass, register_graph_pass


def _is_zero(node: Node) -> bool:
    return (isinstance(node, Constant) and node.value.size == 1
            and float(node.value.reshape(())) == 0.0)


@register_graph_pass
@dataclass(frozen=True)
class FoldNanGuard(GraphPass):
    """``where(isnan(softmax(x)), 0, softmax(x))`` as ``softmax(x, nan_to_zero=True)`` (see
    the module doc)."""

    name = "fold_nan_guard"

    def apply(self, graph: Graph, ctx) -> Graph:
        uses = consumers(graph.nodes())

        def replace(call: Call, args: tuple) -> Node | None:
            if call.op != "where":
                return None
            cond, zero, p = call.args
            if not (isinstance(cond, Call) and cond.op == "isnan" and cond.args[0] is p
                    and isinstance(p, Call) and p.op == "nn.softmax" and _is_zero(zero)
                    and p.shape == call.shape and p.dtype == call.dtype):
                return None
            if {id(u) for u in uses[id(p)]} != {id(cond), id(call)} or len(uses[id(cond)]) != 1:
                return None
            softmax = args[2]
            return Call("nn.softmax", softmax.args, dict(softmax.attrs, nan_to_zero=True))

        return rewrite(graph, replace)
