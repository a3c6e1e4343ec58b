"""``canonicalize_norms``: layer norms and RMS norms rebuilt from their decompositions.

ONNX exports before opset 17 (which has ``LayerNormalization``) and decomposed PyTorch
programs spell a layer norm out::

    m = mean(x, -1, keepdims); d = x - m
    v = mean(d ** 2, -1, keepdims)          (or d * d)
    y = d / sqrt(v + eps)                   (or d * rsqrt(v + eps))
    y = y * gamma + beta                    (both optional)

and an RMS norm (Llama's) as ``x * rsqrt(mean(x ** 2, -1, keepdims) + eps) * w``, often
with casts to float32 and back around it. As written these are five to nine kernels, two of
them reductions; ``nn.layer_norm`` and ``nn.rms_norm`` are one kernel each, with float32
statistics whatever the data's dtype. The gamma multiply and beta add join the norm when
they are constants along the last axis and the norm is their only reader.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import opdefs as G
from ..ir import Call, Constant, Graph, Node, consumers, rewrite
from ..opdefs.elemwise import cast_array
from .base import GraphPass, register_graph_pass


def _call(node: Node, op: str) -> bool:
    return isinstance(node, Call) and node.op == op


def _scalar(node: Node) -> float | None:
    if isinstance(node, Constant) and node.value.size == 1:
        return float(node.value.reshape(()))
    return None


def _last_mean(node: Node) -> Node | None:
    """``x`` when ``node`` is ``mean(x, last axis, keepdims=True)``."""
    if not _call(node, "mean") or not node.attrs["keepdims"]:
        return None
    x = node.args[0]
    axis = node.attrs["axis"]
    if axis is None or len(axis) != 1 or axis[0] % max(x.ndim, 1) != x.ndim - 1:
        return None
    return x


def _square_of(node: Node) -> Node | None:
    """``d`` when ``node`` is ``d ** 2`` or ``d * d``."""
    if _call(node, "power") and _scalar(node.args[1]) == 2.0:
        return node.args[0]
    if _call(node, "multiply") and node.args[0] is node.args[1]:
        return node.args[0]
    return None


def _inv_std(node: Node, op: str) -> tuple[Node, float] | None:
    """``(v, eps)`` when ``node`` is ``sqrt(v + eps)`` (``op == "divide"``) or
    ``rsqrt(v + eps)`` (``op == "multiply"``)."""
    root = "sqrt" if op == "divide" else "rsqrt"
    if not _call(node, root) or not _call(node.args[0], "add"):
        return None
    v, c = node.args[0].args
    eps = _scalar(c)
    if eps is None:
        v, eps = c, _scalar(v)
    return None if eps is None else (v, eps)


def _normalized(call: Call, args: tuple) -> Node | None:
    """``nn.layer_norm`` (unit gamma, zero beta) or ``nn.rms_norm`` (unit weight) for the
    decomposed normalization ending in ``call``."""
    if call.op not in ("divide", "multiply"):
        return None
    for k in ((0, 1) if call.op == "multiply" else (0,)):
        num, den = args[k], args[1 - k]
        found = _inv_std(den, call.op)
        if found is None:
            continue
        var, eps = found
        sq = _square_of(_last_mean(var)) if _last_mean(var) is not None else None
        if sq is None or sq.shape != num.shape:
            continue
        n = num.shape[-1]
        ones = Constant(cast_array(np.ones(n), num.dtype), "ln_gamma", dtype=num.dtype)
        if sq is num and _call(num, "subtract"):  # layer norm: d = x - mean(x)
            x, m = num.args
            if _last_mean(m) is x:
                zeros = Constant(cast_array(np.zeros(n), x.dtype), "ln_beta", dtype=x.dtype)
                return G.layer_norm(x, ones, zeros, epsilon=eps)
        if sq is num and num.dtype in ("float32", "float16", "bfloat16"):  # RMS norm
            return G.rms_norm(num, ones, epsilon=eps)
    return None


def _row_constant(node: Node, n: int, dtype: str) -> np.ndarray | None:
    if not isinstance(node, Constant) or node.dtype != dtype or node.value.ndim == 0:
        return None
    v = node.value
    if v.shape[-1] != n or any(d != 1 for d in v.shape[:-1]):
        return None
    return v.reshape(n)


def _affine(call: Call, args: tuple, uses: dict) -> Node | None:
    """A gamma multiply or beta add of constants along the last axis folded into the norm
    it is the only reader of."""
    if call.op not in ("multiply", "add"):
        return None
    for k in (0, 1):
        norm, c = args[k], args[1 - k]
        if not (_call(norm, "nn.layer_norm") or _call(norm, "nn.rms_norm")):
            continue
        if norm.dtype not in ("float32", "float16", "float64"):  # host arithmetic below
            continue
        if len(uses.get(id(call.args[k]), ())) != 1 or norm.shape != call.shape:
            continue
        vec = _row_constant(c, norm.shape[-1], norm.dtype)
        if vec is None:
            continue
        if norm.op == "nn.rms_norm":
            if call.op != "multiply":
                continue
            w = Constant(norm.args[1].value * vec, c.name or "rms_weight", dtype=norm.dtype)
            return Call("nn.rms_norm", (norm.args[0], w), norm.attrs)
        gamma, beta = norm.args[1].value, norm.args[2].value
        if call.op == "multiply":
            gamma, beta = gamma * vec, beta * vec
        else:
            beta = beta + vec
        return Call("nn.layer_norm", (norm.args[0],
                                      Constant(gamma, "ln_gamma", dtype=norm.dtype),
                                      Constant(beta, "ln_beta", dtype=norm.dtype)), norm.attrs)
    return None


@register_graph_pass
@dataclass(frozen=True)
class CanonicalizeNorms(GraphPass):
    """Rebuild layer norms and RMS norms from their decompositions (see the module doc)."""

    name = "canonicalize_norms"

    def apply(self, graph: Graph, ctx) -> Graph:
        graph = rewrite(graph, _normalized)
        uses = consumers(graph.nodes())
        return rewrite(graph, lambda call, args: _affine(call, args, uses))
