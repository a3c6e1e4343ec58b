"""Typed scalar expressions.

Expressions are immutable trees. ``Var`` nodes are SSA values: equal by identity, named by a
hint. Every other node is compared structurally with :func:`structural_equal` or hashed with
:func:`expr_key`. Python operators build nodes (``a + b``, ``a // b``, ``a < b``); ``a == b``
builds an ``EQ`` comparison whose truth value is structural equality, so expressions can
still be used in ``in`` tests and as dictionary keys (vars hash by identity).
"""

from __future__ import annotations

from typing import Any

from . import dtype as dt


class IRError(ValueError):
    """Ill-formed IR or an expression that does not type-check."""


class Expr:
    """Base of all scalar expressions. Every expression has a ``dtype``."""

    __slots__ = ("dtype",)

    # arithmetic -----------------------------------------------------------------------
    def __add__(self, other):
        return _binary("add", self, other)

    def __radd__(self, other):
        return _binary("add", other, self)

    def __sub__(self, other):
        return _binary("sub", self, other)

    def __rsub__(self, other):
        return _binary("sub", other, self)

    def __mul__(self, other):
        return _binary("mul", self, other)

    def __rmul__(self, other):
        return _binary("mul", other, self)

    def __truediv__(self, other):
        return _div(self, other)

    def __rtruediv__(self, other):
        return _div(other, self)

    def __floordiv__(self, other):
        return _binary("floordiv", self, other)

    def __rfloordiv__(self, other):
        return _binary("floordiv", other, self)

    def __mod__(self, other):
        return _binary("floormod", self, other)

    def __rmod__(self, other):
        return _binary("floormod", other, self)

    def __neg__(self):
        return _binary("sub", const(0, self.dtype), self)

    # comparisons and logic ----------------------------------------------------------------
    def __lt__(self, other):
        return _compare("lt", self, other)

    def __le__(self, other):
        return _compare("le", self, other)

    def __gt__(self, other):
        return _compare("gt", self, other)

    def __ge__(self, other):
        return _compare("ge", self, other)

    def __eq__(self, other):  # type: ignore[override]
        return _compare("eq", self, other)

    def __ne__(self, other):  # type: ignore[override]
        return _compare("ne", self, other)

    def __and__(self, other):
        return logical_and(self, other)

    def __rand__(self, other):
        return logical_and(other, self)

    def __or__(self, other):
        return logical_or(self, other)

    def __ror__(self, other):
        return logical_or(other, self)

    def __invert__(self):
        return Not(self)

    # hashed by identity, in C: every dict of vars and memo of nodes hashes through here,
    # and a Python method would cost a call per look-up
    __hash__ = object.__hash__

    def __bool__(self):
        raise IRError(
            f"the truth value of the expression {self} is not known while tracing; "
            "use te.if_then_else / te.all / te.any instead of Python's if/and/or"
        )

    def __repr__(self):
        from .exprprint import expr_str

        return expr_str(self)

    __str__ = __repr__

    def astype(self, dtype: str) -> Expr:
        return cast(dtype, self)


class IntImm(Expr):
    __slots__ = ("value",)

    def __init__(self, value: int, dtype: str = dt.INDEX):
        if type(value) is int and dtype == "int32":
            # the index constant the simplifier makes by the thousand: nothing to convert
            self.value = value
            self.dtype = dtype
            return
        self.value = int(value) if dtype != "bool" else int(bool(value))
        self.dtype = dt.check(dtype)


class FloatImm(Expr):
    __slots__ = ("value",)

    def __init__(self, value: float, dtype: str = "float32"):
        self.value = float(value)
        self.dtype = dt.check(dtype)


class Var(Expr):
    """An SSA scalar value: a loop variable, a thread index, a let-bound scalar."""

    __slots__ = ("name",)

    def __init__(self, name: str, dtype: str = dt.INDEX):
        if not isinstance(name, str) or not name:
            raise IRError(f"a Var needs a non-empty string name, got {name!r}")
        self.name = name
        self.dtype = dt.check(dtype)


BIN_OPS = ("add", "sub", "mul", "div", "mod", "floordiv", "floormod", "min", "max", "and",
           "or")
