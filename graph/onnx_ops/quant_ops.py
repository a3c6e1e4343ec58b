"""ONNX converters of the linear quantization operators, ``QuantizeLinear`` and
``DequantizeLinear`` (opsets 10 to 21), as element-wise graph operators that fuse with their
neighbours:

- ``DequantizeLinear``: ``(float32(x) - float32(zero_point)) * scale``, in the scale's dtype;
- ``QuantizeLinear``: ``saturate(round_half_even(x / scale) + zero_point)``, computed in
  float32 and cast to the zero point's type (``output_dtype`` when given; uint8 without
  either). To float8 (e4m3fn, e5m2): ``x / scale`` cast with ONNX's rules
  (:mod:`ptxforge.graph.onnx_float8`, ``saturate`` as given); the zero point must be 0.

Scales and zero points are per tensor (scalars), per axis (1-D along ``axis``) or blocked
(``block_size``: one per ``block_size`` elements of ``axis``, spread by a gather). The
integer types are int8, uint8, int16 and uint16 (and int32 for DequantizeLinear); float8,
4-bit and 2-bit types are refused with their name.
"""

from __future__ import annotations

import numpy as np

from ...ir import dtype as dt
from .. import onnx_float8
from .. import opdefs as G
from ..frontend_onnx import OnnxImportError, register_converter
from ..ir import Constant, Node
from ..onnx_model import ONNX_DTYPES
from ..opdefs import index as GI
from ..opdefs import transform as GT
from ..opdefs.arith import binary, unary
from .common import has_input as _has

_QUANTIZED = ("int8", "uint8", "int16", "uint16")
_FLOAT8 = ("float8_e4m3fn", "float8_e5m2")
_SCALES = ("float32", "float16", "bfloat16")


def _spread(im, node, a, k: int, x: Node, what: str) -> Node:
    """Input ``k`` (a scale or zero point) shaped to broadcast against ``x``: a scalar or
    one-element tensor as it is; a 1-D one along ``axis``; with ``block_size``, a tensor of
    ``x``'s rank whose ``axis`` has one entry per block, repeated over each block."""
    v = im.tensor(node.input[k])
    axis = int(a.get("axis", 1))
    block = int(a.get("block_size", 0))
    if v.ndim == 0 or (v.ndim == 1 and v.shape[0] == 1 and block == 0):
        return v
    if not -x.ndim <= axis < x.ndim:
        raise OnnxImportError(f"axis {axis} is out of range for a {x.ndim}-D input")
    axis %= x.ndim
    n = x.shape[axis]
    if block == 0:
        if v.ndim != 1 or v.shape[0] != n:
            raise OnnxImportError(f"the {what} has shape {list(v.shape)}: per-axis needs "
                                  f"[{n}] (the extent of axis {axis})")
        return GT.reshape(v, tuple(n if d == axis else 1 for d in range(x.ndim)))
    if block < 0:
        raise OnnxImportError(f"block_size must be positive, got {block}")
    blocks = -(-n // block)
    want = tuple(blocks if d == axis else x.shape[d] for d in range(x.ndim))
    if tuple(v.shape) != want:
        raise OnnxImportError(f"the {what} has shape {list(v.shape)}; block_size {block} on "
                              f"axis {axis} of {list(x.shape)} needs {list(want)}")
    picks = Constant(np.arange(n, dtype=np.int64) // block, f"{node.output[0]}_blocks",
                     "int64")
    return GI.take(v, picks, axis)


def _as_float32(v: Node) -> Node:
    return v if v.dtype == "float32" else G.cast(v, "float32")


@register_converter("DequantizeLinear")
def _dequantize(im, node, a):
    x = im.tensor(node.input[0])
    if x.dtype not in _QUANTIZED + ("int32",) + _FLOAT8:
        raise OnnxImportError(f"x has dtype {x.dtype}; supported: "
                              f"{', '.join(_QUANTIZED + ('int32',) + _FLOAT8)}")
    scale = _spread(im, node, a, 1, x, "scale")
    if scale.dtype not in _SCALES:
        raise OnnxImportError(f"the scale has dtype {scale.dtype}; supported: "
                              f"{', '.join(_SCALES)}")
    out = _as_float32(x)
    if _has(node, 2):
        zp = _spread(im, node, a, 2, x, "zero point")
        if zp.dtype != x.dtype:
            raise OnnxImportError(f"the zero point has dtype {zp.dtype}, x {x.dtype}; "
                                  "ONNX requires the same")
        out = binary("subtract", out, _as_float32(zp))
    out = binary("multiply", out, _as_float32(scale))
    return out if scale.dtype == "float32" else G.cast(out, scale.dtype)


def _quantized_dtype(im, node, a) -> str:
    if _has(node, 2):
        dtype = im.tensor(node.input[2]).dtype
    elif int(a.get("output_dtype", 0)):
        dtype = ONNX_DTYPES.get(int(a["output_dtype"]), f"ONNX type {int(a['output_dtype'])}")
    else:
        dtype = "uint8"
    if int(a.get("output_dtype", 0)) and _has(node, 2):
        want = ONNX_DTYPES.get(int(a["output_dtype"]))
        if want != dtype:
            raise OnnxImportError(f"output_dtype {want} differs from the zero point's {dtype}")
    if dtype not in _QUANTIZED + _FLOAT8:
        raise OnnxImportError(f"quantizing to {dtype} is not supported; supported: "
                              f"{', '.join(_QUANTIZED + _FLOAT8)}")
    return dtype


@register_converter("QuantizeLinear")
def _quantize(im, node, a):
    x = im.tensor(node.input[0])
    if x.dtype not in _SCALES + ("int32",):
        raise OnnxImportError(f"x has dtype {x.dtype}; supported: "
                              f"{', '.join(_SCALES + ('int32',))}")
    dtype = _quantized_dtype(im, node, a)
    scale = _spread(im, node, a, 1, x, "scale")
    if dtype in _FLOAT8:
        # ONNX's float8 quantization has no offset: the zero point must be known to be 0
        if _has(node, 2) and np.asarray(im.value(
                node.input[2], "a float8 zero point (it must be 0)")).astype(np.float32).any():
            raise OnnxImportError("a float8 zero point must be 0")
        q = binary("divide", _as_float32(x), _as_float32(scale))
        return onnx_float8.cast(q, dtype, bool(a.get("saturate", 1)),
                                node.name or node.output[0])
    # ONNX's reference divides in float32 and rounds half to even (numpy's rint)
    q = unary("round", binary("divide", _as_float32(x), _as_float32(scale)))
    if _has(node, 2):
        q = binary("add", q, _as_float32(_spread(im, node, a, 2, x, "zero point")))
    info = np.iinfo(dt.to_numpy(dtype))
    return G.cast(G.clip(q, float(info.min), float(info.max)), dtype)
