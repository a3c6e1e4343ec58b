"""ONNX ``GridSample`` (opsets 16 to 22): 2-D and 3-D inputs, modes nearest, (bi)linear
and (bi)cubic, padding zeros, border and reflection, ``align_corners`` either way.

A composition of element-wise operators and one ``gather_elements`` per tap, as the torch
front end's ``grid_sampler_2d``, but with ONNX's rules where they differ from torch's:

- a coordinate outside ``[x_min, x_max]`` (the corner pixels' centres with
  ``align_corners``, else the image's outer edges) is first clamped (border) or mirrored
  (reflection) into it; nearest rounds half to even before that;
- then every tap is padded on its own: zeros reads 0 outside the image, border clamps the
  tap, reflection mirrors it. For cubic sampling this differs from clamping the
  coordinate alone.

Taps combine separably: the weight of a tap is the product of its per-axis linear or
cubic (Keys, ``A = -0.75``) weights.
"""

from __future__ import annotations

import itertools

import numpy as np

from .. import opdefs as G
from ..frontend_onnx import OnnxImportError, register_converter
from ..ir import Call, Constant, Node
from ..opdefs import index as GI
from ..opdefs import logic as GL
from ..opdefs import transform as GT
from ..opdefs.arith import binary, unary
from .common import text_attr as _text

_MODES = {"bilinear": "linear", "bicubic": "cubic", "linear": "linear", "cubic": "cubic",
          "nearest": "nearest"}
_CUBIC_A = -0.75


class FloatArith:
    """Element-wise graph arithmetic in one float dtype (GridSample's and RoiAlign's
    sampling rules are written with it)."""

    def __init__(self, dtype: str):
        self.dtype = dtype

    def k(self, v: float) -> Node:
        return Constant(np.array(v, dtype=self.dtype), "", self.dtype)

    def add(self, a, b):
        return binary("add", a, b)

    def sub(self, a, b):
        return binary("subtract", a, b)

    def mul(self, a, b):
        return binary("multiply", a, b)

    def div(self, a, b):
        return binary("divide", a, b)

    def where(self, cond, a, b):
        return GL.where(cond, a, b)

    def cmp(self, op: str, a, b):
        return Call(op, [a, b])

    def clip(self, v, lo: float, hi: float):
        return G.clip(v, lo, hi)

    def reflect(self, v, lo: float, hi: float):
        """ONNX's ``_gs_reflect``: ``v`` mirrored at ``lo`` and ``hi`` until inside."""
        span = hi - lo
        if span <= 0:
            return self.mul(v, self.k(0.0))
        below = self.cmp("less", v, self.k(lo))
        above = self.cmp("greater", v, self.k(hi))
        dist = self.where(below, self.sub(self.k(lo), v), self.sub(v, self.k(hi)))
        turns = unary("floor", binary("divide", dist, self.k(span)))
        rest = self.sub(dist, self.mul(turns, self.k(span)))
        odd = self.cmp("greater_equal", Call("fmod", [turns, self.k(2.0)]), self.k(0.5))
        # below and an even number of turns, or above and an odd one: measured from lo
        from_low = Call("logical_xor", [below, odd])
        folded = self.where(from_low, self.add(self.k(lo), rest), self.sub(self.k(hi), rest))
        return self.where(Call("logical_or", [below, above]), folded, v)


def _cubic(b: FloatArith, t: Node) -> list:
    """The weights of the taps at -1, 0, 1, 2 for the fraction ``t``, in ONNX's order of
    operations."""
    a = _CUBIC_A

    def far(x):  # ((a x - 5a) x + 8a) x - 4a
        return b.sub(b.mul(b.add(b.mul(b.sub(b.mul(b.k(a), x), b.k(5 * a)), x), b.k(8 * a)),
                           x), b.k(4 * a))

    def near(x):  # ((a + 2) x - (a + 3)) x x + 1
        return b.add(b.mul(b.mul(b.sub(b.mul(b.k(a + 2), x), b.k(a + 3)), x), x), b.k(1.0))

    one_minus = b.sub(b.k(1.0), t)
    return [far(b.add(t, b.k(1.0))), near(t), near(one_minus), far(b.sub(b.k(2.0), t))]