"""``div`` and ``mod`` are C's ``/`` and ``%``: on integers the quotient rounds toward zero
and the remainder takes the sign of the dividend (ONNX ``Div`` and ``Mod`` with ``fmod=1``);
on floats ``div`` is IEEE division and ``mod`` is C's ``fmod``. ``floordiv`` and
``floormod`` round toward minus infinity (Python's ``//`` and ``%``)."""
CMP_OPS = ("eq", "ne", "lt", "le", "gt", "ge")
_BIN_OP_SET = frozenset(BIN_OPS)
_CMP_OP_SET = frozenset(CMP_OPS)


class Bin(Expr):
    """A binary arithmetic or logical op: add sub mul div mod floordiv floormod min max and
    or (see :data:`BIN_OPS` for how the divisions round)."""

    __slots__ = ("op", "a", "b")

    def __init__(self, op: str, a: Expr, b: Expr, dtype: str | None = None):
        if op not in _BIN_OP_SET:
            raise IRError(f"unknown binary op {op!r}; expected one of {BIN_OPS}")
        self.op = op
        self.a = a
        self.b = b
        self.dtype = dtype or ("bool" if op in ("and", "or") else a.dtype)


class Cmp(Expr):
    """A comparison (eq ne lt le gt ge); its dtype is bool."""

    __slots__ = ("op", "a", "b")

    def __init__(self, op: str, a: Expr, b: Expr):
        if op not in _CMP_OP_SET:
            raise IRError(f"unknown comparison {op!r}; expected one of {CMP_OPS}")
        self.op = op
        self.a = a
        self.b = b
        self.dtype = "bool"

    def __bool__(self):
        # ``x == y`` on expressions answers structural equality when Python asks for a bool
        # (``in`` tests, dict look-ups); ordering comparisons have no such meaning.
        if self.op == "eq":
            return self.a is self.b or structural_equal(self.a, self.b)
        if self.op == "ne":
            return not (self.a is self.b or structural_equal(self.a, self.b))
        return Expr.__bool__(self)


class Not(Expr):
    __slots__ = ("a",)

    def __init__(self, a: Expr):
        a = as_expr(a)
        if a.dtype != "bool":
            raise IRError(f"logical not needs a bool operand, got {a.dtype} ({a})")
        self.a = a
        self.dtype = "bool"


class Select(Expr):
    """``cond ? t : f`` (``te.if_then_else``)."""

    __slots__ = ("cond", "t", "f")

    def __init__(self, cond: Expr, t: Expr, f: Expr):
        self.cond = cond
        self.t = t
        self.f = f
        self.dtype = t.dtype


class Cast(Expr):
    __slots__ = ("value",)

    def __init__(self, dtype: str, value: Expr):
        self.value = value
        self.dtype = dt.check(dtype)


INTRINSICS = {
    # name: number of arguments
    "exp": 1,
    # 2^x for the softmax of fused attention: on the GPU the hardware's approximation
    # (float32: ex2.approx.ftz, within 2 ulp, subnormals flushed to zero), in the
    # simulator numpy's exp2
    "exp2": 1,
    "log": 1,
    "sqrt": 1,
    "rsqrt": 1,
    "tanh": 1,
    "sigmoid": 1,
    "erf": 1,
    "fabs": 1,
    "abs": 1,
    "floor": 1,
    "ceil": 1,
    "round": 1,
    "sin": 1,
    "cos": 1,
    "pow": 2,
    "fma": 3,
    # float32 rounded to TF32 (10-bit mantissa, ties away from zero; cvt.rna.tf32.f32):
    # the inputs of a product computed at precision "tf32" on CUDA cores
    "round_tf32": 1,
    # shfl_xor(value, lane_mask, width): a warp shuffle (see :func:`shfl_xor`)
    "shfl_xor": 3,
}

SHUFFLE_DTYPES = ("float32", "float16", "bfloat16", "int32")
"""The value types a warp shuffle moves (32 bits or less: one ``shfl.sync`` each)."""

WARP_SIZE = 32


class Call(Expr):
    """An intrinsic: a pure math function (exp, log, sqrt, tanh, sigmoid, erf, fabs, pow,
    fma, ...) or ``shfl_xor``, the warp shuffle, whose value comes from another lane of the
    warp (see :func:`shfl_xor`; passes must not move it into a condition)."""

    __slots__ = ("op", "args")

    def __init__(self, op: str, args: tuple, dtype: str):
        if op not in INTRINSICS:
            raise IRError(f"unknown intrinsic {op!r}; known: {', '.join(sorted(INTRINSICS))}")
        if len(args) != INTRINSICS[op]:
            raise IRError(f"{op} takes {INTRINSICS[op]} argument(s), got {len(args)}")
        self.op = op
        self.args = tuple(args)
        self.dtype = dt.check(dtype)
        if op == "shfl_xor":
            _check_shuffle(self)


