"""ONNX converters of products: ``MatMul`` (1-D operands, broadcast batch dimensions),
``Gemm`` and ``Einsum`` (the equations that are products, transposes and sums).

Every product becomes ``nn.dense``, ``nn.matmul`` or ``nn.batch_matmul``, the operators the
tensor-core kernels implement, with reshapes and transposes around it; a weight known at
import time is stored already transposed, as ``nn.dense`` reads it.
"""

from __future__ import annotations

import numpy as np

from ...ir import dtype as dt
from .. import opdefs as G
from ..frontend_onnx import OnnxImportError, register_converter
from ..ir import Constant, Node, Var
from ..opdefs import transform as GT


def _transposed(im, name: str) -> Node:
    """``name`` transposed (a ``[K, N]`` MatMul/Gemm weight as dense's ``[N, K]``): a weight
    initializer becomes a parameter ``<name>_T`` holding the transposed values, a constant
    a transposed constant, anything else a transpose."""
    if not im.is_static(name):
        return G.transpose(im.tensor(name), (1, 0))
    value = im.static[name]
    if name in im.initializers and value.dtype.kind == "f":
        tname = f"{name}_T"
        if tname not in im.nodes:
            value = np.ascontiguousarray(im.weight(value).T)
            var = Var(tname, value.shape, dt.from_numpy(value.dtype))
            im.params[tname] = value
            im.param_vars.append(var)
            im.nodes[tname] = var
        return im.nodes[tname]
    return Constant(np.ascontiguousarray(value.T), name)


def _reshape(x: Node, shape) -> Node:
    shape = tuple(int(s) for s in shape)
    return x if x.shape == shape else G.reshape(x, shape)


def _transpose(x: Node, perm) -> Node:
    perm = tuple(perm)
    return x if perm == tuple(range(x.ndim)) else G.transpose(x, perm)


def _prod(shape) -> int:
    return int(np.prod(shape, dtype=np.int64))


@register_converter("Gemm")
def _gemm(im, node, a):
    x = im.tensor(node.input[0])
    if a.get("transA", 0):
        x = G.transpose(x, (1, 0))
    bname = node.input[1]
    # dense takes the weight as [N, K]: B itself when transB, else B transposed
    w = im.tensor(bname) if a.get("transB", 0) else _transposed(im, bname)
    y = G.dense(x, w)
    alpha = float(a.get("alpha", 1.0))
    if alpha != 1.0:
        y = G.multiply(y, alpha)
    if len(node.input) > 2 and node.input[2]:
        c = im.tensor(node.input[2])
        beta = float(a.get("beta", 1.0))
        if beta != 1.0:
            c = G.multiply(c, beta)
        y = G.add(y, c)
    return y


@register_converter("MatMul", static=lambda im, node, a: [np.matmul(
    im.static[node.input[0]], im.static[node.input[1]])])
def _matmul(im, node, a):
    """numpy's ``matmul``: a 1-D operand is a row (left) or a column (right) that the result
    drops; batch dimensions broadcast. A 2-D right operand keeps the path of a dense layer
    (its weight stored transposed), equal batch dimensions one ``nn.batch_matmul``."""
    x = im.tensor(node.input[0])
    bname = node.input[1]
    by = im.shape(bname)
    if x.ndim == 0 or len(by) == 0:
        raise OnnxImportError("operands must have at least one "
                              "dimension")
    if len(by) == 2 and x.ndim >= 2:
        w = _transposed(im, bname)
        if x.ndim == 2:
            return G.dense(x, w)
        lead = x.shape[:-1]
        flat = G.reshape(x, (_prod(lead), x.shape[-1]))
        return G.reshape(G.dense(flat, w), lead + (by[1],))
    return matmul_vectors(node, x, im.tensor(bname))


def matmul_vectors(node, x: Node, y: Node) -> Node:
    """numpy's ``matmul`` of graph nodes of at least one dimension: a 1-D operand is a row
    (left) or a column (right) that the result drops (:func:`matmul_nd` for the rest)."""
    row, col = x.ndim == 1, y.ndim == 1
    if row:
        x = G.reshape(x, (1, x.shape[0]))
    if col:
        y = G.reshape(y, (y.shape[0], 1))
    out = matmul_nd(node, x, y)
    shape = out.shape
    if row:
        shape = shape[:-2] + shape[-1:]
    if col:
        shape = shape[:-1]
    return _reshape(out, shape)


