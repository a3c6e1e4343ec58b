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
"""

from __future__ import annotations

from ..ir import Call, Graph, Node, rewrite
from ..opdefs.attention import OP, attention

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


def fold_attention_layout(graph: Graph) -> Graph:
    """``graph`` with the head transposes around each whole ``nn.attention`` folded into it
    (see the module's docstring); the graph itself where there is none."""
    if not any(isinstance(n, Call) and n.op == OP for n in graph.nodes()):
        return graph
    return rewrite(graph, _fold)
