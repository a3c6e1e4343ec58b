"""float16, bfloat16 and TF32: rounding helpers, the simulator's emulation (bit-exact against
step-by-step numpy / ml_dtypes), and PTX for sm_80 and sm_90 through ptxas."""

from __future__ import annotations

import numpy as np
import ptxforge
import pytest
from ptxforge import te
from ptxforge.backend_ptx import compile_kernel, find_ptxas
from ptxforge.ir import dtype as dt
from ptxforge.ir.expr import call
from ptxforge.ops.schedules import default_schedule

needs_ptxas = pytest.mark.skipif(find_ptxas() is None,
                                 reason="ptxas (CUDA toolkit) is not installed here")
HALF = ("float16", "bfloat16")


def host(x: np.ndarray, dtype: str) -> np.ndarray:
    """A host array of ``dtype`` holding ``x`` rounded to it."""
    return dt.to_bfloat16(x) if dtype == "bfloat16" else x.astype(dtype)


def as_f64(a: np.ndarray, dtype: str) -> np.ndarray:
    return (dt.from_bfloat16(a) if dtype == "bfloat16" else a).astype(np.float64)


def run_sim(tensors, arrays, out_dtype, schedule=None):
    f = ptxforge.build(schedule, tensors, target="sim") if schedule is not None else \
        ptxforge.build(tensors, target="sim")
    dev = ptxforge.sim()
    out = ptxforge.nd.empty(tensors[-1].shape, out_dtype, dev)
    f(*[ptxforge.nd.array(a, dev) for a in arrays], out)
    return out.numpy()


# ---------------------------------------------------------------------------------------
# rounding


def test_bfloat16_rounding_is_nearest_even():
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(20000) * np.exp(rng.uniform(-40, 40, 20000))).astype(np.float32)
    bits = dt.bfloat16_bits(x)
    # the two neighbours of every value, and the one chosen is the nearest (ties: even)
    lo = dt.bfloat16_from_bits(x.view(np.uint32) >> 16)
    hi = dt.bfloat16_from_bits((x.view(np.uint32) >> 16) + 1)
    got = dt.bfloat16_from_bits(bits)
    dlo, dhi = np.abs(x.astype(np.float64) - lo), np.abs(x.astype(np.float64) - hi)
    finite = np.isfinite(hi)
    want = np.where(dlo < dhi, lo, np.where(dhi < dlo, hi, np.where((bits & 1) == 0, got, -1)))
    assert np.array_equal(got[finite], want[finite])
    assert dt.bfloat16_bits(np.float32(1.0 + 2**-8)) == 0x3F80  # tie to even
    assert dt.bfloat16_bits(np.float32(1.0 + 3 * 2**-8)) == 0x3F82
    assert np.isnan(dt.round_to(np.float32(np.nan), "bfloat16"))
    assert dt.round_to(np.float32(np.inf), "bfloat16") == np.inf
    # float64 rounds once (not through float32)
    assert dt.round_to(np.float64(1.0 + 2**-8 + 2**-30), "bfloat16") == np.float32(1 + 2**-7)


def test_tf32_rounding_is_nearest_ties_away():
    one = np.float32(1.0)
    assert dt.round_to(np.float32(1 + 2**-11), "tf32") == one + np.float32(2**-10)  # tie up
    assert dt.round_to(np.float32(-(1 + 2**-11)), "tf32") == -(one + np.float32(2**-10))
    assert dt.round_to(np.float32(1 + 2**-12), "tf32") == one
    x = np.random.default_rng(1).standard_normal(1000).astype(np.float32)
    r = dt.round_to(x, "tf32")
    assert np.all(r.view(np.uint32) & 0x1FFF == 0)
    assert np.all(np.abs(r - x) <= np.abs(x) * 2**-11)


