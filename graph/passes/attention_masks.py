"""What the masks of a decomposed attention add to its scores, as ``recompose_attention``
needs to know it: bounds of their values, causal constants, rows they may empty.

A mask is a :class:`~ptxforge.graph.passes.attention_pattern.MaskTerm`: added to the
scores (``add``), or keeping them (``keep``: ``where(cond, scores, fill)``) or dropping
them (``drop``: ``where(cond, fill, scores)``) with a scalar fill. A finite fill ``f <=``
:data:`NEG_LARGE` and minus infinity give the same probabilities: a score ``x`` plus ``f``
rounds to ``f`` for ``|x| < 1e31`` and ``exp(f - max)`` is 0 in every float format.

The bounds of a mask's values come from a small interval analysis. One assumption is made,
the one every tokenizer and Hugging Face's documentation make: an integer tensor ``m`` in
``1 - cast(m)`` (the padding mask ``(1 - attention_mask) * finfo.min`` of BERT-like models
exported with transformers 4) holds 0 and 1. With other values the imported graph's row
would be minus infinity (``m <= -1``) or plus infinity (``m >= 3``) and its softmax NaN;
``nn.attention`` gives 0 there (:data:`ASSUMPTIONS` lists this for the documentation).
"""

from __future__ import annotations

import math

import numpy as np

from ..ir import Call, Constant, Node, Var
from .attention_pattern import MaskTerm, scalar
from .digit_view import DIGIT_OPS

NEG_LARGE = -1e30
"""A finite mask fill at most this is as good as minus infinity (see the module doc)."""

SMALL = 1e31
"""Scores below this in magnitude are absorbed by a fill at most :data:`NEG_LARGE` (half
a unit in the last place of float32's largest value is about 1.01e31)."""

ASSUMPTIONS = ("an integer m in 1 - cast(m) (an attention_mask) holds 0 and 1",)

_OVERFLOW = {"float16": 65504.0 + 16.0, "bfloat16": 3.3895313892515355e38 + 2.0 ** 119,
             "float32": 3.4028234663852886e38 + 2.0 ** 103, "float64": math.inf}
"""Where a sum stops rounding to the largest finite value: half a unit beyond it."""


def _is_int(dtype: str) -> bool:
    return dtype.startswith(("int", "uint")) or dtype == "bool"


def _through_layout(node: Node) -> Node:
    while isinstance(node, Call) and isinstance(node.op, str) and node.op in DIGIT_OPS:
        node = node.args[0]
    return node


def _indicator(node: Node) -> bool:
    """Whether ``node`` is ``cast(m)`` (through layout calls on either side) of an integer
    or bool ``m``: 0 or 1 under the padding mask's assumption (see the module doc)."""
    node = _through_layout(node)
    if not (isinstance(node, Call) and node.op == "cast"):
        return False
    return _is_int(_through_layout(node.args[0]).dtype)


def bounds(node: Node) -> tuple[float, float] | None:
    """Bounds of every value of ``node`` where a simple interval analysis finds them."""
    if isinstance(node, Constant):
        v = np.asarray(node.value)
        if v.size == 0 or node.dtype.startswith("float8"):
            return None
        v = v.astype(np.float64)
        lo, hi = float(v.min()), float(v.max())
        return None if math.isnan(lo) or math.isnan(hi) else (lo, hi)
    if isinstance(node, Var):
        return (0.0, 1.0) if node.dtype == "bool" else None
    if not isinstance(node, Call) or not isinstance(node.op, str):
        return None
    if node.dtype == "bool":
        return 0.0, 1.0
    if node.op in DIGIT_OPS or node.op == "cast":
        return bounds(node.args[0])
    if node.op in ("take", "gather", "gather_nd"):
        return bounds(node.args[0])  # elements of the data
    if node.op == "negative":
        b = bounds(node.args[0])
        return None if b is None else (-b[1], -b[0])
    if node.op == "where":
        a, b = bounds(node.args[1]), bounds(node.args[2])
        return None if a is None or b is None else (min(a[0], b[0]), max(a[1], b[1]))
    if node.op not in ("add", "subtract", "multiply"):
        return None
    a = bounds(node.args[0])
    if node.op == "subtract" and scalar(node.args[0]) == 1.0 and _indicator(node.args[1]):
        b = (0.0, 1.0)  # the padding mask's 1 - cast(attention_mask)
    else:
        b = bounds(node.args[1])
    if a is None or b is None:
        return None
    if node.op == "add":
        return a[0] + b[0], a[1] + b[1]
    if node.op == "subtract":
        return a[0] - b[1], a[1] - b[0]
    with np.errstate(invalid="ignore", over="ignore"):
        ends = [x * y for x in a for y in b]
    if any(math.isnan(e) for e in ends):
        return None
    return min(ends), max(ends)


