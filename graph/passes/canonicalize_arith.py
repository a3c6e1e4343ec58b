"""``canonicalize_arith``: one spelling for element-wise arithmetic by constants.

Exporters divide by a constant where a hand-written graph multiplies by its reciprocal (the
erf GELU's ``x / sqrt(2)``, an attention's ``/ sqrt(d)``). On the GPU a multiply is one
instruction and a correctly rounded float division about ten, and one spelling lets the
same network from every front end reach the same kernels. So a float tensor divided by a
one-element float constant ``c`` becomes a multiply by ``1 / c`` (computed in float64 and
rounded once to the dtype), when ``1 / c`` is finite and nonzero. The result may differ
from the division in the last bit, as any compiler's reciprocal rewrite does.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...ir import dtype as dt
from .. import opdefs as G
from ..ir import Call, Constant, Graph, Node, rewrite
from ..opdefs.elemwise import cast_array
from .base import GraphPass, register_graph_pass


def _reciprocal_multiply(call: Call, args: tuple) -> Node | None:
    if call.op != "divide" or not dt.is_float(call.dtype):
        return None
    x, c = args
    if not (isinstance(c, Constant) and c.value.size == 1 and c.dtype == x.dtype):
        return None
    if c.value.ndim > x.ndim or x.shape != call.shape:
        return None
    value = float(np.asarray(c.value, np.float64).reshape(()))
    if value == 0.0 or not np.isfinite(value):
        return None
    inv = np.asarray(1.0 / value, np.float64)
    rounded = cast_array(inv, c.dtype).reshape(c.value.shape)
    back = cast_array(rounded, "float64")
    if not np.isfinite(back).all() or float(back.reshape(())) == 0.0:
        return None
    return G.multiply(x, Constant(rounded, c.name, dtype=c.dtype))


@register_graph_pass
@dataclass(frozen=True)
class CanonicalizeArith(GraphPass):
    """Float division by a one-element constant as multiplication by its reciprocal (see
    the module doc)."""

    name = "canonicalize_arith"

    def apply(self, graph: Graph, ctx) -> Graph:
        return rewrite(graph, _reciprocal_multiply)