def test_host_bfloat16_helpers_round_trip():
    x = np.array([1.0, -2.5, 3.3, 65504.0, 1e-3], np.float32)
    b = dt.to_bfloat16(x)
    assert b.dtype == dt.BFLOAT16_HOST and b.dtype.itemsize == 2
    back = dt.from_bfloat16(b)
    assert back.dtype == np.float32
    assert np.array_equal(back, dt.round_to(x, "bfloat16"))
    assert dt.to_numpy("bfloat16") == dt.BFLOAT16_HOST
    with pytest.raises(dt.DTypeError, match="bfloat16"):
        dt.from_bfloat16(x)


# ---------------------------------------------------------------------------------------
# simulator: every operation rounds


def _chain(d):
    a = te.placeholder((37, 5), dtype=d, name="a")
    b = te.placeholder((37, 5), dtype=d, name="b")
    c = te.compute((37, 5), lambda i, j: te.exp(a[i, j]) * b[i, j] - a[i, j] / b[i, j] + 0.1,
                   name="c")
    return a, b, c


@pytest.mark.parametrize("d", HALF)
def test_simulator_rounds_after_every_operation(d):
    import ml_dtypes  # the step-by-step reference

    a, b, c = _chain(d)
    rng = np.random.default_rng(2)
    A = host(rng.uniform(-1, 1, (37, 5)), d)
    B = host(np.where(rng.random((37, 5)) < 0.5, -1, 1) * rng.uniform(0.3, 1, (37, 5)), d)
    got = run_sim([a, b, c], [A, B], d, default_schedule(c))
    T = ml_dtypes.bfloat16 if d == "bfloat16" else np.float16
    At, Bt = A.view(T) if d == "bfloat16" else A, B.view(T) if d == "bfloat16" else B
    e = np.exp(At.astype(np.float32)).astype(T)  # transcendentals: float32, one rounding
    want = e * Bt - At / Bt + T(0.1)
    assert np.array_equal(as_f64(got, d), want.astype(np.float64))
    assert as_f64(got, d).dtype == np.float64  # and it is not the float32 answer
    f32 = (np.exp(as_f64(A, d)) * as_f64(B, d) - as_f64(A, d) / as_f64(B, d) + 0.1)
    assert not np.array_equal(as_f64(got, d), f32.astype(np.float32).astype(np.float64))


@pytest.mark.parametrize("d", HALF)
def test_simulator_casts_and_fma_round_once(d):
    x = te.placeholder((64,), dtype="float32", name="x")
    y = te.compute((64,), lambda i: x[i].astype(d), name="y")
    z = te.compute((64,), lambda i: call("fma", y[i], y[i], y[i]), name="z")
    X = np.random.default_rng(3).uniform(-4, 4, 64).astype(np.float32)
    got = run_sim([x, z], [X], d)
    Y = dt.round_to(X, d).astype(np.float64)
    assert np.array_equal(as_f64(got, d), np.asarray(dt.round_to(Y * Y + Y, d), np.float64))
    # two roundings (multiply, then add) differ somewhere: the fma is really fused
    twice = dt.round_to(dt.round_to(Y * Y, d).astype(np.float64) + Y, d)
    assert not np.array_equal(as_f64(got, d), np.asarray(twice, np.float64))


# ---------------------------------------------------------------------------------------
# PTX


@needs_ptxas
@pytest.mark.parametrize("d", HALF)
@pytest.mark.parametrize("sm", ["sm_80", "sm_90"])
def test_half_kernels_assemble(d, sm):
    a, b, _ = _chain(d)
    c = te.compute((37, 5), lambda i, j: te.tanh(a[i, j]) * b[i, j] + call(
        "fma", a[i, j], b[i, j], a[i, j]) + a[i, j].astype("float32").astype(d) + b[i, j] / a[
        i, j], name="c")
    module = ptxforge.lower(default_schedule(c), [a, b, c])
    k = compile_kernel(module.kernels()[0], sm, cache=False)
    ptx = k.get_source("ptx")
    suffix = "f16" if d == "float16" else "bf16"
    assert "ld.global.nc.b16" in ptx and "st.global.b16" in ptx
    assert f"cvt.rn.{suffix}.f32" in ptx  # float32 math rounds back to nearest
    assert f"fma.rn.{suffix} " in ptx  # fma is native, one rounding
    assert ".approx" not in ptx
    assert k.cubin