def _check_shuffle(e: Call) -> None:
    value, mask, width = e.args
    if value.dtype not in SHUFFLE_DTYPES or e.dtype != value.dtype:
        raise IRError(f"shfl_xor moves one of {', '.join(SHUFFLE_DTYPES)} and returns the "
                      f"same type, got a {value.dtype} value and a {e.dtype} result")
    for what, a in (("lane mask", mask), ("width", width)):
        if not (isinstance(a, IntImm) and a.dtype == "int32"):
            raise IRError(f"the {what} of shfl_xor must be an int32 constant, got {a}")
    w = width.value
    if not (1 <= w <= WARP_SIZE and w & (w - 1) == 0):
        raise IRError(f"the width of shfl_xor must be a power of two up to {WARP_SIZE}, "
                      f"got {w}")
    if not 0 <= mask.value < WARP_SIZE:
        raise IRError(f"the lane mask of shfl_xor must lie in [0, {WARP_SIZE}), got "
                      f"{mask.value}")


def shfl_xor(value, lane_mask: int, width: int = WARP_SIZE) -> Call:
    """The ``value`` of lane ``lane ^ lane_mask`` of the warp, as PTX's
    ``shfl.sync.bfly.b32`` with every lane a member (mask ``0xffffffff``) and clamp value
    ``((32 - width) << 8) | 31``: the source lane is ``lane ^ lane_mask`` unless that lies
    above the last lane of the executing lane's segment of ``width`` lanes, where the lane
    reads its own value.

    All 32 lanes of the warp must execute it (the instruction's result is undefined
    otherwise); the simulator raises where they do not.
    """
    value = as_expr(value)
    return Call("shfl_xor", (value, IntImm(lane_mask), IntImm(width)), value.dtype)


class Load(Expr):
    """Read one element of a buffer of the tensor IR."""

    __slots__ = ("buffer", "indices")

    def __init__(self, buffer: Any, indices: tuple):
        self.buffer = buffer
        self.indices = tuple(indices)
        self.dtype = buffer.dtype


class TensorRead(Expr):
    """Read one element of a te tensor (the front end's form of a load)."""

    __slots__ = ("tensor", "indices")

    def __init__(self, tensor: Any, indices: tuple):
        self.tensor = tensor
        self.indices = tuple(indices)
        self.dtype = tensor.dtype


class Reduce(Expr):
    """A commutative reduction (``te.sum``, ``te.max``, ``te.min``) over reduce axes.

    ``combiner`` is ``"sum"``, ``"max"`` or ``"min"``; ``axis`` a tuple of reduce IterVars;
    ``where`` an optional predicate that restricts the reduction domain.
    """

    __slots__ = ("combiner", "source", "axis", "where")

    def __init__(self, combiner: str, source: Expr, axis: tuple, where: Expr | None = None):
        if combiner not in REDUCERS:
            raise IRError(f"unknown reducer {combiner!r}; expected one of {tuple(REDUCERS)}")
        self.combiner = combiner
        self.source = source
        self.axis = tuple(axis)
        self.where = where
        self.dtype = source.dtype


# ---------------------------------------------------------------------------------------
# construction helpers


def const(value, dtype: str | None = None) -> Expr:
    """A constant. Python ints default to int32, floats to float32, bools to bool."""
    if isinstance(value, Expr):
        return value if dtype is None or value.dtype == dtype else cast(dtype, value)
    if dtype is None:
        if isinstance(value, bool):
            dtype = "bool"
        elif isinstance(value, int):
            dtype = dt.INDEX
        elif isinstance(value, float):
            dtype = "float32"
        else:
            import numpy as np

            if isinstance(value, np.generic):
                return const(value.item(), dt.from_numpy(value.dtype))
            raise IRError(f"cannot make a constant from {value!r} ({type(value).__name__})")
    dt.check(dtype)
    if dt.is_float(dtype):
        return FloatImm(float(value), dtype)
    if dtype != "bool":
        if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))
                                         or value != int(value)):
            raise IRError(f"the constant {value} is not an integer but the dtype is {dtype}")
        # a constant beyond its dtype would wrap silently in the kernel; index constants
        # (int32) may exceed int32 up to int64: lowering widens such index arithmetic
        check_int_fits(int(value), "int64" if dtype == dt.INDEX else dtype)
    return IntImm(int(value), dtype)


