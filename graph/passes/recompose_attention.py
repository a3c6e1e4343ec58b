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
  heads (grouped-query attention) that are exactly a ``[B, H, L, E]`` head split, or one
  batch repeated for all (a product's broadcast batch dimension, ``[B, H, L, E] @ [1, H,
  E, S]``: the operand becomes a ``broadcast_to`` of its one batch);
- a mask is added, or kept by ``where(cond, scores, fill)`` (or dropped by
  ``where(cond, fill, scores)``) with a scalar fill, at the scores' shape. A constant mask
  that drops exactly the keys after each query (a Trilu or causal-bias constant, top-left
  aligned) with minus infinity, or with a fill at most :data:`NEG_LARGE` (finfo.min) where
  it is the only mask, is ``is_causal``; a bottom-right aligned one (a cache of keys before
  the queries) is a constant mask, as ``nn.attention``'s causal mask is top-left aligned.
  The other masks are the 4th operand: one as it is (a ``where`` with minus infinity as a
  bool mask, with a finite fill as the additive ``where(cond, 0, fill)``; a
  ``broadcast_to`` of it left out, and written at the fewest elements that broadcast to
  its values: a padding mask the exporter spread over every query row by an all-True
  constant reads ``[B, 1, 1, S]``), several as their sum where all but one add only 0 or
  values at most :data:`NEG_LARGE` (T5's position bias and its padding mask; GPT-2's causal
  ``where`` and its padding mask ``(1 - attention_mask) * finfo.min``), so that adding them
  first gives the scores what adding them one by one gives. A bool mask ``and(causal
  constant, data)`` that drops with minus infinity is ``is_causal`` and the data mask. The
  masks of several attentions made of the same data and equal constants are one node;
- ``nn.attention`` gives 0 for a row whose scores are all minus infinity, where a softmax
  gives NaN: without the exporter's NaN guard (``where(isnan(p), 0, p)``) masks are taken
  only when no row can be all minus infinity: the constant masks summed position by
  position, and each row keeping a position where they plus the lower bounds of the other
  masks (:mod:`~ptxforge.graph.passes.attention_masks`) stay finite.

A finite fill ``f <= NEG_LARGE`` and minus infinity give the same probabilities wherever a
row keeps a score: a score ``x`` plus ``f`` rounds to ``f`` for ``|x| < 1e31`` and ``exp(f -
max)`` is 0 in every float format. A row of only finite fills averages the values at the
largest fill, in the imported graph and in ``nn.attention`` alike; that is why GPT-2's
causal ``where`` with finfo.min beside a padding mask stays in the summed mask rather than
becoming ``is_causal`` (a left-padded row would average later keys too).

Each product of a softmax's result that is left as it is gets its reason: logged at level
DEBUG on this module's logger (``logging.getLogger("ptxforge.graph.passes.recompose_
attention")``, or ``ptxforge -v``), and listed by :func:`refusals`.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import numpy as np

from .. import opdefs as G
from ..ir import Call, Constant, Graph, Node, rewrite
from ..opdefs.elemwise import cast_array
from ..opdefs.logic import logical_not, where
from .attention_masks import (
    NEG_LARGE,
    causal,
    empty_rows_reason,
    keeps_all,
    narrowed,
    selects,
)
from .attention_pattern import AttentionMatch, MaskTerm, Refusal, match_attention, scalar
from .base import GraphPass, register_graph_pass
from .digit_view import DigitView

logger = logging.getLogger(__name__)
"""Each decomposed attention left as it is, with the reason, at level DEBUG."""

HEADS = (0, 2, 1, 3)

__all__ = ["NEG_LARGE", "RecomposeAttention", "narrow_masks", "plan_attention", "recompose",
           "refusals"]

@dataclass(frozen=True)
class _Plan:
    """How to write one matched attention."""

    match: AttentionMatch
    layouts: tuple  # per q, k, v: (reshape target, transpose axes, batch broadcast to)
    masks: tuple[MaskTerm, ...]  # summed into the 4th operand (one: as it is)
    is_causal: bool
    mask_heads: bool  # reshape a [B * H, L, S] mask to [B, H, L, S]


def _layout(shape: tuple, view: DigitView, name: str) -> tuple[tuple, tuple, int]:
    """``(z, axes, batch)`` with ``transpose(reshape(x, z), axes)`` reading ``view`` of
    ``x`` (of ``shape``): the head transpose first, so ``fold_attention_layout`` finds it.
    ``batch`` > 0: the view repeats one batch (a product's broadcast batch dimension), which
    ``broadcast_to`` then repeats ``batch`` times."""
    canon = view.canonical()
    batch = 0
    if canon[0] and all(st == 0 for _, st in canon[0]):
        batch = view.shape[0]  # every batch reads the same elements
        view = DigitView(((),) + view.dims[1:])
        canon = view.canonical()
    if any(st == 0 for dim in canon for _, st in dim):
        raise Refusal(f"{name} repeats part of its batch (a broadcast no operand reads)")
    if any(len(d) > 1 for d in canon):
        raise Refusal(f"{name} is read through a chain that splits an axis of its source")
    stride = [d[0][1] if d else -1 for d in canon]
    order = sorted(range(4), key=lambda d: (-stride[d], d))
    by_stride = tuple(order.index(d) for d in range(4))
    for axes in (HEADS, (0, 1, 2, 3), by_stride):
        z = [0] * 4
        for d, a in enumerate(axes):
            z[a] = view.shape[d]
        base = DigitView.contiguous(shape).reshape(z)
        if base is not None and base.transpose(axes).canonical() == canon:
            return tuple(z), tuple(axes), batch
    raise Refusal(f"{name} is read in an order no reshape and transpose of its source gives")


