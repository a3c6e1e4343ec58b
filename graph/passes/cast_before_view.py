"""``cast_before_view``: a graph output that casts a reshaped value casts it before the reshape.

A network built in float16 or bfloat16 returns its outputs in their own dtype
(``to_mixed_precision``'s ``keep_io_dtype``), so an output computed in 16 bits ends in a
cast up; a 16-bit import that returns float32 ends in one too. When the value is reshaped
on its way out (a language model's logits: ``dense -> reshape [1, seq, vocab] -> cast``),
``fuse_ops`` cannot put the cast in the product's epilogue: an epilogue holds element-wise
operators of the product's own shape, and the reshape between them is an injective
operator of another shape. The reshape and the cast become a kernel of their own, which
reads the whole 16-bit result and writes it again in float32 (GPT-2's logits, 1024 x
50257: 14% of the model's time on an H100).

A cast commutes with a reshape (both keep the elements in their order), so this pass
writes ``cast(reshape(x))`` as ``reshape(cast(x))`` (through any chain of
:data:`~ptxforge.graph.opdefs.transform.VIEW_OPS`) where the cast is a graph output that
no other call reads. The cast then joins ``x``'s kernel as its epilogue, which stores the
output dtype directly, and the reshape is a view: the memory plan lets ``x``'s kernel write
into the output's storage (:func:`~ptxforge.graph.memory_plan.plan_memory`), so no kernel
copies it. Only outputs are rewritten: elsewhere the reshape may already join its readers'
kernel, and moving a cast up to a product would make the product store the wider dtype for
them.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import opdefs as G
from ..ir import Call, Constant, Graph, Node, consumers
from ..opdefs.transform import VIEW_OPS
from .base import GraphPass, register_graph_pass


def _view_source(node: Node) -> Node:
    """``node`` without the view calls (reshapes) on top of it."""
    while isinstance(node, Call) and isinstance(node.op, str) and node.op in VIEW_OPS:
        node = node.args[0]
    return node


def hoist(call: Node) -> Node | None:
    """``reshape(cast(x))`` for ``call`` = ``cast(views(x))``, or None where ``call`` is no
    cast of a view of a computed value."""
    if not (isinstance(call, Call) and call.op == "cast"):
        return None
    data = call.args[0]
    source = _view_source(data)
    if source is data or isinstance(source, Constant):
        return None  # no view to move past (a constant's cast folds anyway)
    return G.reshape(G.cast(source, call.dtype), tuple(call.shape))


@register_graph_pass
@dataclass(frozen=True)
class CastBeforeView(GraphPass):
    """Move the cast of a graph output below the reshapes it reads (see the module doc)."""

    name = "cast_before_view"

    def apply(self, graph: Graph, ctx) -> Graph:
        readers = consumers(graph.nodes())
        new, changed = [], False
        done: dict[int, Node] = {}
        for out in graph.outputs:
            if id(out) not in done:
                # a cast other calls read too stays: rewriting only the output would compute
                # it twice
                done[id(out)] = (hoist(out) if not readers.get(id(out)) else None) or out
            changed |= done[id(out)] is not out
            new.append(done[id(out)])
        if not changed:
            return graph
        return Graph(graph.params, new, graph.name, graph.attrs)