@register_converter("GridSample")
def _grid_sample(im, node, a):
    x, grid = im.tensor(node.input[0]), im.tensor(node.input[1])
    k = x.ndim - 2
    if k not in (2, 3) or grid.ndim != k + 2 or grid.shape[-1] != k \
            or grid.shape[0] != x.shape[0]:
        raise OnnxImportError(f"GridSample takes [N, C, *spatial] data with 2 or 3 spatial "
                              f"dimensions and a grid [N, *out, {k}], got {list(x.shape)} "
                              f"and {list(grid.shape)}")
    mode_name = _text(a.get("mode"), "bilinear" if im.opset < 20 else "linear")
    mode = _MODES.get(mode_name)
    padding = _text(a.get("padding_mode"), "zeros")
    if mode is None or padding not in ("zeros", "border", "reflection"):
        raise OnnxImportError(f"mode {mode_name!r} / padding_mode {padding!r}: supported "
                              "modes nearest, linear (bilinear), cubic (bicubic); padding "
                              "zeros, border, reflection")
    for what, t in (("X", x.dtype), ("grid", grid.dtype)):
        if t not in ("float32", "float16", "bfloat16", "float64"):
            raise OnnxImportError(f"{what} has dtype {t}; GridSample takes float tensors")
    align = bool(a.get("align_corners", 0))
    dtype = "float64" if "float64" in (x.dtype, grid.dtype) else "float32"
    b = FloatArith(dtype)
    n, c = x.shape[:2]
    dims = x.shape[2:]
    out = grid.shape[1:-1]
    points = int(np.prod(out, dtype=np.int64))
    g = grid if grid.dtype == dtype else G.cast(grid, dtype)

    # per spatial axis d: the unnormalized coordinate (grid's last axis lists them in
    # reverse: x = the innermost axis first)
    coords = []
    for d in range(k):
        comp = Call("strided_slice", [g], {"begin": [k - 1 - d], "end": [k - d],
                                          "axes": [k + 1]})
        v = G.reshape(comp, (n, 1, points))
        size = float(dims[d])
        if align:
            v = b.mul(b.mul(b.add(v, b.k(1.0)), b.k(0.5)), b.k(size - 1))
        else:
            v = b.mul(b.sub(b.mul(b.add(v, b.k(1.0)), b.k(size)), b.k(1.0)), b.k(0.5))
        if mode == "nearest":
            v = unary("round", v)  # half to even, as ONNX's reference (np.rint)
        lo, hi = (0.0, size - 1) if align else (-0.5, size - 0.5)
        if padding == "border":
            outside = Call("logical_or", [b.cmp("less", v, b.k(lo)),
                                          b.cmp("greater", v, b.k(hi))])
            v = b.where(outside, b.clip(v, 0.0, size - 1), v)
        elif padding == "reflection":
            v = b.reflect(v, lo, hi)
        coords.append((v, lo, hi))

    # per axis: (tap position, weight) pairs
    taps = []
    for v, _, _ in coords:
        if mode == "nearest":  # an integral coordinate: its one tap, unweighted
            taps.append([(v, None)])
            continue
        base = unary("floor", v)
        t = b.sub(v, base)
        if mode == "linear":
            taps.append([(base, b.sub(b.k(1.0), t)), (b.add(base, b.k(1.0)), t)])
        else:
            ws = _cubic(b, t)
            taps.append([(b.add(base, b.k(float(j))), w) for j, w in zip(range(-1, 3), ws)])

    flat = G.reshape(x if x.dtype == dtype else G.cast(x, dtype),
                     (n, c, int(np.prod(dims, dtype=np.int64))))
    strides = [int(np.prod(dims[d + 1:], dtype=np.int64)) for d in range(k)]
    total = None
    for combo in itertools.product(*taps):
        inside, weight, position = None, None, None
        for d, (tap, w) in enumerate(combo):
            size = float(dims[d])
            _, lo, hi = coords[d]
            if padding == "zeros":
                ok = Call("logical_and", [b.cmp("greater_equal", tap, b.k(0.0)),
                                          b.cmp("less_equal", tap, b.k(size - 1))])
                inside = ok if inside is None else Call("logical_and", [inside, ok])
            elif padding == "reflection":
                tap = b.reflect(tap, lo, hi)
            tap = b.clip(tap, 0.0, size - 1)  # border; a no-op after reflection
            term = b.mul(tap, b.k(float(strides[d])))
            position = term if position is None else b.add(position, term)
            if w is not None:
                weight = w if weight is None else b.mul(weight, w)
        index = GT.broadcast_to(G.cast(position, "int64"), (n, c, points))
        value = GI.gather_elements(flat, index, 2)
        if inside is not None:
            value = b.where(GT.broadcast_to(inside, (n, c, points)), value, b.k(0.0))
        if weight is not None:
            value = b.mul(value, weight)
        total = value if total is None else b.add(total, value)
    y = G.reshape(total, (n, c) + tuple(out))
    return y if y.dtype == x.dtype else G.cast(y, x.dtype)