def rows(term: MaskTerm, lq: int, s: int) -> np.ndarray | None:
    """The values of a constant mask applied to every batch and head alike, as
    ``[lq, s]``: of shape ``[1, ..., 1, lq, s]``, or with leading dimensions over which
    every ``[lq, s]`` block is equal (the dynamo exporter folds GPT-2's causal mask of a
    batch of sequences into a ``[B, 1, L, L]`` constant, the same for each); None for any
    other mask."""
    node = term.node
    if not isinstance(node, Constant):
        return None
    v = np.asarray(node.value)
    if v.ndim < 2 or tuple(v.shape[-2:]) != (lq, s):
        return None
    blocks = v.reshape(-1, lq, s)
    if len(blocks) > 1 and not np.all(blocks == blocks[:1]):
        return None
    return blocks[0]


def causal(term: MaskTerm, lq: int, s: int) -> tuple[str, int] | None:
    """``(kind, offset)`` where ``term`` drops exactly the keys ``j > i + offset`` of each
    query ``i`` (offset 0: top-left aligned, as ``is_causal``; ``s - lq``: bottom-right, a
    cache of ``s - lq`` earlier keys before the queries), ``kind`` ``"inf"`` with minus
    infinity and ``"large"`` with fills at most :data:`NEG_LARGE`; else None."""
    v = rows(term, lq, s)
    if v is None:
        return None
    for offset in sorted({0, s - lq}):
        tril = np.tril(np.ones((lq, s), bool), offset)
        if term.kind == "add":
            w = v.astype(np.float64)
            if not np.all(w[tril] == 0.0) or not np.all(w[~tril] <= NEG_LARGE):
                continue
            return ("inf" if np.all(np.isneginf(w[~tril])) else "large"), offset
        keep = v.astype(bool) if term.kind == "keep" else ~v.astype(bool)
        if np.array_equal(keep, tril) and term.fill <= NEG_LARGE:
            return ("inf" if math.isinf(term.fill) else "large"), offset
    return None


def keeps_all(term: MaskTerm) -> bool:
    """Whether the constant ``term`` changes no score (adds zeros, keeps everything)."""
    node = term.node
    if not isinstance(node, Constant):
        return False
    v = np.asarray(node.value)
    if term.kind == "add":
        return bool(np.all(v.astype(np.float64) == 0.0))
    return bool(np.all(v.astype(bool) if term.kind == "keep" else ~v.astype(bool)))


def selects(term: MaskTerm) -> bool:
    """Whether every value ``term`` adds is 0 or at most :data:`NEG_LARGE`: added to any
    other mask first, it gives the scores the values it gives them added last."""
    if term.kind != "add":
        return term.fill <= NEG_LARGE
    node = term.node
    if isinstance(node, Constant):
        v = np.asarray(node.value, np.float64)
        return bool(np.all((v == 0.0) | (v <= NEG_LARGE)))
    if isinstance(node, Call) and node.op == "where":
        values = [scalar(a) for a in node.args[1:]]
        return all(x is not None and (x == 0.0 or x <= NEG_LARGE) for x in values)
    b = bounds(node)
    if b is not None and b[1] <= 0.0 and b[0] > -_OVERFLOW["float32"]:
        # a padding mask (1 - m) * c with c <= NEG_LARGE: 0 or c
        return _padding_fill(node) is not None
    return False


def _padding_fill(node: Node) -> float | None:
    """``c`` where ``node`` is ``(1 - cast(m)) * c`` (either order; layout calls around
    it) with an integer ``m`` and a scalar ``c <= NEG_LARGE``."""
    node = _through_layout(node)
    if not (isinstance(node, Call) and node.op == "multiply"):
        return None
    for a, c in (node.args, node.args[::-1]):
        a = _through_layout(a)
        fill = scalar(c)
        if fill is not None and fill <= NEG_LARGE and isinstance(a, Call) and \
                a.op == "subtract" and scalar(a.args[0]) == 1.0 and _indicator(a.args[1]):
            return fill
    return None


def term_bounds(term: MaskTerm) -> tuple[float, float] | None:
    if term.kind == "add":
        return bounds(term.node)
    return min(0.0, term.fill), max(0.0, term.fill)


def _values(term: MaskTerm) -> np.ndarray:
    """What the constant ``term`` adds to the scores (a ``keep`` or ``drop`` as 0 and its
    fill), float64, in its own shape."""
    v = np.asarray(term.node.value)
    if term.kind == "add":
        return v.astype(np.float64)
    keep = v.astype(bool) if term.kind == "keep" else ~v.astype(bool)
    return np.where(keep, 0.0, term.fill)


