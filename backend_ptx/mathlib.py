"""Transcendental functions for kernels, written in target-neutral LLVM IR.

NVPTX in LLVM 22 has no lowering for ``llvm.exp``/``llvm.log`` and only approximate
instructions for the rest (``ex2.approx``, ``sin.approx``, ``tanh.approx``), whose errors
break a ``rtol=1e-5`` comparison against numpy. So each function is a small straight-line
IR function (``internal alwaysinline``, inlined by the optimizer), built only from
``fadd``/``fmul``/``fdiv``/``fma``, integer arithmetic on the bits, bit casts and selects,
``llvm.rint``, ``llvm.fabs`` and ``llvm.minnum``.
Being target-neutral, they also run on the host through llvmlite's JIT, which is how the
tests measure their accuracy against numpy on a machine without a GPU.

Methods (``float`` = f32, ``double`` = f64; half types are computed in f32 by codegen):

* ``exp``: ``n = rint(x / ln 2)``, ``r = x - n ln 2`` (two-part ln 2, fused), Taylor series
  of degree 7 (f32) or 13 (f64) on ``|r| <= ln2/2``, times ``2^n`` applied as two exact
  power-of-two factors so the result can reach the subnormal range. About 1 ulp.
* ``exp2``: f32 is the hardware's ``ex2.approx.ftz.f32`` (:data:`.nvptx.EX2_APPROX_FTZ_F32`,
  within 2 ulp, subnormals flushed to zero; not target-neutral, so not in
  :data:`MATH_OPS`, which the host JIT tests), what the softmax of fused attention spends
  on a score; f64 is ``n = rint(x)``, ``exp((x - n) ln 2) 2^n`` (``x - n`` exact, the
  power of two applied as two exact factors), about 1 ulp.
* ``log``: ``x = m 2^k`` with ``m`` in ``[sqrt(1/2), sqrt(2))``; ``log(m) = f - f^2/2 +
  s (f^2/2 + R(s^2))`` with ``f = m - 1``, ``s = f / (2 + f)``, ``R`` the series of
  ``2 atanh(s) - 2 s`` (4 terms for f32, 10 for f64); plus ``k ln 2`` (two-part). About 1 ulp.
* ``tanh``: ``x P(x^2)`` for ``|x| < 0.625`` (Chebyshev fit), else ``1 - 2 / (exp(2|x|) + 1)``.
* ``tanh`` and ``erf`` of a float16 or bfloat16 result (:func:`half_math_call`, helpers
  ``__ptxforge_{tanh,erf}_h``, computed in f32): the f32 erf's method with fits of lower
  degree, good to the 16-bit rounding and no further (about 20 instructions where the f32
  forms take 30 to 50, a division included): ``x P(x^2)`` below a split, else
  ``1 - 2^Q(min(|x|, clamp))`` with the sign of ``x``, ``Q`` a fit of ``log2(1 - tanh x)``
  (``log2 erfc x``), ``2^Q`` from a degree-4 ``2^f``. Within 2.4e-5 (tanh) and 1.1e-5
  (erf) of the function below the clamp (5 and 3), 7e-5 and 2.2e-5 beyond it, where every
  16-bit rounding is 1: the rounded result is float16's nearest (99.6% and 99.4% of all
  finite float16 inputs) or, near a tie, its neighbour; no division, no ``.approx``.
* ``sigmoid``: ``1 / (1 + exp(-x))``.
* ``erf`` (f32): ``x + x R(x^2)`` for ``|x| < 0.875``; else ``1 - 2^Q(min(|x|, 4))`` with
  the sign of ``x``, ``Q`` a degree-6 fit of ``log2(erfc(x))`` on ``[0.875, 4]`` (at 4,
  ``1 - 2^Q`` rounds to 1). ``2^Q`` needs no general ``exp``: ``Q`` lies in ``[-26, 0]``, so
  ``Q = n + f`` (``n`` rounded by adding ``1.5 * 2^23``), a degree-6 fit of ``2^f`` on
  ``|f| <= 1/2``, and ``n`` added into the exponent bits, with no clamps, division or
  special cases; NaN takes the small branch, which keeps it. About 30 instructions, no
  division; within 1.33 ulp and 7.9e-8 of erf over every float in ``[-6, 6]``.
* ``erf`` (f64): ``x P(x^2)`` for ``|x| < 1``; else ``1 - exp(-x^2) g(1/|x|)`` with ``g``
  two fits of ``erfc(x) exp(x^2)`` in ``1/x`` (``[1, 2]``, ``[2, 6]``); 1 above 6.
* ``sin``/``cos``: computed in f64 for both types: ``n = rint(2x/pi)`` with a three-part
  pi/2, Taylor series on ``|r| <= pi/4``, quadrant from ``n mod 4``. Accurate while
  ``|x| < 2^40``; larger arguments lose accuracy (not range).
* ``pow``: computed in f64 for both types: ``exp(y log|x|)`` with numpy's special cases
  (``x**0 = 1``, ``1**y = 1``, a negative base needs an integral exponent, odd exponents
  keep the sign). Relative error about ``|y log x| 2^-53``.

The fitted coefficients are Chebyshev interpolants (``mpmath.chebyfit`` at 50 digits) of the
named function on the named interval, highest degree first; f32 sets are rounded to f32.
The f32 erf sets (``ERF_SMALL_F32``, ``ERFC_LOG2_F32``, ``EXP2_F32``) are weighted minimax
fits instead: Lawson's iteration (weighted least squares, weights multiplied by the error
each step, 600 steps) in float64 on 4,000-8,000 Chebyshev nodes of the interval, against
scipy's ``erf``/``erfc``; the error weighted is the relative error of erf for
``R`` (weight ``x / erf(x)``), the absolute error of ``erfc = 2^Q`` for ``Q`` (weight
``erfc(x) ln 2``) and the relative error for ``2^f``. They are rounded to f32 one at a
time from the highest degree, refitting the lower ones after each rounding.
"""

