"""The decomposed attention of imported graphs, found and proven equal to ``nn.attention``.

PyTorch's exporters write ``scaled_dot_product_attention`` and the eager attention of
Hugging Face models as products, a scale, masks and a softmax; the importer gives::

    s3 = nn.batch_matmul(q3, k3)                    q3 [B*H, L, E], k3 [B*H, E, S] (or k^T)
    x  = reshape(s3, [B, H, L, S]) [* c | / c]      the scale, or sqrt(c) on q and on k
         [+ mask | where(cond, x, fill) | where(cond, fill, x)]...
    p  = softmax(x, axis=-1)  [where(isnan(p), 0, p)]  [casts to float32 and back]
    o3 = nn.batch_matmul(reshape(p, [B*H, L, S]), v3)   v3 [B*H, S, Ev]

where q3, k3 and v3 are chains of reshapes and transposes (and, for grouped-query
attention, a ``broadcast_to`` repeating the key heads) of the projections' results.
:func:`match_attention` checks such a product ``o3`` from its end: the softmax on the last
axis of the scores and nothing else, the scale a scalar constant applied before any mask,
each mask added or selected by ``where`` with a scalar fill at the scores' own shape, and
q, k and v read through chains whose element maps (:class:`DigitView`) are exactly those
of ``[B, H, L, E]`` tensors merged into the product's batch. The result names the sources
of q, k, v and the masks in the original graph; ``recompose_attention`` checks the masks
and writes the call. A product whose first argument is the softmax of something but which
ends no attention this module can prove raises :class:`Refusal` naming the reason (the
pass's debug output); any other product is no attention at all (None).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...ir import dtype as dt
from ..ir import Call, Constant, Node
from .digit_view import DigitView, apply_call, is_digit_call, is_identity


class Refusal(Exception):
    """A product after a softmax that is left decomposed; the message says why."""


@dataclass(frozen=True)
class Operand:
    """q, k or v: ``view`` (``[B, H, S, E]``) of the node ``source``; no digit repeats but
    the batch's, where a product broadcasts one batch of it to all (stride 0)."""

    source: Node
    view: DigitView


@dataclass(frozen=True)
class MaskTerm:
    """One mask applied to the scores: ``add`` (``node`` added), ``keep`` (``where(node,
    scores, fill)``) or ``drop`` (``where(node, fill, scores)``)."""

    kind: str
    node: Node
    fill: float = 0.0


@dataclass(frozen=True)
class AttentionMatch:
    """A decomposed attention ending in a batched product (see the module doc)."""

    q: Operand
    k: Operand
    v: Operand
    masks: tuple[MaskTerm, ...]  # from the product outwards
    scale: float
    nan_guard: bool  # NaN probabilities (rows of only minus infinity) are made 0
    scores: tuple  # the shape the masks broadcast to (the softmax's)
    heads: tuple  # (B, Hq, Hkv)
    dtype: str


def _call(node: Node, op: str) -> bool:
    return isinstance(node, Call) and node.op == op


def scalar(node: Node) -> float | None:
    """The value of a one-element constant."""
    if isinstance(node, Constant) and node.value.size == 1:
        return float(np.asarray(node.value, np.float64).reshape(()))
    return None


def _exact_factor(value: float, dtype: str) -> bool:
    """Whether a factor may move between an operand and the product: in 16 bits only a
    power of two (scaling without rounding), as ``canonicalize_products`` moves them."""
    if not dt.is_half(dtype):
        return math.isfinite(value) and value != 0.0
    return value != 0.0 and math.isfinite(value) and math.log2(abs(value)).is_integer()


def scalar_factor(node: Node) -> tuple[Node, float] | None:
    """``(x, f)`` where ``node`` is ``x * c``, ``c * x`` or ``x / c`` with a one-element
    constant ``c`` of ``x``'s dtype that does not broadcast ``x`` (``f`` = c or 1 / c)."""
    if not isinstance(node, Call) or node.op not in ("multiply", "divide"):
        return None
    sides = (0, 1) if node.op == "multiply" else (0,)
    for k in sides:
        x, c = node.args[k], node.args[1 - k]
        value = scalar(c)
        if value is None or x.shape != node.shape or c.dtype != x.dtype:
            continue
        if node.op == "divide":
            if value == 0.0:
                return None
            value = 1.0 / value
        if _exact_factor(value, x.dtype):
            return x, value
    return None


def trace(node: Node, scaled: bool) -> tuple[Node, DigitView, float] | None:
    """``(source, view, factor)``: ``node`` is ``factor`` times ``view`` of ``source``,
    through layout calls (and, where ``scaled``, scalar factors, which commute with them)."""
    chain: list[Call] = []
    factor = 1.0
    while True:
        if is_digit_call(node):
            chain.append(node)
            node = node.args[0]
            continue
        found = scalar_factor(node) if scaled else None
        if found is None:
            break
        node, f = found
        factor *= f
    view: DigitView | None = DigitView.contiguous(node.shape)
    for call in reversed(chain):
        view = apply_call(view, call)
        if view is None:
            return None
    return node, view, factor