def _causal_masks(masks: list, lq: int, s: int) -> tuple[bool, list]:
    """``(is_causal, the other masks)``: a constant dropping exactly the keys after each
    query (top-left aligned, as ``is_causal``) with minus infinity, or with fills at most
    :data:`NEG_LARGE` where it is the only mask, is ``is_causal``. A bottom-right aligned
    one (keys before the queries: a cache) stays a constant mask (``nn.attention``'s causal
    mask is top-left aligned)."""
    kinds = [causal(t, lq, s) for t in masks]
    kinds = [k[0] if k is not None and k[1] == 0 else None for k in kinds]
    if len(masks) == 1 and kinds[0] is not None:
        return True, []
    if "inf" in kinds:
        return True, [t for t, k in zip(masks, kinds) if k != "inf"]
    return False, masks


def _causal_half(term: MaskTerm, lq: int, s: int) -> MaskTerm | None:
    """The data half of a mask that drops with minus infinity where ``and(causal, data)``
    is False (``where(and(c, d), scores, -inf)`` or ``+ where(and(c, d), 0, -inf)``), ``c``
    a top-left causal constant: ``is_causal`` and the mask ``d`` drop the same scores. With a
    finite fill they would not: a row of only finite fills averages every key, the causal
    ones too."""
    if term.kind == "keep" and term.fill == -math.inf:
        cond = term.node
    elif term.kind == "add" and isinstance(term.node, Call) and term.node.op == "where" and \
            scalar(term.node.args[1]) == 0.0 and scalar(term.node.args[2]) == -math.inf:
        cond = term.node.args[0]
    else:
        return None
    if not (isinstance(cond, Call) and cond.op == "logical_and"):
        return None
    for c, d in (cond.args, cond.args[::-1]):
        if causal(MaskTerm("keep", c, -math.inf), lq, s) == ("inf", 0):
            return MaskTerm("keep", d, -math.inf)
    return None


def plan_attention(call: Call) -> _Plan | None:
    """How ``call`` (a batched product) is written as ``nn.attention``; None where it ends
    no attention; :class:`~ptxforge.graph.passes.attention_pattern.Refusal` naming the
    reason where it ends one this pass cannot prove equal (see the module doc)."""
    m = match_attention(call)
    if m is None:
        return None
    layouts = tuple(_layout(tuple(op.source.shape), op.view, name)
                    for op, name in zip((m.q, m.k, m.v), "qkv"))
    _, lq, _ = call.shape
    s = m.k.view.shape[2]
    is_causal, masks = _causal_masks([t for t in m.masks if not keeps_all(t)], lq, s)
    halves = [_causal_half(t, lq, s) for t in masks]
    if any(halves):
        is_causal = True
        masks = [h or t for h, t in zip(halves, masks)]
    if any(t.kind != "add" and not t.fill < math.inf for t in masks):
        raise Refusal("a where fills the scores with NaN or plus infinity, which no mask of "
                      "nn.attention writes")
    if sum(not selects(t) for t in masks) > 1:
        raise Refusal("two masks add values other than 0 and at most -1e30: their sum would "
                      "round differently from adding them one by one")
    if masks and not m.nan_guard:
        reason = empty_rows_reason(masks, lq, s, is_causal, m.dtype)
        if reason is not None:
            raise Refusal(reason)
    mask_heads = False
    nodes = [_unbroadcast(t.node) for t in masks]
    if len(m.scores) == 3 and any(n.ndim == 3 and n.shape[0] != 1 for n in nodes):
        if len(masks) > 1 or nodes[0].shape[0] != m.scores[0]:
            raise Refusal("a mask of [B * H, L, S] scores is summed with another or "
                          "broadcast")
        mask_heads = True
    return _Plan(m, layouts, tuple(masks), is_causal, mask_heads)


def _operand(source: Node, layout: tuple) -> Node:
    z, axes, batch = layout
    x = source if tuple(source.shape) == z else G.reshape(source, z)
    x = x if axes == (0, 1, 2, 3) else G.transpose(x, axes)
    if not batch:
        return x
    from ..opdefs.transform import broadcast_to

    return broadcast_to(x, (batch,) + tuple(x.shape[1:]))


def _unbroadcast(node: Node) -> Node:
    """``node`` without the ``broadcast_to`` calls that stretch it (an exporter's
    ``expand_as(scores)``): the attention broadcasts its mask itself and reads less."""
    while isinstance(node, Call) and node.op == "broadcast_to":
        node = node.args[0]
    return node


