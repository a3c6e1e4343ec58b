"""``fold_constant``: evaluate every call whose arguments are all constants.

The value comes from the reference executor, so it is exactly what the operator means.
The folded constant keeps the name of its largest named argument (a folded
``multiply(conv1_weight, scale)`` is still called ``conv1_weight``).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..interpreter import evaluate_call
from ..ir import Call, Constant, Graph, rewrite
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


@register_graph_pass
@dataclass(frozen=True)
class FoldConstant(GraphPass):
    """Replace calls on constants by their values."""

    name = "fold_constant"

    def apply(self, graph: Graph, ctx) -> Graph:
        return rewrite(graph, fold_call)