from __future__ import annotations

from fractions import Fraction
from math import factorial

from .llvm_text import FunctionWriter, ModuleParts, float_literal, int_literal
from .nvptx import EX2_APPROX_FTZ_F32, INTRINSIC_SUFFIX

# erf(x)/x as a polynomial in z = x^2, z in [0, 1] (f64; the f32 erf uses ERF_SMALL_F32)
ERF_SMALL_F64 = (5.957176147748911e-11, -1.1372848856791674e-09, 1.4659775274047436e-08,
                 -1.6350312701054695e-07, 1.6461000484121368e-06, -1.4925595266831182e-05,
                 0.0001205533111164271, -0.000854832698083379, 0.0052239776248180145,
                 -0.026866170645076792, 0.11283791670954879, -0.3761263890318375,
                 1.1283791670955126)
# f32 erf, |x| < ERF_SPLIT_F32: erf(x)/x - 1 as a polynomial in z = x^2, z in [0, 0.875^2]
ERF_SPLIT_F32 = 0.875
ERF_SMALL_F32 = (-0.0006203255034051836, 0.005032181274145842, -0.026791462674736977,
                 0.11282455176115036, -0.3761255145072937, 0.12837916612625122)
# f32 erf, |x| >= ERF_SPLIT_F32: log2(erfc(x)) as a polynomial in x, x in [0.875, 4];
# arguments are clamped to ERF_CLAMP_F32, where 1 - 2^Q rounds to exactly 1
ERF_CLAMP_F32 = 4.0
ERFC_LOG2_F32 = (0.0002883964916691184, -0.004446377977728844, 0.032288990914821625,
                 -0.15040121972560883, -0.918738067150116, -1.6272003650665283,
                 -0.00020805944222956896)
# 2^f as a polynomial in f, f in [-1/2, 1/2] (f32)
EXP2_F32 = (0.0001534581242594868, 0.0013399930903688073, 0.009618489071726799,
            0.05550328642129898, 0.24022646248340607, 0.6931471824645996, 1.0)
# 1.5 * 2^23: adding it rounds an f32 of magnitude below 2^22 to an integer, which then
# sits in the low mantissa bits of the sum
ROUND_MAGIC_F32 = 12582912.0
# f64: x in [1, 2], centre 0.75
ERFC_NEAR_F64 = (1.582415731979244e-05, -0.00303603240773729, 0.006015685884310375,
                 -0.007414509318637793, 0.007075364412207526, -0.004395530074757591,
                 -0.0010415211277913059, 0.008907403601129578, -0.017696332072994203,
                 0.024101018136252237, -0.022199195224013844, 0.002443898291465284,
                 0.04956777243553041, -0.15457007331392142, 0.34136885869943434,
                 0.3511346940289053)
