"""The ONNX converter of ``RotaryEmbedding`` (opset 23): rotary position embeddings as a
gather of the cos/sin caches by position, slices of the rotated part (halves, or even and
odd elements when interleaved), products and a concatenation; every step is an injective or
element-wise graph operator, so the whole rotation fuses into one kernel."""

from __future__ import annotations

from .. import opdefs as G
from ..frontend_onnx import OnnxImportError, register_converter
from ..ir import Node
from ..opdefs import index as GI
from ..opdefs import transform as GT


def _last(x: Node, start: int, stop: int, step: int = 1) -> Node:
    """``x[..., start:stop:step]``."""
    if start == 0 and stop == x.shape[-1] and step == 1:
        return x
    return GT.strided_slice(x, [start], [stop], [step], [x.ndim - 1])


def rotary_embedding(x: Node, cos: Node, sin: Node, positions: Node | None, num_heads: int,
                     rotary_dim: int, interleaved: bool) -> Node:
    """ONNX ``RotaryEmbedding`` of ``x``: ``[B, H, S, D]``, or ``[B, S, H * D]`` with
    ``num_heads``; the caches are ``[max_position, rotary_dim / 2]`` read at ``positions``
    ``[B, S]``, or ``[B, S, rotary_dim / 2]`` when there are no positions."""
    if x.ndim == 4:
        b, _, s, d = x.shape
        xt = G.transpose(x, (0, 2, 1, 3))
    elif x.ndim == 3:
        b, s, hidden = x.shape
        if num_heads < 1 or hidden % num_heads:
            raise OnnxImportError(f"a 3-D input [B, S, hidden] needs num_heads dividing "
                                  f"hidden {hidden}, got num_heads={num_heads}")
        d = hidden // num_heads
        xt = G.reshape(x, (b, s, num_heads, d))
    else:
        raise OnnxImportError(f"input must be 3-D or 4-D, got {list(x.shape)}")
    rd = rotary_dim or d
    if rd % 2 or rd > d:
        raise OnnxImportError(f"rotary_embedding_dim {rd} must be even and at most the head "
                              f"size {d}")
    half = rd // 2
    if positions is not None:
        cos, sin = GI.take(cos, positions, 0), GI.take(sin, positions, 0)
    for name, cache in (("cos", cos), ("sin", sin)):
        if cache.shape != (b, s, half):
            raise OnnxImportError(f"the {name} cache read at the positions has shape "
                                  f"{list(cache.shape)}, expected {[b, s, half]}")
    cos, sin = G.reshape(cos, (b, s, 1, half)), G.reshape(sin, (b, s, 1, half))
    rotated = _last(xt, 0, rd)
    if interleaved:
        x1, x2 = _last(rotated, 0, rd, 2), _last(rotated, 1, rd, 2)
    else:
        x1, x2 = _last(rotated, 0, half), _last(rotated, half, rd)
    real = G.subtract(G.multiply(cos, x1), G.multiply(sin, x2))
    imag = G.add(G.multiply(sin, x1), G.multiply(cos, x2))
    if interleaved:
        pairs = [G.reshape(v, v.shape + (1,)) for v in (real, imag)]
        rotated = G.reshape(G.concatenate(pairs, 4), rotated.shape)
    else:
        rotated = G.concatenate([real, imag], 3)
    if rd < d:
        rotated = G.concatenate([rotated, _last(xt, rd, d)], 3)
    if x.ndim == 3:
        return G.reshape(rotated, x.shape)
    return G.transpose(rotated, (0, 2, 1, 3))


@register_converter("RotaryEmbedding")
def _rotary_embedding(im, node, a):
    positions = im.tensor(node.input[3]) if len(node.input) > 3 and node.input[3] else None
    return rotary_embedding(im.tensor(node.input[0]), im.tensor(node.input[1]),
                            im.tensor(node.input[2]), positions, int(a.get("num_heads", 0)),
                            int(a.get("rotary_embedding_dim", 0)),
                            bool(a.get("interleaved", 0)))
