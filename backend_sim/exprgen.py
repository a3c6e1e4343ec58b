"""Python code for scalar expressions, for the kernel generator (:mod:`.codegen`).

A value is a Python scalar where it is the same for every lane and a numpy array over
lanes where it is not (see :mod:`.analysis`). Pure expressions get names and are placed in
the outermost loop scope where their vars exist; integer sums are split by loop depth so
that each part is computed as far out as it can be. Loads are left to the subclass.
"""

from __future__ import annotations

import contextlib

import numpy as np

from ..ir import dtype as dt
from ..ir.expr import Bin, Call, Cast, Cmp, Expr, FloatImm, IntImm, Load, Not, Select, Var
from .analysis import ARRAY, SCALAR, Facts
from .emit import Block
from .errors import SimIRError
from .mathfns import int_range, wrap

CMP_SYMBOL = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
ARITH_SYMBOL = {"add": "+", "sub": "-", "mul": "*"}
NUMPY_UNARY = ("exp", "exp2", "log", "sqrt", "sin", "cos", "tanh", "floor", "ceil")
HELPER_UNARY = {"rsqrt": "_rsqrt", "sigmoid": "_sigmoid", "erf": "_erf", "round": "_round",
                "round_tf32": "_tf32"}
MAX_PARENS = 120
"""Parentheses in one generated expression before part of it goes to a temporary (the
Python tokenizer stops at 200 nesting levels)."""


def np_type(dtype: str) -> str:
    """The numpy type that generated code names for ``dtype``.

    bfloat16 values are float32 values that every operation rounds to bfloat16 (nearest
    even) before anything else sees them, so they are always exact bfloat16 numbers;
    float16 is numpy's float16, whose operations round to float16 each time. fp8 values
    are their uint8 bit patterns, as in memory: the GPU has no fp8 arithmetic, so they are
    only loaded, stored, selected and converted (through :mod:`ptxforge.ir.float8`).
    """
    if dtype == "bfloat16":
        return "np.float32"
    if dtype.startswith("float8"):
        return "np.uint8"
    return f"np.{'bool_' if dtype == 'bool' else dtype}"


def storage_dtype(dtype: str) -> str:
    """The numpy dtype name of simulator buffers of IR ``dtype`` (bfloat16: float32)."""
    return np_type(dtype)[3:]


def is_name(code: str) -> bool:
    bare = code[2:-1] if code.startswith("(-") else code
    return bare.isidentifier() or bare.isdigit() or code in ("True", "False")