def as_expr(value, like: Expr | None = None) -> Expr:
    """Turn a Python number into a constant (of ``like``'s dtype where that fits)."""
    if isinstance(value, Expr):
        return value
    if hasattr(value, "as_expr"):  # te IterVar
        return value.as_expr()
    if like is not None and isinstance(value, (int, float)) and not isinstance(value, bool):
        if dt.is_float(like.dtype) or (isinstance(value, int) and dt.is_int(like.dtype)):
            if isinstance(value, int) and dt.is_int(like.dtype):
                check_int_fits(value, like.dtype, like)
            return const(value, like.dtype)
    return const(value)


def check_int_fits(value: int, dtype: str, where: str | Expr = "") -> None:
    """Raise :class:`IRError` when the integer ``value`` is outside ``dtype``'s range (it
    would wrap silently in the kernel). ``where`` is text, or the expression the constant
    joins (printed only in the error: printing it on every call would be quadratic)."""
    lo, hi = dt.int_range(dtype)
    if not lo <= value <= hi:
        if isinstance(where, Expr):
            where = f"next to {where}"
        raise IRError(
            f"the constant {value} does not fit {dtype} ({lo} to {hi})"
            f"{' ' + where if where else ''}; cast the other operand to a wider integer "
            f"type (te.cast) or use a smaller constant")


def _coerce(a, b) -> tuple[Expr, Expr]:
    if not isinstance(a, Expr) and not hasattr(a, "as_expr"):
        b = as_expr(b)
        a = as_expr(a, like=b)
    else:
        a = as_expr(a)
        b = as_expr(b, like=a)
    if a.dtype != b.dtype:
        target = dt.promote(a.dtype, b.dtype)
        if a.dtype != target:
            a = _implicit_cast(a, target)
        if b.dtype != target:
            b = _implicit_cast(b, target)
    return a, b


def _implicit_cast(e: Expr, dtype: str) -> Expr:
    if isinstance(e, IntImm) and not dt.is_float(dtype):
        return IntImm(e.value, dtype)
    if isinstance(e, (IntImm, FloatImm)) and dt.is_float(dtype):
        return FloatImm(float(e.value), dtype)
    return Cast(dtype, e)


def _binary(op: str, a, b) -> Expr:
    a, b = _coerce(a, b)
    if a.dtype == "bool" and op not in ("and", "or", "min", "max"):
        raise IRError(f"arithmetic {op} on bool operands ({a}, {b}); cast to an int first")
    if op in ("floordiv", "floormod") and dt.is_float(a.dtype) and op == "floormod":
        raise IRError(f"floormod needs integer operands, got {a.dtype}")
    return Bin(op, a, b)


def _div(a, b) -> Expr:
    a, b = _coerce(a, b)
    if dt.is_float(a.dtype):
        return Bin("div", a, b)
    return Bin("floordiv", a, b)


def _compare(op: str, a, b) -> Expr:
    a, b = _coerce(a, b)
    return Cmp(op, a, b)


def logical_and(a, b) -> Expr:
    a, b = as_expr(a), as_expr(b)
    for x in (a, b):
        if x.dtype != "bool":
            raise IRError(f"logical and needs bool operands, got {x.dtype} ({x})")
    return Bin("and", a, b)


def logical_or(a, b) -> Expr:
    a, b = as_expr(a), as_expr(b)
    for x in (a, b):
        if x.dtype != "bool":
            raise IRError(f"logical or needs bool operands, got {x.dtype} ({x})")
    return Bin("or", a, b)


def cast(dtype: str, value) -> Expr:
    value = as_expr(value)
    if value.dtype == dtype:
        return value
    return Cast(dtype, value)


def select(cond, t, f) -> Expr:
    cond = as_expr(cond)
    if cond.dtype != "bool":
        raise IRError(f"if_then_else needs a bool condition, got {cond.dtype} ({cond})")
    t, f = _coerce(t, f)
    return Select(cond, t, f)


def floordiv(a, b) -> Expr:
    return _binary("floordiv", a, b)


def truncdiv(a, b) -> Expr:
    """``a / b`` rounded toward zero on integers (C's ``/``; ONNX ``Div``), IEEE division on
    floats."""
    return _binary("div", a, b)


def truncmod(a, b) -> Expr:
    """The remainder of :func:`truncdiv`: C's ``%`` on integers (the sign of ``a``; ONNX
    ``Mod`` with ``fmod=1``), C's ``fmod`` on floats."""
    return _binary("mod", a, b)


