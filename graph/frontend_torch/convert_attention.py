"""Converters of scaled dot-product attention: every spelling PyTorch leaves in a graph
becomes one ``nn.attention`` (q, k, v [B, H, L, E], an optional bool or additive mask; attrs
``scale`` and ``is_causal``; grouped-query heads where k and v have fewer heads).

- ``aten.scaled_dot_product_attention``: what ``torch.export`` keeps with our
  decomposition table;
- ``ptxforge.scaled_dot_product_attention``: what the ``torch.compile`` backend rewrites
  Dynamo's SDPA calls into (:mod:`.sdpa_op`);
- the fused kernels' overloads (``_scaled_dot_product_flash_attention``,
  ``_efficient_attention``, ``_cudnn_attention``, ``_fused_attention_overrideable`` and the
  CPU's ``_flash_attention_for_cpu``), which a graph traced on a device holds after SDPA
  was dispatched. Only their attention output is computed: the log-sum-exp, the sequence
  offsets and the random-number state serve training, and a graph reading them is refused.
"""

from __future__ import annotations

from .convert_nn import Unavailable
from .helpers import numel, operand, reshape
from .registry import converter


def _as4(cx, t):
    """``t`` [..., H, L, E] as 4-D [B, H, L, E] (leading dimensions merged, or a batch of 1)."""
    if t.ndim == 4:
        return t
    if t.ndim > 4:
        return reshape(cx, t, (numel(t.shape[:-3]),) + tuple(t.shape[-3:]))
    return reshape(cx, t, (1,) * (4 - t.ndim) + tuple(t.shape))


def attention(cx, q, k, v, mask, *, scale, is_causal, dropout_p, gqa: bool):
    """``nn.attention`` of the arguments of one of PyTorch's attention overloads, shaped as
    ``q`` with ``v``'s last dimension. ``gqa``: key and value heads fewer than the query's
    are grouped-query attention (else an error asking for ``enable_gqa``)."""
    if dropout_p:
        cx.fail(f"dropout_p={dropout_p} is random; pass 0 (eval mode) for inference")
    lead = q.shape[:-2]
    q4, k4, v4 = _as4(cx, q), _as4(cx, k), _as4(cx, v)
    args = [q4, k4, v4]
    if mask is not None:
        if mask.ndim > 4:
            mask = reshape(cx, mask, (numel(mask.shape[:-3]),) + tuple(mask.shape[-3:]))
        if mask.dtype != "bool" and mask.dtype != q.dtype:
            mask = operand(cx, mask, q.dtype)
        args.append(mask)
    if q4.shape[1] != k4.shape[1] and not gqa:
        cx.fail(f"q has {q4.shape[1]} heads and k {k4.shape[1]}: pass enable_gqa=True for "
                "grouped-query attention")
    out = cx.call("nn.attention", args, {"scale": scale, "is_causal": bool(is_causal)})
    return reshape(cx, out, tuple(lead) + tuple(out.shape[-2:]))


@converter("aten.scaled_dot_product_attention.default",
           "ptxforge.scaled_dot_product_attention.default", needs=("nn.attention", "reshape"),
           maps_to="nn.attention", note="dropout_p=0 only")
def _sdpa(cx, a):
    return attention(cx, a.query, a.key, a.value, a.attn_mask, scale=a.scale,
                     is_causal=a.is_causal, dropout_p=a.dropout_p, gqa=bool(a.enable_gqa))


def _with_unused(cx, out):
    """``out`` followed by the overload's other results, each unavailable by its name."""
    returns = cx.node.target._schema.returns
    what = cx.overload.split(".")[1]
    return (out,) + tuple(Unavailable(f"the {r.name or f'result {k}'} of {what}, which only "
                                      "training uses")
                          for k, r in enumerate(returns) if k)


_FUSED = dict(needs=("nn.attention", "reshape"), maps_to="nn.attention (the output only)",
              note="dropout_p=0; only the attention output is read", computes=(0,))


@converter("aten._scaled_dot_product_flash_attention.default", **_FUSED)
def _flash(cx, a):
    # flash attention takes no mask; grouped-query heads reach the kernel as they are
    out = attention(cx, a.query, a.key, a.value, None, scale=a.scale, is_causal=a.is_causal,
                    dropout_p=a.dropout_p, gqa=True)
    return _with_unused(cx, out)


@converter("aten._scaled_dot_product_flash_attention_for_cpu.default", **_FUSED)
def _flash_cpu(cx, a):
    out = attention(cx, a.query, a.key, a.value, a.attn_mask, scale=a.scale,
                    is_causal=a.is_causal, dropout_p=a.dropout_p, gqa=True)
    return _with_unused(cx, out)


@converter("aten._scaled_dot_product_efficient_attention.default",
           "aten._scaled_dot_product_cudnn_attention.default",
           "aten._scaled_dot_product_fused_attention_overrideable.default", **_FUSED)
def _with_bias(cx, a):
    # attn_bias: the additive mask (SDPA turns a bool mask into 0 / -inf before these)
    out = attention(cx, a.query, a.key, a.value, a.attn_bias, scale=a.scale,
                    is_causal=a.is_causal, dropout_p=a.dropout_p, gqa=True)
    return _with_unused(cx, out)