# f64: x in [2, 6], centre 1/3
ERFC_FAR_F64 = (-0.32004918053039233, 0.8701454568442257, -0.6641623127167074,
                0.16815538699342994, 0.1801677510711303, -0.2785625725864063,
                0.18107398497769953, -0.004656837004986864, -0.13484127559096631,
                0.16147285204362483, -0.05014611074235536, -0.18141695623718443,
                0.48935034006456135, 0.17900115118138799)
# tanh(x)/x as a polynomial in z = x^2, z in [0, 0.625^2]
TANH_SMALL = {
    "float": (-0.005657135043293238, 0.020588191226124763, -0.05372010916471481,
              0.13331113755702972, -0.3333325982093811, 1.0),
    "double": (-1.6001499513001042e-05, 7.698563199045423e-05, -0.00022841018529512851,
               0.0005862314316050611, -0.0014549293858543903, 0.003591982521583925,
               -0.008863220021256096, 0.021869487483410596, -0.053968253925945696,
               0.13333333333245254, -0.33333333333332615, 1.0),
}

# 16-bit results (half_math_call): weighted minimax fits (Lawson's iteration, 300 steps, on
# 4,000 Chebyshev nodes, float64, against numpy's tanh and math.erf/erfc), weights giving
# the error of the function itself; rounded to f32
TANH_SPLIT_H = 1.0
TANH_CLAMP_H = 5.0  # 1 - tanh(5) = 9e-5: every 16-bit rounding of tanh beyond it is 1
# tanh(x)/x as a polynomial in z = x^2, z in [0, 1]
TANH_SMALL_H = (0.009036561474204063, -0.04481786489486694, 0.13036835193634033,
                -0.3329807221889496, 0.999993085861206)
# log2(1 - tanh(x)) as a polynomial in x, x in [1, 5]
TANH_LOG2_H = (-0.015449309721589088, 0.1678743213415146, -0.6840209364891052,
               -1.6207587718963623, 0.08398550748825073)
ERF_SPLIT_H = 0.875
ERF_CLAMP_H = 3.0  # erfc(3) = 2.2e-5: erf rounds to 1 beyond it
# erf(x)/x as a polynomial in z = x^2, z in [0, 0.875^2]
ERF_SMALL_H = (-0.020046813413500786, 0.10971800982952118, -0.3756522834300995,
               1.12836754322052)
# log2(erfc(x)) as a polynomial in x, x in [0.875, 3]
ERFC_LOG2_H = (-0.044639796018600464, -1.0859627723693848, -1.5016412734985352,
               -0.03614354506134987)
# 2^f as a polynomial in f, f in [-1/2, 1/2]
EXP2_H = (0.009570101276040077, 0.05591785907745361, 0.240247443318367, 0.6931217908859253,
          0.9999992847442627)

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453
# ln 2 split so that k * hi is exact for every exponent k of the type
LN2_HI = {"float": 0.693145751953125, "double": 0.6931471803691238}
LN2_LO = {"float": 1.428606765330187e-06, "double": 1.9082149292705877e-10}
TWO_OVER_PI = 0.6366197723675814
PIO2_PARTS = (1.5707963267341256, 6.077100506303966e-11, 2.0222662487959506e-21)


def _taylor(coefs) -> tuple:
    return tuple(float(c) for c in coefs)


EXP_TAYLOR = {  # 1/k!, highest degree first
    "float": _taylor(Fraction(1, factorial(k)) for k in range(7, -1, -1)),
    "double": _taylor(Fraction(1, factorial(k)) for k in range(13, -1, -1)),
}
LOG_SERIES = {  # 2/(2k+1), k = K..1
    "float": _taylor(Fraction(2, 2 * k + 1) for k in range(4, 0, -1)),
    "double": _taylor(Fraction(2, 2 * k + 1) for k in range(10, 0, -1)),
}
SIN_TAYLOR = _taylor(Fraction((-1) ** k, factorial(2 * k + 1)) for k in range(7, 0, -1))
COS_TAYLOR = _taylor(Fraction((-1) ** k, factorial(2 * k)) for k in range(8, -1, -1))


