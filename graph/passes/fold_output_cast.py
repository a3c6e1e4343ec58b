"""``fold_output_cast``: a softmax or layer norm whose result is only cast down writes the
low-precision result itself.

``to_mixed_precision`` runs softmax and layer norm in float32 (they are ``NEVER``
operators) and casts their result to float16 or bfloat16 where a matrix product reads it.
Both operators are opaque to ``fuse_ops``, so that cast would be a kernel of its own: one
more launch and one more pass over the tensor (per layer of a transformer, after its
attention softmax). This pass folds ``cast(op(x), dtype)`` into ``op(x, out_dtype=dtype)``
when:

- ``op`` is ``nn.softmax`` or ``nn.layer_norm`` (:data:`ROUNDING_OPS`);
- the cast is the only reader of the operator's result, which is not a graph output
  (a layer norm that also feeds a float32 residual add keeps its float32 result and its
  cast);
- the cast goes to a float dtype narrower than the result's (float32 to float16 or
  bfloat16), and the operator has no ``out_dtype`` of its own yet.

The operator computes exactly as before and rounds once at its store, so the result has
the same bits as the float32 operator followed by the cast, in one kernel fewer. The build
pipeline runs this pass after the precision passes and before ``fuse_ops``.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...ir import dtype as dt
from ..ir import Call, Graph, Node, consumers, rewrite
from .base import GraphPass, register_graph_pass

ROUNDING_OPS = ("nn.softmax", "nn.layer_norm")
"""Operators with an ``out_dtype`` that rounds their result once at the end."""


def _narrower_float(src: str, dst: str) -> bool:
    return dt.is_float(src) and dt.is_float(dst) and dt.bits(dst) < dt.bits(src)


@register_graph_pass
@dataclass(frozen=True)
class FoldOutputCast(GraphPass):
    """Fold a cast down that is the only reader of a softmax or layer norm into the
    operator's ``out_dtype`` (see the module's docstring)."""

    name = "fold_output_cast"

    def apply(self, graph: Graph, ctx) -> Graph:
        nodes = graph.nodes()
        readers = consumers(nodes)
        outputs = {id(o) for o in graph.outputs}

        def foldable(call: Call) -> bool:
            if not (isinstance(call.op, str) and call.op == "cast"):
                return False
            src = call.args[0]
            return (isinstance(src, Call) and isinstance(src.op, str)
                    and src.op in ROUNDING_OPS and not src.attrs.get("out_dtype")
                    and id(src) not in outputs and len(readers[id(src)]) == 1
                    and _narrower_float(src.dtype, call.dtype))

        def fold(call: Call, args: tuple) -> Node | None:
            if not foldable(call):
                return None
            (src,) = args  # the operator, its own arguments already rewritten
            return Call(src.op, src.args, {**src.attrs, "out_dtype": call.dtype})

        return rewrite(graph, fold)
