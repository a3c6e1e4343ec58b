"""Winograd convolution F(m x m, 3 x 3) for 3x3 stride-1 convolutions.

``nn.conv2d_winograd`` takes the data and a kernel already transformed to
``[alpha, alpha, CO, CI]`` (``alpha = m + 2``) by ``nn.winograd_weight_transform``, which
constant folding evaluates once at build time. The te computation has TOPI's stages::

    data_pad       the padded input, padded further so every tile is whole
    input_tile     (alpha, alpha, P, CI): the overlapping alpha x alpha tiles
    data_pack      B^T d B, per tile and channel          (reduction over r_a, r_b)
    bgemm          a batched matrix product over CI       (alpha*alpha GEMMs of P x CO)
    inverse        A^T M A: (m, m, P, CO)                  (reduction over r_a, r_b)
    conv2d_winograd the output tiles put back in place

The transform matrices come from Toom-Cook interpolation at the points 0, 1, -1, 2, -2, ...
and infinity (Lavin's matrices for m = 2 and 4).
"""

from __future__ import annotations

from functools import cache

import numpy as np

from ... import ops
from ...ir import te
from ...ops import tag as optag
from ..ir import Call, Node, TensorType
from ..op import OpDef, OpPattern, register_op
from .common import expect_rank, fail, padding4, same_dtype

_POINTS = (0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5)
KERNEL = 3


@cache
def transform_matrices(tile_size: int, kernel: int = KERNEL):
    """``(A, B, G)`` of F(tile_size, kernel): ``y = A^T [(G g) * (B^T d)]`` in 1-D."""
    if not 2 <= tile_size <= 6:
        fail("winograd", f"tile_size must be between 2 and 6, got {tile_size}")
    alpha = tile_size + kernel - 1
    n = alpha - 1
    pts = _POINTS[:n]

    def vandermonde(k: int) -> np.ndarray:
        v = np.zeros((alpha, k))
        for j, p in enumerate(pts):
            v[j] = [p**c for c in range(k)]
        v[n, k - 1] = 1.0  # the point at infinity picks the leading coefficient
        return v

    scale = np.ones(alpha)
    for j in range(n):
        scale[j] = abs(np.prod([pts[j] - pts[k] for k in range(n) if k != j]))
    a = vandermonde(tile_size)
    g = vandermonde(kernel) / scale[:, None]
    b = np.linalg.inv(vandermonde(alpha)) * scale[None, :]
    b[np.abs(b) < 1e-12] = 0.0
    return a, b, g


def tile_size_for(out_height: int) -> int:
    """TVM's choice: 4x4 output tiles where the output height is a multiple of 8, else 2x2."""
    return 4 if out_height % 8 == 0 else 2


def _const_matrix(values: np.ndarray, name: str, dtype: str):
    """A te stage holding a small constant matrix as a select chain over its non-zeros."""
    rows, cols = values.shape
    entries = [(i, j, float(values[i, j])) for i in range(rows) for j in range(cols)
               if values[i, j] != 0]

    def f(i, j):
        expr = te.const(0.0, dtype)
        for a, b, v in entries:
            expr = te.if_then_else(te.all(i == a, j == b), te.const(v, dtype), expr)
        return expr

    return te.compute((rows, cols), f, name=name, tag=optag.ELEMWISE + ",const_matrix")


def _geometry(op, data: TensorType, kernel: TensorType, attrs):
    layout = attrs["data_layout"]
    if layout == "NHWC":
        n, h, w, ci = data.shape
    else:
        n, ci, h, w = data.shape
    m = attrs["tile_size"]
    alpha = m + KERNEL - 1
    if kernel.shape[:2] != (alpha, alpha) or kernel.shape[3] != ci:
        fail(op, f"the transformed kernel must be [{alpha}, {alpha}, CO, {ci}] for tile_size "
                 f"{m}, got {list(kernel.shape)}")
    top, left, bottom, right = attrs["padding"]
    oh, ow = h + top + bottom - KERNEL + 1, w + left + right - KERNEL + 1
    if oh < 1 or ow < 1:
        fail(op, f"the 3x3 window does not fit the padded input {h}x{w}")
    return n, h, w, ci, kernel.shape[2], oh, ow


def _normalize(attrs):
    out = dict(attrs)
    out["padding"] = padding4("nn.conv2d_winograd", attrs["padding"])
    if attrs["data_layout"] not in ("NCHW", "NHWC"):
        fail("nn.conv2d_winograd", f"data_layout must be NCHW or NHWC, got "
                                   f"{attrs['data_layout']!r}")
    tile = attrs["tile_size"]
    if isinstance(tile, bool) or not isinstance(tile, int) or not 2 <= tile <= 6:
        fail("nn.conv2d_winograd", f"tile_size must be an int in [2, 6], got {tile!r}")
    return out


