"""ONNX converters of the integer products: ``MatMulInteger``, ``ConvInteger``,
``QLinearMatMul`` and ``QLinearConv`` (int8 / uint8 operands, products accumulated in
int32).

Each operand minus its zero point is widened to int32 (element-wise, fused into the
product's operand loads), and the product is the graph's own ``nn.dense`` /
``nn.matmul`` / ``nn.batch_matmul`` / ``nn.conv2d`` / ``nn.conv_nd`` in int32: CUDA-core
kernels, exact (int32 wraps as ONNX's does). The ``QLinear`` forms then requantize as
ONNX's reference does: ``saturate(rint(C * m) + y_zero_point)`` with the multiplier ``m =
x_scale * w_scale / y_scale`` computed at import time in the scales' dtype and the product
``C * m`` in float64 (numpy's type of an int32 times a float32 or float16), so results are
exact; adding the integer zero point after rounding gives the same value and leaves nothing
to contract into an fma. Scales must therefore be known at import time (initializers, as
quantized models store them); a scale computed from data is an
:class:`~ptxforge.graph.frontend_onnx.OnnxDataDependentError` naming it.

Zero points: scalars, or per row of ``A`` / per column of ``B`` (``MatMulInteger``), per
output channel of ``W`` (``ConvInteger``, ``QLinearConv``); ``QLinearConv``'s ``w_scale``
may be per output channel.
"""

from __future__ import annotations

import numpy as np

from .. import opdefs as G
from ..frontend_onnx import OnnxImportError, register_converter
from ..ir import Constant, Node
from ..opdefs.arith import binary, unary
from .common import has_input as _has
from .linear_ops import matmul_vectors
from .nn_ops import convolution

_TYPES = ("int8", "uint8")


def _operand(im, node, k: int, what: str) -> Node:
    x = im.tensor(node.input[k])
    if x.dtype not in _TYPES:
        raise OnnxImportError(f"{what} has dtype {x.dtype}; supported: {', '.join(_TYPES)}")
    return x


def _widened(im, node, x: Node, k: int, what: str, axis: int | None) -> Node:
    """``int32(x) - int32(zero_point)`` with the zero point of input ``k`` (absent: 0): a
    scalar, or 1-D along ``axis`` of ``x`` (None: scalars only)."""
    out = G.cast(x, "int32")
    if not _has(node, k):
        return out
    zp = im.tensor(node.input[k])
    if zp.dtype != x.dtype:
        raise OnnxImportError(f"the {what} zero point has dtype {zp.dtype}, the operand "
                              f"{x.dtype}; ONNX requires the same")
    size = int(np.prod(zp.shape, dtype=np.int64))
    if size != 1:
        if axis is None or zp.ndim != 1 or zp.shape[0] != x.shape[axis]:
            where = "a scalar" if axis is None else (
                f"a scalar or [{x.shape[axis]}] (axis {axis % x.ndim} of {list(x.shape)})")
            raise OnnxImportError(f"the {what} zero point has shape {list(zp.shape)}; "
                                  f"supported: {where}")
        zp = G.reshape(zp, tuple(zp.shape[0] if d == axis % x.ndim else 1
                                 for d in range(x.ndim)))
    elif zp.ndim:
        zp = G.reshape(zp, ())
    return binary("subtract", out, G.cast(zp, "int32"))


def _product(node, x: Node, y: Node) -> Node:
    """numpy's ``matmul`` of graph nodes (a 1-D operand is a row or a column)."""
    if x.ndim == 0 or y.ndim == 0:
        raise OnnxImportError(f"{node.op_type} {node.name!r}: operands must have at least "
                              "one dimension")
    return matmul_vectors(node, x, y)


@register_converter("MatMulInteger")
def _matmul_integer(im, node, a):
    x = _operand(im, node, 0, "A")
    y = _operand(im, node, 1, "B")
    return _product(node, _widened(im, node, x, 2, "A", -2 if x.ndim >= 2 else None),
                    _widened(im, node, y, 3, "B", -1 if y.ndim >= 2 else None))


@register_converter("ConvInteger")
def _conv_integer(im, node, a):
    x = _operand(im, node, 0, "X")
    w = _operand(im, node, 1, "W")
    return convolution(node, a, _widened(im, node, x, 2, "X", None),
                       _widened(im, node, w, 3, "W", 0))