class _Format:
    """Bit-level facts of a binary float format."""

    def __init__(self, ty: str):
        self.ty = ty
        self.ity = {"float": "i32", "double": "i64"}[ty]
        self.mant = {"float": 23, "double": 52}[ty]
        self.bias = {"float": 127, "double": 1023}[ty]
        self.one_bits = {"float": 0x3F800000, "double": 0x3FF0000000000000}[ty]
        self.sqrt_half_bits = {"float": 0x3F3504F3, "double": 0x3FE6A09E667F3BCD}[ty]
        self.min_normal = {"float": 2.0**-126, "double": 2.0**-1022}[ty]
        self.sub_scale = {"float": 25, "double": 54}[ty]
        # exp's argument clamp: beyond these the result is inf or 0 anyway
        self.exp_max = {"float": 89.0, "double": 710.0}[ty]
        self.exp_min = {"float": -104.0, "double": -746.0}[ty]


class _Body:
    """Straight-line IR for one math function, with arithmetic shorthands."""

    def __init__(self, parts: ModuleParts, ty: str):
        self.parts = parts
        self.f = _Format(ty)
        self.ty = ty
        self.w = FunctionWriter()

    def c(self, value: float) -> str:
        return float_literal(value, self.ty)

    def ci(self, value: int) -> str:
        return int_literal(value, self.f.ity)

    def bin(self, op: str, a: str, b: str, hint: str = "t", ty: str | None = None) -> str:
        return self.w.value(f"{op} {ty or self.ty} {a}, {b}", hint)

    def intr(self, name: str, args: list[str], hint: str = "t", ty: str | None = None) -> str:
        ty = ty or self.ty
        full = f"llvm.{name}.{INTRINSIC_SUFFIX[ty]}"
        ref = self.parts.declare(full, f"{ty} ({', '.join([ty] * len(args))})")
        return self.w.value(f"call {ty} {ref}({', '.join(f'{ty} {a}' for a in args)})", hint)

    def fma(self, a: str, b: str, c: str, hint: str = "t") -> str:
        return self.intr("fma", [a, b, c], hint)

    def horner(self, coefs, x: str, hint: str = "p") -> str:
        acc = self.c(coefs[0])
        for k in coefs[1:]:
            acc = self.fma(acc, x, self.c(k), hint)
        return acc

    def fcmp(self, pred: str, a: str, b: str, hint: str = "c") -> str:
        return self.w.value(f"fcmp {pred} {self.ty} {a}, {b}", hint)

    def select(self, cond: str, a: str, b: str, hint: str = "s", ty: str | None = None) -> str:
        ty = ty or self.ty
        return self.w.value(f"select i1 {cond}, {ty} {a}, {ty} {b}", hint)

    def call(self, helper: str, args: list[str], hint: str) -> str:
        return self.w.value(
            f"call {self.ty} {helper}({', '.join(f'{self.ty} {a}' for a in args)})", hint)

    def finish(self, name: str, params: list[str], result: str) -> str:
        self.w.op(f"ret {self.ty} {result}")
        sig = ", ".join(f"{self.ty} %{p}" for p in params)
        return (f"define internal {self.ty} @{name}({sig}) alwaysinline nounwind {{\n"
                f"{self.w.text()}\n}}")


def helper_name(op: str, ty: str) -> str:
    return f"__ptxforge_{op}_{INTRINSIC_SUFFIX[ty]}"


def math_call(parts: ModuleParts, op: str, ty: str) -> str:
    """Define the helper for ``op`` on ``ty`` (``float``/``double``) in ``parts`` once;
    return its ``@name``."""
    builders = _BUILDERS if op != "exp2" else {"exp2": _exp2}
    if op not in builders:
        raise ValueError(f"no math helper for {op!r}; have {sorted(_BUILDERS)} and exp2")
    if ty not in ("float", "double"):
        raise ValueError(f"math helpers exist for float and double, not {ty}")
    name = helper_name(op, ty)
    if name not in parts.helpers:
        parts.helpers[name] = ""  # reserve: builders may call other helpers first
        parts.helpers[name] = builders[op](parts, ty, name)
    return "@" + name


# ---------------------------------------------------------------------------------------
# the functions


def _exp(parts: ModuleParts, ty: str, name: str) -> str:
    b = _Body(parts, ty)
    f, w = b.f, b.w
    x = "%x"
    isnan = b.fcmp("uno", x, x, "isnan")
    hi = b.select(b.fcmp("ogt", x, b.c(f.exp_max)), b.c(f.exp_max), x, "xc")
    xc = b.select(b.fcmp("olt", hi, b.c(f.exp_min)), b.c(f.exp_min), hi, "xc")
    n = b.intr("rint", [b.bin("fmul", xc, b.c(LOG2E), "t")], "n")
    nneg = w.value(f"fneg {ty} {n}", "nneg")
    r = b.fma(nneg, b.c(LN2_HI[ty]), xc, "r")
    r = b.fma(nneg, b.c(LN2_LO[ty]), r, "r")
    y = _scale_pow2(b, b.horner(EXP_TAYLOR[ty], r), n)
    return b.finish(name, ["x"], b.select(isnan, x, y, "res"))


