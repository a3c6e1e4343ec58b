"""ONNX ``Det``: the determinant of ``[..., M, M]`` matrices by Gaussian elimination with
partial pivoting (what LAPACK's ``getrf`` under numpy's ``det`` does), unrolled over the
``M`` columns at import: per column, the row of the largest magnitude at or below the
diagonal is swapped up (a gather of rows; the sign flips when it moves), its pivot joins the
running product, and the rows below subtract their multiple of it. A zero pivot (a singular
matrix) gives 0. The graph grows with ``M`` (about a dozen operators per column), so ``M``
is bounded by :data:`MAX_ORDER`.
"""

from __future__ import annotations

import numpy as np

from .. import opdefs as G
from ..frontend_onnx import OnnxImportError, register_converter
from ..ir import Call, Constant
from ..opdefs import index as GI
from ..opdefs import logic as GL
from ..opdefs import transform as GT
from ..opdefs.arith import binary, unary
from ..opdefs.reduce import argmax

MAX_ORDER = 64
"""The largest matrix order ``Det`` takes (the elimination is unrolled per column)."""


def _rows(a, begin: int, end: int, axis: int):
    return Call("strided_slice", [a], {"begin": [begin], "end": [end], "axes": [axis]})


@register_converter("Det")
def _det(im, node, a):
    x = im.tensor(node.input[0])
    if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
        raise OnnxImportError(f"Det {node.name!r}: X must be [..., M, M], got {list(x.shape)}")
    if x.dtype not in ("float16", "bfloat16", "float32", "float64"):
        raise OnnxImportError(f"Det {node.name!r}: X has dtype {x.dtype}; Det takes floats")
    m = int(x.shape[-1])
    if m > MAX_ORDER:
        raise OnnxImportError(f"Det {node.name!r}: matrices of order {m}; at most "
                              f"{MAX_ORDER} are supported (the elimination is unrolled)")
    lead = tuple(x.shape[:-2])
    k = int(np.prod(lead, dtype=np.int64))
    if m == 0 or k == 0:
        raise OnnxImportError(f"Det {node.name!r}: X {list(x.shape)} is empty; empty tensors "
                              "are not supported")
    dtype = "float64" if x.dtype == "float64" else "float32"

    def const(v):
        return Constant(np.asarray(v, dtype=dtype), "", dtype)

    mat = G.reshape(x if x.dtype == dtype else G.cast(x, dtype), (k, m, m))
    rows = Constant(np.arange(m, dtype=np.int64).reshape(1, m), "", "int64")
    det = None
    for j in range(m):
        # the pivot: the largest magnitude in column j at or below the diagonal (the first
        # of equals, as LAPACK's idamax)
        col = G.reshape(_rows(_rows(mat, j, m, 1), j, j + 1, 2), (k, m - j))
        if j < m - 1:
            p = binary("add", argmax(unary("abs", col), 1, True),
                       Constant(np.asarray(j, np.int64), "", "int64"))  # [k, 1]
            jj = Constant(np.asarray(j, np.int64), "", "int64")
            perm = GL.where(Call("equal", [rows, jj]), GT.broadcast_to(p, (k, m)),
                            GL.where(Call("equal", [rows, p]), GT.broadcast_to(jj, (k, m)),
                                     GT.broadcast_to(rows, (k, m))))
            mat = GI.gather_elements(mat, GT.broadcast_to(G.reshape(perm, (k, m, 1)),
                                                          (k, m, m)), 1)
            flip = GL.where(Call("equal", [p, jj]), const(1.0), const(-1.0))  # [k, 1]
        pivot = G.reshape(_rows(_rows(mat, j, j + 1, 1), j, j + 1, 2), (k, 1))
        step = pivot if j == m - 1 else binary("multiply", pivot, flip)
        det = step if det is None else binary("multiply", det, step)
        if j == m - 1:
            break
        top = _rows(mat, j, j + 1, 1)  # [k, 1, m]
        below = _rows(mat, j + 1, m, 1)  # [k, m-j-1, m]
        piv3 = G.reshape(pivot, (k, 1, 1))
        zero = Call("equal", [piv3, const(0.0)])
        factor = GL.where(zero, const(0.0),
                          binary("divide", _rows(below, j, j + 1, 2),
                                 GL.where(zero, const(1.0), piv3)))
        below = binary("subtract", below, binary("multiply", factor, top))
        mat = G.concatenate([_rows(mat, 0, j + 1, 1), below], 1)
    out = G.reshape(det, lead)
    return out if x.dtype == dtype else G.cast(out, x.dtype)