def _term_node(term: MaskTerm, memo: dict, dtype: str, additive: bool) -> Node:
    """``term`` as a bool mask (a ``where`` with minus infinity, unless ``additive``) or as
    values added to the scores, without what only repeats its values
    (:func:`~.attention_masks.narrowed`)."""
    node = narrowed(memo[id(_unbroadcast(term.node))])
    if term.kind == "add":
        return node
    if math.isinf(term.fill) and not additive:
        return node if term.kind == "keep" else logical_not(node)
    zero = Constant(cast_array(np.zeros(()), dtype), dtype=dtype)
    fill = Constant(cast_array(np.asarray(term.fill), dtype), "mask_fill", dtype=dtype)
    return where(node, zero, fill) if term.kind == "keep" else where(node, fill, zero)


def _mask_key(plan: _Plan, memo: dict) -> tuple:
    """What the mask of ``plan`` is made of: data masks by node, constants by value (the
    layers of a network each slice their own copy of a causal bias; written once, the
    layers read one mask and the kernels that sum it run once)."""
    def term(t: MaskTerm):
        node = _unbroadcast(t.node)
        if isinstance(node, Constant):
            v = np.asarray(node.value)
            what = ("const", node.dtype, v.shape, v.tobytes())
        else:
            what = id(memo[id(node)])
        return t.kind, t.fill, what

    return plan.match.dtype, plan.mask_heads, plan.match.heads, tuple(map(term, plan.masks))


def _mask_node(plan: _Plan, memo: dict, written: dict) -> Node | None:
    if not plan.masks:
        return None
    key = _mask_key(plan, memo)
    if key in written:
        return written[key]
    dtype = plan.match.dtype
    additive = len(plan.masks) > 1
    node = _term_node(plan.masks[0], memo, dtype, additive)
    for term in plan.masks[1:]:
        node = G.add(node, _term_node(term, memo, dtype, additive))
    if plan.mask_heads:
        b, h, _ = plan.match.heads
        node = G.reshape(node, (b, h) + tuple(node.shape[1:]))
    written[key] = node
    return node


def _attention(plan: _Plan, memo: dict, written: dict) -> Call:
    from ..opdefs.attention import attention

    m = plan.match
    q, k, v = (_operand(memo[id(op.source)], lay)
               for op, lay in zip((m.q, m.k, m.v), plan.layouts))
    return attention(q, k, v, _mask_node(plan, memo, written), m.scale, plan.is_causal)


def refusals(graph: Graph) -> list[str]:
    """Why each decomposed attention of ``graph`` (a product of a softmax's result with
    the values) that the pass leaves as it is was left: one line per product, naming it by
    its place among the graph's products and its shape."""
    return _plans(graph)[1]


def _plans(graph: Graph) -> tuple[dict, list[str]]:
    plans, refused = {}, []
    products = [n for n in graph.nodes() if isinstance(n, Call) and n.op == "nn.batch_matmul"]
    for k, n in enumerate(products):
        try:
            plan = plan_attention(n)
        except Refusal as e:
            refused.append(f"product {k} of {len(products)} ({list(n.args[0].shape)} @ "
                           f"{list(n.args[1].shape)}): {e}")
            continue
        if plan is not None:
            plans[id(n)] = plan
    return plans, refused


def recompose(graph: Graph) -> Graph:
    """``graph`` with every decomposed attention that :func:`plan_attention` accepts
    written as one ``nn.attention`` (the graph itself where there is none); each one left
    is logged at level DEBUG with the reason (:func:`refusals` gives the lines)."""
    plans, refused = _plans(graph)
    for line in refused:
        logger.debug("recompose_attention left %s", line)
    if not plans:
        return graph
    memo: dict[int, Node] = {}
    made: dict[int, Call] = {}  # a new attention (or its reshape) by id: the attention
    written: dict[tuple, Node] = {}  # the masks written, by what they are made of
    for node in graph.nodes():
        if not isinstance(node, Call):
            memo[id(node)] = node
            continue
        args = tuple(memo[id(a)] for a in node.args)
        plan = plans.get(id(node))
        if plan is not None:
            att = _attention(plan, memo, written)
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
    module doc); then every ``nn.attention``'s mask at its fewest elements
    (:func:`narrow_masks`)."""

    name = "recompose_attention"

    def apply(self, graph: Graph, ctx) -> Graph:
        return narrow_masks(recompose(graph))


def narrow_masks(graph: Graph) -> Graph:
    """``graph`` with the mask of every ``nn.attention`` (a front end's, as
    ``graph.from_torch`` keeps ``scaled_dot_product_attention``, or a recomposed one)
    written at the fewest elements that hold it (:func:`~.attention_masks.narrowed`)."""
    def narrow(call: Call, args: tuple) -> Node | None:
        if call.op != "nn.attention" or len(args) != 4:
            return None
        mask = narrowed(args[3])
        if mask is args[3]:
            return None
        return Call(call.op, (*args[:3], mask), call.attrs)

    return rewrite(graph, narrow)