def _scale_pow2(b: _Body, y: str, n: str) -> str:
    """``y * 2^n`` (``n`` an integral float within the exponent range) as two exact
    power-of-two factors, so that the product may reach the subnormal range."""
    f, w = b.f, b.w
    ni = w.value(f"fptosi {b.ty} {n} to {f.ity}", "ni")
    n1 = w.value(f"ashr {f.ity} {ni}, 1", "n1")
    n2 = w.value(f"sub {f.ity} {ni}, {n1}", "n2")
    for k in (n1, n2):
        e = w.value(f"add {f.ity} {k}, {b.ci(f.bias)}", "e")
        e = w.value(f"shl {f.ity} {e}, {b.ci(f.mant)}", "e")
        y = b.bin("fmul", y, w.value(f"bitcast {f.ity} {e} to {b.ty}", "scale"), "y")
    return y


def _exp2(parts: ModuleParts, ty: str, name: str) -> str:
    b = _Body(parts, ty)
    if ty == "float":
        ref = parts.declare(EX2_APPROX_FTZ_F32, "float (float)")
        return b.finish(name, ["x"], b.w.value(f"call float {ref}(float %x)", "res"))
    x = "%x"
    isnan = b.fcmp("uno", x, x, "isnan")
    # exp's clamps in base 2: beyond them the result is inf or 0 anyway
    hi = b.select(b.fcmp("ogt", x, b.c(1025.0)), b.c(1025.0), x, "xc")
    xc = b.select(b.fcmp("olt", hi, b.c(-1077.0)), b.c(-1077.0), hi, "xc")
    n = b.intr("rint", [xc], "n")
    r = b.bin("fmul", b.bin("fsub", xc, n, "r"), b.c(LN2), "r")
    y = _scale_pow2(b, b.call(math_call(parts, "exp", ty), [r], "p"), n)
    return b.finish(name, ["x"], b.select(isnan, x, y, "res"))


def _log(parts: ModuleParts, ty: str, name: str) -> str:
    b = _Body(parts, ty)
    f, w = b.f, b.w
    x = "%x"
    sub = b.fcmp("olt", x, b.c(f.min_normal), "issub")
    xs = b.select(sub, b.bin("fmul", x, b.c(2.0**f.sub_scale), "xs"), x, "xs")
    ks = w.value(f"select i1 {sub}, {f.ity} {b.ci(-f.sub_scale)}, {f.ity} 0", "ks")
    ix = w.value(f"bitcast {ty} {xs} to {f.ity}", "ix")
    ix = w.value(f"add {f.ity} {ix}, {b.ci(f.one_bits - f.sqrt_half_bits)}", "ix")
    k = w.value(f"lshr {f.ity} {ix}, {b.ci(f.mant)}", "k")
    k = w.value(f"sub {f.ity} {k}, {b.ci(f.bias)}", "k")
    k = w.value(f"add {f.ity} {k}, {ks}", "k")
    mb = w.value(f"and {f.ity} {ix}, {b.ci((1 << f.mant) - 1)}", "mb")
    mb = w.value(f"add {f.ity} {mb}, {b.ci(f.sqrt_half_bits)}", "mb")
    m = w.value(f"bitcast {f.ity} {mb} to {ty}", "m")
    fm = b.bin("fsub", m, b.c(1.0), "f")
    s = b.bin("fdiv", fm, b.bin("fadd", fm, b.c(2.0), "t"), "s")
    z = b.bin("fmul", s, s, "z")
    rr = b.bin("fmul", z, b.horner(LOG_SERIES[ty], z), "R")
    hfsq = b.bin("fmul", b.bin("fmul", fm, fm, "t"), b.c(0.5), "hfsq")
    dk = w.value(f"sitofp {f.ity} {k} to {ty}", "dk")
    # dk*ln2_hi - ((hfsq - (s*(hfsq+R) + dk*ln2_lo)) - f)
    t = b.fma(dk, b.c(LN2_LO[ty]), b.bin("fmul", s, b.bin("fadd", hfsq, rr, "t"), "t"))
    t = b.bin("fsub", b.bin("fsub", hfsq, t, "t"), fm, "t")
    y = b.bin("fsub", b.bin("fmul", dk, b.c(LN2_HI[ty]), "t"), t, "y")
    inf = float("inf")
    y = b.select(b.fcmp("oeq", x, b.c(inf), "isinf"), b.c(inf), y, "y")
    y = b.select(b.fcmp("oeq", x, b.c(0.0), "iszero"), b.c(-inf), y, "y")
    y = b.select(b.fcmp("ult", x, b.c(0.0), "isneg"), b.c(float("nan")), y, "y")
    return b.finish(name, ["x"], b.select(b.fcmp("uno", x, x, "isnan"), x, y, "res"))


