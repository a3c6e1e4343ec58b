"""ONNX converters of the class-index losses, ``NegativeLogLikelihoodLoss`` and
``SoftmaxCrossEntropyLoss``: a gather of each sample's class along axis 1, the per-class
weights gathered by the same targets, the ignored samples masked, and a reduction."""

from __future__ import annotations

import numpy as np

from .. import opdefs as G
from ..frontend_onnx import OnnxImportError, register_converter
from ..ir import Constant, Node
from ..opdefs import index as GI
from ..opdefs import logic as GL
from ..opdefs.reduce import reduce as reduction
from .common import text_attr as _text
from .math_ops import log_softmax

_REDUCTIONS = ("none", "sum", "mean")


def nll_loss(x: Node, target: Node, weight: Node | None, ignore_index: int | None,
             reduction_kind: str) -> Node:
    """ONNX's negative log likelihood of ``x`` ``[N, C, d...]`` (log-probabilities) at the
    classes ``target`` ``[N, d...]``: ``-x[n, target, d...]`` times the class weight, 0 for
    the samples whose target is ``ignore_index``; ``mean`` divides by the summed weights of
    the samples (their count without weights) when weights or an ignored index are given."""
    if reduction_kind not in _REDUCTIONS:
        raise OnnxImportError(f"reduction must be one of {list(_REDUCTIONS)}, got "
                              f"{reduction_kind!r}")
    if x.ndim < 2 or target.shape != (x.shape[0],) + x.shape[2:]:
        raise OnnxImportError(f"input {list(x.shape)} must be [N, C, d...] and target "
                              f"{list(target.shape)} [N, d...]")
    safe, keep = target, None
    if ignore_index is not None:
        ignored = GL.equal(target, Constant(np.array([ignore_index]), dtype=target.dtype))
        keep = GL.logical_not(ignored)
        # an ignored target may be any number: read class 0 there (its loss is masked)
        safe = GL.where(keep, target, Constant(np.zeros(1), dtype=target.dtype))
    column = G.reshape(safe, (x.shape[0], 1) + x.shape[2:])
    picked = G.reshape(GI.gather_elements(x, column, 1), target.shape)
    loss = G.negative(picked)
    w = None
    if weight is not None:
        w = GI.take(weight, safe)
    if keep is not None:
        mask = G.cast(keep, x.dtype)
        w = mask if w is None else G.multiply(w, mask)
    if w is not None:
        loss = G.multiply(loss, w)
    if reduction_kind == "none":
        return loss
    total = reduction("sum", loss, None, False)
    if reduction_kind == "sum":
        return total
    if w is None:
        return G.mean(loss, None, False)
    return G.divide(total, reduction("sum", w, None, False))


def _loss_args(im, node, a):
    x, target = im.tensor(node.input[0]), im.tensor(node.input[1])
    weight = (im.tensor(node.input[2]) if len(node.input) > 2 and node.input[2] else None)
    ignore = a.get("ignore_index")
    return x, target, weight, None if ignore is None else int(ignore), _text(
        a.get("reduction"), "mean")


@register_converter("NegativeLogLikelihoodLoss")
def _nll(im, node, a):
    return nll_loss(*_loss_args(im, node, a))


@register_converter("SoftmaxCrossEntropyLoss")
def _softmax_cross_entropy(im, node, a):
    x, target, weight, ignore, kind = _loss_args(im, node, a)
    log_prob = log_softmax(x, 1)
    loss = nll_loss(log_prob, target, weight, ignore, kind)
    return [loss, log_prob][:max(len(node.output), 1)]