class ExprEmitter:
    """Emits expression code into blocks; ``load(e, block)`` comes from the subclass,
    which knows how buffers are laid out."""

    def __init__(self, name: str):
        self.name = name
        self.facts = Facts(name)
        self.constants: dict = {}
        self.views: set = set()  # codes that are views of a local buffer row
        self._count = 0
        self._float_names: dict = {}
        self._inner = False  # inside a pure expression that gets one name as a whole
        self._keep: list = []  # expressions made here, kept alive for id-keyed memos

    # names ----------------------------------------------------------------------------
    def tmp(self, prefix: str = "t") -> str:
        self._count += 1
        return f"{prefix}{self._count}"

    def mat(self, code: str, B: Block) -> str:
        """``code`` as a name (assigning it to a fresh temporary unless it is one)."""
        if is_name(code):
            return code
        name = self.tmp()
        B.line(f"{name} = {code}")
        if code in self.views:
            self.views.add(name)
        return name

    def bounded(self, code: str, B: Block) -> str:
        return self.mat(code, B) if code.count("(") > MAX_PARENS else code

    def int_lit(self, value: int, dtype: str) -> str:
        if dtype == "bool":
            return "True" if value else "False"
        v = wrap(value, dtype)
        return str(v) if v >= 0 else f"({v})"

    def float_const(self, value: float, dtype: str) -> str:
        """The name of a typed float constant (exact, NaN and infinities included)."""
        key = (repr(value), dtype)
        name = self._float_names.get(key)
        if name is None:
            name = self._float_names[key] = f"_k{len(self._float_names)}"
            if dt.is_half(dtype):
                value = dt.round_to(np.float64(value), dtype)[()]
            if dtype.startswith("float8"):
                from ..ir.float8 import float8_bits

                value = float8_bits(np.float64(value), dtype)[()]
            self.constants[name] = getattr(np, storage_dtype(dtype))(value)
        return name

    def fp8_cast(self, code: str, src: str, dst: str, kind: str, iv) -> str:
        """A conversion to or from fp8 bit patterns: decoded exactly to float32, encoded
        as ``cvt.rn.satfinite`` (through float32 for other sources)."""
        if src.startswith("float8"):
            f32 = f"_fp8f({code}, {src!r})"
            return f32 if dst == "float32" else self.cast_code(f32, "float32", dst, kind, iv)
        if src != "float32":
            code = self.cast_code(code, src, "float32", kind, iv)
        return f"_fp8b({code}, {dst!r})"

    def zero(self, dtype: str) -> str:
        if dt.is_float(dtype):
            return self.float_const(0.0, dtype)
        return self.int_lit(0, dtype)

    # expressions ------------------------------------------------------------------------
    def ex(self, e: Expr, B: Block) -> str:
        """Python code for the value of ``e`` in block ``B``.

        A pure (load-free) expression is computed in the outermost scope where its vars
        are defined; the largest pure expressions get names, shared by every later use
        that the defining block dominates.
        """
        if isinstance(e, IntImm):
            return self.int_lit(e.value, e.dtype)
        if isinstance(e, FloatImm):
            return self.float_const(e.value, e.dtype)
        f = self.facts
        if isinstance(e, Var):
            info = f.var(e)
            return self.ex(info.alias, B) if info.alias is not None else info.code
        if not f.pure(e):
            return self.bounded(self.node(e, B), B)
        d = f.depth(e)
        if d < B.scope.depth:
            B = B.scope.at_depth(d).prologue
        elif self._inner:
            return self.bounded(self.node(e, B), B)
        key = f.key(e)
        name = lookup(B, key)
        if name is None:
            outer, self._inner = self._inner, True
            try:
                code = self.node(e, B)
            finally:
                self._inner = outer
            name = self.tmp("h")
            B.line(f"{name} = {code}")
            B.cse[key] = name
        return name

    def node(self, e: Expr, B: Block) -> str:
        if isinstance(e, Bin):
            return self.binary(e, B)
        if isinstance(e, Cmp):
            d = dt.promote(e.a.dtype, e.b.dtype)
            a, b = self.operand(e.a, d, B), self.operand(e.b, d, B)
            return f"({a} {CMP_SYMBOL[e.op]} {b})"
        if isinstance(e, Not):
            a = self.ex(e.a, B)
            return f"(not {a})" if self.facts.kind(e) == SCALAR else f"(~{a})"
        if isinstance(e, Select):
            return self.select(e, B)
        if isinstance(e, Cast):
            v = e.value
            return self.cast_code(self.ex(v, B), v.dtype, e.dtype, self.facts.kind(v),
                                  self.facts.interval(v))
        if isinstance(e, Call):
            return self.call(e, B)
        if isinstance(e, Load):
            return self.load(e, B)
        raise SimIRError(
            f"kernel {self.name}: {type(e).__name__} expressions cannot appear in device IR"
        )

    def operand(self, e: Expr, dtype: str, B: Block) -> str:
        code = self.ex(e, B)
        if e.dtype == dtype:
            return code
        return self.cast_code(code, e.dtype, dtype, self.facts.kind(e), self.facts.interval(e))

    def cast_code(self, code: str, src: str, dst: str, kind: str, iv) -> str:
        if src == dst:
            return code
        if src.startswith("float8") or dst.startswith("float8"):
            return self.fp8_cast(code, src, dst, kind, iv)
        if dst == "bfloat16":
            return f"_bf16({code})"
        if src == "bfloat16" and dst == "float32":
            return code
        target = np_type(dst)
        if kind == ARRAY:
            if dst == "bool":
                return f"({code} != 0)"
            if dt.is_float(src) and not dt.is_float(dst):
                return f"_f2i({code}, {dst!r})"
            return f"{code}.astype({target})"
        if dst == "bool":
            return f"bool({code} != 0)"
        if dt.is_float(dst):
            return f"{target}({code})"
        if dt.is_float(src):
            return f"_f2i({code}, {dst!r})"
        if src == "bool":
            return f"int({code})"
        lo, hi = int_range(dst)
        if iv is not None and lo <= iv[0] and iv[1] <= hi:
            return code
        return self.wrap_code(code, dst)

    def wrap_code(self, code: str, dtype: str) -> str:
        return f"_wrap32({code})" if dtype == "int32" else f"_wrap({code}, {dtype!r})"

    def binary(self, e: Bin, B: Block) -> str:
        f = self.facts
        op, d = e.op, e.dtype
        kind = f.kind(e)
        if op in ("and", "or"):
            if not f.pure(e.b):
                # like C's && and ||: the right side's loads run only where it decides
                short = (Select(e.a, e.b, IntImm(0, "bool")) if op == "and"
                         else Select(e.a, IntImm(1, "bool"), e.b))
                self._keep.append(short)
                return self.select(short, B)
            a, b = self.ex(e.a, B), self.ex(e.b, B)
            if kind == SCALAR:
                return f"({a} {op} {b})"
            return f"({a} {'&' if op == 'and' else '|'} {b})"
        integer = not dt.is_float(d)
        if integer and d != "bool" and op in ARITH_SYMBOL:
            code = self.affine(e, B)
            if code is not None:
                return code
        a, b = self.operand(e.a, d, B), self.operand(e.b, d, B)
        if op in ARITH_SYMBOL:
            code = f"({a} {ARITH_SYMBOL[op]} {b})"
            if integer and kind == SCALAR and f.interval(e) is None:
                code = self.wrap_code(code, d)
            return self.rounded(code, d)
        if op in ("min", "max"):
            if not integer:  # NaN-propagating, as the GPU code's llvm.minimum/maximum
                return f"np.{'minimum' if op == 'min' else 'maximum'}({a}, {b})"
            if kind == SCALAR:
                return f"{op}({a}, {b})"
            return f"np.{'minimum' if op == 'min' else 'maximum'}({a}, {b})"
        if op == "div":
            if integer:
                return f"_tdiv({a}, {b}, {d!r})"
            return self.rounded(f"({a} / {b})", d)
        if op == "mod":
            if integer:
                return f"_tmod({a}, {b}, {d!r})"
            return self.rounded(f"np.fmod({a}, {b})", d)
        divisor = f.interval(e.b)
        nonzero = divisor is not None and (divisor[0] > 0 or divisor[1] < 0)
        if not integer:
            # each step rounds, as the GPU code's fdiv, floor, fmul and fsub do
            q = f"np.floor({self.rounded(f'({a} / {b})', d)})"
            if op == "floordiv":
                return q
            a, b = self.mat(a, B), self.mat(b, B)
            return self.rounded(f"({a} - {self.rounded(f'{q} * {b}', d)})", d)
        if op == "floordiv":
            if kind == ARRAY:
                return f"({a} // {b})"
            code = f"({a} // {b})" if nonzero else f"_fdiv({a}, {b})"
            return code if f.interval(e) is not None else self.wrap_code(code, d)
        if op == "floormod":
            if kind == SCALAR:
                return f"({a} % {b})" if nonzero else f"_fmod({a}, {b})"
            if isinstance(e.b, IntImm) and e.b.value > 0:
                # numpy's integer remainder is slow; floor division by a constant is not
                a = self.mat(a, B)
                return f"({a} - {a} // {b} * {b})"
            return f"({a} % {b})"
        raise SimIRError(f"kernel {self.name}: unknown binary op {op!r}")

    def rounded(self, code: str, dtype: str) -> str:
        """``code`` rounded to bfloat16 where ``dtype`` is bfloat16 (other dtypes round in
        numpy already)."""
        return f"_bf16({code})" if dtype == "bfloat16" else code

    # conditions -------------------------------------------------------------------------
    def conditions(self, cond: Expr, holds: bool = True) -> list:
        """(expression key, interval) facts implied by ``cond`` being true (or false, with
        ``holds=False``): ``e < c``, ``e >= c`` and the like for a constant ``c``, through
        ``and``, ``or`` and ``not``."""
        if isinstance(cond, Not):
            return self.conditions(cond.a, not holds)
        if isinstance(cond, Bin) and cond.op == ("and" if holds else "or"):
            return self.conditions(cond.a, holds) + self.conditions(cond.b, holds)
        if not isinstance(cond, Cmp) or cond.op not in ("lt", "le", "gt", "ge"):
            return []
        a, b, op = cond.a, cond.b, cond.op
        if not holds:
            op = {"lt": "ge", "le": "gt", "gt": "le", "ge": "lt"}[op]
        if isinstance(a, IntImm) and not isinstance(b, IntImm):
            a, b, op = b, a, {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le"}[op]
        if (not isinstance(b, IntImm) or dt.is_float(a.dtype) or a.dtype == "bool"
                or not self.facts.pure(a)):
            return []  # a load in the condition may read memory the branch changes
        lo, hi = int_range(a.dtype)
        c = b.value
        bound = {"lt": (lo, c - 1), "le": (lo, c), "gt": (c + 1, hi), "ge": (c, hi)}[op]
        return [(self.facts.key(a), bound)]

    @contextlib.contextmanager
    def assuming(self, cond: Expr, holds: bool = True):
        """Within the block, what ``cond`` (or its negation) implies holds for the active
        lanes."""
        self.facts.refine(self.conditions(cond, holds))
        try:
            yield
        finally:
            self.facts.unrefine()

    # affine index arithmetic ------------------------------------------------------------
    def linear(self, e: Expr, scale: int, terms: dict, dtype: str) -> int:
        """Add ``scale * e`` to ``terms`` (atom key -> [coefficient, atom]); return the
        constant part."""
        if isinstance(e, IntImm):
            return scale * e.value
        if isinstance(e, Var):
            info = self.facts.var(e)
            if info.alias is not None and info.alias.dtype == dtype:
                return self.linear(info.alias, scale, terms, dtype)
        if (isinstance(e, Bin) and e.dtype == dtype and e.a.dtype == dtype
                and e.b.dtype == dtype):
            if e.op == "add":
                return (self.linear(e.a, scale, terms, dtype)
                        + self.linear(e.b, scale, terms, dtype))
            if e.op == "sub":
                return (self.linear(e.a, scale, terms, dtype)
                        + self.linear(e.b, -scale, terms, dtype))
            if e.op == "mul" and isinstance(e.b, IntImm):
                return self.linear(e.a, scale * e.b.value, terms, dtype)
            if e.op == "mul" and isinstance(e.a, IntImm):
                return self.linear(e.b, scale * e.a.value, terms, dtype)
        key = self.facts.key(e)
        slot = terms.get(key)
        if slot is None:
            terms[key] = [scale, e]
        else:
            slot[0] += scale
        return 0

    def affine(self, e: Bin, B: Block) -> str | None:
        """Code for an integer sum whose terms live at different loop depths: each depth's
        part is computed in that depth's prologue. None when nothing would move."""
        f = self.facts
        d = e.dtype
        terms: dict = {}
        const = wrap(self.linear(e, 1, terms, d), d)
        cur = B.scope.depth
        groups: dict = {}
        for coef, atom in terms.values():
            coef = wrap(coef, d)
            if coef == 0:
                continue
            depth = f.depth(atom) if f.pure(atom) else cur
            groups.setdefault(depth, []).append((coef, atom))
        if len(groups) < 2:
            return None
        pieces = []
        for depth in sorted(groups):
            items = groups[depth]
            if depth < cur:
                pieces.append(self.hoist_sum(items, const, depth, B, d))
                const = 0
            else:
                pieces.extend(self.term(coef, atom, B) for coef, atom in items)
        return self.sum_code(pieces, const, d)

    def term(self, coef: int, atom: Expr, B: Block) -> tuple:
        lo, hi = self.facts.range(atom)
        a, b = coef * lo, coef * hi
        return (self.ex(atom, B), coef, self.facts.kind(atom), (min(a, b), max(a, b)))

    def hoist_sum(self, items: list, const: int, depth: int, B: Block, dtype: str) -> tuple:
        f = self.facts
        P = B.scope.at_depth(depth).prologue
        key = ("sum", dtype, const, tuple(sorted((repr(f.key(a)), c) for c, a in items)))
        hit = lookup(P, key)
        if hit is None and len(items) == 1 and items[0][0] == 1 and const == 0:
            return self.term(1, items[0][1], P)
        if hit is None:
            pieces = [self.term(c, a, P) for c, a in items]
            name = self.tmp("h")
            P.line(f"{name} = {self.sum_code(pieces, const, dtype)}")
            kind = ARRAY if any(p[2] == ARRAY for p in pieces) else SCALAR
            lo = const + sum(p[3][0] for p in pieces)
            hi = const + sum(p[3][1] for p in pieces)
            hit = P.cse[key] = (name, kind, (lo, hi))
        name, kind, iv = hit
        lo, hi = int_range(dtype)
        if kind == SCALAR and not (lo <= iv[0] and iv[1] <= hi):
            iv = (lo, hi)  # the temporary holds the wrapped value
        return (name, 1, kind, iv)

    def sum_code(self, pieces: list, const: int, dtype: str) -> str:
        """Scalars first (exact Python ints, wrapped once if they may overflow), then the
        arrays (numpy wraps them)."""
        signed = not dt.is_uint(dtype)
        scalars = [p for p in pieces if p[2] == SCALAR]
        arrays = [p for p in pieces if p[2] == ARRAY]
        lo = const + sum(p[3][0] for p in scalars)
        hi = const + sum(p[3][1] for p in scalars)
        text = _join([(p[0], p[1]) for p in scalars] + ([(str(const), 1)] if const else []),
                     signed)
        rlo, rhi = int_range(dtype)
        if text and not (rlo <= lo and hi <= rhi):
            text = self.wrap_code(text, dtype)
        elif text and len(scalars) + bool(const) > 1:
            text = f"({text})"
        if not arrays:
            return text or "0"
        parts = ([(text, 1)] if text else []) + [(p[0], p[1]) for p in arrays]
        return f"({_join(parts, signed)})"

    # select, cast, call -----------------------------------------------------------------
    def spread(self, code: str, e: Expr, kind: str) -> str:
        """A lane-independent value as an array when the context needs one."""
        if kind == ARRAY and self.facts.kind(e) == SCALAR:
            return f"_full({code}, _L, {np_type(e.dtype)})"
        return code

    def select(self, e: Select, B: Block) -> str:
        f = self.facts
        if isinstance(e.cond, IntImm):
            return self.ex(e.t if e.cond.value else e.f, B)
        kind = f.kind(e)
        d = e.dtype
        pure_t, pure_f = f.pure(e.t), f.pure(e.f)
        if f.kind(e.cond) == SCALAR:
            c = self.ex(e.cond, B)
            if pure_t and pure_f:
                t = self.spread(self.ex(e.t, B), e.t, kind)
                fc = self.spread(self.ex(e.f, B), e.f, kind)
                code = f"({t} if {c} else {fc})"
                if t in self.views or fc in self.views:
                    self.views.add(code)
                return code
            # only the chosen side runs, so its loads cannot fault for the other
            r = self.tmp("r")
            for header, side in ((f"if {c}", e.t), ("else", e.f)):
                S = B.compound(header)
                with self.assuming(e.cond, side is e.t):
                    code = self.spread(self.ex(side, S), side, kind)
                S.line(f"{r} = {code}")
                if code in self.views:
                    self.views.add(r)
            return r
        c = self.mat(self.ex(e.cond, B), B)
        sides = []
        for side, negate, pure in ((e.t, False, pure_t), (e.f, True, pure_f)):
            if pure:
                sides.append(self.ex(side, B))
                continue
            # loads of a side run only for the lanes that choose it
            m = self.tmp("m")
            term = f"~{c}" if negate else c
            B.line(f"{m} = {B.mask} & {term}" if B.mask else f"{m} = {term}")
            r = self.tmp("r")
            S = B.compound(f"if {m}.any()", mask=m, nz=None)
            with self.assuming(e.cond, not negate):
                S.line(f"{r} = {self.ex(side, S)}")
            B.compound("else").line(f"{r} = {self.zero(d)}")
            sides.append(r)
        code = f"np.where({c}, {sides[0]}, {sides[1]})"
        if not dt.is_float(d):
            code = f"{code}.astype({np_type(d)}, copy=False)"
        return code

    def call(self, e: Call, B: Block) -> str:
        argd = e.args[0].dtype
        if e.op == "shfl_xor":
            value, mask, width = e.args
            return (f"_shfl(_C, {self.ex(value, B)}, {mask.value}, {width.value}, "
                    f"{B.mask})")
        args = [self.operand(a, argd, B) for a in e.args]
        kind = self.facts.kind(e)
        if dt.is_half(argd):
            # as the GPU code: fma rounds once, everything else computes in float32 and
            # rounds once at the end
            if e.op == "fma":
                code = f"_fma_wide({', '.join(args)})"
            else:
                code = self.call_code(e.op, "float32", [f"_f32({a})" for a in args], kind)
            code = f"_bf16({code})" if argd == "bfloat16" else f"_f16({code})"
        else:
            code = self.call_code(e.op, argd, args, kind)
        if e.dtype != argd:
            code = self.cast_code(code, argd, e.dtype, kind, None)
        return code

    def call_code(self, op: str, argd: str, args: list, kind: str) -> str:
        floating = dt.is_float(argd)
        a = args[0]
        if op in ("floor", "ceil", "round") and not floating:
            return a
        if op in NUMPY_UNARY:
            return f"np.{op}({a})"
        if op in ("fabs", "abs"):
            if floating or kind == ARRAY:
                return f"np.abs({a})"
            return self.wrap_code(f"abs({a})", argd) if argd != "bool" else a
        if op in HELPER_UNARY:
            return f"{HELPER_UNARY[op]}({a})"
        if op == "pow":
            return f"np.power({a}, {args[1]})"
        if op == "fma":
            if floating:
                return f"_fma({a}, {args[1]}, {args[2]})"
            code = f"({a} * {args[1]} + {args[2]})"
            return self.wrap_code(code, argd) if kind == SCALAR else code
        raise SimIRError(f"kernel {self.name}: unknown intrinsic {op!r}")


def lookup(B: Block, key):
    """A name for ``key`` defined in ``B`` or a block that dominates it."""
    while B is not None:
        hit = B.cse.get(key)
        if hit is not None:
            return hit
        B = B.parent
    return None


def _join(parts: list, signed: bool) -> str:
    """``a + b*3 - c`` from (code, coefficient) pairs."""
    out = ""
    for code, coef in parts:
        neg = signed and coef < 0
        mag = -coef if neg else coef
        text = code if mag == 1 else f"{code} * {mag}"
        if not out:
            out = f"-{text}" if neg else text
        else:
            out += f" - {text}" if neg else f" + {text}"
    return out