def _tanh(parts: ModuleParts, ty: str, name: str) -> str:
    b = _Body(parts, ty)
    x = "%x"
    ax = b.intr("fabs", [x], "ax")
    small = b.bin("fmul", x, b.horner(TANH_SMALL[ty], b.bin("fmul", x, x, "z")), "small")
    e = b.call(math_call(parts, "exp", ty), [b.bin("fmul", ax, b.c(2.0), "t")], "e")
    t = b.bin("fdiv", b.c(2.0), b.bin("fadd", e, b.c(1.0), "t"), "t")
    large = b.intr("copysign", [b.bin("fsub", b.c(1.0), t, "t"), x], "large")
    return b.finish(name, ["x"], b.select(b.fcmp("olt", ax, b.c(0.625)), small, large, "res"))


def _sigmoid(parts: ModuleParts, ty: str, name: str) -> str:
    b = _Body(parts, ty)
    e = b.call(math_call(parts, "exp", ty), [b.w.value(f"fneg {ty} %x", "nx")], "e")
    y = b.bin("fdiv", b.c(1.0), b.bin("fadd", e, b.c(1.0), "t"), "res")
    return b.finish(name, ["x"], y)


def _exp2_reduced(b: _Body, q: str, coefs: tuple = EXP2_F32) -> str:
    """``2^q`` in f32 for ``q`` in ``[-120, 120]`` (no clamps, no NaN or infinity checks):
    ``q = n + f`` with ``n`` rounded by the magic-number addition, ``EXP2_F32(f)``, and
    ``2^n`` added into the exponent bits of the result."""
    w = b.w
    magic = b.c(ROUND_MAGIC_F32)
    t = b.bin("fadd", q, magic, "t")
    fr = b.bin("fsub", q, b.bin("fsub", t, magic, "n"), "f")
    p = w.value(f"bitcast float {b.horner(coefs, fr)} to i32", "pb")
    # the low mantissa bits of t hold n; shifted up they are n << 23 (mod 2^32)
    nb = w.value(f"shl i32 {w.value(f'bitcast float {t} to i32', 'tb')}, 23", "nb")
    return w.value(f"bitcast i32 {w.value(f'add i32 {p}, {nb}', 'eb')} to float", "e")


def _erf_f32(parts: ModuleParts, name: str) -> str:
    b = _Body(parts, "float")
    w = b.w
    x = "%x"
    ax = b.intr("fabs", [x], "ax")
    z = b.bin("fmul", x, x, "z")
    small = b.fma(x, b.horner(ERF_SMALL_F32, z), x, "small")
    # NaN clamps to the limit too; it takes the small branch below, which keeps it NaN
    xc = b.intr("minnum", [ax, b.c(ERF_CLAMP_F32)], "xc")
    erfc = _exp2_reduced(b, b.horner(ERFC_LOG2_F32, xc, "q"))
    mag = w.value(f"bitcast float {b.bin('fsub', b.c(1.0), erfc, 'mag')} to i32", "mb")
    sign = w.value(f"and i32 {w.value(f'bitcast float {x} to i32', 'xb')}, "
                   f"{int_literal(1 << 31, 'i32')}", "sign")
    large = w.value(f"bitcast i32 {w.value(f'or i32 {mag}, {sign}', 'lb')} to float", "large")
    big = b.fcmp("oge", ax, b.c(ERF_SPLIT_F32), "big")
    return b.finish(name, ["x"], b.select(big, large, small, "res"))


