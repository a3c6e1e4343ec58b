"""The 16-bit forms of tanh and erf (``mathlib.half_math_call``) that fused epilogues with a
float16 or bfloat16 result spend (GPT-2's tanh GELU, BERT's erf GELU in fp16): JIT-compiled
for the host and run on every finite float16 value, they round to numpy's correctly rounded
result or, near a tie, its neighbour; the kernels use them only for 16-bit results."""

from __future__ import annotations

import ctypes
import math

import numpy as np
import pytest

import ptxforge
from ptxforge import te
from ptxforge.backend_ptx.compile import compile_kernel, llvm_binding
from ptxforge.backend_ptx.llvm_text import ModuleParts
from ptxforge.backend_ptx.mathlib import HALF_MATH_OPS, half_math_call
from ptxforge.ops.schedules import default_schedule

REFS = {"tanh": np.tanh, "erf": np.vectorize(math.erf)}


def _host_apply(op: str):
    """``f(float32 array) -> float32 array`` applying the 16-bit helper of ``op``."""
    llvm = llvm_binding()
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    parts = ModuleParts()
    helper = half_math_call(parts, op)
    text = "\n".join(parts.declarations.values()) + "\n\n" + "\n\n".join(
        parts.helpers.values()).replace("define internal", "define") + f"""
define void @apply(ptr %a, ptr %o, i64 %n) {{
entry:
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%next, %loop]
  %pa = getelementptr float, ptr %a, i64 %i
  %v = load float, ptr %pa
  %r = call float {helper}(float %v)
  %po = getelementptr float, ptr %o, i64 %i
  store float %r, ptr %po
  %next = add i64 %i, 1
  %more = icmp ult i64 %next, %n
  br i1 %more, label %loop, label %done
done:
  ret void
}}
"""
    mod = llvm.parse_assembly(text)
    mod.verify()
    engine = llvm.create_mcjit_compiler(
        mod, llvm.Target.from_default_triple().create_target_machine())
    engine.finalize_object()
    fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(
        engine.get_function_address("apply"))

    def apply(x: np.ndarray) -> np.ndarray:
        x = np.ascontiguousarray(x, np.float32)
        out = np.empty_like(x)
        fn(x.ctypes.data, out.ctypes.data, x.size)
        return out

    apply.engine = engine  # keep the code alive with the function
    return apply


def _ordered(h: np.ndarray) -> np.ndarray:
    """float16 bits as integers in the order of their values (ulp distance = difference)."""
    b = h.view(np.uint16).astype(np.int32)
    return np.where(b & 0x8000, 0x8000 - b, b)


@pytest.mark.parametrize("op", HALF_MATH_OPS)
def test_half_forms_round_like_numpy_on_every_float16(op):
    x = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    x = x[np.isfinite(x)]
    got = _host_apply(op)(x.astype(np.float32)).astype(np.float16)
    want = REFS[op](x.astype(np.float64)).astype(np.float16)
    ulps = np.abs(_ordered(got) - _ordered(want))
    assert ulps.max() <= 1, (op, x[ulps.argmax()], got[ulps.argmax()], want[ulps.argmax()])
    assert np.mean(ulps == 0) > 0.99  # a neighbour only near ties
    # odd, and exact at 0 (the sign of zero kept)
    assert np.array_equal(got[x == 0].view(np.uint16), x[x == 0].view(np.uint16))
    # bfloat16 has 3 fewer bits: the error (the clamp's 6e-5 at most) is far below its
    # half ulp (2^-9 near 1, 2^-9 relative)
    grid = np.linspace(-6, 6, 20001)
    bf = _host_apply(op)(grid.astype(np.float32))
    np.testing.assert_allclose(bf, REFS[op](grid), rtol=3e-5, atol=1e-4)


@pytest.mark.parametrize("op", HALF_MATH_OPS)
def test_half_forms_keep_nan_and_saturate_at_infinity(op):
    f = _host_apply(op)
    got = f(np.array([np.nan, np.inf, -np.inf, 40.0, -40.0], np.float32))
    assert np.isnan(got[0])
    assert np.array_equal(got[1:].astype(np.float16), np.array([1, -1, 1, -1], np.float16))


@pytest.mark.parametrize("dtype,half", [("float16", True), ("bfloat16", True),
                                        ("float32", False)])
@pytest.mark.parametrize("op", HALF_MATH_OPS)
def test_kernels_take_the_half_form_for_16_bit_results_only(op, dtype, half):
    a = te.placeholder((256,), dtype, name="a")
    c = te.compute((256,), lambda i: getattr(te, op)(a[i]), name="c")
    module = ptxforge.lower(default_schedule(c, "cuda -arch=sm_90a"), [a, c])
    k = compile_kernel(module.kernels()[0], "sm_90a", stop_after="llvm_ir", cache=False)
    text = k.get_source("llvm_ir")
    assert (f"@__ptxforge_{op}_h(" in text) == half
    assert (f"@__ptxforge_{op}_f32(" in text) == (not half)