def floormod(a, b) -> Expr:
    return _binary("floormod", a, b)


def emin(a, b) -> Expr:
    return _binary("min", a, b)


def emax(a, b) -> Expr:
    return _binary("max", a, b)


def call(op: str, *args) -> Expr:
    args = tuple(as_expr(a) for a in args)
    dtype = args[0].dtype
    if op in ("exp", "exp2", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "erf", "sin", "cos",
              "pow"):
        if not dt.is_float(dtype):
            raise IRError(f"{op} needs a float argument, got {dtype}")
    if op == "round_tf32" and dtype != "float32":
        raise IRError(f"round_tf32 rounds float32 values, got {dtype}")
    if len(args) > 1:
        a = args
        for x in a[1:]:
            if x.dtype != dtype:
                raise IRError(f"{op} arguments must share a dtype, got {[y.dtype for y in a]}")
    return Call(op, args, dtype)


# ---------------------------------------------------------------------------------------
# reducers

REDUCERS = {
    # name: (identity for float, identity for int, binary op)
    "sum": (0.0, 0, "add"),
    "max": (float("-inf"), -(2**31), "max"),
    "min": (float("inf"), 2**31 - 1, "min"),
}


def reducer_identity(combiner: str, dtype: str) -> Expr:
    fl, it, _ = REDUCERS[combiner]
    if dt.is_float(dtype):
        return FloatImm(fl, dtype)
    if combiner == "max":
        return IntImm(-(2 ** (dt.bits(dtype) - 1)) if not dt.is_uint(dtype) else 0, dtype)
    if combiner == "min":
        return IntImm(2 ** (dt.bits(dtype) - (0 if dt.is_uint(dtype) else 1)) - 1, dtype)
    return IntImm(it, dtype)


def reducer_combine(combiner: str, acc: Expr, value: Expr) -> Expr:
    return Bin(REDUCERS[combiner][2], acc, value)


COMBINER_OF_OP = {op: name for name, (_, _, op) in REDUCERS.items()}
"""The reducer (``sum``, ``max``, ``min``) whose combining op is the key."""


def conjuncts(e: Expr | None) -> list:
    """The terms of a chain of ``and`` s (none for None)."""
    if e is None:
        return []
    if isinstance(e, Bin) and e.op == "and":
        return conjuncts(e.a) + conjuncts(e.b)
    return [e]


# ---------------------------------------------------------------------------------------
# generic traversal


def children(e: Expr) -> tuple:
    # the common node types by exact type first: every walk of the IR calls this
    t = type(e)
    if t is Bin or t is Cmp:
        return (e.a, e.b)
    if t is Var or t is IntImm or t is FloatImm:
        return ()
    if t is Load:
        return e.indices
    if isinstance(e, (Bin, Cmp)):
        return (e.a, e.b)
    if isinstance(e, Not):
        return (e.a,)
    if isinstance(e, Select):
        return (e.cond, e.t, e.f)
    if isinstance(e, Cast):
        return (e.value,)
    if isinstance(e, Call):
        return e.args
    if isinstance(e, (Load, TensorRead)):
        return e.indices
    if isinstance(e, Reduce):
        return (e.source,) if e.where is None else (e.source, e.where)
    return ()


def rebuild(e: Expr, new_children: tuple) -> Expr:
    """A copy of ``e`` with its children replaced (``e`` itself when nothing changed)."""
    t = type(e)
    if t is Bin:
        a, b = new_children
        if a is e.a and b is e.b:
            return e
        return Bin(e.op, a, b, e.dtype)
    if t is Cmp:
        a, b = new_children
        if a is e.a and b is e.b:
            return e
        return Cmp(e.op, a, b)
    old = children(e)
    for a, b in zip(old, new_children):
        if a is not b:
            break
    else:
        return e
    c = new_children
    if isinstance(e, Bin):
        return Bin(e.op, c[0], c[1], e.dtype)
    if isinstance(e, Cmp):
        return Cmp(e.op, c[0], c[1])
    if isinstance(e, Not):
        return Not(c[0])
    if isinstance(e, Select):
        return Select(c[0], c[1], c[2])
    if isinstance(e, Cast):
        return Cast(e.dtype, c[0])
    if isinstance(e, Call):
        return Call(e.op, c, e.dtype)
    if isinstance(e, Load):
        return Load(e.buffer, c)
    if isinstance(e, TensorRead):
        return TensorRead(e.tensor, c)
    if isinstance(e, Reduce):
        return Reduce(e.combiner, c[0], e.axis, c[1] if len(c) > 1 else None)
    raise IRError(f"cannot rebuild {type(e).__name__}")