def _signed_one_minus(b: _Body, x: str, e: str) -> str:
    """``1 - e`` with the sign of ``x`` (f32 bits)."""
    w = b.w
    mag = w.value(f"bitcast float {b.bin('fsub', b.c(1.0), e, 'mag')} to i32", "mb")
    sign = w.value(f"and i32 {w.value(f'bitcast float {x} to i32', 'xb')}, "
                   f"{int_literal(1 << 31, 'i32')}", "sign")
    return w.value(f"bitcast i32 {w.value(f'or i32 {mag}, {sign}', 'lb')} to float", "large")


def _half_odd(parts: ModuleParts, name: str, small_coefs: tuple, split: float,
              clamp: float, log2_coefs: tuple) -> str:
    """An odd function ``g`` with ``g -> 1`` (tanh, erf) for a 16-bit result, in f32:
    ``x P(x^2)`` below ``split``, else ``1 - 2^Q(min(|x|, clamp))`` signed as ``x``
    (NaN takes the small branch and stays NaN; infinities clamp)."""
    b = _Body(parts, "float")
    x = "%x"
    ax = b.intr("fabs", [x], "ax")
    small = b.bin("fmul", x, b.horner(small_coefs, b.bin("fmul", x, x, "z")), "small")
    xc = b.intr("minnum", [ax, b.c(clamp)], "xc")
    large = _signed_one_minus(b, x, _exp2_reduced(b, b.horner(log2_coefs, xc, "q"), EXP2_H))
    big = b.fcmp("oge", ax, b.c(split), "big")
    return b.finish(name, ["x"], b.select(big, large, small, "res"))


def _tanh_h(parts: ModuleParts, name: str) -> str:
    return _half_odd(parts, name, TANH_SMALL_H, TANH_SPLIT_H, TANH_CLAMP_H, TANH_LOG2_H)


def _erf_h(parts: ModuleParts, name: str) -> str:
    return _half_odd(parts, name, ERF_SMALL_H, ERF_SPLIT_H, ERF_CLAMP_H, ERFC_LOG2_H)


_HALF_BUILDERS = {"tanh": _tanh_h, "erf": _erf_h}

HALF_MATH_OPS = tuple(_HALF_BUILDERS)
"""The functions with a form for 16-bit results (:func:`half_math_call`)."""


def half_math_call(parts: ModuleParts, op: str) -> str:
    """Define the f32 helper of ``op`` (one of :data:`HALF_MATH_OPS`) for a result that is
    rounded to float16 or bfloat16 in ``parts`` once; return its ``@name``. Its error is a
    tenth of float16's half ulp (module doc), so the rounded result matches the accurate
    helper's except near ties; a float32 result keeps :func:`math_call`."""
    if op not in _HALF_BUILDERS:
        raise ValueError(f"no 16-bit math helper for {op!r}; have {sorted(_HALF_BUILDERS)}")
    name = f"__ptxforge_{op}_h"
    if name not in parts.helpers:
        parts.helpers[name] = _HALF_BUILDERS[op](parts, name)
    return "@" + name


def _erf(parts: ModuleParts, ty: str, name: str) -> str:
    if ty == "float":
        return _erf_f32(parts, name)
    b = _Body(parts, ty)
    x = "%x"
    ax = b.intr("fabs", [x], "ax")
    z = b.bin("fmul", x, x, "z")
    small = b.bin("fmul", x, b.horner(ERF_SMALL_F64, z), "small")
    t = b.bin("fdiv", b.c(1.0), ax, "t")
    near = b.horner(ERFC_NEAR_F64, b.bin("fsub", t, b.c(0.75), "u"), "g")
    far = b.horner(ERFC_FAR_F64, b.bin("fsub", t, b.c(1.0 / 3.0), "u"), "g")
    g = b.select(b.fcmp("olt", ax, b.c(2.0)), near, far, "g")
    ez = b.call(math_call(parts, "exp", ty), [b.w.value(f"fneg {ty} {z}", "nz")], "ez")
    erfc = b.bin("fmul", ez, g, "erfc")
    large = b.intr("copysign", [b.bin("fsub", b.c(1.0), erfc, "t"), x], "large")
    one = b.intr("copysign", [b.c(1.0), x], "one")
    y = b.select(b.fcmp("olt", ax, b.c(6.0)), large, one, "y")
    y = b.select(b.fcmp("olt", ax, b.c(1.0)), small, y, "y")
    return b.finish(name, ["x"], b.select(b.fcmp("uno", x, x, "isnan"), x, y, "res"))