def matmul_nd(node, x: Node, y: Node) -> Node:
    """``x @ y`` for operands of at least two dimensions whose batch dimensions broadcast."""
    (m, k1), (k2, n) = x.shape[-2:], y.shape[-2:]
    if k1 != k2:
        raise OnnxImportError(f"inner dimensions differ: "
                              f"{list(x.shape)} @ {list(y.shape)}")
    lead_x, lead_y = x.shape[:-2], y.shape[:-2]
    try:
        lead = tuple(int(s) for s in np.broadcast_shapes(lead_x, lead_y))
    except ValueError:
        raise OnnxImportError(f"batch dimensions "
                              f"{list(lead_x)} and {list(lead_y)} do not broadcast") from None
    if x.ndim == 2 and y.ndim == 2:
        return G.matmul(x, y)
    if _prod(lead_y) == 1 and lead_x == lead:
        # one right matrix for every batch: a single product over all the rows
        flat = _reshape(x, (_prod(lead) * m, k1))
        return _reshape(G.matmul(flat, _reshape(y, (k2, n))), lead + (m, n))
    if lead_x != lead and _prod(lead_x) != 1:
        x = GT.broadcast_to(x, lead + (m, k1))
    if lead_y != lead and _prod(lead_y) != 1:
        y = GT.broadcast_to(y, lead + (k2, n))
    bx = _prod(x.shape[:-2])
    by = _prod(y.shape[:-2])
    x3 = _reshape(x, (bx, m, k1))
    y3 = _reshape(y, (by, k2, n))
    return _reshape(G.batch_matmul(x3, y3, transpose_b=False), lead + (m, n))


# -- einsum ----------------------------------------------------------------------------------


