"""``simplify_inference``: rewrite inference-only operators into plain arithmetic.

``nn.batch_norm(x, gamma, beta, mean, var)`` becomes ``x * scale + shift`` with
``scale = gamma / sqrt(var + eps)`` and ``shift = beta - mean * scale``, both shaped to
broadcast along the normalized axis. With the statistics bound as constants,
``fold_constant`` then computes ``scale`` and ``shift`` once, and ``fold_scale_axis`` folds
the multiply into the weights of a convolution before it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import opdefs as G
from ..ir import Call, Constant, Graph, Node, rewrite
from .base import GraphPass, register_graph_pass


def _along_axis(v: Node, axis: int, ndim: int) -> Node:
    trailing = ndim - 1 - axis
    return G.expand_dims(v, 1, trailing) if trailing else v


def expand_batch_norm(call: Call, args: tuple) -> Node:
    """``x * scale + shift`` for a ``nn.batch_norm`` call with arguments ``args``."""
    x, gamma, beta, mean, var = args
    attrs = call.attrs
    axis = attrs["axis"] % x.ndim
    eps = Constant(np.array(attrs["epsilon"], dtype=x.dtype))
    inv = G.rsqrt(G.add(var, eps))
    scale = G.multiply(gamma, inv) if attrs["scale"] else inv
    shift = G.negative(G.multiply(mean, scale))
    if attrs["center"]:
        shift = G.add(beta, shift)
    out = G.multiply(x, _along_axis(scale, axis, x.ndim))
    return G.add(out, _along_axis(shift, axis, x.ndim))


@register_graph_pass
@dataclass(frozen=True)
class SimplifyInference(GraphPass):
    """Expand ``nn.batch_norm`` into a multiply and an add (inference semantics)."""

    name = "simplify_inference"

    def apply(self, graph: Graph, ctx) -> Graph:
        def fn(call: Call, args: tuple):
            if call.op == "nn.batch_norm":
                return expand_batch_norm(call, args)
            return None

        return rewrite(graph, fn)