def _sincos(parts: ModuleParts, ty: str, name: str, shift: int) -> str:
    b = _Body(parts, ty)
    w = b.w
    x = "%x"
    if ty == "float":
        wide = math_call(parts, "sin" if shift == 0 else "cos", "double")
        xd = w.value(f"fpext float {x} to double", "xd")
        yd = w.value(f"call double {wide}(double {xd})", "yd")
        return b.finish(name, ["x"], w.value(f"fptrunc double {yd} to float", "res"))
    n = b.intr("rint", [b.bin("fmul", x, b.c(TWO_OVER_PI), "t")], "n")
    nneg = w.value(f"fneg double {n}", "nneg")
    r = x
    for part in PIO2_PARTS:
        r = b.fma(nneg, b.c(part), r, "r")
    # n mod 4 in floating point: exact, and never poison for finite x
    q = b.bin("fmul", b.intr("floor", [b.bin("fmul", n, b.c(0.25), "t")], "t"), b.c(4.0), "t")
    qi = w.value(f"fptosi double {b.bin('fsub', n, q, 'q')} to i32", "qi")
    qi = w.value(f"add i32 {qi}, {shift}", "qi")
    z = b.bin("fmul", r, r, "z")
    sin_r = b.fma(b.bin("fmul", r, z, "t"), b.horner(SIN_TAYLOR, z), r, "sin_r")
    cos_r = b.horner(COS_TAYLOR, z, "cos_r")
    odd = w.value(f"trunc i32 {qi} to i1", "odd")
    v = b.select(odd, cos_r, sin_r, "v")
    neg = w.value(f"and i32 {qi}, 2", "neg")
    neg = w.value(f"icmp ne i32 {neg}, 0", "neg")
    v = b.select(neg, w.value(f"fneg double {v}", "t"), v, "v")
    ax = b.intr("fabs", [x], "ax")
    finite = b.fcmp("olt", ax, b.c(float("inf")), "finite")
    return b.finish(name, ["x"], b.select(finite, v, b.c(float("nan")), "res"))


def _sin(parts: ModuleParts, ty: str, name: str) -> str:
    return _sincos(parts, ty, name, 0)


def _cos(parts: ModuleParts, ty: str, name: str) -> str:
    return _sincos(parts, ty, name, 1)


def _pow(parts: ModuleParts, ty: str, name: str) -> str:
    b = _Body(parts, ty)
    w = b.w
    if ty == "float":
        wide = math_call(parts, "pow", "double")
        xd = w.value("fpext float %x to double", "xd")
        yd = w.value("fpext float %y to double", "yd")
        r = w.value(f"call double {wide}(double {xd}, double {yd})", "rd")
        return b.finish(name, ["x", "y"], w.value(f"fptrunc double {r} to float", "res"))
    x, y = "%x", "%y"
    ax = b.intr("fabs", [x], "ax")
    lg = b.call(math_call(parts, "log", ty), [ax], "lg")
    r = b.call(math_call(parts, "exp", ty), [b.bin("fmul", y, lg, "t")], "r")
    yint = b.fcmp("oeq", b.intr("floor", [y], "t"), y, "yint")
    half = b.bin("fmul", y, b.c(0.5), "half")
    hodd = b.fcmp("une", b.intr("floor", [half], "t"), half, "t")
    yodd = w.value(f"and i1 {yint}, {hodd}", "yodd")
    neg = b.fcmp("olt", x, b.c(0.0), "xneg")
    flip = w.value(f"and i1 {neg}, {yodd}", "flip")
    r = b.select(flip, w.value(f"fneg double {r}", "t"), r, "r")
    notint = w.value(f"xor i1 {yint}, true", "t")
    bad = w.value(f"and i1 {neg}, {notint}", "bad")
    r = b.select(bad, b.c(float("nan")), r, "r")
    r = b.select(b.fcmp("oeq", y, b.c(0.0)), b.c(1.0), r, "r")
    r = b.select(b.fcmp("oeq", x, b.c(1.0)), b.c(1.0), r, "res")
    return b.finish(name, ["x", "y"], r)


_BUILDERS = {
    "exp": _exp,
    "log": _log,
    "tanh": _tanh,
    "sigmoid": _sigmoid,
    "erf": _erf,
    "sin": _sin,
    "cos": _cos,
    "pow": _pow,
}

MATH_OPS = tuple(_BUILDERS)
"""The intrinsics :func:`math_call` provides."""

MATH_ARITY = {"pow": 2}
