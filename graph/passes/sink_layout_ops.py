"""``sink_layout_ops``: reshapes and transposes move after the element-wise work they precede.

Exporters write a product over ``[batch, seq, hidden]`` as a reshape to two dimensions, the
product, and a reshape back, and then add the bias, the residual and the activation in
three dimensions; they scale an attention's query and key after the head transposes. As
written, each reshape or transpose ends a fusion group, so every bias add and scale is a
kernel of its own. This pass moves a layout operator (``reshape``, ``transpose``) below the
element-wise operator that reads it, as long as the other operands follow along for free:

- scalars (a constant of one element), under any layout operator;
- constants along the last axis (a bias of ``[N]`` or ``[1, ..., N]``), under a reshape that
  keeps the last dimension or a transpose that keeps the last axis last;
- tensors of the reshape's shape, which are reshaped back (a view, no copy): a residual add;
  and tensors that broadcast along the leading dimensions and vary only along trailing
  ones the reshape keeps (an attention mask over the heads, at batch 1).

It moves reshapes below ``nn.layer_norm``, ``nn.rms_norm`` and ``nn.softmax`` of the last
axis when the reshape keeps the last dimension, merges chains of reshapes and of
transposes, and drops those that change nothing (``squeeze``, ``expand_dims`` and
``nn.batch_flatten`` are reshapes too). The element-wise work then meets the product it
follows, and joins its epilogue under ``fuse_ops``, as in a graph written by hand.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import opdefs as G
from ..ir import Call, Constant, Graph, Node, rewrite
from ..op import OpPattern, get_op
from .base import GraphPass, register_graph_pass

_RESHAPES = ("reshape", "squeeze", "expand_dims", "nn.batch_flatten")
_ROW_OPS = ("nn.layer_norm", "nn.rms_norm", "nn.softmax")


def _is_call(node: Node, op: str) -> bool:
    return isinstance(node, Call) and node.op == op


def _elementwise(call: Call) -> bool:
    if isinstance(call.op, Graph):
        return False
    return get_op(call.op).pattern_of(call.attrs) in (OpPattern.ELEMWISE, OpPattern.BROADCAST)


def _scalar(node: Node) -> bool:
    return isinstance(node, Constant) and node.value.size == 1


def _row_vector(node: Node, n: int) -> bool:
    """A constant ``[n]`` or ``[1, ..., 1, n]``: one value per element of the last axis."""
    if not isinstance(node, Constant) or node.value.ndim == 0:
        return False
    shape = node.value.shape
    return shape[-1] == n and all(d == 1 for d in shape[:-1])


def _keeps_last(layout: Call) -> bool:
    src = layout.args[0]
    if layout.op == "transpose":
        return layout.attrs["axes"] is not None and list(layout.attrs["axes"])[-1] == src.ndim - 1
    return src.ndim >= 1 and layout.ndim >= 1 and src.shape[-1] == layout.shape[-1]


def _redo(layout: Call, data: Node) -> Node:
    """``layout`` applied to ``data`` (which has the shape of ``layout``'s argument)."""
    if layout.op == "transpose":
        return G.transpose(data, layout.attrs["axes"])
    return G.reshape(data, layout.shape)


def _adapt(operand: Node, layout: Call, out_shape: tuple) -> Node | None:
    """The operand to use below ``layout`` in place of ``operand``, or None if it cannot
    follow for free."""
    src = layout.args[0]
    if _scalar(operand):
        return Constant(operand.value.reshape(()), operand.name, dtype=operand.dtype)
    if _row_vector(operand, out_shape[-1]) and _keeps_last(layout):
        return Constant(operand.value.reshape(operand.value.shape[-1]), operand.name,
                        dtype=operand.dtype)
    if layout.op != "transpose" and operand.shape == out_shape:
        return G.reshape(operand, src.shape)
    if layout.op != "transpose" and operand.ndim <= len(out_shape):
        # a broadcast operand (an attention mask [1, 1, s, s] over [1, heads, s, s] scores):
        # it follows when what it varies along is the trailing dimensions the reshape keeps
        trailing = tuple(operand.shape)
        while trailing and trailing[0] == 1:
            trailing = trailing[1:]
        n = len(trailing)
        if n and n < src.ndim and trailing == tuple(src.shape[-n:]) == tuple(out_shape[-n:]):
            return G.reshape(operand, trailing)
    return None


def _sinkable(node: Node) -> bool:
    """A layout operator worth moving down: a transpose, or a reshape that adds dimensions
    or keeps their number (one that removes dimensions stays, so that work is done in the
    fewer dimensions, and a reshape moved down never moves back up)."""
    if not isinstance(node, Call):
        return False
    if node.op == "transpose":
        return True
    return node.op == "reshape" and node.args[0].ndim <= node.ndim


def _sink(call: Call, args: tuple) -> Node | None:
    """``ew(layout(a), others...)`` as ``layout(ew(a, others'...))``, or None."""
    pos = next((k for k, a in enumerate(args) if _sinkable(a) and a.shape == call.shape),
               None)
    if pos is None:
        return None
    layout = args[pos]
    new_args = []
    for k, a in enumerate(args):
        if k == pos:
            new_args.append(layout.args[0])
            continue
        same = (isinstance(a, Call) and a.op == layout.op and a.attrs == layout.attrs
                and a.args[0].shape == layout.args[0].shape)
        adapted = a.args[0] if same else _adapt(a, layout, call.shape)
        if adapted is None:
            return None
        new_args.append(adapted)
    try:
        inner = Call(call.op, new_args, call.attrs)
    except Exception:  # noqa: BLE001 - the operator refuses the new shapes: leave it
        return None
    if inner.ndim != layout.args[0].ndim:
        return None
    return _redo(layout, inner)


def _sink_row_op(call: Call, args: tuple) -> Node | None:
    """``layer_norm(reshape(a))`` / ``softmax(reshape(a))`` over the last axis, when the
    reshape keeps the last dimension, as ``reshape(op(a))``."""
    data = args[0]
    if not (_is_call(data, "reshape") and _sinkable(data)) or call.attrs["axis"] not in (
            -1, call.ndim - 1):
        return None
    if not _keeps_last(data) or data.args[0].ndim < 2:
        return None
    attrs = dict(call.attrs, axis=-1)
    return G.reshape(Call(call.op, (data.args[0],) + args[1:], attrs), call.shape)


def _simplify(call: Call, args: tuple) -> Node | None:
    if call.op in _RESHAPES:
        data = args[0]
        while _is_call(data, "reshape"):
            data = data.args[0]
        if data.shape == call.shape:
            return data
        if call.op != "reshape" or data is not args[0]:
            return G.reshape(data, call.shape)
        return None
    if call.op == "transpose":
        data, axes = args[0], list(call.attrs["axes"] or reversed(range(call.ndim)))
        if _is_call(data, "transpose"):
            inner = list(data.attrs["axes"] or reversed(range(data.ndim)))
            axes = [inner[a] for a in axes]
            data = data.args[0]
        if axes == list(range(len(axes))):
            return data
        if data is not args[0]:
            return G.transpose(data, axes)
        return None
    if call.op in _ROW_OPS:
        return _sink_row_op(call, args)
    if _elementwise(call):
        return _sink(call, args)
    return None


@register_graph_pass
@dataclass(frozen=True)
class SinkLayoutOps(GraphPass):
    """Move reshapes and transposes below element-wise operators, merge and drop them (see
    the module doc).

    Parameters:
        max_rounds: how many times the graph is rewritten at most (each round moves every
            layout operator as far as it goes; a second one catches what the first
            exposed).
    """

    name = "sink_layout_ops"
    max_rounds: int = 4

    def apply(self, graph: Graph, ctx) -> Graph:
        for _ in range(self.max_rounds):
            out = rewrite(graph, _simplify)
            if out is graph:
                break
            graph = out
        return graph

