"""``combine_parallel_dense``: one matrix product for dense layers that share their input.

As Relay's ``CombineParallelDense`` (with ``to_batch=False``): when at least
``min_num_branches`` ``nn.dense`` calls read the same data with constant weights of the
same dtype and inner size (and the same ``out_dtype`` and ``precision``), they become one
``nn.dense`` over the weights concatenated along the output units, and each branch reads
its columns back with ``strided_slice``. When every branch is followed by a bias add of
a constant bias along the units (``nn.bias_add``, the only use of the product), the biases
are concatenated too and the one bias add joins the combined product's epilogue.

The attention block of a transformer is the case it is for: the query, key and value
projections of the same hidden states (three 128 x 768 x 768 products in BERT-base at
sequence length 128) become one 128 x 2304 x 768 product, one kernel instead of three,
with three times the blocks to spread over the SMs; in 16 bits the slices and the head
transposes that follow them join the attention's products (``fuse_ops``), so they add no
kernel. The weights are concatenated when the
network is built (constant folding), so nothing is copied at run time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import opdefs as G
from ..ir import Call, Constant, Graph, GraphError, Node, consumers, rewrite
from .base import GraphPass, register_graph_pass


def _bias_of(dense: Call, users: list[Call]) -> Call | None:
    """The bias add that is ``dense``'s only use, with a constant bias along the units."""
    if len(users) != 1:
        return None
    b = users[0]
    if (b.op != "nn.bias_add" or b.args[0] is not dense or not isinstance(b.args[1], Constant)
            or b.attrs["axis"] % 2 != 1):
        return None
    return b


@dataclass
class _Branches:
    """Dense calls with one data argument, and the node each one's result is read from."""

    denses: list
    biases: list
    tails: dict | None = None  # the slice replacing each branch, once combined


@register_graph_pass
@dataclass(frozen=True)
class CombineParallelDense(GraphPass):
    """Combine dense layers that read the same input (see the module doc).

    Parameters:
        min_num_branches: the fewest parallel dense calls worth combining (Relay's
            default, 3).
    """

    name = "combine_parallel_dense"
    min_num_branches: int = 3

    def __post_init__(self):
        if (isinstance(self.min_num_branches, bool) or not isinstance(self.min_num_branches, int)
                or self.min_num_branches < 2):
            raise GraphError("combine_parallel_dense: min_num_branches must be an int of at "
                             f"least 2, got {self.min_num_branches!r}")

    def apply(self, graph: Graph, ctx) -> Graph:
        nodes = graph.nodes()
        uses = consumers(nodes)
        outputs = {id(o) for o in graph.outputs}
        groups: dict[tuple, list[Call]] = {}
        for n in nodes:
            if not (isinstance(n, Call) and n.op == "nn.dense"
                    and isinstance(n.args[1], Constant)):
                continue
            data, w = n.args
            key = (id(data), w.dtype, w.shape[1], n.attrs["out_dtype"], n.attrs["precision"])
            groups.setdefault(key, []).append(n)
        branch_of: dict[int, _Branches] = {}
        for denses in groups.values():
            if len(denses) < self.min_num_branches:
                continue
            biases = [None if id(d) in outputs else _bias_of(d, uses[id(d)]) for d in denses]
            if not all(b is not None for b in biases) or len({b.dtype for b in biases}) != 1:
                biases = [None] * len(denses)
            br = _Branches(denses, biases)
            for d, b in zip(denses, biases):
                branch_of[id(b if b is not None else d)] = br

        if not branch_of:
            return graph

        def replace(call: Call, args: tuple) -> Node | None:
            br = branch_of.get(id(call))
            if br is None:
                return None
            if br.tails is None:
                self._combine(br, call, args)
            return br.tails[id(call)]

        return rewrite(graph, replace)

    @staticmethod
    def _combine(br: _Branches, first: Call, args: tuple) -> None:
        """Build the combined product from the first branch met (``first`` with its rewritten
        ``args``), and one slice of it per branch."""
        dense0 = br.denses[0]
        data = args[0] if first.op == "nn.dense" else args[0].args[0]
        weights = [d.args[1] for d in br.denses]
        w = Constant(np.concatenate([c.value for c in weights], axis=0),
                     f"{weights[0].name or 'dense'}_combined{len(weights)}")
        y = G.dense(data, w, None, dense0.attrs["out_dtype"], dense0.attrs["precision"])
        if br.biases[0] is not None:
            bias = Constant(np.concatenate([b.args[1].value for b in br.biases]),
                            f"{br.biases[0].args[1].name or 'bias'}_combined{len(weights)}")
            y = G.bias_add(y, bias, axis=-1)
        br.tails = {}
        start = 0
        for d, b in zip(br.denses, br.biases):
            units = d.shape[1]
            sl = G.strided_slice(y, [start], [start + units], axes=[1])
            br.tails[id(b if b is not None else d)] = sl
            start += units
