"""``fold_constant``: evaluate every call whose arguments are all constants.

The value comes from the reference executor, so it is exactly what the operator means.
The folded constant keeps the name of its largest named argument (a folded
``multiply(conv1_weight, scale)`` is still called ``conv1_weight``).

A transpose of a transposed constant is folded as one transpose, and where the two
compose to the identity it is that constant itself, not an equal copy: a tied weight read
as it is by one operator and transposed twice by another (GPT-2's embedding table, which
the LM head reads through ``MatMul(x, Transpose(wte))``, written ``dense(x, wte)`` with
a transpose of the transpose) stays one constant, stored once, and one cast of it serves
both readers in mixed precision.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..interpreter import evaluate_call
from ..ir import Call, Constant, Graph, Node, rewrite
from ..opdefs.transform import _transpose_axes
from .base import GraphPass, register_graph_pass


def fold_call(call: Call, args: tuple) -> Constant | None:
    """The folded value of ``call`` over ``args``, or None when an argument is not constant."""
    if isinstance(call.op, Graph) or not all(isinstance(a, Constant) for a in args):
        return None
    rebuilt = call if all(a is b for a, b in zip(args, call.args)) else Call(
        call.op, args, call.attrs)
    value = evaluate_call(rebuilt, [a.value for a in args])
    named = [a for a in args if a.name]
    name = max(named, key=lambda a: a.value.size).name if named else ""
    return Constant(value, name)


def _compose_transposes(call: Call, args: tuple) -> Node | None:
    """``transpose(transpose(c, p), q)`` of a constant ``c`` as ``transpose(c, p[q])``, or
    ``c`` itself where ``p[q]`` is the identity; None for any other call."""
    inner = args[0] if call.op == "transpose" else None
    if not (isinstance(inner, Call) and inner.op == "transpose"
            and isinstance(inner.args[0], Constant)):
        return None
    p = _transpose_axes(inner.ndim, inner.attrs.get("axes"))
    q = _transpose_axes(call.ndim, call.attrs.get("axes"))
    axes = tuple(p[k] for k in q)
    if axes == tuple(range(len(axes))):
        return inner.args[0]
    return Call("transpose", [inner.args[0]], {"axes": axes})


@register_graph_pass
@dataclass(frozen=True)
class FoldConstant(GraphPass):
    """Replace calls on constants by their values (transposes of transposed constants
    composed first, see the module doc)."""

    name = "fold_constant"

    def apply(self, graph: Graph, ctx) -> Graph:
        return rewrite(rewrite(graph, _compose_transposes), fold_call)