def _softmax_of(node: Node) -> bool:
    """Whether ``node`` is a softmax's result (through its NaN guard and casts)."""
    while True:
        if _call(node, "where") and _call(node.args[0], "isnan"):
            node = node.args[2]
        elif _call(node, "cast"):
            node = node.args[0]
        else:
            return _call(node, "nn.softmax")


def _probabilities(node: Node, dtype: str) -> tuple[Node, bool] | None:
    """``(x, nan_guard)`` where ``node`` is the softmax of ``x`` on its last axis, in
    ``dtype`` (a float32 softmax of a 16-bit ``x`` cast back to it counts), possibly with
    its NaN guard ``where(isnan(p), 0, p)``."""
    guard = False
    down = False
    while True:
        if _call(node, "where") and _call(node.args[0], "isnan") \
                and node.args[0].args[0] is node.args[2] and scalar(node.args[1]) == 0.0 \
                and node.args[2].shape == node.shape:
            guard = True
            node = node.args[2]
        elif _call(node, "cast") and not down and node.args[0].dtype == "float32" \
                and node.dtype == dtype:
            down = True
            node = node.args[0]
        else:
            break
    if not _call(node, "nn.softmax"):
        if isinstance(node, Call) and any(_softmax_of(a) for a in node.args):
            raise Refusal(f"the probabilities are changed after the softmax ({node.op})")
        return None
    if node.attrs.get("out_dtype") or node.attrs.get("sum_dtype") or \
            node.dtype != ("float32" if down else dtype):
        raise Refusal(f"the softmax computes in {node.dtype} (out_dtype or sum_dtype set, "
                      f"or not the products' {dtype})")
    x = node.args[0]
    if node.attrs["axis"] % x.ndim != x.ndim - 1:
        raise Refusal(f"the softmax is on axis {node.attrs['axis']} of {list(x.shape)}, not "
                      "the keys (the last axis)")
    guard = guard or bool(node.attrs["nan_to_zero"])
    if down:
        if not (_call(x, "cast") and x.args[0].dtype == dtype):
            raise Refusal("the float32 softmax's input is no cast from the products' dtype")
        x = x.args[0]
    return x, guard


def _mask_term(node: Node) -> list[tuple[Node, MaskTerm]]:
    """The candidates ``(scores, term)`` for one mask applied at ``node``'s shape."""
    out = []
    if _call(node, "add"):
        for k in (0, 1):
            s, m = node.args[k], node.args[1 - k]
            if s.shape == node.shape and s.dtype == node.dtype and m.ndim <= node.ndim:
                out.append((s, MaskTerm("add", m)))
    elif _call(node, "where") and node.args[0].dtype == "bool":
        cond, a, b = node.args
        if a.shape == node.shape and scalar(b) is not None:
            out.append((a, MaskTerm("keep", cond, scalar(b))))
        if b.shape == node.shape and scalar(a) is not None:
            out.append((b, MaskTerm("drop", cond, scalar(a))))
    return [c for c in out if c[1].node.ndim <= node.ndim]


def _scores(x: Node, masks: tuple) -> tuple[Call, float, tuple]:
    """``(product, factor, masks)``: ``x`` is the masks (outermost last) applied to
    ``factor`` times a row-major view of the batched product's result."""
    refusals = []
    for s, term in _mask_term(x):
        try:
            return _scores(s, (term,) + masks)
        except Refusal as e:
            refusals.append(e)
    found = trace(x, scaled=True)
    if found is None:
        if refusals:
            raise refusals[0]
        raise Refusal(f"the scores come from {_what(x)}, which is no scalar scale, mask "
                      "(an add or a where with a scalar fill) or view of a batched product")
    prod, view, factor = found
    if not _call(prod, "nn.batch_matmul"):
        if refusals:
            raise refusals[0]
        raise Refusal(f"the scores come from {_what(prod)}, which is no scalar scale, mask "
                      "(an add or a where with a scalar fill) or batched product")
    if prod.attrs.get("out_dtype") or prod.attrs.get("precision"):
        raise Refusal("the scores' product has its own out_dtype or precision")
    if not is_identity(view, x.shape):
        raise Refusal("the scores reach the softmax through a chain that moves elements "
                      "(a transpose of the scores)")
    return prod, factor, masks


def _what(node: Node) -> str:
    """A short description of ``node`` for a refusal's message."""
    if isinstance(node, Call):
        return f"{node.op} {list(node.shape)}"
    return f"{type(node).__name__.lower()} {list(node.shape)}"


