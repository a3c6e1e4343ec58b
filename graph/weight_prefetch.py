"""Which weights a fused function's kernels may prefetch into L2.

On sm_90a and later a kernel prefetches the network's constant arguments (its weights)
into L2 before it waits for the kernel before it (``compile_module(...,
constant_params=)``): each block asks for its share of every such buffer, so the whole
buffer is fetched. That is right for a product, which reads all of its weights, and wrong
for a table that a gather reads a few rows of: an embedding lookup of 1,024 tokens from
GPT-2's 50,257 x 768 float32 table reads 3 MB of it, and prefetching the table moved all
154 MB (the lookup took 22.7 us on an H200 where its own bytes need about 2).

:func:`gathered_params` names the parameters of a fused function that are read only
through data-dependent indices (the data of ``take``, ``gather_elements`` or
``gather_nd``, directly or through element-wise operators); :func:`prefetched_params`
removes them from the candidates.
"""

from __future__ import annotations

from collections.abc import Iterable

from .ir import Call, Graph, Var
from .op import OpPattern, pattern_of

GATHER_OPS = ("take", "gather_elements", "gather_nd")
"""Operators that read their first argument at indices computed from another tensor."""


def _source_param(node, params: dict[int, int]) -> int | None:
    """The parameter position ``node`` reads, through one-argument element-wise calls
    (a cast of the table), or None."""
    while isinstance(node, Call) and isinstance(node.op, str) and len(node.args) == 1 \
            and pattern_of(node) <= OpPattern.ELEMWISE:
        node = node.args[0]
    return params.get(id(node)) if isinstance(node, Var) else None


def gathered_params(func: Graph) -> set[int]:
    """Positions of ``func``'s parameters that some gather reads as its table (see the
    module's docstring)."""
    params = {id(p): j for j, p in enumerate(func.params)}
    out: set[int] = set()
    for node in func.nodes():
        if isinstance(node, Call) and isinstance(node.op, str) and node.op in GATHER_OPS:
            j = _source_param(node.args[0], params)
            if j is not None:
                out.add(j)
    return out


def prefetched_params(func: Graph, constant_args: Iterable[int]) -> tuple[int, ...]:
    """The positions of ``constant_args`` (the arguments that are weights at every call of
    ``func``) whose buffers the kernels read whole, so that prefetching them into L2 fetches
    only bytes the kernel reads: the gathered tables left out."""
    skip = gathered_params(func)
    return tuple(sorted(j for j in constant_args if j not in skip))
