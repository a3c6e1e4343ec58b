"""``recompose_attention``: the decomposed attention of imported graphs as ``nn.attention``.

ONNX exports write attention as products, a scale, masks and a softmax (both of PyTorch's
exporters, for ``scaled_dot_product_attention`` and for the eager attention of Hugging Face
models alike; :mod:`~ptxforge.graph.passes.attention_pattern` lists the forms). This pass
finds each and writes one ``nn.attention(q, k, v[, mask], scale=, is_causal=)`` on
``[B, H, L, E]`` views of the tensors the exporter split into heads, so that
``decompose_attention`` then makes the same choice for an ONNX import as for
``graph.from_torch``: the fused kernel where the keys are many (or ``fused_attention`` asks
for it), the batched products and softmax otherwise. q, k and v are written as
``transpose(reshape(x, [B, L, H, E]), (0, 2, 1, 3))`` where that reads the same elements
as the exporter's chain, so ``fold_attention_layout`` folds them into the kernel.

Only a rewrite that computes the same function is made:

- the softmax is on the scores' last axis (the keys), in the products' dtype or in float32
  between casts from and back to it; the probabilities reach the second product and the
  scores come from the first one through reshapes that keep every element in place;
- the scale is a product of scalar constants, on the scores or on q and k (in 16 bits only
  powers of two move, as ``canonicalize_products`` moves them), and it comes before every
  mask; q, k and v reach the products through reshapes, transposes and a repeat of the key
  heads (grouped-query attention) that are exactly a ``[B, H, L, E]`` head split;
- a mask is added, or kept by ``where(cond, scores, fill)`` (or dropped by
  ``where(cond, fill, scores)``) with a scalar fill, at the scores' shape. A constant mask
  that drops exactly the keys after each query (a Trilu or causal-bias constant) with minus
  infinity, or with a fill at most :data:`NEG_LARGE` (finfo.min) where it is the only mask,
  is ``is_causal``; the other masks are the 4th operand: one as it is (a ``where`` with
  minus infinity as a bool mask, with a finite fill as the additive ``where(cond, 0,
  fill)``), several as their sum where all but one add only 0 or values at most
  :data:`NEG_LARGE` (T5's position bias and its padding mask), so that adding them first
  gives the scores what adding them one by one gives;
- ``nn.attention`` gives 0 for a row whose scores are all minus infinity, where a softmax
  gives NaN: without the exporter's NaN guard (``where(isnan(p), 0, p)``) a mask is taken
  only when no row can be all minus infinity (a constant checked row by row, or a mask whose
  values are provably finite).

A finite fill ``f <= NEG_LARGE`` and minus infinity give the same probabilities: a score
``x`` plus ``f`` rounds to ``f`` for ``|x| < 1e31`` and ``exp(f - max)`` is 0 in every
float format.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .. import opdefs as G
from ..ir import Call, Constant, Graph, Node, Var
from ..opdefs.elemwise import cast_array
from .attention_pattern import AttentionMatch, MaskTerm, match_attention, scalar
from .base import GraphPass, register_graph_pass
from .digit_view import DIGIT_OPS, DigitView

NEG_LARGE = -1e30
"""A finite mask fill at most this is as good as minus infinity (see the module doc)."""

HEADS = (0, 2, 1, 3)

_FLOAT_MAX = {"float16": 65504.0, "bfloat16": 3.3895313892515355e38,
              "float32": 3.4028234663852886e38, "float64": 1.7976931348623157e308}
_OVERFLOW = {"float16": 65504.0 + 16.0, "bfloat16": 3.3895313892515355e38 + 2.0 ** 119,
             "float32": 3.4028234663852886e38 + 2.0 ** 103, "float64": math.inf}


def _bounds(node: Node) -> tuple[float, float] | None:
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
    if node.op in DIGIT_OPS:
        return _bounds(node.args[0])
    if node.op == "cast":
        return _bounds(node.args[0])
    if node.op == "negative":
        b = _bounds(node.args[0])
        return None if b is None else (-b[1], -b[0])
    if node.op == "where":
        a, b = _bounds(node.args[1]), _bounds(node.args[2])
        return None if a is None or b is None else (min(a[0], b[0]), max(a[1], b[1]))
    if node.op in ("add", "subtract", "multiply"):
        a, b = _bounds(node.args[0]), _bounds(node.args[1])
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
    return None


def _rows(term: MaskTerm, lq: int, s: int) -> np.ndarray | None:
    """The values of a constant mask applied to every batch and head alike, as
    ``[lq, s]``; None for any other mask."""
    node = term.node
    if not isinstance(node, Constant):
        return None
    v = np.asarray(node.value)
    if v.ndim < 2 or tuple(v.shape[-2:]) != (lq, s) or any(d != 1 for d in v.shape[:-2]):
        return None
    return v.reshape(lq, s)


def _causal(term: MaskTerm, lq: int, s: int) -> str | None:
    """``"inf"`` or ``"large"`` where ``term`` drops exactly the keys after each query
    (``j > i``) with minus infinity or with fills at most :data:`NEG_LARGE`, else None."""
    v = _rows(term, lq, s)
    if v is None:
        return None
    tril = np.tril(np.ones((lq, s), bool))
    if term.kind == "add":
        v = v.astype(np.float64)
        if not np.all(v[tril] == 0.0) or not np.all(v[~tril] <= NEG_LARGE):
            return None
        return "inf" if np.all(np.isneginf(v[~tril])) else "large"
    keep = v.astype(bool) if term.kind == "keep" else ~v.astype(bool)
    if not np.array_equal(keep, tril) or not term.fill <= NEG_LARGE:
        return None
    return "inf" if math.isinf(term.fill) else "large"


def _keeps_all(term: MaskTerm) -> bool:
    """Whether the constant ``term`` changes no score (adds zeros, keeps everything)."""
    node = term.node
    if not isinstance(node, Constant):
        return False
    v = np.asarray(node.value)
    if term.kind == "add":
        return bool(np.all(v.astype(np.float64) == 0.0))
    return bool(np.all(v.astype(bool) if term.kind == "keep" else ~v.astype(bool)))


def _empty_rows(term: MaskTerm, lq: int, s: int, causal: bool) -> bool | None:
    """Whether the constant ``term`` (with the causal mask where ``causal``) leaves a row
    with every score minus infinity; None where it cannot be told."""
    node = term.node
    if not isinstance(node, Constant):
        return None
    v = np.asarray(node.value)
    if term.kind == "add":
        dropped = np.isneginf(v.astype(np.float64))
    elif math.isinf(term.fill):
        dropped = ~v.astype(bool) if term.kind == "keep" else v.astype(bool)
    else:
        return False
    dropped = np.broadcast_to(dropped, np.broadcast_shapes(dropped.shape, (lq, s)))
    if causal:
        dropped = dropped | ~np.tril(np.ones((lq, s), bool))
    return bool(np.any(np.all(dropped, axis=-1)))


@dataclass(frozen=True)
class _Plan:
    """How to write one matched attention."""

    match: AttentionMatch
    layouts: tuple  # per q, k, v: (reshape target, transpose axes)
    masks: tuple[MaskTerm, ...]  # summed into the 4th operand (one: as it is)
    is_causal: bool
    mask_heads: bool  # reshape a [B * H, L, S] mask to [B, H, L, S]


def _layout(shape: tuple, view: DigitView) -> tuple[tuple, tuple] | None:
    """``(z, axes)`` with ``transpose(reshape(x, z), axes)`` reading ``view`` of ``x``
    (of ``shape``): the head transpose first, so ``fold_attention_layout`` finds it."""
    canon = view.canonical()
    if any(len(d) > 1 for d in canon):
        return None
    stride = [d[0][1] if d else -1 for d in canon]
    order = sorted(range(4), key=lambda d: (-stride[d], d))
    by_stride = tuple(order.index(d) for d in range(4))
    for axes in (HEADS, (0, 1, 2, 3), by_stride):
        z = [0] * 4
        for d, a in enumerate(axes):
            z[a] = view.shape[d]
        base = DigitView.contiguous(shape).reshape(z)
        if base is not None and base.transpose(axes).canonical() == canon:
            return tuple(z), tuple(axes)
    return None


def _selects(term: MaskTerm) -> bool:
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
    return False


def _term_bounds(term: MaskTerm) -> tuple[float, float] | None:
    if term.kind == "add":
        return _bounds(term.node)
    return min(0.0, term.fill), max(0.0, term.fill)


def _no_empty_rows(masks: list, lq: int, s: int, causal: bool) -> bool:
    """Whether no row of scores can be all minus infinity (where the softmax gives NaN and
    ``nn.attention`` 0): a constant mask checked row by row, any other provably finite."""
    if len(masks) == 1:
        empty = _empty_rows(masks[0], lq, s, causal)
        if empty is not None:
            return not empty
    lo = hi = 0.0
    for t in masks:
        b = _term_bounds(t)
        if b is None:
            return False
        lo, hi = lo + b[0], hi + b[1]
    # a sum rounds to the largest finite value until half a unit beyond it
    limit = _OVERFLOW.get(masks[0].node.dtype if masks[0].kind == "add" else "float32")
    return limit is not None and -limit < lo and hi < limit


def plan_attention(call: Call) -> _Plan | None:
    """How ``call`` (a batched product) is written as ``nn.attention``, or None where it
    ends no attention this pass can prove equal (see the module doc)."""
    m = match_attention(call)
    if m is None:
        return None
    layouts = []
    for op in (m.q, m.k, m.v):
        lay = _layout(tuple(op.source.shape), op.view)
        if lay is None:
            return None
        layouts.append(lay)
    _, lq, _ = call.shape
    s = m.k.view.shape[2]
    masks = [t for t in m.masks if not _keeps_all(t)]
    kinds = [_causal(t, lq, s) for t in masks]
    causal = False
    if len(masks) == 1 and kinds[0] is not None:
        causal, masks = True, []
    elif "inf" in kinds:
        causal = True
        masks = [t for t, k in zip(masks, kinds) if k != "inf"]
    if any(t.kind != "add" and not t.fill < math.inf for t in masks):
        return None  # a NaN or +inf fill: no mask of nn.attention writes it
    if sum(not _selects(t) for t in masks) > 1:
        return None  # two general masks: their sum would round differently
    if masks and not m.nan_guard and not _no_empty_rows(masks, lq, s, causal):
        return None
    mask_heads = False
    if len(m.scores) == 3 and any(t.node.ndim == 3 and t.node.shape[0] != 1 for t in masks):
        if len(masks) > 1 or tuple(masks[0].node.shape) != m.scores:
            return None
        mask_heads = True
    return _Plan(m, tuple(layouts), tuple(masks), causal, mask_heads)


def _operand(source: Node, layout: tuple) -> Node:
    z, axes = layout
    x = source if tuple(source.shape) == z else G.reshape(source, z)
    return x if axes == (0, 1, 2, 3) else G.transpose(x, axes)


def _term_node(term: MaskTerm, memo: dict, dtype: str, additive: bool) -> Node:
    """``term`` as a bool mask (a ``where`` with minus infinity, unless ``additive``) or as
    values added to the scores."""
    node = memo[id(term.node)]
    if term.kind == "add":
        return node
    if math.isinf(term.fill) and not additive:
        return node if term.kind == "keep" else G.logical_not(node)
    zero = Constant(cast_array(np.zeros(()), dtype), dtype=dtype)
    fill = Constant(cast_array(np.asarray(term.fill), dtype), "mask_fill", dtype=dtype)
    return G.where(node, zero, fill) if term.kind == "keep" else G.where(node, fill, zero)


def _mask_node(plan: _Plan, memo: dict) -> Node | None:
    if not plan.masks:
        return None
    dtype = plan.match.dtype
    additive = len(plan.masks) > 1
    node = _term_node(plan.masks[0], memo, dtype, additive)
    for term in plan.masks[1:]:
        node = G.add(node, _term_node(term, memo, dtype, additive))
    if plan.mask_heads:
        b, h, _ = plan.match.heads
        node = G.reshape(node, (b, h) + tuple(node.shape[1:]))
    return node


def _attention(plan: _Plan, memo: dict) -> Call:
    from ..opdefs.attention import attention

    m = plan.match
    q, k, v = (_operand(memo[id(op.source)], lay)
               for op, lay in zip((m.q, m.k, m.v), plan.layouts))
    return attention(q, k, v, _mask_node(plan, memo), m.scale, plan.is_causal)


def recompose(graph: Graph) -> Graph:
    """``graph`` with every decomposed attention that :func:`plan_attention` accepts
    written as one ``nn.attention`` (the graph itself where there is none)."""
    plans = {id(n): p for n in graph.nodes() if isinstance(n, Call) and n.op ==
             "nn.batch_matmul" and (p := plan_attention(n)) is not None}
    if not plans:
        return graph
    memo: dict[int, Node] = {}
    made: dict[int, Call] = {}  # a new attention (or its reshape) by id: the attention
    for node in graph.nodes():
        if not isinstance(node, Call):
            memo[id(node)] = node
            continue
        args = tuple(memo[id(a)] for a in node.args)
        plan = plans.get(id(node))
        if plan is not None:
            att = _attention(plan, memo)
            out = att if att.shape == node.shape else G.reshape(att, node.shape)
            made[id(out)] = att
        elif node.op == "reshape" and id(args[0]) in made:
            att = made[id(args[0])]  # a reshape of one: one reshape of the attention
            out = att if att.shape == node.shape else G.reshape(att, node.shape)
            made[id(out)] = att
        elif any(a is not b for a, b in zip(args, node.args)):
            out = Call(node.op, args, node.attrs)
        else:
            out = node
        memo[id(node)] = out
    return Graph(graph.params, [memo[id(o)] for o in graph.outputs], graph.name, graph.attrs)


@register_graph_pass
@dataclass(frozen=True)
class RecomposeAttention(GraphPass):
    """Decomposed attention (products, scale, masks, softmax) as ``nn.attention`` (see the
    module doc)."""

    name = "recompose_attention"

    def apply(self, graph: Graph, ctx) -> Graph:
        return recompose(graph)