def _infer(types, attrs):
    op = "nn.conv2d_winograd"
    data, kernel = types
    expect_rank(op, "data", data, 4, attrs["data_layout"])
    expect_rank(op, "kernel", kernel, 4, "[alpha, alpha, CO, CI]")
    dtype = same_dtype(op, types)
    n, _, _, _, co, oh, ow = _geometry(op, data, kernel, attrs)
    shape = (n, oh, ow, co) if attrs["data_layout"] == "NHWC" else (n, co, oh, ow)
    return TensorType(shape, attrs["out_dtype"] or dtype)


def _lower(args, attrs):
    data, kernel = args
    dtype = attrs["out_dtype"] or data.dtype
    layout = attrs["data_layout"]
    n, h, w, ci, co, oh, ow = _geometry("nn.conv2d_winograd", TensorType(data.shape, data.dtype),
                                        TensorType(kernel.shape, kernel.dtype), attrs)
    m = attrs["tile_size"]
    alpha = m + KERNEL - 1
    nh, nw = -(-oh // m), -(-ow // m)
    tiles = n * nh * nw
    top, left, bottom, right = attrs["padding"]
    # pad so that every alpha x alpha tile lies inside the padded input
    extra_h = nh * m + KERNEL - 1 - (h + top + bottom)
    extra_w = nw * m + KERNEL - 1 - (w + left + right)
    a_np, b_np, _ = transform_matrices(m)
    if layout == "NHWC":
        data_pad = ops.nn.pad(data, [0, top, left, 0], [0, bottom + extra_h, right + extra_w, 0],
                              name="data_pad")

        def tile_read(eps, nu, p, c):
            return data_pad[p // (nh * nw), (p // nw) % nh * m + eps, p % nw * m + nu, c]
    else:
        data_pad = ops.nn.pad(data, [0, 0, top, left], [0, 0, bottom + extra_h, right + extra_w],
                              name="data_pad")

        def tile_read(eps, nu, p, c):
            return data_pad[p // (nh * nw), c, (p // nw) % nh * m + eps, p % nw * m + nu]

    input_tile = te.compute((alpha, alpha, tiles, ci), tile_read, name="input_tile",
                            tag=optag.INJECTIVE)
    bmat = _const_matrix(b_np, "B", dtype)
    r_a = te.reduce_axis((0, alpha), "r_a")
    r_b = te.reduce_axis((0, alpha), "r_b")
    data_pack = te.compute(
        (alpha, alpha, tiles, ci),
        lambda eps, nu, p, c: te.sum(input_tile[r_a, r_b, p, c] * bmat[r_a, eps]
                                     * bmat[r_b, nu], axis=[r_a, r_b]),
        name="data_pack", tag="winograd_data_pack")
    rc = te.reduce_axis((0, ci), "ci")
    bgemm = te.compute(
        (alpha, alpha, tiles, co),
        lambda eps, nu, p, f: te.sum(data_pack[eps, nu, p, rc] * kernel[eps, nu, f, rc],
                                     axis=[rc]),
        name="bgemm", tag="winograd_bgemm")
    amat = _const_matrix(a_np, "A", dtype)
    r_a2 = te.reduce_axis((0, alpha), "r_a")
    r_b2 = te.reduce_axis((0, alpha), "r_b")
    inverse = te.compute(
        (m, m, tiles, co),
        lambda vh, vw, p, f: te.sum(bgemm[r_a2, r_b2, p, f] * amat[r_a2, vh] * amat[r_b2, vw],
                                    axis=[r_a2, r_b2]),
        name="inverse", tag="winograd_inverse")

    def tile_index(b, y, x):
        return b * (nh * nw) + (y // m) * nw + x // m

    if layout == "NHWC":
        return te.compute(
            (n, oh, ow, co),
            lambda b, y, x, f: inverse[y % m, x % m, tile_index(b, y, x), f],
            name="conv2d_winograd", tag="conv2d_winograd_nhwc")
    return te.compute(
        (n, co, oh, ow),
        lambda b, f, y, x: inverse[y % m, x % m, tile_index(b, y, x), f],
        name="conv2d_winograd", tag="conv2d_winograd_nchw")


def winograd_reference(data: np.ndarray, kernel_pack: np.ndarray, attrs: dict) -> np.ndarray:
    """The Winograd algorithm in numpy (float64 inside), for checking the te stages."""
    layout = attrs["data_layout"]
    x = data if layout == "NHWC" else data.transpose(0, 2, 3, 1)
    n, h, w, ci = x.shape
    m = attrs["tile_size"]
    alpha = m + KERNEL - 1
    top, left, bottom, right = attrs["padding"]
    oh, ow = h + top + bottom - 2, w + left + right - 2
    nh, nw = -(-oh // m), -(-ow // m)
    padded = np.zeros((n, nh * m + 2, nw * m + 2, ci))
    padded[:, top:top + h, left:left + w] = x
    a, b, _ = transform_matrices(m)
    # tiles: (n, nh, nw, alpha, alpha, ci)
    idx_h = (np.arange(nh) * m)[:, None] + np.arange(alpha)[None, :]
    idx_w = (np.arange(nw) * m)[:, None] + np.arange(alpha)[None, :]
    tiles = padded[:, idx_h[:, :, None, None], idx_w[None, None, :, :]]
    tiles = tiles.transpose(0, 1, 3, 2, 4, 5)  # n, nh, nw, alpha(h), alpha(w), ci
    v = np.einsum("ae,bf,nhwabc->efnhwc", b, b, tiles)
    u = kernel_pack.astype(np.float64)  # alpha, alpha, co, ci
    mm = np.einsum("efnhwc,efoc->efnhwo", v, u)
    y = np.einsum("ei,fj,efnhwo->nhiwjo", a, a, mm)
    y = y.reshape(n, nh * m, nw * m, -1)[:, :oh, :ow]
    out = y.astype(attrs["out_dtype"] or data.dtype)
    return out if layout == "NHWC" else out.transpose(0, 3, 1, 2)


register_op(OpDef(
    name="nn.conv2d_winograd", num_inputs=2, infer=_infer, lower=_lower,
    ref=lambda a, attrs: winograd_reference(a[0], a[1], attrs),
    pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
    defaults={"tile_size": 2, "padding": (0, 0, 0, 0), "data_layout": "NHWC", "out_dtype": ""},
    normalize=_normalize,
))


def conv2d_winograd(data: Node, kernel_pack: Node, tile_size: int, padding=(1, 1),
                    data_layout: str = "NHWC", out_dtype: str = "") -> Call:
    """A 3x3 stride-1 convolution by Winograd's F(tile_size, 3) with a transformed kernel
    ``[alpha, alpha, CO, CI]`` (see :func:`winograd_weight_transform`)."""
    return Call("nn.conv2d_winograd", [data, kernel_pack], {
        "tile_size": tile_size, "padding": padding, "data_layout": data_layout,
        "out_dtype": out_dtype})


def _wt_infer(types, attrs):
    op = "nn.winograd_weight_transform"
    (w,) = types
    expect_rank(op, "weight", w, 4, attrs["kernel_layout"])
    if attrs["kernel_layout"] == "HWIO":
        kh, kw, ci, co = w.shape
    elif attrs["kernel_layout"] == "OIHW":
        co, ci, kh, kw = w.shape
    else:
        fail(op, f"kernel_layout must be OIHW or HWIO, got {attrs['kernel_layout']!r}")
    if (kh, kw) != (KERNEL, KERNEL):
        fail(op, f"the kernel must be 3x3, got {kh}x{kw}")
    alpha = attrs["tile_size"] + KERNEL - 1
    return TensorType((alpha, alpha, co, ci), w.dtype)


def _hwio(w: np.ndarray, layout: str) -> np.ndarray:
    return w if layout == "HWIO" else w.transpose(2, 3, 1, 0)


def _wt_ref(a, attrs):
    w = _hwio(a[0], attrs["kernel_layout"]).astype(np.float64)
    _, _, g = transform_matrices(attrs["tile_size"])
    u = np.einsum("ek,fl,klio->efoi", g, g, w)
    return u.astype(a[0].dtype)


def _wt_lower(args, attrs):
    (w,) = args
    _, _, g_np = transform_matrices(attrs["tile_size"])
    gmat = _const_matrix(g_np, "G", w.dtype)
    alpha = attrs["tile_size"] + KERNEL - 1
    hwio = attrs["kernel_layout"] == "HWIO"
    co, ci = (w.shape[3], w.shape[2]) if hwio else (w.shape[0], w.shape[1])
    rk = te.reduce_axis((0, KERNEL), "r_kh")
    rl = te.reduce_axis((0, KERNEL), "r_kw")

    def read(o, i):
        return w[rk, rl, i, o] if hwio else w[o, i, rk, rl]

    return te.compute(
        (alpha, alpha, co, ci),
        lambda eps, nu, o, i: te.sum(gmat[eps, rk] * read(o, i) * gmat[nu, rl], axis=[rk, rl]),
        name="kernel_pack", tag="winograd_kernel_pack")


register_op(OpDef(
    name="nn.winograd_weight_transform", num_inputs=1, infer=_wt_infer, lower=_wt_lower,
    ref=_wt_ref, pattern=OpPattern.OPAQUE,
    defaults={"tile_size": 2, "kernel_layout": "HWIO"},
))


def winograd_weight_transform(weight: Node, tile_size: int, kernel_layout: str = "HWIO") -> Call:
    """``G g G^T`` per (CO, CI): the kernel of :func:`conv2d_winograd`."""
    return Call("nn.winograd_weight_transform", [weight],
                {"tile_size": tile_size, "kernel_layout": kernel_layout})
