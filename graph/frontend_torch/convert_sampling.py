"""Converters that read a tensor at computed positions: ``grid_sampler_2d`` (the sampling of
``F.grid_sample``) and ``masked_scatter``, both compositions of elementwise ops and a
gather whose indices are computed in the graph."""

from __future__ import annotations

from .helpers import broadcast_to, numel, operand, promoted, reshape
from .registry import converter

_INTERPOLATION = {0: "bilinear", 1: "nearest", 2: "bicubic"}
_PADDING = {0: "zeros", 1: "border", 2: "reflection"}

_SAMPLER_OPS = ("strided_slice", "reshape", "add", "subtract", "multiply", "floor", "round",
                "greater_equal", "less_equal", "logical_and", "where", "clip", "cast",
                "broadcast_to", "gather_elements", "fmod", "maximum", "negative")


@converter("aten.grid_sampler_2d.default", needs=_SAMPLER_OPS,
           maps_to="gather_elements of the flat image at the computed taps, weighted "
                   "(bilinear, bicubic) or rounded (nearest)",
           note="bilinear, nearest and bicubic; padding zeros, border, reflection")
def _grid_sampler_2d(cx, a):
    mode = _INTERPOLATION.get(a.interpolation_mode, str(a.interpolation_mode))
    padding = _PADDING.get(a.padding_mode, str(a.padding_mode))
    if mode not in ("bilinear", "nearest", "bicubic"):
        cx.fail(f"unknown interpolation mode {a.interpolation_mode}")
    if padding not in _PADDING.values():
        cx.fail(f"unknown padding mode {a.padding_mode}")
    x, grid = a.input, a.grid
    dtype = promoted(cx)
    n, c, h, w = x.shape
    _, ho, wo, _ = grid.shape
    points = ho * wo
    grid = operand(cx, grid, dtype)
    k = lambda v: cx.const(v, dtype)  # noqa: E731

    def coordinate(axis: int, size: int):
        g = cx.call("strided_slice", [grid], {"begin": [axis], "end": [axis + 1], "axes": [3]})
        g = reshape(cx, g, (n, 1, points))
        if a.align_corners:  # -1 and 1 are the centres of the corner pixels
            pos = cx.call("multiply", [cx.call("add", [g, k(1.0)]), k((size - 1) / 2)])
        else:  # -1 and 1 are the outer edges of the corner pixels
            pos = cx.call("multiply", [cx.call("add", [g, k(1.0)]), k(size / 2)])
            pos = cx.call("subtract", [pos, k(0.5)])
        # bicubic pads each of its taps instead (below)
        return pos if mode == "bicubic" else padded(pos, size)

    def padded(pos, size: int):
        if padding == "reflection":
            pos = _reflect(cx, pos, size, a.align_corners, k)
        if padding != "zeros":
            pos = cx.call("clip", [pos], {"a_min": 0.0, "a_max": float(size - 1)})
        return pos

    ix, iy = coordinate(0, w), coordinate(1, h)
    flat = reshape(cx, operand(cx, x, dtype), (n, c, h * w))

    def read(xi, yi, weight):
        """``flat`` at (yi, xi) times ``weight``; positions outside the image read 0."""
        inside = cx.call("logical_and", [
            cx.call("logical_and", [cx.call("greater_equal", [xi, k(0.0)]),
                                    cx.call("less_equal", [xi, k(float(w - 1))])]),
            cx.call("logical_and", [cx.call("greater_equal", [yi, k(0.0)]),
                                    cx.call("less_equal", [yi, k(float(h - 1))])])])
        xc = cx.call("clip", [xi], {"a_min": 0.0, "a_max": float(w - 1)})
        yc = cx.call("clip", [yi], {"a_min": 0.0, "a_max": float(h - 1)})
        flat_pos = cx.call("add", [cx.call("multiply", [yc, k(float(w))]), xc])
        index = broadcast_to(cx, cx.call("cast", [flat_pos], {"dtype": "int64"}), (n, c, points))
        value = cx.call("gather_elements", [flat, index], {"axis": 2})
        return cx.call("multiply", [value, cx.call("where", [inside, weight, k(0.0)])])

    if mode == "nearest":  # round half to even, as torch's nearbyint
        out = read(cx.call("round", [ix]), cx.call("round", [iy]), k(1.0))
    elif mode == "bicubic":  # 4x4 taps, cubic convolution weights (A = -0.75) as torch
        x0, y0 = cx.call("floor", [ix]), cx.call("floor", [iy])
        wxs = _cubic_weights(cx, cx.call("subtract", [ix, x0]), k)
        wys = _cubic_weights(cx, cx.call("subtract", [iy, y0]), k)
        xs = [padded(cx.call("add", [x0, k(float(i))]), w) for i in range(-1, 3)]
        ys = [padded(cx.call("add", [y0, k(float(i))]), h) for i in range(-1, 3)]
        out = None
        for yi, wy in zip(ys, wys):
            for xi, wx in zip(xs, wxs):
                term = read(xi, yi, cx.call("multiply", [wx, wy]))
                out = term if out is None else cx.call("add", [out, term])
    else:
        x0, y0 = cx.call("floor", [ix]), cx.call("floor", [iy])
        x1, y1 = cx.call("add", [x0, k(1.0)]), cx.call("add", [y0, k(1.0)])
        wx1, wy1 = cx.call("subtract", [ix, x0]), cx.call("subtract", [iy, y0])
        wx0, wy0 = cx.call("subtract", [x1, ix]), cx.call("subtract", [y1, iy])
        out = None
        for xi, yi, wx, wy in ((x0, y0, wx0, wy0), (x1, y0, wx1, wy0), (x0, y1, wx0, wy1),
                               (x1, y1, wx1, wy1)):
            term = read(xi, yi, cx.call("multiply", [wx, wy]))
            out = term if out is None else cx.call("add", [out, term])
    out = reshape(cx, out, (n, c, ho, wo))
    return out if out.dtype == cx.out_dtype() else operand(cx, out, cx.out_dtype())