def _split_heads(view: DigitView, b: int, h: int) -> tuple[DigitView, int] | str:
    """``view`` ``[B * H, S, E]`` as ``([B, Hkv, S, E], H / Hkv)``: key heads repeated
    ``G`` times (a least significant head digit of stride 0) are read once; a batch
    repeated (stride 0, a product's broadcast batch dimension) stays in the view. A
    message saying why where the view is no such split."""
    _, s, e = view.shape
    v4 = view.reshape((b, h, s, e))
    if v4 is None:
        return f"its batch {view.shape[0]} is no merge of {b} batches and {h} heads"
    heads = v4.canonical()[1]
    group = heads[-1][0] if heads and heads[-1][1] == 0 else 1
    if group > 1:
        v5 = v4.reshape((b, h // group, group, s, e))
        if v5 is None or any(st != 0 for _, st in v5.canonical()[2]):
            return "its heads repeat in no grouped-query pattern"
        v4 = DigitView(v5.dims[:2] + v5.dims[3:])
    if any(st == 0 for dim in v4.canonical()[1:] for _, st in dim):
        return "it repeats its positions or head elements (a broadcast no attention reads)"
    return v4, group


def _operand(node: Node, transposed: bool, b: int, h: int, scaled: bool, name: str
             ) -> tuple[Operand, float, int]:
    found = trace(node, scaled)
    if found is None:
        raise Refusal(f"{name} reaches the product through a chain that is no head split")
    source, view, factor = found
    if transposed:
        view = view.transpose((0, 2, 1))
    split = _split_heads(view, b, h)
    if isinstance(split, str):
        raise Refusal(f"{name} is read through a chain that is no [B, H, S, E] head split: "
                      f"{split}")
    return Operand(source, split[0]), factor, split[1]


def _heads(x_shape: tuple, q: Node) -> tuple[int, int]:
    """``(B, H)`` of the product's batch ``B * H``: the scores' leading axes where they are
    4-D, else the two digits of the query's batch (one head per batch where it has one)."""
    bh = q.shape[0]
    if len(x_shape) == 4:
        if x_shape[0] * x_shape[1] != bh:
            raise Refusal(f"the scores {list(x_shape)} split the product's batch {bh} into "
                          "no batches and heads")
        return x_shape[0], x_shape[1]
    if len(x_shape) != 3:
        raise Refusal(f"the scores {list(x_shape)} are neither [B * H, L, S] nor [B, H, L, S]")
    found = trace(q, scaled=True)
    if found is None:
        raise Refusal("q reaches the product through a chain that is no head split")
    digits = found[1].canonical()[0]
    if len(digits) == 2:
        return digits[0][0], digits[1][0]
    return 1, bh


def match_attention(call: Call) -> AttentionMatch | None:
    """The attention ``call`` (a batched product) ends; None where its first argument is
    no softmax's result; :class:`Refusal` naming the reason where it is one but the
    attention is none this module proves (see the module doc)."""
    if not _call(call, "nn.batch_matmul") or call.attrs["transpose_a"]:
        return None
    p3, v3 = call.args
    dtype = call.dtype
    found = trace(p3, scaled=False)
    if found is None:
        return None
    p_src, p_view, _ = found
    probs = _probabilities(p_src, dtype)
    if probs is None:
        return None
    if call.attrs.get("out_dtype") or call.attrs.get("precision"):
        raise Refusal("the product with v has its own out_dtype or precision")
    if not is_identity(p_view, p3.shape):
        raise Refusal("the probabilities reach the product with v through a chain that moves "
                      "elements (a transpose)")
    x, guard = probs
    bh, lq, s = p3.shape
    if x.shape[-1] != s:
        raise Refusal(f"the softmax's rows ({x.shape[-1]}) are not the {s} keys of the product")
    prod, factor, masks = _scores(x, ())
    if prod.shape != p3.shape or prod.dtype != dtype:
        raise Refusal(f"the scores' product {list(prod.shape)} {prod.dtype} is not the "
                      f"probabilities' {list(p3.shape)} {dtype}")
    q3, k3 = prod.args
    b, h = _heads(x.shape, q3)
    if len(x.shape) == 4 and tuple(x.shape[2:]) != (lq, s):
        raise Refusal(f"the scores {list(x.shape)} are not [B, H, {lq}, {s}]")
    q = _operand(q3, prod.attrs["transpose_a"], b, h, True, "q")
    k = _operand(k3, not prod.attrs["transpose_b"], b, h, True, "k")
    v = _operand(v3, call.attrs["transpose_b"], b, h, False, "v")
    if q[2] != 1:
        raise Refusal("q repeats its heads")
    if k[2] != v[2]:
        raise Refusal(f"k repeats its heads {k[2]} times but v {v[2]} times")
    if not (q[0].view.shape[2] == lq and k[0].view.shape[2] == s == v[0].view.shape[2]):
        raise Refusal("q, k and v's positions are not the scores' rows and columns")
    scale = factor * q[1] * k[1]
    return AttentionMatch(q[0], k[0], v[0], masks, scale, guard, tuple(x.shape),
                          (b, h, h // k[2]), dtype)