def _scale(im, node, k: int, what: str) -> np.ndarray:
    value = np.asarray(im.value(node.input[k], f"the {what} scale"))
    if value.dtype.name not in ("float32", "float16", "bfloat16"):
        raise OnnxImportError(f"the {what} scale has dtype {value.dtype.name}; supported: "
                              "float32, float16, bfloat16")
    return value


def _requantize(im, node, c: Node, multiplier: np.ndarray, zp_index: int,
                out_dtype: str) -> Node:
    """``saturate(rint(c * multiplier) + zero_point)`` as ``out_dtype``: the multiplier a
    scalar or per output channel (axis 1 of ``c``)."""
    m = np.asarray(multiplier, dtype=np.float64)
    if m.size != 1:
        m = m.reshape((m.size,) + (1,) * (c.ndim - 2))
    else:
        m = m.reshape(())
    d = unary("round", binary("multiply", G.cast(c, "float64"),
                              Constant(m, f"{node.output[0]}_multiplier", "float64")))
    if _has(node, zp_index):
        zp = im.tensor(node.input[zp_index])
        if zp.dtype != out_dtype:
            raise OnnxImportError(f"the output zero point has dtype {zp.dtype}; the output "
                                  f"is {out_dtype}")
        if int(np.prod(zp.shape, dtype=np.int64)) != 1:
            raise OnnxImportError(f"the output zero point has shape {list(zp.shape)}; "
                                  "supported: a scalar")
        zp = G.reshape(zp, ()) if zp.ndim else zp
        d = binary("add", d, G.cast(zp, "float64"))
    info = np.iinfo(out_dtype)
    return G.cast(G.clip(d, float(info.min), float(info.max)), out_dtype)


def _output_dtype(im, node, zp_index: int, fallback: str) -> str:
    return im.tensor(node.input[zp_index]).dtype if _has(node, zp_index) else fallback


@register_converter("QLinearMatMul")
def _qlinear_matmul(im, node, a):
    x = _operand(im, node, 0, "a")
    y = _operand(im, node, 3, "b")
    scales = [_scale(im, node, k, w) for k, w in ((1, "a"), (4, "b"), (6, "y"))]
    for s, what in zip(scales, ("a", "b", "y")):
        if s.size != 1:
            raise OnnxImportError(f"the {what} scale has shape {list(s.shape)}; supported: a "
                                  "scalar (per-tensor quantization)")
    sa, sb, sy = (s.reshape(()) for s in scales)
    c = _product(node, _widened(im, node, x, 2, "a", None), _widened(im, node, y, 5, "b", None))
    # the multiplier in the scales' own arithmetic, as ONNX's reference computes it
    return _requantize(im, node, c, sa * sb / sy, 7, _output_dtype(im, node, 7, x.dtype))


@register_converter("QLinearConv")
def _qlinear_conv(im, node, a):
    x = _operand(im, node, 0, "x")
    w = _operand(im, node, 3, "w")
    sx, sw, sy = (_scale(im, node, k, what) for k, what in ((1, "x"), (4, "w"), (6, "y")))
    if sx.size != 1 or sy.size != 1 or (sw.size != 1 and sw.shape != (w.shape[0],)):
        raise OnnxImportError(
            f"scales of shapes {list(sx.shape)}, {list(sw.shape)}, {list(sy.shape)}: x and y "
            f"scales must be scalars, the w scale a scalar or [{w.shape[0]}] (per output "
            "channel)")
    c = convolution(node, a, _widened(im, node, x, 2, "x", None),
                    _widened(im, node, w, 5, "w", 0))
    if _has(node, 8):
        b = im.tensor(node.input[8])
        if b.dtype != "int32" or b.shape != (w.shape[0],):
            raise OnnxImportError(f"the bias must be int32 of shape [{w.shape[0]}], got "
                                  f"{b.dtype} {list(b.shape)}")
        c = binary("add", c, G.reshape(b, (w.shape[0],) + (1,) * (c.ndim - 2)))
    multiplier = sx.reshape(()) * sw.reshape(-1) / sy.reshape(())
    return _requantize(im, node, c, multiplier, 7, _output_dtype(im, node, 7, x.dtype))
