"""Device IR expressions -> LLVM IR text: arithmetic, comparisons, selects, casts, calls.

:class:`ExprCodegen` is the expression half of the kernel code generator
(:class:`.codegen.KernelCodegen` derives from it); the rules it follows are listed in
:mod:`.codegen`'s docstring.
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
    Not,
    Select,
    Var,
)
from ..ir.stmt import Buffer, PrimFunc, walk_exprs
from . import nvptx
from .llvm_text import (
    FunctionWriter,
    ModuleParts,
    float_literal,
    int_literal,
    pointer_type,
)
from .mathlib import math_call


class CodegenError(ValueError):
    """A kernel that cannot be compiled to NVPTX (names the kernel and what is wrong)."""


@dataclass(frozen=True)
class BufRef:
    """How codegen addresses a buffer: base operand, address space, element type, align."""

    ptr: str  # operand naming the buffer's first element
    addrspace: int
    elem: str  # storage type
    align: int


_FLOAT_BIN = {"add": "fadd contract", "sub": "fsub contract", "mul": "fmul contract",
              "div": "fdiv"}
_INT_CMP_SIGNED = {"eq": "eq", "ne": "ne", "lt": "slt", "le": "sle", "gt": "sgt", "ge": "sge"}
_INT_CMP_UNSIGNED = {"eq": "eq", "ne": "ne", "lt": "ult", "le": "ule", "gt": "ugt", "ge": "uge"}
_FLOAT_CMP = {"eq": "oeq", "ne": "une", "lt": "olt", "le": "ole", "gt": "ogt", "ge": "oge"}
_HALF_TYPES = ("half", "bfloat")


def llvm_type(dtype: str) -> str:
    """LLVM register type of an IR dtype."""
    return nvptx.LLVM_TYPES[dtype]


def _may_fault(e: Expr) -> bool:
    """True if evaluating ``e`` may touch memory or divide by zero when its guard is false."""
    for x in walk_exprs(e):
        if isinstance(x, Load):
            return True
        if isinstance(x, Bin) and x.op in ("floordiv", "floormod", "div", "mod") and \
                not dt.is_float(x.dtype):
            if not (isinstance(x.b, IntImm) and x.b.value != 0):
                return True
    return False


class ExprCodegen:
    """Emits expressions into ``self.w``; subclasses set up the state listed here."""

    func: PrimFunc
    w: FunctionWriter
    parts: ModuleParts
    vars: dict
    bufs: dict
    nonneg: set

    def expr(self, e: Expr, hint: str | None = None) -> str:
        """Emit ``e``; return its operand (``%name`` or a literal)."""
        if isinstance(e, IntImm):
            return int_literal(e.value, llvm_type(e.dtype))
        if isinstance(e, FloatImm):
            return float_literal(e.value, llvm_type(e.dtype))
        if isinstance(e, Var):
            try:
                return self.vars[e]
            except KeyError:
                raise CodegenError(
                    f"kernel {self.func.name}: variable {e.name} is used outside the loop or "
                    "let that defines it") from None
        method = getattr(self, "_e_" + type(e).__name__, None)
        if method is None:
            raise CodegenError(
                f"kernel {self.func.name}: {type(e).__name__} cannot appear in device IR: {e}")
        return method(e, hint)

    def _address(self, buf: Buffer, index: Expr) -> tuple[str, BufRef]:
        ref = self.bufs.get(buf)
        if ref is None:
            raise CodegenError(
                f"kernel {self.func.name}: buffer {buf.name} is accessed outside its "
                "allocation (or is not a kernel parameter)")
        idx = self.expr(index)
        ptr = self.w.value(
            f"getelementptr inbounds {ref.elem}, {pointer_type(ref.addrspace)} {ref.ptr}, "
            f"{llvm_type(index.dtype)} {idx}", buf.name + ".addr")
        return ptr, ref

    def _e_Load(self, e: Load, hint: str | None) -> str:
        if len(e.indices) != 1:
            raise CodegenError(
                f"kernel {self.func.name}: load from {e.buffer.name} has {len(e.indices)} "
                "indices; device IR buffers are flat")
        ptr, ref = self._address(e.buffer, e.indices[0])
        v = self.w.value(f"load {ref.elem}, {pointer_type(ref.addrspace)} {ptr}, "
                         f"align {ref.align}", hint or e.buffer.name + ".v")
        if e.dtype == "bool":
            v = self.w.value(f"icmp ne i8 {v}, 0", hint or e.buffer.name + ".v")
        return v

    def _e_Bin(self, e: Bin, hint: str | None) -> str:
        op, dtype = e.op, e.dtype
        ty = llvm_type(dtype)
        if op in ("and", "or"):
            if _may_fault(e.b):
                # short-circuit: b is evaluated only when a does not decide the result
                t, f = (e.b, IntImm(0, "bool")) if op == "and" else (IntImm(1, "bool"), e.b)
                return self._diamond(e.a, t, f, "i1", hint or op)
            a, b = self.expr(e.a), self.expr(e.b)
            return self.w.value(f"{op} i1 {a}, {b}", hint or op)
        a, b = self.expr(e.a), self.expr(e.b)
        name = hint or op
        if dt.is_float(dtype):
            if op in _FLOAT_BIN:
                return self.w.value(f"{_FLOAT_BIN[op]} {ty} {a}, {b}", name)
            if op in ("min", "max"):
                return self._intrinsic("minimum" if op == "min" else "maximum", ty, [a, b],
                                       name)
            if op == "mod":
                # C's fmod; exact, so a 16-bit float computes it in float32 without error
                if ty in _HALF_TYPES:
                    wa = self.w.value(f"fpext {ty} {a} to float", "t")
                    wb = self.w.value(f"fpext {ty} {b} to float", "t")
                    r = self.w.value(f"frem float {wa}, {wb}", "t")
                    return self.w.value(f"fptrunc float {r} to {ty}", name)
                return self.w.value(f"frem {ty} {a}, {b}", name)
            if op == "floordiv":
                q = self.w.value(f"fdiv {ty} {a}, {b}", "q")
                return self._intrinsic("floor", ty, [q], name)
            if op == "floormod":
                q = self._intrinsic("floor", ty, [self.w.value(f"fdiv {ty} {a}, {b}", "q")],
                                    "q")
                return self.w.value(
                    f"fsub {ty} {a}, {self.w.value(f'fmul {ty} {q}, {b}', 't')}", name)
        if dtype == "bool":
            if op in ("min", "max"):
                return self.w.value(f"{'and' if op == 'min' else 'or'} i1 {a}, {b}", name)
            raise CodegenError(f"kernel {self.func.name}: {op} on bool operands: {e}")
        unsigned = dt.is_uint(dtype)
        flags = " nsw" if dtype in ("int32", "int64") else ""
        if op in ("add", "sub", "mul"):
            return self.w.value(f"{op}{flags} {ty} {a}, {b}", name)
        if op in ("min", "max"):
            fn = ("u" if unsigned else "s") + op
            return self._intrinsic(fn, ty, [a, b], name)
        if op == "div":  # C's division: rounds toward zero (ONNX Div)
            return self.w.value(f"{'udiv' if unsigned else 'sdiv'} {ty} {a}, {b}", name)
        if op == "mod":  # C's remainder: the sign of the dividend (ONNX Mod, fmod=1)
            return self.w.value(f"{'urem' if unsigned else 'srem'} {ty} {a}, {b}", name)
        if op in ("floordiv", "floormod"):
            if unsigned:
                return self.w.value(f"{'udiv' if op == 'floordiv' else 'urem'} {ty} {a}, {b}",
                                    name)
            return self._floor_divmod(op, e, ty, a, b, name)
        raise CodegenError(f"kernel {self.func.name}: unsupported op {op} on {dtype}: {e}")

    def _floor_divmod(self, op: str, e: Bin, ty: str, a: str, b: str, name: str) -> str:
        w = self.w
        c = e.b.value if isinstance(e.b, IntImm) else None
        if c is not None and c > 0:
            if c == 1:
                return int_literal(0, ty) if op == "floormod" else a
            if c & (c - 1) == 0:
                if op == "floordiv":
                    shift = "lshr" if self._nonneg(e.a) else "ashr"
                    return w.value(f"{shift} {ty} {a}, {c.bit_length() - 1}", name)
                return w.value(f"and {ty} {a}, {c - 1}", name)
            if self._nonneg(e.a):
                return w.value(f"{'udiv' if op == 'floordiv' else 'urem'} {ty} {a}, {c}", name)
            r = w.value(f"srem {ty} {a}, {c}", "rem")
            neg = w.value(f"icmp slt {ty} {r}, 0", "rem.neg")
            if op == "floormod":
                fixed = w.value(f"add nsw {ty} {r}, {c}", "rem.fix")
                return w.value(f"select i1 {neg}, {ty} {fixed}, {ty} {r}", name)
            q = w.value(f"sdiv {ty} {a}, {c}", "quot")
            adj = w.value(f"sext i1 {neg} to {ty}", "adj")
            return w.value(f"add nsw {ty} {q}, {adj}", name)
        # general divisor: correct when the remainder is non-zero and its sign differs from b
        r = w.value(f"srem {ty} {a}, {b}", "rem")
        nz = w.value(f"icmp ne {ty} {r}, 0", "rem.nz")
        x = w.value(f"xor {ty} {r}, {b}", "t")
        diff = w.value(f"icmp slt {ty} {x}, 0", "rem.sign")
        adj = w.value(f"and i1 {nz}, {diff}", "adj")
        if op == "floormod":
            fixed = w.value(f"add {ty} {r}, {b}", "rem.fix")
            return w.value(f"select i1 {adj}, {ty} {fixed}, {ty} {r}", name)
        q = w.value(f"sdiv {ty} {a}, {b}", "quot")
        return w.value(f"sub {ty} {q}, {w.value(f'zext i1 {adj} to {ty}', 'adj')}", name)

    def _nonneg(self, e: Expr) -> bool:
        """Whether integer ``e`` is provably >= 0 (for cheaper division)."""
        if isinstance(e, IntImm):
            return e.value >= 0
        if isinstance(e, Var):
            return e in self.nonneg
        if dt.is_uint(e.dtype) or e.dtype == "bool":
            return True
        if isinstance(e, Bin):
            if e.op in ("add", "mul", "min"):
                return self._nonneg(e.a) and self._nonneg(e.b)
            if e.op == "max":
                return self._nonneg(e.a) or self._nonneg(e.b)
            if e.op == "floordiv":
                return self._nonneg(e.a) and isinstance(e.b, IntImm) and e.b.value > 0
            if e.op == "floormod":
                return isinstance(e.b, IntImm) and e.b.value > 0
            return False
        if isinstance(e, Cast):
            return not dt.is_float(e.value.dtype) and self._nonneg(e.value) and \
                dt.bits(e.dtype) >= dt.bits(e.value.dtype)
        if isinstance(e, Select):
            return self._nonneg(e.t) and self._nonneg(e.f)
        return False

    def _e_Cmp(self, e: Cmp, hint: str | None) -> str:
        a, b = self.expr(e.a), self.expr(e.b)
        src = e.a.dtype
        ty = llvm_type(src)
        if dt.is_float(src):
            return self.w.value(f"fcmp {_FLOAT_CMP[e.op]} {ty} {a}, {b}", hint or e.op)
        table = _INT_CMP_UNSIGNED if (dt.is_uint(src) or src == "bool") else _INT_CMP_SIGNED
        return self.w.value(f"icmp {table[e.op]} {ty} {a}, {b}", hint or e.op)

    def _e_Not(self, e: Not, hint: str | None) -> str:
        return self.w.value(f"xor i1 {self.expr(e.a)}, true", hint or "not")

    def _e_Select(self, e: Select, hint: str | None) -> str:
        ty = llvm_type(e.dtype)
        if _may_fault(e.t) or _may_fault(e.f):
            return self._diamond(e.cond, e.t, e.f, ty, hint or "sel")
        c, t, f = self.expr(e.cond), self.expr(e.t), self.expr(e.f)
        return self.w.value(f"select i1 {c}, {ty} {t}, {ty} {f}", hint or "sel")

    def _diamond(self, cond: Expr, t: Expr, f: Expr, ty: str, hint: str) -> str:
        """``cond ? t : f`` with control flow, evaluating only the chosen side."""
        w = self.w
        c = self.expr(cond)
        then_l, else_l, end_l = w.label("sel.then"), w.label("sel.else"), w.label("sel.end")
        w.op(f"br i1 {c}, label %{then_l}, label %{else_l}")
        w.start_block(then_l)
        tv = self.expr(t)
        then_end = w.block
        w.op(f"br label %{end_l}")
        w.start_block(else_l)
        fv = self.expr(f)
        else_end = w.block
        w.op(f"br label %{end_l}")
        w.start_block(end_l)
        return w.value(f"phi {ty} [ {tv}, %{then_end} ], [ {fv}, %{else_end} ]", hint)

    def _e_Cast(self, e: Cast, hint: str | None) -> str:
        return self.cast(self.expr(e.value), e.value.dtype, e.dtype, hint or "cast")

    def cast(self, v: str, src: str, dst: str, hint: str) -> str:
        """Convert operand ``v`` from IR dtype ``src`` to ``dst``."""
        if src == dst:
            return v
        if src.startswith("float8") or dst.startswith("float8"):
            return self._fp8_cast(v, src, dst, hint)
        w = self.w
        st, tt = llvm_type(src), llvm_type(dst)
        if dst == "bool":
            if dt.is_float(src):
                return w.value(f"fcmp une {st} {v}, {float_literal(0.0, st)}", hint)
            return w.value(f"icmp ne {st} {v}, 0", hint)
        if dt.is_float(src) and dt.is_float(dst):
            if st == tt:
                return v
            if st in _HALF_TYPES and tt in _HALF_TYPES:
                v = w.value(f"fpext {st} {v} to float", hint)
                st = "float"
            widen = dt.bits(src) < dt.bits(dst) or st in _HALF_TYPES and tt == "float"
            return w.value(f"{'fpext' if widen else 'fptrunc'} {st} {v} to {tt}", hint)
        if dt.is_float(dst):
            op = "uitofp" if (dt.is_uint(src) or src == "bool") else "sitofp"
            return w.value(f"{op} {st} {v} to {tt}", hint)
        if dt.is_float(src):
            fn = "fptoui.sat" if dt.is_uint(dst) else "fptosi.sat"
            if st in _HALF_TYPES:
                v = w.value(f"fpext {st} {v} to float", hint)
                st = "float"
            name = f"llvm.{fn}.{tt}.{nvptx.INTRINSIC_SUFFIX[st]}"
            ref = self.parts.declare(name, f"{tt} ({st})")
            return w.value(f"call {tt} {ref}({st} {v})", hint)
        sb, db = int(st[1:]), int(tt[1:])
        if sb == db:
            return v
        if sb > db:
            return w.value(f"trunc {st} {v} to {tt}", hint)
        ext = "zext" if (dt.is_uint(src) or src == "bool") else "sext"
        return w.value(f"{ext} {st} {v} to {tt}", hint)

    def _fp8_cast(self, v: str, src: str, dst: str, hint: str) -> str:
        """fp8 conversions (sm_89+; fp8 values are ``i8`` bit patterns): to fp8 from float32
        with ``cvt.rn.satfinite.{e4m3,e5m2}x2.f32`` (the pair's low byte), from fp8 to f16
        exactly with ``cvt.rn.f16x2.{e4m3,e5m2}x2`` and on from there; other dtypes go
        through float32."""
        from ..ir.float8 import float8_format

        target = getattr(self, "target", None)
        if target is not None and target.sm < 89:
            raise CodegenError(f"converting {src} to {dst} needs the fp8 cvt of sm_89 or "
                               f"newer; the target is {target.arch}")
        w = self.w
        if src.startswith("float8"):
            fmt = float8_format(src).ptx
            pair = w.value(f"zext i8 {v} to i16", hint)
            h2 = w.value(f'call i32 asm "cvt.rn.f16x2.{fmt}x2 $0, $1;", "=r,h"(i16 {pair})',
                         hint)
            lo = w.value(f"trunc i32 {h2} to i16", hint)
            half = w.value(f"bitcast i16 {lo} to half", hint)
            return self.cast(half, "float16", dst, hint) if dst != "float16" else half
        if src != "float32":
            v = self.cast(v, src, "float32", hint)
        fmt = float8_format(dst).ptx
        pair = w.value(f'call i16 asm "cvt.rn.satfinite.{fmt}x2.f32 $0, $1, $2;", '
                       f'"=h,f,f"(float 0.0, float {v})', hint)
        return w.value(f"trunc i16 {pair} to i8", hint)

    def _intrinsic(self, name: str, ty: str, args: list[str], hint: str,
                   extra: str = "") -> str:
        full = f"llvm.{name}.{nvptx.INTRINSIC_SUFFIX[ty]}"
        arg_types = [ty] * len(args) + (["i1"] if extra else [])
        ref = self.parts.declare(full, f"{ty} ({', '.join(arg_types)})")
        operands = ", ".join([f"{ty} {a}" for a in args] + ([f"i1 {extra}"] if extra else []))
        return self.w.value(f"call {ty} {ref}({operands})", hint)

    def _e_Call(self, e: Call, hint: str | None) -> str:
        op, dtype = e.op, e.dtype
        name = hint or op
        if op == "shfl_xor":
            return self._shuffle(e, name)
        args = [self.expr(a) for a in e.args]
        ty = llvm_type(dtype)
        if not dt.is_float(dtype):
            if op == "abs" or op == "fabs":
                if dt.is_uint(dtype) or dtype == "bool":
                    return args[0]
                return self._intrinsic("abs", ty, args, name, extra="false")
            if op in ("floor", "ceil", "round"):
                return args[0]
            if op == "fma":
                flags = " nsw" if dtype in ("int32", "int64") else ""
                m = self.w.value(f"mul{flags} {ty} {args[0]}, {args[1]}", "t")
                return self.w.value(f"add{flags} {ty} {m}, {args[2]}", name)
            raise CodegenError(
                f"kernel {self.func.name}: {op} needs a float argument, got {dtype}: {e}")
        if ty in _HALF_TYPES and op in ("fma", "fabs", "abs"):
            # native (fma.rn.f16 / fma.rn.bf16 round once, like the simulator's fma)
            return self._intrinsic("fabs" if op == "abs" else op, ty, args, name)
        if ty in _HALF_TYPES:
            # half types compute in f32 and round once at the end
            wide = [self.w.value(f"fpext {ty} {a} to float", "t") for a in args]
            r = self._float_call(op, "float", wide, "t", e)
            return self.w.value(f"fptrunc float {r} to {ty}", name)
        return self._float_call(op, ty, args, name, e)

    def _shuffle(self, e: Call, name: str) -> str:
        """``shfl.sync.bfly.b32`` over the whole warp; a 16-bit value rides in an i32."""
        value, mask, width = e.args
        v = self.expr(value)
        ty = llvm_type(value.dtype)
        w = self.w
        if ty in _HALF_TYPES:
            bits = w.value(f"bitcast {ty} {v} to i16", "t")
            v, via = w.value(f"zext i16 {bits} to i32", "t"), "i32"
        else:
            via = ty
        if via not in nvptx.SHUFFLE_BFLY:
            raise CodegenError(f"kernel {self.func.name}: no warp shuffle for {value.dtype}: {e}")
        ref = self.parts.declare(nvptx.SHUFFLE_BFLY[via], f"{via} (i32, {via}, i32, i32)")
        clamp = nvptx.shuffle_clamp(width.value)
        got = w.value(f"call {via} {ref}(i32 {nvptx.FULL_WARP_MASK - 2**32}, {via} {v}, "
                      f"i32 {mask.value}, i32 {clamp})", name if via == ty else "t")
        if via == ty:
            return got
        low = w.value(f"trunc i32 {got} to i16", "t")
        return w.value(f"bitcast i16 {low} to {ty}", name)

    def _float_call(self, op: str, ty: str, args: list[str], name: str, e: Call) -> str:
        simple = {"fabs": "fabs", "abs": "fabs", "sqrt": "sqrt", "floor": "floor",
                  "ceil": "ceil", "round": "round", "fma": "fma"}
        if op in simple:
            return self._intrinsic(simple[op], ty, args, name)
        if op == "round_tf32":
            # cvt.rna.tf32.f32: the TF32 value in a 32-bit register, low 13 bits zero
            ref = self.parts.declare("llvm.nvvm.f2tf32.rna", "i32 (float)")
            bits = self.w.value(f"call i32 {ref}(float {args[0]})", "tf32")
            return self.w.value(f"bitcast i32 {bits} to float", name)
        if op == "rsqrt":
            root = self._intrinsic("sqrt", ty, args, "sqrt")
            return self.w.value(f"fdiv {ty} {float_literal(1.0, ty)}, {root}", name)
        try:
            fn = math_call(self.parts, op, ty)
        except ValueError:
            raise CodegenError(
                f"kernel {self.func.name}: no NVPTX lowering for intrinsic {op}: {e}") from None
        operands = ", ".join(f"{ty} {a}" for a in args)
        return self.w.value(f"call {ty} {fn}({operands})", name)
