"""``eliminate_common_subexpr``: one node for calls that compute the same thing.

Every graph operator is pure, so two calls of the same operator with the same arguments
(the same nodes) and equal attributes compute the same value. Exporters write such copies
often: PyTorch's ONNX exporters reshape a transformer layer's input once for each of the
query, key and value projections, and only after the copies are one node do the three
products read the same data, which ``combine_parallel_dense`` needs to make them one
product. Constants are compared by identity, not by value (a comparison of weights by value
would cost as much as the weights), so two equal weight tensors stay two; but small
constants (at most :data:`SMALL_CONSTANT` elements: scalars, the masks' fill values, axes)
are compared by value, since exporters write a new one at every use.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..ir import Call, Constant, Graph, Node, attr_text, rewrite
from .base import GraphPass, register_graph_pass

SMALL_CONSTANT = 64
"""Constants of at most this many elements are the same node when their values are."""


def _key(call: Call, args: tuple) -> tuple | None:
    if isinstance(call.op, Graph):  # a fused function: its identity is its own
        return None
    attrs = tuple(sorted((k, attr_text(v)) for k, v in call.attrs.items()))
    return (call.op, tuple(map(id, args)), attrs)


@register_graph_pass
@dataclass(frozen=True)
class EliminateCommonSubexpr(GraphPass):
    """Replace repeated calls (same operator, same argument nodes, equal attributes) by the
    first one (see the module doc)."""

    name = "eliminate_common_subexpr"

    def apply(self, graph: Graph, ctx) -> Graph:
        seen: dict[tuple, Node] = {}
        constants: dict[tuple, Constant] = {}

        def canonical(node: Node) -> Node:
            if not isinstance(node, Constant) or node.value.size > SMALL_CONSTANT:
                return node
            value = node.value
            key = (node.dtype, value.shape, value.tobytes())
            return constants.setdefault(key, node)

        def replace(call: Call, args: tuple) -> Node | None:
            args = tuple(canonical(a) for a in args)
            key = _key(call, args)
            if key is None:
                return None
            first = seen.get(key)
            if first is not None:
                return first
            changed = any(a is not b for a, b in zip(args, call.args))
            node = Call(call.op, args, call.attrs) if changed else call
            seen[key] = node
            return node

        return rewrite(graph, replace)
