"""``fuse_ops``: partition the graph into fused (primitive) functions, one kernel group each.

Modelled on Relay's FuseOps, with its post-dominator rule: starting from a node, all the
nodes on every path to its immediate post-dominator join its group when each of them
fits the group:

* after a convolution, dense, batch matmul, pooling or reduction (``OUT_ELEMWISE_FUSABLE``
  / ``COMM_REDUCE``): element-wise and broadcast operators of the same output shape (the
  epilogue: bias, batch-norm shift, residual add, activation, also across diamonds such as
  GELU's ``x * erf(x)``);
* after an element-wise, broadcast or injective operator: more of those (reshape,
  transpose, pad, concatenate chains);
* opaque operators (softmax, layer norm) stay alone;
* a lone ``cast`` whose only reader is such an epilogue operator, of its shape, joins the
  epilogue (a residual add that widens a 16-bit operand converts it as it reads it).

Then two rules for the matrix products the tensor cores may run (16-bit inputs, or
float32 at TF32 precision; ``layouts=False`` turns them off), which move a group of
layout operators (slices, reshapes, transposes: :mod:`.layout_view`) into the product's:

* prologue: a layout chain whose only reader is one operand of the product, when the
  chain is a strided view of its source whose last axis is contiguous and 16 bytes
  aligned (an attention's query, key and value, sliced out of the combined projection and
  split into heads). The product's shared-memory copies read the source through the
  remapped index, with ``cp.async`` as from any input;
* epilogue: a layout chain that is the only reader of the product's group, when each axis
  of the product lands in one digit of one axis of the chain's result (the head transpose
  back, ``[heads, seq, dim]`` into ``[seq, heads * dim]``). The product stores each
  element at its place in that layout.

A chain that fits neither (a slice whose rows start off a 16-byte boundary, a transposed
reduction axis, arithmetic on the way) stays a kernel of its own.

And one rule for an opaque row operator after such a product (``rows=False`` turns it
off): a softmax over the last axis whose input is a tensor-core product's group (the
product and element-wise operators of its shape: an attention's scores ``Q K^T * scale``
and their cast to float32), and nothing else reads that result, joins the group as its
row epilogue when one block tile of the product covers the whole row (``N`` at most
:data:`ROW_EPILOGUE_MAX`, the tile sizes of :func:`tensor_core_product` with
``shapes``). The product's kernel then normalizes each row of its tile in shared memory
and writes the probabilities (:mod:`ptxforge.ops.schedules.gemm_rows`): the separate
softmax kernel and the scores' round trip through global memory disappear. Layer norm
(over rows of a dense's output, which span many block tiles) and a softmax over another
axis stay kernels of their own.

Groups are extended as long as possible. Every call ends up in exactly one group; each
group becomes a :class:`~ptxforge.graph.ir.Graph` with ``attrs["primitive"] = True``,
called from the new main graph with its external inputs as arguments. Constant weights
are arguments too (they become kernel parameters); one-element constants that an
element-wise operator can take as an immediate stay inside the function. A group of
nothing but reshapes is marked ``attrs["view"] = True``: it needs no kernel.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..ir import Call, Constant, Graph, GraphError, Node, Var, consumers
from ..op import OpPattern, get_op
from ..opdefs.transform import VIEW_OPS
from .base import GraphPass, register_graph_pass
from .layout_view import LAYOUT_OPS, chain_view, copyable_rows, layout_chain, stored_view

MAX_NAME = 80
MAX_DEPTH = 64
"""The most calls one fused function holds by default (Relay's ``max_depth``). An
element-wise chain fuses into one expression as deep as the chain; a few hundred levels
overflow Python's stack in every IR walker, and compile time grows faster than the chain.
Past the cap a chain is cut into functions of at most this many calls, which repeat (so
compile once) along a uniform chain: build time stays linear in the number of calls."""
PRODUCT_OPS = ("nn.dense", "nn.matmul", "nn.batch_matmul")
ROW_EPILOGUE_OPS = ("nn.softmax",)
"""Opaque operators over the last axis that may be a tensor-core product's row epilogue."""
ROW_EPILOGUE_MAX = 256
"""The longest row a row epilogue covers: one block tile of the product (wgmma's widest
tile; :data:`ptxforge.ops.schedules.gemm_rows.MAX_ROW`)."""


class _Groups:
    """Union-find over calls; the root holds the group's pattern, output and members."""

    def __init__(self, calls: list[Call]):
        self.parent = {id(c): id(c) for c in calls}
        self.pattern = {id(c): get_op(c.op).pattern_of(c.attrs) for c in calls}
        self.output = {id(c): c for c in calls}
        self.size = {id(c): 1 for c in calls}
        self.max_size = MAX_DEPTH

    def room(self, root: int, more: int) -> bool:
        """Whether the group of ``root`` may take ``more`` calls (the depth cap)."""
        return self.size[root] + more <= self.max_size

    def root(self, k: int) -> int:
        while self.parent[k] != k:
            self.parent[k] = self.parent[self.parent[k]]
            k = self.parent[k]
        return k

    def merge_into(self, member: Call, root: int) -> None:
        r = self.root(id(member))
        if r != root:
            self.parent[r] = root
            self.size[root] += self.size[r]


def _post_dominators(nodes: list[Node], outputs: list[Node]) -> dict[int, Node | None]:
    """The immediate post-dominator of every node (None: the graph's exit)."""
    cons = consumers(nodes)
    out_ids = {id(o) for o in outputs}
    ipdom: dict[int, Node | None] = {}
    depth: dict[int, int] = {}

    def lca(a: Node | None, b: Node | None) -> Node | None:
        while a is not b:
            da = -1 if a is None else depth[id(a)]
            db = -1 if b is None else depth[id(b)]
            if da >= db and a is not None:
                a = ipdom[id(a)]
            elif b is not None:
                b = ipdom[id(b)]
            else:
                return None
        return a

    for node in reversed(nodes):
        users: list[Node | None] = list(cons.get(id(node), []))
        if id(node) in out_ids or not users:
            users.append(None)
        d = users[0]
        for u in users[1:]:
            d = lca(d, u)
        ipdom[id(node)] = d
        depth[id(node)] = 0 if d is None else depth[id(d)] + 1
    return ipdom


def _fits(group_pattern: OpPattern, anchor_shape: tuple, node: Node) -> bool:
    if not isinstance(node, Call) or isinstance(node.op, Graph):
        return False
    p = get_op(node.op).pattern_of(node.attrs)
    if group_pattern in (OpPattern.OUT_ELEMWISE_FUSABLE, OpPattern.COMM_REDUCE):
        return p <= OpPattern.BROADCAST and node.shape == anchor_shape
    if group_pattern <= OpPattern.INJECTIVE:
        return p <= OpPattern.INJECTIVE
    return False


def partition(graph: Graph, layouts: bool = True, rows: bool = True,
              max_depth: int = MAX_DEPTH) -> tuple[list[Node], _Groups]:
    """Group the calls of ``graph`` (see the module doc; ``layouts``: with the layout
    chains of tensor-core products; ``rows``: with their softmax row epilogues; no group
    of more than ``max_depth`` calls); returns the nodes in topological order and the
    groups."""
    nodes = graph.nodes()
    calls = [n for n in nodes if isinstance(n, Call)]
    for c in calls:
        if isinstance(c.op, Graph):
            raise GraphError("fuse_ops: the graph is already fused")
    groups = _Groups(calls)
    ipdom = _post_dominators(nodes, graph.outputs)
    cons = consumers(nodes)
    for node in calls:
        root = groups.root(id(node))
        if groups.output[root] is not node:
            continue  # an inner node of a group: all its uses are inside
        pattern = groups.pattern[root]
        dom = ipdom[id(node)]
        if dom is None or pattern == OpPattern.OPAQUE:
            continue
        path: list[Call] = []
        seen = {id(node)}
        stack = list(cons[id(node)])
        ok = True
        while stack and ok:
            m = stack.pop()
            if id(m) in seen:
                continue
            seen.add(id(m))
            if (not _fits(pattern, node.shape, m) or groups.root(id(m)) != id(m)
                    or groups.size[id(m)] != 1):
                ok = False
                break
            path.append(m)
            if m is not dom:
                stack.extend(cons[id(m)])
        if not ok or groups.size[root] + len(path) > max_depth:
            continue  # the group ends here; ``dom`` starts the next one
        for m in path:
            groups.merge_into(m, root)
        groups.output[root] = dom
    outputs = {id(o) for o in graph.outputs}
    groups.max_size = max_depth
    _fuse_epilogue_operand_casts(calls, groups, cons, outputs)
    if layouts:
        _fuse_operand_layouts(nodes, groups, cons, outputs)
        _fuse_output_layouts(nodes, groups, cons, outputs)
    if rows:
        _fuse_row_epilogues(nodes, groups, cons, outputs)
    return nodes, groups


def _fuse_epilogue_operand_casts(calls: list[Call], groups: _Groups, cons,
                                 outputs: set[int]) -> None:
    """A ``cast`` left alone whose only reader is an epilogue operator of a convolution's,
    product's or reduction's group, of the same shape (a residual add widening a 16-bit
    value), joins that group: the epilogue reads the value and converts it itself,
    instead of a kernel writing the converted copy. The cast's argument comes from
    outside the group (an inner node's uses are all inside it), so no cycle forms."""
    for c in calls:
        if not (c.op == "cast" and groups.size[id(c)] == 1 and groups.root(id(c)) == id(c)
                and id(c) not in outputs and len(cons[id(c)]) == 1):
            continue
        (m,) = cons[id(c)]
        root = groups.root(id(m))
        if (root != id(m) and groups.pattern[root] in (OpPattern.OUT_ELEMWISE_FUSABLE,
                                                        OpPattern.COMM_REDUCE)
                and get_op(m.op).pattern_of(m.attrs) <= OpPattern.BROADCAST
                and m.shape == c.shape and groups.room(root, 1)):
            groups.merge_into(c, root)


def _members(nodes: list[Node], groups: _Groups) -> dict[int, list[Call]]:
    out: dict[int, list[Call]] = {}
    for n in nodes:
        if isinstance(n, Call):
            out.setdefault(groups.root(id(n)), []).append(n)
    return out


def tensor_core_product(call: Node, shapes: bool = False) -> bool:
    """Whether ``call`` is a matrix product the tensor cores may run: a dense, matmul or
    batch_matmul of 16-bit inputs, or of float32 ones at TF32 precision. With ``shapes``,
    also in the layouts and sizes the tensor-core GEMM schedule stores through a remapped
    epilogue (the rules of :mod:`ptxforge.ops.schedules.gemm.forms` that
    :func:`~ptxforge.ops.schedules.gemm.forms.gemm_form` applies: A not transposed, TF32's
    B as ``[n, k]``, ``M`` and ``N`` whole tiles of 16 and ``K`` of one mma's depth); the
    target's own tensor cores are for the schedule to find."""
    from ...ops.schedules.gemm.forms import layout_ok, product_kind, whole_tiles

    if not (isinstance(call, Call) and isinstance(call.op, str) and call.op in PRODUCT_OPS):
        return False
    kind = product_kind(call.args[0].dtype, call.attrs.get("precision"))
    if kind is None:
        return False
    if not shapes:
        return True
    a, b = (tuple(x.shape) for x in call.args)
    if call.op == "nn.dense":
        (m, k), (n, _), b_kn, trans_a = a, b, False, False
    else:
        trans_a = bool(call.attrs.get("transpose_a"))
        b_kn = not call.attrs.get("transpose_b")
        m, k = a[-2:]
        n = b[-1] if b_kn else b[-2]
    # whole tiles: the epilogue runs over the product's loops, which a zero-padded tile's
    # partial copy does not keep
    return layout_ok(kind, trans_a, b_kn) and whole_tiles(kind, m, n, k)


def _layout_group(members: list[Call], output: Call) -> tuple[Node, list[Call]] | None:
    """``(source, chain)`` when the group ``members`` (output ``output``) is one chain of
    layout calls that needs a kernel (not reshapes only), else None."""
    source, chain = layout_chain(output)
    inside = {id(m) for m in members}
    while chain and id(chain[0]) not in inside:  # the chain may start in another group
        source, chain = chain[0], chain[1:]
    if len(chain) != len(members) or any(id(c) not in inside for c in chain):
        return None
    if all(c.op in VIEW_OPS for c in chain):
        return None  # an alias of its input already: no kernel to save
    return source, chain


def _products_with_one_reader(nodes: list[Node], groups: _Groups, cons: dict, outputs: set,
                              shapes: bool):
    """Each tensor-core product (:func:`tensor_core_product` with ``shapes``) at the root
    of its group, with the group's output and that output's only reader, where the output
    is not a graph output. Groups merged while this runs are seen as they are then."""
    for node in nodes:
        if not tensor_core_product(node, shapes=shapes) or groups.root(id(node)) != id(node):
            continue
        out = groups.output[id(node)]
        if id(out) in outputs or len(cons[id(out)]) != 1:
            continue
        yield node, out, cons[id(out)][0]


def _fuse_output_layouts(nodes: list[Node], groups: _Groups, cons: dict,
                         outputs: set) -> None:
    """Epilogue fusion: a group that only moves the elements of a tensor-core product's
    result (a reshape and transpose chain, such as an attention's head transpose back),
    its only reader, joins the product's group when every axis of the product lands in one
    digit of one axis of the chain's result (:func:`~.layout_view.stored_view`). The
    product's epilogue then stores each element at its place in that layout."""
    members = _members(nodes, groups)
    for node, out, reader in _products_with_one_reader(nodes, groups, cons, outputs, True):
        r = groups.root(id(reader))
        if r != id(reader) or not (isinstance(reader.op, str) and reader.op in LAYOUT_OPS):
            continue
        found = _layout_group(members[r], groups.output[r])
        if found is None or found[0] is not out:
            continue
        if stored_view(found[1]) is None or not groups.room(id(node), groups.size[r]):
            continue
        groups.parent[r] = id(node)
        groups.size[id(node)] += groups.size[r]
        groups.output[id(node)] = groups.output[r]


def row_epilogue_fits(product: Node, between: list, row_op: Node) -> bool:
    """Whether the opaque row operator ``row_op`` may be the row epilogue of ``product``
    (a call) through the element-wise calls ``between`` (see the module doc): a
    softmax over the last axis of a tensor-core product (:func:`tensor_core_product` with
    ``shapes``) of the same shape, whose rows (``N``) one block tile covers
    (:data:`ROW_EPILOGUE_MAX`), with only element-wise or broadcast operators of that
    shape on the way."""
    if not (isinstance(row_op, Call) and isinstance(row_op.op, str)
            and row_op.op in ROW_EPILOGUE_OPS):
        return False
    if row_op.attrs.get("sum_dtype"):
        # a row sum that must run serially, in order: the row epilogue may split rows
        # over threads
        return False
    if not tensor_core_product(product, shapes=True):
        return False
    shape = tuple(product.shape)
    if tuple(row_op.shape) != shape or row_op.attrs.get("axis", -1) % len(shape) != len(shape) - 1:
        return False
    if shape[-1] > ROW_EPILOGUE_MAX:
        return False
    for m in between:
        if isinstance(m.op, Graph) or get_op(m.op).pattern_of(m.attrs) > OpPattern.BROADCAST:
            return False
        if tuple(m.shape) != shape:
            return False
    return True


def _fuse_row_epilogues(nodes: list[Node], groups: _Groups, cons: dict,
                        outputs: set) -> None:
    """Row-epilogue fusion: a softmax over the last axis that is the only reader of a
    tensor-core product's group joins it (:func:`row_epilogue_fits`). The group's own
    calls after the product must be element-wise (not a layout chain its epilogue
    stores through), the softmax a group of its own."""
    members = _members(nodes, groups)
    for node, out, reader in _products_with_one_reader(nodes, groups, cons, outputs, False):
        r = groups.root(id(reader))
        if r != id(reader) or groups.size[r] != 1 or groups.output[r] is not reader:
            continue
        # the group's calls that read the product (its epilogue; the others are the
        # operands' layout chains)
        after = {id(node)}
        between = []
        for m in members[id(node)]:
            if m is not node and any(id(a) in after for a in m.args):
                after.add(id(m))
                between.append(m)
        if out is not node and id(out) not in after:
            continue
        if not row_epilogue_fits(node, between, reader) or not groups.room(id(node), 1):
            continue
        groups.parent[r] = id(node)
        groups.size[id(node)] += 1
        groups.output[id(node)] = reader


def _fuse_operand_layouts(nodes: list[Node], groups: _Groups, cons: dict,
                          outputs: set) -> None:
    """Prologue fusion: a group that only moves the elements of one tensor (a chain of
    :data:`~.layout_view.LAYOUT_OPS` calls, such as the slice and head transpose of an
    attention's query) and whose only reader is one operand of a tensor-core product joins
    the product's group, when the product's shared-memory copies can read the chain's
    source directly (:func:`~.layout_view.copyable_rows`). Its kernel disappears: the
    product's operand copies compute the remapped index instead."""
    members = _members(nodes, groups)
    for node in nodes:
        if not tensor_core_product(node) or groups.root(id(node)) != id(node):
            continue
        for arg in node.args:
            if not isinstance(arg, Call) or sum(a is arg for a in node.args) != 1:
                continue
            r = groups.root(id(arg))
            if (groups.output[r] is not arg or id(arg) in outputs
                    or len(cons[id(arg)]) != 1 or isinstance(arg.op, Graph)):
                continue
            found = _layout_group(members[r], arg)
            if found is None:
                continue
            view = chain_view(*found)
            if view is None or not copyable_rows(view, arg.dtype):
                continue  # the separate kernel stays (today's layout copy)
            if not groups.room(id(node), groups.size[r]):
                continue
            groups.parent[r] = id(node)
            groups.size[id(node)] += groups.size[r]


def _immediate(const: Constant, call: Call, index: int) -> bool:
    """Whether ``const`` can be folded into ``call``'s te computation as a scalar."""
    if const.value.size != 1 or isinstance(call.op, Graph):
        return False
    if index not in get_op(call.op).scalar_args:
        return False
    others = [a for k, a in enumerate(call.args) if k != index]
    return all(o.shape == call.shape for o in others)


def _function_name(members: list[Call]) -> str:
    # layout calls fused ahead of a product (its operands' slices and transposes) are named
    # after it, so that the name starts with the operator that makes the kernel
    lead = 0
    while lead < len(members) and members[lead].op in LAYOUT_OPS:
        lead += 1
    if lead and any(m.op in PRODUCT_OPS for m in members[lead:]):
        members = members[lead:] + members[:lead]
    name = "fused_" + "_".join(m.op.replace(".", "_") for m in members)
    if len(name) > MAX_NAME:
        name = name[:MAX_NAME].rstrip("_")
    return name


def build_function(members: list[Call], output: Call) -> tuple[Graph, list[Node]]:
    """The primitive function computing ``output`` from the calls ``members`` (topological
    order), and the external nodes to call it with."""
    inside = {id(m) for m in members}
    uses: dict[int, list[tuple[Call, int]]] = {}
    for m in members:
        for k, a in enumerate(m.args):
            uses.setdefault(id(a), []).append((m, k))
    params: list[Var] = []
    outer: list[Node] = []
    mapping: dict[int, Node] = {}
    for m in members:
        for a in m.args:
            if id(a) in inside or id(a) in mapping:
                continue
            if isinstance(a, Constant) and all(_immediate(a, c, k) for c, k in uses[id(a)]):
                mapping[id(a)] = a
                continue
            p = Var(f"p{len(params)}", a.ty)
            params.append(p)
            outer.append(a)
            mapping[id(a)] = p
    for m in members:
        mapping[id(m)] = Call(m.op, [mapping[id(a)] for a in m.args], m.attrs)
    attrs = {"primitive": True}
    if all(m.op in VIEW_OPS for m in members):
        attrs["view"] = True
    fn = Graph(params, [mapping[id(output)]], _function_name(members), attrs)
    return fn, outer


CONFIG_ROWS = "fuse_ops.rows"
"""The pass context config key overriding :class:`FuseOps`' ``rows``."""


@register_graph_pass
@dataclass(frozen=True)
class FuseOps(GraphPass):
    """Fuse operators into primitive functions (see the module doc).

    Parameters:
        layouts: fuse layout chains into the tensor-core products that read them or whose
            result they rearrange (``False``: they stay kernels of their own).
        rows: fuse a softmax over the rows of a tensor-core product into the product's
            kernel (default ``False``: it stays a kernel of its own). Off by default: on an
            H100, BERT-base's fused scores and softmax took 5.3-10 us where the two tuned
            kernels take about 4 (docs/networks.md). The pass context's config key
            ``"fuse_ops.rows"`` overrides it for a whole build.
        max_depth: the most calls one fused function holds (:data:`MAX_DEPTH`); a longer
            chain becomes several functions.
    """

    name = "fuse_ops"
    layouts: bool = True
    rows: bool = False
    max_depth: int = MAX_DEPTH

    def __post_init__(self):
        for what in ("layouts", "rows"):
            v = getattr(self, what)
            if not isinstance(v, bool):
                raise GraphError(f"fuse_ops: {what} must be a bool, got {v!r}")
        if (not isinstance(self.max_depth, int) or isinstance(self.max_depth, bool)
                or self.max_depth < 1):
            raise GraphError(f"fuse_ops: max_depth must be a positive int (the most calls "
                             f"in one fused function), got {self.max_depth!r}")

    def apply(self, graph: Graph, ctx) -> Graph:
        rows = getattr(ctx, "config", {}).get(CONFIG_ROWS, self.rows)
        if not isinstance(rows, bool):
            raise GraphError(f"{CONFIG_ROWS} in the pass context's config is a bool, got "
                             f"{rows!r}")
        if self.layouts:
            # the head transposes around a fused attention become its addressing
            from .fold_attention_layout import fold_attention_layout

            graph = fold_attention_layout(graph)
        nodes, groups = partition(graph, self.layouts, rows, self.max_depth)
        members: dict[int, list[Call]] = {}
        for n in nodes:
            if isinstance(n, Call):
                members.setdefault(groups.root(id(n)), []).append(n)
        new: dict[int, Node] = {}
        for n in nodes:
            if not isinstance(n, Call):
                new[id(n)] = n
                continue
            root = groups.root(id(n))
            out = groups.output[root]
            if out is not n:
                continue
            fn, outer = build_function(members[root], out)
            new[id(n)] = Call(fn, [new[id(a)] for a in outer])
        outputs = []
        for o in graph.outputs:
            outputs.append(new[id(o)])
        return Graph(graph.params, outputs, graph.name, graph.attrs)
