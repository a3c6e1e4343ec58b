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
        intern = self._intern
        while stack:
            x = stack[-1]
            if id(x) in names:
                stack.pop()
                continue
            t = type(x)
            if t is Bin or t is Cmp:
                # the common node spelled out: its key is its op, dtype and two names
                a, b = x.a, x.b
                pending = False
                if id(a) not in names:
                    ta = type(a)
                    if ta is IntImm or ta is Var:
                        self._leaf(a)
                    else:
                        stack.append(a)
                        pending = True
                if id(b) not in names:
                    tb = type(b)
                    if tb is IntImm or tb is Var:
                        self._leaf(b)
                    else:
                        stack.append(b)
                        pending = True
                if pending:
                    continue
                stack.pop()
                na, nb = names[id(a)][1], names[id(b)][1]
                key = ("b", x.op, x.dtype, na, nb) if t is Bin else ("c", x.op, na, nb)
                n = intern.get(key)
                if n is None:
                    self._add(x, key, None, (na, nb))
                else:
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
                        stack.append(k)
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
        # any fixed order will do: a name's vars are listed once, when it is first made
        if own is not None:
            return (own,)
        sets = self.var_sets
        if len(kid_names) == 2:
            va, vb = sets[kid_names[0]], sets[kid_names[1]]
            if not vb or va == vb:
                return va
            if not va:
                return vb
            return tuple(dict.fromkeys(va + vb))
        vs: tuple = ()
        for k in kid_names:
            vs += sets[k]
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
