"""``canonicalize_products``: matrix products as the kernels expect them.

Importers write a linear layer as a product and an ``add`` of its bias, and the key of an
attention as an explicit transpose before the product. This pass writes them the way the
operator library and the graph passes after it expect:

- ``add(nn.dense(x, w), b)`` with a constant ``b`` along the units (``[N]`` or ``[1, N]``)
  becomes ``nn.bias_add(nn.dense(x, w), b)``, which ``combine_parallel_dense`` combines and
  ``fuse_ops`` puts in the product's epilogue;
- ``nn.batch_matmul(a, transpose(b, [0, 2, 1]))`` reads ``b`` through the product's own
  ``transpose_b`` (and likewise for ``a``), so no transposed copy is made;
- a scalar constant multiplying an operand of a product (an attention's scale, split by
  exporters between query and key) multiplies the product instead: one multiply, in the
  product's epilogue. In float16 and bfloat16 only a power of two moves (exact in any
  order): any other factor rounds the scaled operand to 16 bits first, as the graph says,
  and the product of rounded operands differs from the rounded product by units in the
  last place (a float32 graph, mixed precision's included, moves every factor).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...ir import dtype as dt
from .. import opdefs as G
from ..ir import Call, Constant, Graph, Node, rewrite
from ..opdefs.elemwise import cast_array
from .base import GraphPass, register_graph_pass

_SWAP_LAST = [0, 2, 1]


def _bias(call: Call, args: tuple) -> Node | None:
    if call.op != "add":
        return None
    for k in (0, 1):
        prod, bias = args[k], args[1 - k]
        if not (isinstance(prod, Call) and prod.op == "nn.dense" and isinstance(bias, Constant)):
            continue
        units = prod.shape[-1]
        shape = bias.value.shape
        if (bias.dtype == prod.dtype and len(shape) in (1, 2) and shape[-1] == units
                and all(d == 1 for d in shape[:-1])):
            return G.bias_add(prod, Constant(bias.value.reshape(units), bias.name,
                                             dtype=bias.dtype), axis=-1)
    return None


def _scalar_factor(node: Node) -> tuple[Node, Constant] | None:
    """``(x, c)`` when ``node`` is ``x * c`` with a one-element constant ``c``, possibly
    under reshapes and transposes (then ``x`` is under the same ones)."""
    layouts: list[Call] = []
    while isinstance(node, Call) and node.op in ("reshape", "transpose"):
        layouts.append(node)
        node = node.args[0]
    if not (isinstance(node, Call) and node.op == "multiply"):
        return None
    for k in (0, 1):
        c = node.args[1 - k]
        if isinstance(c, Constant) and c.value.size == 1 and node.args[k].shape == node.shape:
            x = node.args[k]
            for layout in reversed(layouts):
                x = Call(layout.op, (x,), layout.attrs)
            return x, c
    return None


def _moves_exactly(c: Constant) -> bool:
    """Whether factor ``c`` may move from an operand onto the product: always in 32 and 64
    bits (one rounding in another place, far inside any tolerance); in 16 bits only a power
    of two, which scales without rounding."""
    if not dt.is_half(c.dtype):
        return True
    v = abs(float(c.value.reshape(()).astype(np.float32)))
    return v > 0 and np.isfinite(v) and float(np.log2(v)).is_integer()


def _swapped_operand(x: Node) -> Node | None:
    """``x`` transposed in its last two axes, when that needs no copy of its own: ``x`` is
    ``transpose(y, [..., 1])`` that moves ``y``'s last axis away (``[0, 2, 3, 1]``: a key
    transposed for the product), possibly merged to three dimensions by a reshape of the
    leading ones. The result then reads ``y``'s rows in order (``[0, 2, 1, 3]``), as the
    head transposes before the other operand do, and fuses with them."""
    if not isinstance(x, Call) or x.ndim != 3:
        return None
    reshape = x if x.op == "reshape" else None
    tr = x.args[0] if reshape is not None else x
    if not (isinstance(tr, Call) and tr.op == "transpose" and tr.ndim >= 3):
        return None
    perm = list(tr.attrs["axes"] or reversed(range(tr.ndim)))
    if perm[-1] == tr.ndim - 1 or perm[-2] != tr.ndim - 1:
        return None
    if reshape is not None and tuple(reshape.shape[-2:]) != tuple(tr.shape[-2:]):
        return None
    swapped = perm[:-2] + [perm[-1], perm[-2]]
    out = G.transpose(tr.args[0], swapped)
    if reshape is not None or out.ndim != 3:
        out = G.reshape(out, (x.shape[0], x.shape[2], x.shape[1]))
    return out


def _batch_matmul(call: Call, args: tuple) -> Node | None:
    if call.op != "nn.batch_matmul":
        return None
    a, b = args
    attrs = dict(call.attrs)
    changed = False
    for k, flag in ((0, "transpose_a"), (1, "transpose_b")):
        x = (a, b)[k]
        if (isinstance(x, Call) and x.op == "transpose" and x.ndim == 3
                and list(x.attrs["axes"] or [2, 1, 0]) == _SWAP_LAST):
            attrs[flag] = not attrs[flag]
            a, b = (x.args[0], b) if k == 0 else (a, x.args[0])
            changed = True
            continue
        swapped = _swapped_operand(x)
        if swapped is not None:
            attrs[flag] = not attrs[flag]
            a, b = (swapped, b) if k == 0 else (a, swapped)
            changed = True
    scale = 1.0
    scales: list[Constant] = []
    for k in (0, 1):
        found = _scalar_factor((a, b)[k])
        # the product's result dtype may differ from its operands' (out_dtype): a factor
        # moves onto the result only in the result's own dtype
        if (found is not None and found[1].dtype == call.dtype
                and _moves_exactly(found[1])):
            x, c = found
            a, b = (x, b) if k == 0 else (a, x)
            scales.append(c)
            scale *= float(c.value.reshape(()))
            changed = True
    if not changed:
        return None
    out = Call("nn.batch_matmul", (a, b), attrs)
    if scales:
        factor = cast_array(np.asarray(scale, np.float64), out.dtype)
        out = G.multiply(out, Constant(factor, scales[0].name, dtype=out.dtype))
    return out


@register_graph_pass
@dataclass(frozen=True)
class CanonicalizeProducts(GraphPass):
    """Bias adds of dense layers as ``nn.bias_add``, transposed and scaled operands of
    batched products folded into the product (see the module doc)."""

    name = "canonicalize_products"

    def apply(self, graph: Graph, ctx) -> Graph:
        def replace(call: Call, args: tuple) -> Node | None:
            return _bias(call, args) or _batch_matmul(call, args)

        return rewrite(graph, replace)
