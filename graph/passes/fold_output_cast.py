"""``fold_output_cast``: a softmax or layer norm whose result is only cast down writes the
low-precision result itself.

``to_mixed_precision`` runs softmax in float32 (a ``NEVER`` operator), and layer and RMS
norms too with ``keep_norms_float32`` (by default they round their own result, policy
``ROUND``), and casts their result to float16 or bfloat16 where a matrix product reads it.
Both operators are opaque to ``fuse_ops``, so that cast would be a kernel of its own: one
more launch and one more pass over the tensor (per layer of a transformer, after its
attention softmax). This pass folds ``cast(op(x), dtype)`` into ``op(x, out_dtype=dtype)``
when:

- ``op`` is ``nn.softmax``, ``nn.layer_norm`` or ``nn.rms_norm`` (:data:`ROUNDING_OPS`);
- the cast is the only reader of the operator's result, which is not a graph output
  (a layer norm that also feeds a float32 residual add keeps its float32 result and its
  cast);
- the cast goes to a float dtype narrower than the result's (float32 to float16 or
  bfloat16), and the operator has no ``out_dtype`` of its own yet.

The operator computes exactly as before and rounds once at its store, so the result has
the same bits as the float32 operator followed by the cast, in one kernel fewer. The build
pipeline runs this pass after the precision passes and before ``fuse_ops``.

With ``round_shared=True`` (the default of ``graph.build(precision="float16" |
"bfloat16")``), an operator whose result is cast down for some readers and read in float32
by others that are all element-wise (a transformer's layer norm, read by the next layer's
products through the cast and by the residual add in float32) also stores only the
rounded result: the float32 readers widen it (``cast`` up, fused into their own kernels).
That is one kernel (the cast) and one float32 tensor fewer per such operator, at the cost
of rounding the value the float32 readers see, exactly as a low-precision network rounds
every activation it stores (the residual add still adds in float32; docs/precision.md
gives the effect on BERT). Off, those operators keep their float32 result and the cast:
``graph.GraphPassContext(config={"fold_output_cast.round_shared": False})`` around the
build turns it off (and ``True`` on) whatever the pipeline asked.

Readers reached through reshapes count as readers of the operator: the reshapes
(:data:`~ptxforge.graph.opdefs.transform.VIEW_OPS`, no kernels) then reshape the rounded
result, a cast down below one reads it directly, and a float32 reader below one widens it.
BERT's embedding layer norm is read that way, through the reshape to two dimensions, by
the first layer's products (cast down) and by its residual add (float32): kept in
float32, it cost the first layer a cast kernel of its own and a residual kernel that read
the norm in float32 where the other eleven layers' read it in float16 (an H200 at batch 8,
512 tokens: 15.9 us and 15.1 us against 13.5 us for the others' residual kernel); folded,
the first layer runs the other layers' kernels.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...ir import dtype as dt
from .. import opdefs as G
from ..ir import Call, Graph, GraphError, Node, consumers, rewrite
from ..op import OpPattern, pattern_of
from ..opdefs.transform import VIEW_OPS
from .base import GraphPass, register_graph_pass

CONFIG_ROUND_SHARED = "fold_output_cast.round_shared"
"""The pass context config key overriding ``round_shared``."""

ROUNDING_OPS = ("nn.softmax", "nn.layer_norm", "nn.rms_norm")
"""Operators with an ``out_dtype`` that rounds their result once at the end."""


def _narrower_float(src: str, dst: str) -> bool:
    return dt.is_float(src) and dt.is_float(dst) and dt.bits(dst) < dt.bits(src)


@register_graph_pass
@dataclass(frozen=True)
class FoldOutputCast(GraphPass):
    """Fold a cast down that is the only reader of a softmax or layer norm into the
    operator's ``out_dtype`` (see the module's docstring).

    Parameters:
        round_shared: also store only the rounded result of an operator that other,
            element-wise readers read in float32; they widen it.
    """

    name = "fold_output_cast"
    round_shared: bool = False

    def apply(self, graph: Graph, ctx) -> Graph:
        nodes = graph.nodes()
        readers = consumers(nodes)
        outputs = {id(o) for o in graph.outputs}
        round_shared = getattr(ctx, "config", {}).get(CONFIG_ROUND_SHARED, self.round_shared)
        if not isinstance(round_shared, bool):
            raise GraphError(f"{CONFIG_ROUND_SHARED} in the pass context's config is a bool, "
                             f"got {round_shared!r}")

        def rounding_op(node) -> bool:
            return (isinstance(node, Call) and isinstance(node.op, str)
                    and node.op in ROUNDING_OPS and not node.attrs.get("out_dtype")
                    and id(node) not in outputs)

        def cast_down(call: Call, src) -> bool:
            return (isinstance(call.op, str) and call.op == "cast"
                    and _narrower_float(src.dtype, call.dtype))

        def is_view(node) -> bool:
            return isinstance(node, Call) and isinstance(node.op, str) and node.op in VIEW_OPS

        def reached(src: Call) -> tuple[list, list] | None:
            """``(views, leaves)``: the reshapes below ``src`` and the ``(reader, what it
            reads)`` pairs of every other reader of ``src`` or of those reshapes; None where
            one of the reshapes is a graph output (it must keep ``src``'s dtype)."""
            views, leaves, frontier = [], [], [src]
            while frontier:
                node = frontier.pop()
                for c in readers[id(node)]:
                    if is_view(c):
                        if id(c) in outputs:
                            return None
                        views.append(c)
                        frontier.append(c)
                    else:
                        leaves.append((c, node))
            return views, leaves

        def rounded_dtype(src: Call) -> str | None:
            """The dtype ``src`` may store instead of its own, or None."""
            if not rounding_op(src):
                return None
            found = reached(src)
            if found is None:
                return None
            _, leaves = found
            downs = {c.dtype for c, n in leaves if cast_down(c, n)}
            if len(downs) != 1:
                return None
            others = [c for c, n in leaves if not cast_down(c, n)]
            if not others:
                return downs.pop()
            if round_shared and all(isinstance(c.op, str)
                                         and pattern_of(c) <= OpPattern.INJECTIVE
                                         for c in others):
                return downs.pop()
            return None

        stored = {id(n): d for n in nodes if (d := rounded_dtype(n)) is not None}
        # the reshapes between a rounded operator and its readers: they reshape the rounded
        # result (the views of one operator share its stored dtype)
        viewed = {id(v) for n in nodes if id(n) in stored for v in reached(n)[0]}
        widened: dict[int, Node] = {}  # id(cast up we made) -> the rounded value it widens

        def low_value(call: Call, low: Node) -> Node:
            """``low`` for readers of ``call`` that all cast it down, else ``low`` widened
            back to ``call``'s dtype for the others (the casts down unwrap it)."""
            if all(cast_down(c, call) for c in readers[id(call)]):
                return low
            up = G.cast(low, call.dtype)
            widened[id(up)] = low
            return up

        def fold(call: Call, args: tuple) -> Node | None:
            if id(call) in stored:  # the operator, storing the rounded result
                low = Call(call.op, args, {**call.attrs, "out_dtype": stored[id(call)]})
                return low_value(call, low)
            if id(call) in viewed:  # a reshape of the rounded result
                (src,) = args
                low = widened.get(id(src), src)
                return low_value(call, Call(call.op, (low,), call.attrs))
            if cast_down(call, call.args[0]) and (id(call.args[0]) in stored
                                                  or id(call.args[0]) in viewed):
                (src,) = args
                # the rounded value itself (under a widening cast for the other readers)
                return widened.get(id(src), src)
            return None

        return rewrite(graph, fold)
