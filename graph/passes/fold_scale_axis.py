"""``fold_scale_axis``: fold per-channel scales into the weights of the producing layer.

After ``simplify_inference`` a batch norm is ``conv(x, W) * scale + shift`` with constant,
per-output-channel ``scale`` and ``shift``. This pass rewrites

* ``conv2d(x, W) * s``        to ``conv2d(x, W * s)``   (s along the output channels)
* ``dense(x, W) * s``         to ``dense(x, W * s)``
* ``(y + b) * s``             to ``y * s + b * s``      (y a conv2d or dense)
* ``(y + b1) + b2``           to ``y + (b1 + b2)``

where the layer's output is used only by the rewritten expression, repeating (with
constant folding in between) until nothing changes. What is left of a batch norm is a
per-channel bias add, which operator fusion puts in the convolution's epilogue.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir import Call, Constant, Graph, Node, consumers, rewrite
from .base import GraphPass, register_graph_pass
from .fold_constant import fold_call

_LAYERS = ("nn.conv2d", "nn.dense")


def channel_axis(layer: Call) -> int:
    """The output-channel axis of a conv2d or dense call."""
    if layer.op == "nn.conv2d":
        return 1 if layer.attrs["data_layout"] == "NCHW" else 3
    return 1


def channel_vector(c: Node, out_shape: tuple, axis: int) -> np.ndarray | None:
    """The values of constant ``c`` along ``axis`` when, broadcast against ``out_shape``, it
    varies along no other axis and does not grow the shape; else None."""
    if not isinstance(c, Constant) or c.ndim > len(out_shape):
        return None
    shape = (1,) * (len(out_shape) - c.ndim) + c.shape
    for d, s in enumerate(shape):
        if s != 1 and (d != axis or s != out_shape[axis]):
            return None
    return c.value.reshape(-1)


def _weight_scale(layer: Call, s: np.ndarray) -> Constant:
    w = layer.args[1]
    if s.size == 1:
        return Constant(s.reshape(()).astype(w.dtype))
    if layer.op == "nn.dense" or layer.attrs["kernel_layout"] == "OIHW":
        shape = (s.size,) + (1,) * (w.ndim - 1)
    else:  # HWIO: output channels last
        shape = (s.size,)
    return Constant(s.reshape(shape).astype(w.dtype))


class _Folder:
    def __init__(self, graph: Graph):
        nodes = graph.nodes()
        self.uses = {k: len(v) for k, v in consumers(nodes).items()}
        for o in graph.outputs:
            self.uses[id(o)] = self.uses.get(id(o), 0) + 1

    def single_use(self, node: Node) -> bool:
        return self.uses.get(id(node), 0) == 1

    def __call__(self, call: Call, args: tuple) -> Node | None:
        if call.op == "multiply":
            return self.fold_multiply(call, args)
        if call.op == "add":
            return self.merge_adds(call, args)
        return None

    def _split(self, call: Call, args: tuple, op: str):
        """``(original inner call, new inner call, other argument)`` for ``op(inner, c)``
        or ``op(c, inner)`` where inner is a single-use call."""
        for k in (0, 1):
            inner, other = call.args[k], args[1 - k]
            if isinstance(inner, Call) and isinstance(args[k], Call) and self.single_use(inner):
                if inner.op == op or (op == "layer" and inner.op in _LAYERS):
                    return inner, args[k], other
        return None

    def fold_multiply(self, call: Call, args: tuple) -> Node | None:
        found = self._split(call, args, "layer")
        if found is not None:
            _, layer, scale = found
            s = channel_vector(scale, layer.shape, channel_axis(layer))
            if s is not None and call.shape == layer.shape:
                x, w = layer.args
                from .. import opdefs as G

                return Call(layer.op, [x, G.multiply(w, _weight_scale(layer, s))], layer.attrs)
        found = self._split(call, args, "add")
        if found is not None:
            _, add, scale = found
            for k in (0, 1):
                y, bias = add.args[k], add.args[1 - k]
                if not (isinstance(y, Call) and y.op in _LAYERS and isinstance(bias, Constant)):
                    continue
                axis = channel_axis(y)
                if (channel_vector(scale, y.shape, axis) is None
                        or channel_vector(bias, y.shape, axis) is None
                        or call.shape != y.shape or add.shape != y.shape):
                    continue
                from .. import opdefs as G

                return G.add(G.multiply(y, scale), G.multiply(bias, scale))
        return None

    def merge_adds(self, call: Call, args: tuple) -> Node | None:
        found = self._split(call, args, "add")
        if found is None:
            return None
        _, inner, b2 = found
        for k in (0, 1):
            y, b1 = inner.args[k], inner.args[1 - k]
            if not (isinstance(y, Call) and y.op in _LAYERS):
                continue
            axis = channel_axis(y)
            if (channel_vector(b1, y.shape, axis) is not None
                    and channel_vector(b2, y.shape, axis) is not None
                    and call.shape == y.shape):
                from .. import opdefs as G

                return G.add(y, G.add(b1, b2))
        return None


@register_graph_pass
@dataclass(frozen=True)
class FoldScaleAxis(GraphPass):
    """Fold per-channel constant scales into conv2d / dense weights (see the module doc).

    Parameters:
        max_rounds: how many rewrite-and-fold rounds to run at most.
    """

    name = "fold_scale_axis"
    max_rounds: int = 8

    def apply(self, graph: Graph, ctx) -> Graph:
        for _ in range(self.max_rounds):
            new = rewrite(graph, _Folder(graph))
            if new is graph:
                break
            graph = rewrite(new, fold_call)
        return graph
