"""cse: common index subexpressions of a statement are computed once, in a ``let``.

Within one store (its indices and value) or one condition, an integer subexpression that
occurs more than once and is not a var or constant is bound to a new var around the
statement. A run of consecutive stores (a tuple compute's block stores each output at the
same index) shares its bindings: one ``let`` around the run, for subexpressions that load
nothing (a load could read what an earlier store of the run wrote). LLVM would find most
of these too; doing it here keeps the device IR readable and the simulator fast, and leaves
LLVM less to do.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...ir import dtype as dt
from ...ir.attrs import Level
from ...ir.expr import Bin, Cast, Cmp, FloatImm, IntImm, Load, Var, children, expr_key, rebuild
from ...ir.stmt import Let, PrimFunc, Seq, Store, map_stmt, seq, walk_exprs
from ..base import Pass
from ..registry import register_pass

_OPS = ("add", "sub", "mul", "floordiv", "floormod", "min", "max")


def _loads_nothing(e) -> bool:
    return not any(isinstance(x, Load) for x in walk_exprs(e))


class _Keys:
    """A small int per node, equal where :func:`~ptxforge.ir.expr.expr_key` is: each node's
    from its children's, once (``expr_key`` of every node would walk its subtree again)."""

    __slots__ = ("_memo", "_intern")

    def __init__(self):
        self._memo: dict[int, tuple] = {}  # id(node) -> (node, key)
        self._intern: dict = {}

    def __call__(self, e) -> int:
        hit = self._memo.get(id(e))
        if hit is not None:
            return hit[1]
        # each signature is expr_key's with the children's keys in place of theirs
        t = type(e)
        if t is Bin or t is Cmp:
            sig = (e.op, e.dtype, self(e.a), self(e.b))
        elif t is Var:
            sig = ("v", id(e))
        elif t is IntImm or t is FloatImm:
            sig = ("i" if t is IntImm else "f", e.value, e.dtype)
        elif t is Load:
            sig = ("load", id(e.buffer)) + tuple([self(i) for i in e.indices])
        elif t is Cast:
            sig = ("cast", e.dtype, self(e.value))
        else:
            sig = ("other", expr_key(e))
        k = self._intern.get(sig)
        if k is None:
            k = self._intern[sig] = len(self._intern)
        self._memo[id(e)] = (e, k)
        return k


def _candidates(exprs, key: _Keys) -> list:
    """Repeated integer subexpressions, largest first, as (key, expr)."""
    count: dict = {}
    first: dict = {}
    order = []

    def visit(e):
        if isinstance(e, Bin) and e.op in _OPS and dt.is_int(e.dtype):
            k = key(e)
            count[k] = count.get(k, 0) + 1
            if k not in first:
                first[k] = e
                order.append(k)
            if count[k] > 1:
                return  # its parts are counted once, with the first occurrence
        for c in children(e):
            visit(c)

    for e in exprs:
        visit(e)
    visit = None  # it refers to itself: free it (and the tables) now, not by the collector
    rep = [k for k in order if count[k] > 1]
    return [(k, first[k]) for k in rep]


def _replace(e, table: dict, key: _Keys):
    if type(e) is Bin:
        k = key(e)
        if k in table:
            return table[k]
    kids = children(e)
    if not kids:
        return e
    return rebuild(e, tuple(_replace(c, table, key) for c in kids))


def _cse_stores(stores: list, shared: bool = False):
    """The stores with their repeated subexpressions bound once around them all (only
    those that load nothing when ``shared``: several stores), or None if none repeat."""
    exprs = [e for s in stores for e in (*s.indices, s.value)]
    key = _Keys()
    cands = _candidates(exprs, key)
    if shared:
        cands = [(k, e) for k, e in cands if _loads_nothing(e)]
    if not cands:
        return None
    table: dict = {}
    lets = []
    for n, (k, e) in enumerate(cands):
        v = Var(f"cse{n}", e.dtype)
        # earlier (bigger or earlier-seen) bindings may occur inside later ones
        lets.append((v, _replace(e, table, key)))
        table[k] = v
    out = seq(*[Store(s.buffer, [_replace(i, table, key) for i in s.indices],
                      _replace(s.value, table, key)) for s in stores])
    for v, e in reversed(lets):
        out = Let(v, e, out)
    return out


def _cse_store(s: Store):
    return _cse_stores([s])


def _cse_runs(x: Seq):
    """Bind what runs of consecutive stores of ``x`` repeat around each run (None if
    nothing changes); stores alone are left to :func:`_cse_store`."""
    out, run, changed = [], [], False

    def flush():
        nonlocal changed
        if len(run) > 1:
            got = _cse_stores(run, shared=True)
            if got is not None:
                out.append(got)
                changed = True
                run.clear()
                return
        out.extend(run)
        run.clear()

    for st in x.stmts:
        if isinstance(st, Store):
            run.append(st)
            continue
        flush()
        out.append(st)
    flush()
    return Seq(out) if changed else None


def cse(func: PrimFunc) -> PrimFunc:
    def runs(x):
        return _cse_runs(x) if isinstance(x, Seq) else None

    def fix(x):
        if isinstance(x, Store):
            return _cse_store(x)
        return None

    # first what runs of stores share, then what is left repeated within each store
    body = map_stmt(func.body, fstmt=runs)
    return func.replace(body=map_stmt(body, fstmt=fix))


@register_pass
@dataclass(frozen=True)
class CSE(Pass):
    """Bind integer subexpressions repeated within a statement (or a run of consecutive
    stores) to let vars."""

    name = "cse"
    lowering = True
    levels = (Level.KERNEL,)

    def apply(self, module, ctx):
        return self.map_functions(module, cse)
