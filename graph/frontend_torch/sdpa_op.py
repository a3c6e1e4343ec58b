"""``scaled_dot_product_attention`` kept whole through ``torch.compile``.

AOT autograd traces a Dynamo graph by dispatching each call, and
``scaled_dot_product_attention`` is a composite operator: dispatching it picks a kernel for
the device (``_scaled_dot_product_flash_attention`` and its siblings on CUDA, the math
composition of products, a mask and a softmax on the CPU) before any decomposition table is
consulted, so the attention would reach the backend in pieces. :func:`keep_attention_whole`
rewrites the Dynamo graph's SDPA calls, before AOT autograd sees them, into the custom
operator ``ptxforge::scaled_dot_product_attention``, which dispatching leaves alone (its
shape comes from a fake implementation); its converter makes one ``nn.attention`` of it.
Where the graph stays with PyTorch the operator runs ``F.scaled_dot_product_attention``
itself; its gradient is written with plain operators, so training graphs work too.

Calls with a dropout probability that is not the constant 0 are left as they are (their
randomness belongs to PyTorch).
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F

OVERLOAD = "ptxforge.scaled_dot_product_attention.default"
"""The converter table's name of the custom operator."""


@torch.library.custom_op("ptxforge::scaled_dot_product_attention", mutates_args=())
def scaled_dot_product_attention(
        query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
        attn_mask: Optional[torch.Tensor], dropout_p: float, is_causal: bool,  # noqa: UP045
        scale: Optional[float], enable_gqa: bool) -> torch.Tensor:  # noqa: UP045
    """``F.scaled_dot_product_attention`` as one operator (every argument explicit)."""
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=attn_mask,
                                         dropout_p=dropout_p, is_causal=is_causal, scale=scale,
                                         enable_gqa=enable_gqa)
    # the fake implementation promises a compact result; PyTorch's fused kernels may return
    # a transposed layout, which the graph's views after the call would not expect
    return out.contiguous()


@scaled_dot_product_attention.register_fake
def _fake(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa):
    return query.new_empty((*query.shape[:-1], value.shape[-1]))


def _setup_context(ctx, inputs, output):
    query, key, value, attn_mask, _dropout, is_causal, scale, _gqa = inputs
    ctx.save_for_backward(query, key, value, attn_mask)
    ctx.is_causal, ctx.scale = is_causal, scale


def _backward(ctx, grad):
    """The gradients of softmax(q k^T * scale + mask) v (no dropout), written with plain
    operators so that AOT autograd traces them into the backward graph."""
    query, key, value, attn_mask = ctx.saved_tensors
    q, k, v, g = (t.float() for t in (query, key, value, grad))
    groups = q.shape[-3] // k.shape[-3]
    if groups > 1:  # grouped-query heads: each key head serves `groups` query heads
        k, v = k.repeat_interleave(groups, -3), v.repeat_interleave(groups, -3)
    scale = ctx.scale if ctx.scale is not None else q.shape[-1] ** -0.5
    scores = q @ k.transpose(-2, -1) * scale
    keep = None
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        keep = attn_mask
    elif attn_mask is not None:
        scores = scores + attn_mask.float()
    if ctx.is_causal:
        lq, lk = scores.shape[-2:]
        tril = torch.ones(lq, lk, dtype=torch.bool, device=q.device).tril()
        keep = tril if keep is None else keep & tril
    if keep is not None:
        scores = scores.masked_fill(~keep, float("-inf"))
    p = torch.softmax(scores, -1).nan_to_num(0.0)  # a row with every key masked: zeros
    dv = p.transpose(-2, -1) @ g
    dp = g @ v.transpose(-2, -1)
    ds = p * (dp - (dp * p).sum(-1, keepdim=True))
    dq = ds @ k * scale
    dk = ds.transpose(-2, -1) @ q * scale
    if groups > 1:
        dk = dk.unflatten(-3, (-1, groups)).sum(-3)
        dv = dv.unflatten(-3, (-1, groups)).sum(-3)
    dmask = None
    if attn_mask is not None and attn_mask.is_floating_point() and ctx.needs_input_grad[3]:
        dmask = _sum_to(ds, attn_mask.shape).to(attn_mask.dtype)
    return (dq.to(query.dtype), dk.to(key.dtype), dv.to(value.dtype), dmask,
            None, None, None, None)


def _sum_to(t: torch.Tensor, shape) -> torch.Tensor:
    """``t`` summed over the dimensions a tensor of ``shape`` was broadcast along."""
    lead = t.ndim - len(shape)
    if lead:
        t = t.sum(tuple(range(lead)))
    dims = tuple(d for d, n in enumerate(shape) if n == 1 and t.shape[d] != 1)
    return t.sum(dims, keepdim=True) if dims else t


scaled_dot_product_attention.register_autograd(_backward, setup_context=_setup_context)

_SDPA_TARGETS = (F.scaled_dot_product_attention, torch.ops.aten.scaled_dot_product_attention,
                 torch.ops.aten.scaled_dot_product_attention.default)
_SCHEMA = torch.ops.aten.scaled_dot_product_attention.default._schema


def keep_attention_whole(gm: torch.fx.GraphModule) -> int:
    """Rewrite, in place, the ``scaled_dot_product_attention`` calls of a Dynamo graph
    ``gm`` into ``ptxforge::scaled_dot_product_attention`` (all arguments explicit), so
    AOT autograd passes them on whole. Calls whose ``dropout_p`` is not the constant 0 stay.
    Returns the number of calls rewritten."""
    rewritten = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target not in _SDPA_TARGETS:
            continue
        args = _bound(node)
        if args is None or isinstance(args["dropout_p"], torch.fx.Node) \
                or args["dropout_p"] != 0:
            continue
        with gm.graph.inserting_before(node):
            new = gm.graph.call_function(
                torch.ops.ptxforge.scaled_dot_product_attention.default,
                tuple(args[name] for name in ("query", "key", "value", "attn_mask"))
                + (0.0, bool(args["is_causal"]), args["scale"], bool(args["enable_gqa"])))
        new.meta.update(node.meta)
        node.replace_all_uses_with(new)
        gm.graph.erase_node(node)
        rewritten += 1
    if rewritten:
        gm.recompile()
    return rewritten


def _bound(node) -> dict | None:
    """The call's arguments by the names of ATen's schema, defaults filled in; None when
    they do not bind (an argument this rewrite does not know, a non-constant flag)."""
    values: dict = {}
    positional = list(node.args)
    names = {a.name for a in _SCHEMA.arguments}
    if set(node.kwargs) - names or len(positional) > len(_SCHEMA.arguments):
        return None
    for k, arg in enumerate(_SCHEMA.arguments):
        if k < len(positional):
            values[arg.name] = positional[k]
        elif arg.name in node.kwargs:
            values[arg.name] = node.kwargs[arg.name]
        elif arg.has_default_value():
            values[arg.name] = arg.default_value
        else:
            return None
    for flag in ("is_causal", "enable_gqa"):
        if not isinstance(values[flag], bool):
            return None
    return values