def _cubic_weights(cx, t, k, a: float = -0.75) -> list:
    """The weights of the taps at -1, 0, 1, 2 for a fraction ``t``: torch's
    ``cubic_convolution2(t + 1)``, ``cubic_convolution1(t)``, ``cubic_convolution1(1 - t)``,
    ``cubic_convolution2(2 - t)``."""
    mul = lambda p, q: cx.call("multiply", [p, q])  # noqa: E731
    add = lambda p, q: cx.call("add", [p, q])  # noqa: E731

    def near(v):  # ((a + 2) v - (a + 3)) v^2 + 1, for |v| <= 1
        return add(mul(add(mul(v, k(a + 2)), k(-(a + 3))), mul(v, v)), k(1.0))

    def far(v):  # ((a v - 5a) v + 8a) v - 4a, for 1 < |v| < 2
        return add(mul(add(mul(add(mul(v, k(a)), k(-5 * a)), v), k(8 * a)), v), k(-4 * a))

    one_minus = cx.call("subtract", [k(1.0), t])
    return [far(add(t, k(1.0))), near(t), near(one_minus), far(add(one_minus, k(1.0)))]


def _reflect(cx, pos, size: int, align_corners: bool, k):
    """torch's ``reflect_coordinates``: ``pos`` folded back into the image by mirroring at
    the corner pixels' centres (align_corners) or at the image's edges."""
    low, high = (0.0, float(size - 1)) if align_corners else (-0.5, size - 0.5)
    span = high - low
    if span <= 0:
        return cx.call("multiply", [pos, k(0.0)])
    shifted = cx.call("subtract", [pos, k(low)])
    dist = cx.call("maximum", [shifted, cx.call("negative", [shifted])])
    extra = cx.call("fmod", [dist, k(span)])
    flips = cx.call("floor", [cx.call("multiply", [dist, k(1.0 / span)])])
    odd = cx.call("subtract", [flips, cx.call("multiply", [
        cx.call("floor", [cx.call("multiply", [flips, k(0.5)])]), k(2.0)])])
    forward = cx.call("add", [extra, k(low)])
    backward = cx.call("add", [cx.call("subtract", [k(span), extra]), k(low)])
    return cx.call("where", [cx.call("greater_equal", [odd, k(0.5)]), backward, forward])


@converter("aten.masked_scatter.default",
           needs=("broadcast_to", "cast", "reshape", "cumsum", "clip", "add", "take", "where"),
           maps_to="where(mask, take(source, cumsum(mask) - 1), self): the k-th true "
                   "position takes the k-th element of source")
def _masked_scatter(cx, a):
    x = a.self
    shape = tuple(cx.out_shape())
    mask = broadcast_to(cx, operand(cx, a.mask, "bool"), shape)
    x = broadcast_to(cx, x, shape)
    size = numel(shape)
    count = cx.call("cumsum", [reshape(cx, cx.call("cast", [mask], {"dtype": "int64"}),
                                       (size,))], {"axis": 0})
    # positions past the end of source belong to false entries only (torch requires as
    # many source elements as true entries): clip them, where() drops them
    index = cx.call("clip", [count], {"a_min": 1, "a_max": max(numel(a.source.shape), 1)})
    index = cx.call("add", [index, cx.const(-1, "int64")])
    source = reshape(cx, operand(cx, a.source, x.dtype), (numel(a.source.shape),))
    picked = reshape(cx, cx.call("take", [source, index], {"axis": 0}), shape)
    return cx.call("where", [mask, picked, x])
