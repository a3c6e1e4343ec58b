"""A cache of :func:`~ptxforge.ir.simplify.simplify` results, open for one lowering run.

Lowering asks the simplifier about the same index expressions over and over: every access
of a buffer is bounded for each placement, the bounds are shifted into the compacted
buffer, loop bodies are copied and simplified again. ``simplify(e, ranges)`` depends only on
the structure of ``e`` and on the ranges of the vars that occur in it, so inside
``with simplify_cache():`` its results are kept under that key and a repeated question is
answered at once. Outside such a block nothing is cached.

The simplifier asks about every subtree, not only whole expressions: an index copied into
another expression, or the same access bounded in several places, is simplified once.

Keys are small ints interned per cache: every node is named once by its structure (its op,
dtype and its children's names; vars, buffers and opaque nodes by identity), memoized by
node, so an expression that shares its subtrees with earlier ones costs only its new nodes.
Every node named is kept alive by the cache, so the identities in its keys stay unique
while it is open.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

from .expr import (
    Bin,
    Call,
    Cast,
    Cmp,
    Expr,
    FloatImm,
    IntImm,
    Load,
    Not,
    Select,
    TensorRead,
    Var,
    children,
)

_ACTIVE: contextvars.ContextVar[SimplifyCache | None] = contextvars.ContextVar(
    "ptxforge_simplify_cache", default=None)

_NO_VARS: tuple = ()


class SimplifyCache:
    """Structural names of expressions and the simplified form of each (name, ranges).

    ``results`` maps ``name`` (an expression without vars, or simplified without ranges)
    or ``(name, ranges of its vars)`` to ``(source, result)``; the simplifier fills and
    reads it for every subtree it simplifies. ``root`` holds the simplifier whose
    range-independent tables (affine forms, keys, sizes) every simplification in the block
    shares (set by :mod:`ptxforge.ir.simplify`).
    """

    __slots__ = ("names", "var_sets", "_intern", "results", "root")

    def __init__(self):
        self.names: dict[int, tuple[Expr, int]] = {}  # id(node) -> (node, name)
        self.var_sets: list[tuple] = []  # name -> the node's vars
        self._intern: dict[tuple, int] = {}
        self.results: dict = {}
        self.root = None

    def name(self, e: Expr) -> int:
        """A small int equal for structurally equal expressions (vars by identity); every
        node below ``e`` is named too."""
        names = self.names
        hit = names.get(id(e))
        if hit is not None:
            return hit[1]
        # post-order with an explicit stack: long sums must not recurse
        stack = [e]
        push = stack.append
        intern = self._intern
        sets = self.var_sets
        while stack:
            x = stack[-1]
            if id(x) in names:
                stack.pop()
                continue
            t = type(x)
            if t is Bin or t is Cmp:
                # the common node spelled out: its key is its op, dtype and two names;
                # int and var operands are named on the spot
                a, b = x.a, x.b
                pending = False
                ha = names.get(id(a))
                if ha is not None:
                    na = ha[1]
                elif type(a) is IntImm:
                    na = self._const(a)
                elif type(a) is Var:
                    na = self._var(a)
                else:
                    push(a)
                    pending = True
                hb = names.get(id(b))
                if hb is not None:
                    nb = hb[1]
                elif type(b) is IntImm:
                    nb = self._const(b)
                elif type(b) is Var:
                    nb = self._var(b)
                else:
                    push(b)
                    pending = True
                if pending:
                    continue
                stack.pop()
                key = ("b", x.op, x.dtype, na, nb) if t is Bin else ("c", x.op, na, nb)
                n = intern.get(key)
                if n is None:
                    # a new name: its vars are its operands' (any fixed order will do: a
                    # name's vars are listed once, when it is made)
                    n = intern[key] = len(sets)
                    va, vb = sets[na], sets[nb]
                    if not vb or va is vb:
                        sets.append(va)
                    elif not va:
                        sets.append(vb)
                    else:
                        sets.append(tuple(dict.fromkeys(va + vb)))
                names[id(x)] = (x, n)
                continue
            kids = children(x)
            pending = False
            for k in kids:
                if id(k) not in names:
                    tk = type(k)
                    if tk is IntImm or tk is Var:  # leaves: named at once
                        self._leaf(k)
                    else:
                        push(k)
                        pending = True
            if pending:
                continue
            stack.pop()
            if not kids:
                self._leaf(x)
                continue
            sig, own = _signature(x)
            kid_names = tuple([names[id(k)][1] for k in kids])
            self._add(x, sig + kid_names, None, kid_names)
        return names[id(e)][1]

    def _const(self, x: IntImm) -> int:
        key = ("i", x.value, x.dtype)
        n = self._intern.get(key)
        if n is None:
            n = self._intern[key] = len(self.var_sets)
            self.var_sets.append(_NO_VARS)
        self.names[id(x)] = (x, n)
        return n

    def _var(self, x: Var) -> int:
        key = ("v", id(x))
        n = self._intern.get(key)
        if n is None:
            n = self._intern[key] = len(self.var_sets)
            self.var_sets.append((x,))
        self.names[id(x)] = (x, n)
        return n

    def _leaf(self, x: Expr) -> None:
        sig, own = _signature(x)
        self._add(x, sig, own, ())

    def _add(self, x: Expr, key: tuple, own: Var | None, kid_names: tuple) -> None:
        n = self._intern.get(key)
        if n is None:
            n = len(self.var_sets)
            self._intern[key] = n
            self.var_sets.append(self._merge_vars(own, kid_names))
        self.names[id(x)] = (x, n)

    def _merge_vars(self, own: Var | None, kid_names: tuple) -> tuple:
        if own is not None:
            return (own,)
        vs: tuple = ()
        for k in kid_names:
            vs += self.var_sets[k]
        return tuple(dict.fromkeys(vs)) if vs else _NO_VARS


def _signature(x: Expr) -> tuple[tuple, Var | None]:
    """The node's own part of its structural key, and the var it is (if it is one)."""
    t = type(x)
    if t is Var:
        return ("v", id(x)), x
    if t is IntImm:
        return ("i", x.value, x.dtype), None
    if t is FloatImm:
        return ("f", x.value.hex(), x.dtype), None
    if t is Bin:
        return ("b", x.op, x.dtype), None
    if t is Cmp:
        return ("c", x.op), None
    if t is Not:
        return ("n",), None
    if t is Select:
        return ("s",), None
    if t is Cast:
        return ("cast", x.dtype), None
    if t is Call:
        return ("call", x.op, x.dtype, len(x.args)), None
    if t is Load:
        return ("load", id(x.buffer), len(x.indices)), None
    if t is TensorRead:
        return ("read", id(x.tensor), len(x.indices)), None
    # a reduction or anything else: equal only to itself
    return ("opaque", id(x)), None


def current() -> SimplifyCache | None:
    """The cache of the innermost open :func:`simplify_cache` block, or None."""
    return _ACTIVE.get()


@contextlib.contextmanager
def simplify_cache() -> Iterator[SimplifyCache]:
    """Cache ``simplify`` results in the enclosed block (in this thread or task). Inside an
    open block, a nested one is that same cache (a lowering pass run by the lowering
    pipeline shares the pipeline's)."""
    outer = _ACTIVE.get()
    if outer is not None:
        yield outer
        return
    cache = SimplifyCache()
    token = _ACTIVE.set(cache)
    try:
        yield cache
    finally:
        _ACTIVE.reset(token)
        # the shared simplifier and the cache refer to each other: dropping the link frees
        # the block's tables (thousands of forms and names) by reference counting when the
        # cache goes, instead of leaving them to the cyclic collector
        cache.root = None