def _parse_einsum(node, equation: str, operands) -> tuple[list[str], str]:
    """The letters of each operand and of the output, with ``...`` spelled as capital
    letters (one per broadcast dimension, right-aligned as numpy does)."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(operands):
        raise OnnxImportError(f"equation {equation!r} names "
                              f"{len(terms)} operands, the node has {len(operands)}")
    spare = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ" if c not in eq]
    width = 0
    for term, x in zip(terms, operands):
        if "..." in term:
            width = max(width, x.ndim - (len(term) - 3))
    ell = "".join(spare[:width])
    letters = []
    for term, x in zip(terms, operands):
        if "..." in term:
            n = x.ndim - (len(term) - 3)
            term = term.replace("...", ell[width - n:] if n else "")
        if len(term) != x.ndim or not all(c.isalpha() for c in term):
            raise OnnxImportError(f"term {term!r} of {equation!r} does "
                                  f"not fit an operand of shape {list(x.shape)}")
        letters.append(term)
    if arrow:
        out = rhs.replace("...", ell)
    else:
        counts = {c: sum(t.count(c) for t in letters) for c in set("".join(letters))}
        out = ell + "".join(sorted(c for c, k in counts.items() if k == 1 and c not in ell))
    if len(set(out)) != len(out) or not set(out) <= set("".join(letters)):
        raise OnnxImportError(f"output {out!r} of {equation!r} names a "
                              "letter twice or one that no operand has")
    return letters, out


def _diagonal(node, x: Node, term: str) -> tuple[Node, str]:
    """``x`` with every letter repeated within ``term`` taken once (its diagonal): the two
    dimensions move last, merge into one of ``n * n`` and a slice of step ``n + 1`` keeps
    the diagonal, so no gather is needed."""
    while len(set(term)) != len(term):
        c = next(c for c in term if term.count(c) > 1)
        first, second = term.index(c), term.index(c, term.index(c) + 1)
        n = x.shape[first]
        if x.shape[second] != n:
            raise OnnxImportError(f"letter {c!r} of term {term!r} has extents {n} and "
                                  f"{x.shape[second]}; a diagonal needs them equal")
        rest = [d for d in range(x.ndim) if d not in (first, second)]
        x = _transpose(x, rest + [first, second])
        x = _reshape(x, [x.shape[d] for d in range(len(rest))] + [n * n])
        if n > 1:
            x = GT.strided_slice(x, [0], [n * n], [n + 1], [x.ndim - 1])
        term = "".join(term[d] for d in rest) + c
    return x, term


def _sum_out(x: Node, term: str, keep: str) -> tuple[Node, str]:
    """Sum ``x`` over the letters of ``term`` not in ``keep`` (as a product with a vector of
    ones, which keeps the sum in the matrix kernels' float32 accumulation)."""
    gone = [c for c in term if c not in keep]
    if not gone:
        return x, term
    kept = [c for c in term if c in keep]
    order = [term.index(c) for c in kept + gone]
    rows = _prod([x.shape[term.index(c)] for c in kept])
    depth = _prod([x.shape[term.index(c)] for c in gone])
    flat = _reshape(_transpose(x, order), (rows, depth))
    ones = Constant(np.ones((1, depth)), "einsum_ones", dtype=x.dtype)
    summed = G.dense(flat, ones)
    return _reshape(summed, [x.shape[term.index(c)] for c in kept]), "".join(kept)


def _contract(node, x: Node, xs: str, y: Node, ys: str, keep: str) -> tuple[Node, str]:
    """The product of two operands summed over the letters they share that ``keep`` lacks:
    batch letters (in both and kept), then rows of ``x``, then columns of ``y``."""
    x, xs = _sum_out(x, xs, keep + ys)
    y, ys = _sum_out(y, ys, keep + xs)
    size = {}
    for t, v in ((xs, x), (ys, y)):
        for c, s in zip(t, v.shape):
            if c in size and size[c] != s and 1 not in (size[c], s):
                raise OnnxImportError(f"letter {c!r} has extents "
                                      f"{size[c]} and {s}")
            size[c] = max(size.get(c, 1), s)
    batch = [c for c in xs if c in ys and c in keep]
    inner = [c for c in xs if c in ys and c not in keep]
    left = [c for c in xs if c not in ys]
    right = [c for c in ys if c not in xs]
    x = _stretch(x, xs, size, batch + inner)
    y = _stretch(y, ys, size, batch + inner)
    nb, nm, nn_, nk = (_prod([size[c] for c in g]) for g in (batch, left, right, inner))
    x3 = _reshape(_transpose(x, [xs.index(c) for c in batch + left + inner]), (nb, nm, nk))
    y3 = _reshape(_transpose(y, [ys.index(c) for c in batch + right + inner]), (nb, nn_, nk))
    if nb == 1:
        out = G.dense(_reshape(x3, (nm, nk)), _reshape(y3, (nn_, nk)))
    else:
        out = G.batch_matmul(x3, y3, transpose_b=True)
    letters = "".join(batch + left + right)
    return _reshape(out, [size[c] for c in letters]), letters


def _stretch(x: Node, term: str, size: dict, letters) -> Node:
    """``x`` broadcast along those ``letters`` where it has extent 1 and the other operand
    more (numpy's broadcasting of ``...`` dimensions)."""
    shape = tuple(size[c] if c in letters else s for c, s in zip(term, x.shape))
    return x if shape == x.shape else GT.broadcast_to(x, shape)


@register_converter("Einsum", static=lambda im, node, a: [np.einsum(
    a["equation"].decode() if isinstance(a["equation"], bytes) else a["equation"],
    *[im.static[i] for i in node.input])])
def _einsum(im, node, a):
    equation = a["equation"]
    equation = equation.decode() if isinstance(equation, bytes) else str(equation)
    operands = [im.tensor(i) for i in node.input]
    letters, out = _parse_einsum(node, equation, operands)
    for k, (x, term) in enumerate(zip(operands, letters)):
        operands[k], letters[k] = _diagonal(node, x, term)
    x, xs = operands[0], letters[0]
    for k in range(1, len(operands)):
        later = out + "".join(letters[k + 1:])
        x, xs = _contract(node, x, xs, operands[k], letters[k], later)
    x, xs = _sum_out(x, xs, out)
    return _transpose(x, [xs.index(c) for c in out])
