"""``fold_attention_layout``: the head transposes around a fused attention folded into its
addressing.

A transformer's projections write ``[B, L, H * E]``; the heads are split by a reshape to
``[B, L, H, E]`` (a view) and a transpose to ``[B, H, L, E]`` (a kernel), and merged back
after the attention by the inverse transpose and a reshape. The fused attention kernel
reads and writes ``[B, L, H, E]`` as well (``layout="bshd"``), so::

    attention(transpose(q', P), transpose(k', P), transpose(v', P))   P = (0, 2, 1, 3)
        -> transpose(attention(q', k', v', layout="bshd"), P)

and a transpose by ``P`` of that result is the ``bshd`` attention itself (the two
transposes cancel). Only an ``nn.attention`` kept whole for the fused kernel is rewritten
(the ones ``decompose_attention`` left), and only where all of q, k and v are such
transposes. ``fuse_ops`` applies it before partitioning, so the head split and merge cost
no kernels of their own.

Then the slices of a combined Q/K/V projection (``combine_parallel_dense``: one product
writes ``[B * L, 3 H E]`` and each operand is ``reshape(strided_slice(y, [o], [o + H E],
axes=[1]), (B, L, H, E))``, a copy kernel of its own) fold into the kernel's addressing
too: a ``bshd`` attention's operand that is the reshape of a slice of the last dimension
alone (step 1) of a tensor of ``B L`` rows becomes that tensor, read through the view
``(B, L, H, E, o)`` (the attribute ``views``; the kernel's
:class:`~ptxforge.ops.schedules.attention.OperandView`: rows ``3 H E`` apart, element ``o``
first). The slices then cost no kernel: q, k and v are read from the product's output.
Offsets and row lengths that are not multiples of 8 elements are left as they are (the
kernel copies 16 bytes at a time from aligned addresses). The graph pass config key
:data:`VIEWS_OPTION` False keeps the slices (``GraphPassContext(config={...: False})``).
"""

from __future__ import annotations

from ..ir import Call, Graph, Node, rewrite
from ..opdefs.attention import OP, attention

VIEWS_OPTION = "fused_attention.views"
"""Graph pass config key: False keeps the slices of a combined projection as copy kernels
before the fused attention (default True: they fold into its addressing)."""

HEADS = (0, 2, 1, 3)
"""The permutation between ``[B, H, L, E]`` and ``[B, L, H, E]`` (its own inverse)."""


def _head_transpose(n: Node) -> Node | None:
    """``x`` where ``n`` is ``transpose(x, (0, 2, 1, 3))``."""
    if isinstance(n, Call) and n.op == "transpose" and tuple(n.attrs.get("axes") or ()) == HEADS:
        return n.args[0]
    return None


def _fold(call: Call, args: tuple) -> Node | None:
    if call.op == OP and call.attrs.get("layout", "bhsd") == "bhsd":
        inner = [_head_transpose(a) for a in args[:3]]
        if any(x is None for x in inner):
            return None
        folded = attention(*inner, args[3] if len(args) == 4 else None,
                           call.attrs["scale"], call.attrs["is_causal"], layout="bshd")
        from ..opdefs.transform import transpose

        return transpose(folded, HEADS)
    if call.op == "transpose" and tuple(call.attrs.get("axes") or ()) == HEADS:
        # the head merge after a folded attention: the two transposes cancel
        x = _head_transpose(args[0])
        if x is not None and isinstance(x, Call) and x.op == OP and \
                x.attrs.get("layout") == "bshd":
            return x
    return None


def _slice_view(n: Node) -> tuple | None:
    """``(y, (B, L, H, E, offset))`` where ``n`` (``[B, L, H, E]``) is
    ``reshape(strided_slice(y, ...))`` taking ``H E`` consecutive elements from ``offset``
    of each of ``y``'s ``B L`` rows (its last dimension sliced alone, step 1), with the
    row length and the offset multiples of the kernel's 16-byte copies."""
    from ...ops.schedules.attention.workload import COPY_ALIGN
    from ...ops.transform import slice_ranges

    if not (isinstance(n, Call) and n.op == "reshape" and len(n.shape) == 4):
        return None
    sl = n.args[0]
    if not (isinstance(sl, Call) and sl.op == "strided_slice"):
        return None
    y = sl.args[0]
    if y.ndim < 2:
        return None
    a = sl.attrs
    ranges = slice_ranges("strided_slice", y.shape, a["begin"], a["end"], a["strides"],
                          a["axes"])
    b, seq, heads, dim = n.shape
    *lead, (offset, step, count) = ranges
    whole = all(r == (0, 1, d) for r, d in zip(lead, y.shape[:-1]))
    rows = 1
    for d in y.shape[:-1]:
        rows *= d
    if not whole or step != 1 or count != heads * dim or rows != b * seq:
        return None
    if offset % COPY_ALIGN or y.shape[-1] % COPY_ALIGN:
        return None
    return y, (b, seq, heads, dim, offset)


def _fold_views(call: Call, args: tuple) -> Node | None:
    if call.op != OP or call.attrs.get("layout") != "bshd" or call.attrs.get("views"):
        return None
    found = [_slice_view(a) for a in args[:3]]
    if not any(found):
        return None
    qkv = [f[0] if f else a for f, a in zip(found, args[:3])]
    views = tuple(f[1] if f else () for f in found)
    return attention(*qkv, args[3] if len(args) == 4 else None, call.attrs["scale"],
                     call.attrs["is_causal"], layout="bshd", views=views)


def fold_attention_layout(graph: Graph) -> Graph:
    """``graph`` with the head transposes around each whole ``nn.attention`` and the
    slices of a combined projection before it folded into it (see the module's
    docstring); the graph itself where there is none."""
    from .base import GraphPassContext

    if not any(isinstance(n, Call) and n.op == OP for n in graph.nodes()):
        return graph
    graph = rewrite(graph, _fold)
    if GraphPassContext.current().config.get(VIEWS_OPTION, True) is False:
        return graph
    return rewrite(graph, _fold_views)
