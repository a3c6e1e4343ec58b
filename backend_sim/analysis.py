"""Static facts about the expressions of one kernel, for code generation.

* kind: ``S`` when a value is the same for every lane (a Python scalar at run time) or
  ``A`` when it is an array over lanes;
* interval: the exact range of an integer expression's value, or None where it is not
  known or where int32 arithmetic might wrap (the run-time checks stay then);
* purity (no loads) and depth (the innermost loop or let scope whose var it reads), which
  decide how far a computation can be hoisted out of loops.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..ir import dtype as dt
from ..ir.expr import (
    Bin,
    Call,
    Cast,
    Cmp,
    Expr,
    FloatImm,
    IntImm,
    Load,
    Select,
    Var,
    children,
)
from .errors import SimIRError
from .mathfns import int_range

SCALAR = "S"
ARRAY = "A"


@dataclass
class VarInfo:
    """How a var is represented: its Python name (or an expression it stands for)."""

    code: str | None
    kind: str
    interval: tuple | None
    depth: int
    alias: Expr | None = None


@dataclass
class BufInfo:
    """How a buffer is represented in generated code."""

    name: str
    code: str
    scope: str
    size: int
    dtype: str
    copies: bool  # one copy per block (shared) or per lane (local)
    race: str | None = None
    offset: str | None = None  # per-lane start of the lane's block copy (shared)
    flat: str | None = None  # flat view (local, per lane)


class Facts:
    """Memoized kind, interval, purity and depth of expressions, given var bindings."""

    def __init__(self, kernel: str):
        self.kernel = kernel
        self.vars: dict = {}
        self.buffers: dict = {}
        self._memo: dict = {}
        self._refined: list = []
        self._guarded: dict = {}

    def bind(self, var: Var, info: VarInfo) -> None:
        if var in self.vars:
            # a var bound twice (shared subtrees): memoized facts may be about the old one
            self._memo.clear()
            self._guarded.clear()
        self.vars[var] = info

    def var(self, v: Var) -> VarInfo:
        try:
            return self.vars[v]
        except KeyError:
            raise SimIRError(
                f"kernel {self.kernel}: var {v.name} is used but no loop, let or thread "
                "binding around it defines it"
            ) from None

    def buffer(self, b) -> BufInfo:
        try:
            return self.buffers[b]
        except KeyError:
            raise SimIRError(
                f"kernel {self.kernel}: buffer {b.name} is accessed but is neither a kernel "
                "parameter nor allocated in the kernel"
            ) from None

    def _get(self, what: str, e: Expr, fn):
        key = (what, id(e))
        try:
            return self._memo[key][1]
        except KeyError:
            value = fn(e)
            self._memo[key] = (e, value)  # keep e alive so its id stays unique
            return value

    # kind -----------------------------------------------------------------------------
    def kind(self, e: Expr) -> str:
        if isinstance(e, (IntImm, FloatImm)):
            return SCALAR
        if isinstance(e, Var):
            info = self.var(e)
            return self.kind(info.alias) if info.alias is not None else info.kind
        return self._get("kind", e, self._kind)

    def _kind(self, e: Expr) -> str:
        if isinstance(e, Call) and e.op == "shfl_xor":
            return ARRAY  # one value per lane, read from another lane
        if isinstance(e, Load):
            b = self.buffer(e.buffer)
            if b.copies:
                return ARRAY
        for c in children(e):
            if self.kind(c) == ARRAY:
                return ARRAY
        return SCALAR

    # purity and depth -----------------------------------------------------------------
    def pure(self, e: Expr) -> bool:
        if isinstance(e, (IntImm, FloatImm, Var)):
            return True
        return self._get("pure", e, self._pure)

    def _pure(self, e: Expr) -> bool:
        # a shuffle reads the other lanes' values where it runs: never hoisted or shared
        if isinstance(e, Load) or (isinstance(e, Call) and e.op == "shfl_xor"):
            return False
        return all(self.pure(c) for c in children(e))

    def depth(self, e: Expr) -> int:
        """The depth of the innermost scope whose var a pure ``e`` reads (0: none)."""
        if isinstance(e, (IntImm, FloatImm)):
            return 0
        if isinstance(e, Var):
            info = self.var(e)
            return self.depth(info.alias) if info.alias is not None else info.depth
        return self._get("depth", e, lambda x: max((self.depth(c) for c in children(x)),
                                                    default=0))

    # structural key (for common-subexpression elimination) -----------------------------
    def key(self, e: Expr):
        if isinstance(e, Var):
            info = self.var(e)
            return self.key(info.alias) if info.alias is not None else ("v", id(e))
        if isinstance(e, IntImm):
            return ("i", e.value, e.dtype)
        if isinstance(e, FloatImm):
            return ("f", repr(e.value), e.dtype)
        return self._get("key", e, self._key)

    def _key(self, e: Expr):
        head: tuple
        if isinstance(e, (Bin, Cmp)):
            head = (type(e).__name__, e.op, e.dtype)
        elif isinstance(e, Call):
            head = ("call", e.op, e.dtype)
        elif isinstance(e, Load):
            head = ("load", id(e.buffer))
        else:
            head = (type(e).__name__, e.dtype)
        return head + tuple(self.key(c) for c in children(e))

    # intervals --------------------------------------------------------------------------
    def interval(self, e: Expr) -> tuple | None:
        """[lo, hi] of an integer (or bool) expression, None if unknown or it may wrap."""
        if isinstance(e, IntImm):
            return (e.value, e.value)
        if isinstance(e, FloatImm) or dt.is_float(e.dtype):
            return None
        if isinstance(e, Var):
            info = self.var(e)
            return self.interval(info.alias) if info.alias is not None else info.interval
        return self._get("interval", e, lambda x: self._interval(x, self.interval))

    def range(self, e: Expr) -> tuple:
        """The interval, or the whole range of the dtype."""
        iv = self.interval(e)
        return iv if iv is not None else int_range(e.dtype)

    def refine(self, facts: list) -> None:
        """Push (expression key, interval) facts that hold for the active lanes (from an
        enclosing condition); :meth:`guarded_interval` uses them."""
        self._refined.append(dict(facts))
        self._guarded.clear()

    def unrefine(self) -> None:
        self._refined.pop()
        self._guarded.clear()

    def guarded_interval(self, e: Expr) -> tuple | None:
        """Like :meth:`interval`, also using the conditions of enclosing ifs. It holds only
        where those conditions do, so it may decide bounds checks of accesses under them,
        never how values are computed."""
        if not any(self._refined):
            return self.interval(e)
        if isinstance(e, (IntImm, FloatImm)) or dt.is_float(e.dtype):
            return self.interval(e)
        k = id(e)
        hit = self._guarded.get(k)
        if hit is not None:
            return hit[1]
        if isinstance(e, Var) and self.var(e).alias is not None:
            iv = self.guarded_interval(self.var(e).alias)
        elif isinstance(e, Var):
            iv = self.interval(e)
        else:
            iv = self._interval(e, self.guarded_interval)
        key = self.key(e)
        for layer in self._refined:
            r = layer.get(key)
            if r is not None:
                lo, hi = iv if iv is not None else int_range(e.dtype)
                iv = (max(lo, r[0]), min(hi, r[1]))
        self._guarded[k] = (e, iv)
        return iv

    def _interval(self, e: Expr, sub) -> tuple | None:
        def rng(x):
            iv = sub(x)
            return iv if iv is not None else int_range(x.dtype)

        if e.dtype == "bool":
            return (0, 1)
        if isinstance(e, Bin):
            iv = _bin_interval(e.op, rng(e.a), rng(e.b))
        elif isinstance(e, Select):
            t, f = sub(e.t), sub(e.f)
            iv = None if t is None or f is None else (min(t[0], f[0]), max(t[1], f[1]))
        elif isinstance(e, Cast):
            v = e.value
            iv = None if dt.is_float(v.dtype) else sub(v)
        elif isinstance(e, Call) and e.op in ("floor", "ceil", "round") and not dt.is_float(
                e.args[0].dtype):
            iv = sub(e.args[0])
        else:
            iv = None
        if iv is None:
            return None
        lo, hi = int_range(e.dtype)
        return iv if lo <= iv[0] and iv[1] <= hi else None


def _bin_interval(op: str, a: tuple, b: tuple) -> tuple | None:
    (alo, ahi), (blo, bhi) = a, b
    if op == "add":
        return (alo + blo, ahi + bhi)
    if op == "sub":
        return (alo - bhi, ahi - blo)
    if op == "mul":
        p = (alo * blo, alo * bhi, ahi * blo, ahi * bhi)
        return (min(p), max(p))
    if op == "min":
        return (min(alo, blo), min(ahi, bhi))
    if op == "max":
        return (max(alo, blo), max(ahi, bhi))
    if op == "floordiv" and blo > 0:
        q = (alo // blo, alo // bhi, ahi // blo, ahi // bhi)
        return (min(q), max(q))
    if op == "floormod" and blo > 0:
        if alo >= 0 and ahi < blo:
            return (alo, ahi)
        return (0, bhi - 1)
    return None
