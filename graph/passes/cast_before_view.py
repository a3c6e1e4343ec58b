"""``cast_before_view``: a cast of reshaped values (a graph output's, or a cast down) is made
before the reshapes.

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
copies it.

Elsewhere only a cast down (float32 to float16) moves, where nothing else reads the
reshapes: the producer may then store the narrow value itself (``fold_output_cast`` folds it
into a layer norm's ``out_dtype``: the first layer norm of GPT-2 and BERT, whose result is
reshaped to two dimensions before the products' cast) and the reshape is a view. A cast up
stays: moved into a product's epilogue it would make the product store the wider dtype for
readers that widen it in their own kernel today.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...ir import dtype as dt
from .. import opdefs as G
from ..ir import Call, Constant, Graph, Node, consumers, rewrite
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


def _narrowing(call: Call) -> bool:
    src, dst = call.args[0].dtype, call.dtype
    return dt.is_float(src) and dt.is_float(dst) and dt.bits(dst) < dt.bits(src)


def _private_views(node: Node, readers: dict) -> bool:
    """Whether every view call from ``node`` down to its source has one reader."""
    while isinstance(node, Call) and isinstance(node.op, str) and node.op in VIEW_OPS:
        if len(readers.get(id(node), ())) != 1:
            return False
        node = node.args[0]
    return True


@register_graph_pass
@dataclass(frozen=True)
class CastBeforeView(GraphPass):
    """Move the cast of a graph output, and a cast down read through reshapes that nothing
    else reads, below those reshapes (see the module doc)."""

    name = "cast_before_view"

    def apply(self, graph: Graph, ctx) -> Graph:
        readers = consumers(graph.nodes())
        outputs = {id(o) for o in graph.outputs}

        def move(call: Call, args: tuple) -> Node | None:
            if call.op != "cast":
                return None
            # an output's cast that other calls read too stays: rewriting it for the output
            # alone would compute it twice
            if id(call) in outputs and not readers.get(id(call)):
                return hoist(Call(call.op, args, call.attrs))
            if _narrowing(call) and _private_views(call.args[0], readers):
                return hoist(Call(call.op, args, call.attrs))
            return None

        return rewrite(graph, move)