def transform(e: Expr, fn) -> Expr:
    """Bottom-up rewrite: ``fn(node)`` returns a replacement or None to keep the node."""
    t = type(e)
    if t is Bin or t is Cmp:
        # the common node spelled out (every rewrite of loads walks whole index trees),
        # and its var and constant operands given to ``fn`` here
        a, b = e.a, e.b
        ta, tb = type(a), type(b)
        if ta is Var or ta is IntImm or ta is FloatImm:
            na = fn(a)
            if na is None:
                na = a
        else:
            na = transform(a, fn)
        if tb is Var or tb is IntImm or tb is FloatImm:
            nb = fn(b)
            if nb is None:
                nb = b
        else:
            nb = transform(b, fn)
        if na is not a or nb is not b:
            e = Bin(e.op, na, nb, e.dtype) if t is Bin else Cmp(e.op, na, nb)
    elif t is not Var and t is not IntImm and t is not FloatImm:
        kids = children(e)
        if kids:
            e = rebuild(e, tuple([transform(k, fn) for k in kids]))
    r = fn(e)
    return e if r is None else r


def substitute(e: Expr, vmap: dict) -> Expr:
    """Replace vars (keys, by identity) by expressions (values)."""
    if not vmap:
        return e

    def go(x):
        t = type(x)
        if t is Bin or t is Cmp:
            a, b = x.a, x.b
            na, nb = go(a), go(b)
            if na is a and nb is b:
                return x
            return Bin(x.op, na, nb, x.dtype) if t is Bin else Cmp(x.op, na, nb)
        if t is Var:
            return vmap.get(x, x)
        if t is IntImm or t is FloatImm:
            return x
        if isinstance(x, Var):
            return vmap.get(x, x)
        kids = children(x)
        if not kids:
            return x
        return rebuild(x, tuple([go(k) for k in kids]))

    try:
        return go(e)
    finally:
        # ``go`` refers to itself through its closure: clearing the cell breaks the cycle,
        # so the function and what it holds are freed now, not by the cyclic collector
        go = None


def free_vars(e: Expr, out: set | None = None) -> set:
    out = set() if out is None else out
    stack = [e]
    while stack:
        x = stack.pop()
        if isinstance(x, Var):
            out.add(x)
        else:
            stack.extend(children(x))
    return out


def uses_var(e: Expr, var: Var) -> bool:
    stack = [e]
    while stack:
        x = stack.pop()
        if x is var:
            return True
        stack.extend(children(x))
    return False


def expr_key(e: Expr):
    """A hashable structural key: equal keys mean structurally equal expressions."""
    if isinstance(e, Var):
        return ("v", id(e))
    if isinstance(e, IntImm):
        return ("i", e.value, e.dtype)
    if isinstance(e, FloatImm):
        return ("f", e.value, e.dtype)
    if isinstance(e, (Bin, Cmp)):
        return (e.op, e.dtype, expr_key(e.a), expr_key(e.b))
    if isinstance(e, Not):
        return ("not", expr_key(e.a))
    if isinstance(e, Select):
        return ("sel", expr_key(e.cond), expr_key(e.t), expr_key(e.f))
    if isinstance(e, Cast):
        return ("cast", e.dtype, expr_key(e.value))
    if isinstance(e, Call):
        return ("call", e.op, e.dtype) + tuple(expr_key(a) for a in e.args)
    if isinstance(e, Load):
        return ("load", id(e.buffer)) + tuple(expr_key(i) for i in e.indices)
    if isinstance(e, TensorRead):
        return ("read", id(e.tensor)) + tuple(expr_key(i) for i in e.indices)
    if isinstance(e, Reduce):
        return (
            "reduce",
            e.combiner,
            expr_key(e.source),
            tuple(id(a) for a in e.axis),
            None if e.where is None else expr_key(e.where),
        )
    raise IRError(f"no key for {type(e).__name__}")


def structural_equal(a: Expr, b: Expr) -> bool:
    return a is b or expr_key(a) == expr_key(b)


def is_const(e: Expr, value=None) -> bool:
    if not isinstance(e, (IntImm, FloatImm)):
        return False
    return value is None or e.value == value


def const_value(e: Expr):
    """The Python value of a constant expression, or None."""
    return e.value if isinstance(e, (IntImm, FloatImm)) else None