def empty_rows_reason(masks: list, lq: int, s: int, is_causal: bool,
                      dtype: str) -> str | None:
    """Why a row of scores may be all minus infinity under ``masks`` (and the causal mask
    where ``is_causal``), where a softmax gives NaN and ``nn.attention`` 0; None when no
    row can be: the constant masks' values are summed position by position, and each row
    needs a position where they and the lower bounds of the others stay finite."""
    consts = [t for t in masks if isinstance(t.node, Constant)]
    data = [t for t in masks if not isinstance(t.node, Constant)]
    lo = hi = 0.0
    for t in data:
        b = term_bounds(t)
        if b is None:
            return (f"without a NaN guard, the mask {_describe(t)} may make a row all minus "
                    "infinity (no bounds of its values are known)")
        lo, hi = lo + b[0], hi + b[1]
    limit = _OVERFLOW.get(dtype, math.inf)
    total = np.zeros((lq, s))
    for t in consts:
        total = total + _values(t)
    if is_causal:
        total = total + np.where(np.tril(np.ones((lq, s), bool)), 0.0, -np.inf)
    with np.errstate(invalid="ignore"):
        finite = (total + lo > -limit) & (total + hi < limit)
        if np.any(total + hi >= limit):
            return "a sum of masks may exceed the largest finite value"
    if not np.all(np.any(finite, axis=-1)):
        return ("without a NaN guard, the masks may make a row all minus infinity (a "
                "softmax gives NaN there, nn.attention 0)")
    return None


def _describe(term: MaskTerm) -> str:
    node = term.node
    what = node.op if isinstance(node, Call) else type(node).__name__.lower()
    return f"{term.kind} {what} {list(node.shape)} {node.dtype}"


_NARROWS = ("cast", "where", "logical_and", "logical_or", "logical_not", "add", "subtract",
            "multiply", "negative")
"""Element-wise operators through which :func:`narrowed` narrows a mask's operands."""


def narrowed(node: Node) -> Node:
    """``node`` (a mask) without what only repeats its values: a value of fewer elements,
    of the same rank, that broadcasts to ``node``'s shape and gives the same values there.

    Exporters build a padding mask at the scores' full shape: transformers 5's SDPA mask of
    BERT is ``where(and(C, pad), 0, finfo.min)`` with ``pad`` ``[B, 1, 1, S]`` and ``C`` an
    all-True ``[1, 1, L, 1]`` constant, so the graph computes a ``[B, 1, L, S]`` mask (a kernel
    writing it, and the attention reading 2 or 4 bytes per score of every head) where
    ``[B, 1, 1, S]`` holds it all. This drops ``broadcast_to``, shrinks constants along the
    axes they are uniform along, drops an all-True operand of ``logical_and`` (all-False of
    ``logical_or``), and rebuilds the element-wise operators of :data:`_NARROWS` on narrowed
    operands."""
    out = _narrow(node, {})
    if out is node:
        return node
    if out.ndim < node.ndim:
        from .. import opdefs as G

        out = G.reshape(out, (1,) * (node.ndim - out.ndim) + tuple(out.shape))
    return out


def _narrow(node: Node, memo: dict) -> Node:
    if id(node) in memo:
        return memo[id(node)]
    out = node
    if isinstance(node, Constant):
        out = _narrow_constant(node)
    elif isinstance(node, Call) and isinstance(node.op, str):
        if node.op == "broadcast_to":
            out = _narrow(node.args[0], memo)
        elif node.op in _NARROWS:
            args = [_narrow(a, memo) for a in node.args]
            identity = {"logical_and": True, "logical_or": False}.get(node.op)
            if identity is not None:
                for k, a in enumerate(args):
                    other = args[1 - k]
                    if (isinstance(a, Constant) and np.all(np.asarray(a.value) == identity)
                            and other.dtype == node.dtype):
                        out = other
                        break
            if out is node and any(a is not b for a, b in zip(args, node.args)):
                out = Call(node.op, args, node.attrs)
    memo[id(node)] = out
    return out


def _narrow_constant(node: Constant) -> Constant:
    """``node`` with each axis along which it is uniform cut to size 1."""
    v = np.asarray(node.value)
    if v.size <= 1:
        return node
    cut = v
    for axis in range(v.ndim):
        if cut.shape[axis] > 1:
            first = np.take(cut, [0], axis=axis)
            if np.array_equal(cut, np.broadcast_to(first, cut.shape)):
                cut = first
    if cut.shape == v.shape:
        return node
    return Constant(np.ascontiguousarray(cut), node.name, dtype=node.dtype)
