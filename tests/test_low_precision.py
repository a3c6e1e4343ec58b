"""float16, bfloat16 and TF32: rounding helpers, the simulator's emulation (bit-exact against
step-by-step numpy / ml_dtypes), and PTX for sm_80 and sm_90 through ptxas."""

from __future__ import annotations

import zlib

import numpy as np
import ptxforge
import ptxforge.ops as ops
import pytest
from ptxforge import te
from ptxforge.backend_ptx import compile_kernel, find_ptxas
from ptxforge.ir import dtype as dt
from ptxforge.ir.expr import call
from ptxforge.ops import testing as ref
from ptxforge.ops.schedules import default_schedule
from ptxforge.ops.schedules.cases import SMALL, workload

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


# ---------------------------------------------------------------------------------------
# every operator in float16 and bfloat16, default schedule, against a float64 reference

# relative to a float64 reference computed from the same (rounded) inputs; the absolute
# part is a fraction of the largest reference value (sums of mixed signs cancel)
TOLERANCE = {"float16": 2e-3, "bfloat16": 1.6e-2}
INTEGER_CASES = ("floor_divide", "floor_mod")


def _half_params(first_only: bool):
    out = []
    for case, shapes in SMALL.items():
        if case in INTEGER_CASES:
            continue
        for k, shape in enumerate(shapes[:1] if first_only else shapes[1:]):
            for d in HALF:
                out.append(pytest.param(case, shape, d, id=f"{case}-{k}-{d}"))
    return out


def _check_half_op(case, shape, d):
    w = workload(case, dtype=d, **shape)
    assert w.inputs[0].dtype == d
    s = default_schedule(w.output)
    rng = np.random.default_rng(zlib.crc32(f"{case}{shape}{d}".encode()))
    inputs = w.random_inputs(rng)
    got = run_sim(w.tensors, inputs, w.output.dtype, s)
    want = w.expected64(inputs)
    got64 = ref.widen(got, w.output.dtype)
    if not dt.is_float(w.output.dtype):  # cast to int32: exact
        assert np.array_equal(got64, want)
        return
    tol = TOLERANCE[d] if dt.is_half(w.output.dtype) else TOLERANCE[d] / 2
    scale = float(np.abs(want).max()) if want.size else 0.0
    np.testing.assert_allclose(got64, want, rtol=tol, atol=tol * max(scale, 1e-6))
    return got64, want


@pytest.mark.parametrize("case,shape,d", _half_params(first_only=True))
def test_operator_in_half_precision_matches_float64(case, shape, d):
    _check_half_op(case, shape, d)


@pytest.mark.slow
@pytest.mark.parametrize("case,shape,d", _half_params(first_only=False))
def test_operator_in_half_precision_every_shape(case, shape, d):
    _check_half_op(case, shape, d)


@pytest.mark.parametrize("d", HALF)
def test_sums_accumulate_in_float32(d):
    # 3000 x 0.1 in a 16-bit running sum stalls (float16 at 256: the ulp is 0.25)
    x = te.placeholder((3000,), dtype=d, name="x")
    total = ops.sum(x)
    assert total.dtype == d
    stages = {t.op.name: t.dtype for t in [total, total.op.input_tensors[0]]}
    assert stages == {"T_cast": d, "x_red": "float32"}
    X = host(np.full(3000, 0.1), d)
    got = float(as_f64(run_sim([x, total], [X], d, default_schedule(total)), d))
    assert abs(got - 3000 * float(as_f64(X, d)[0])) <= 300 * TOLERANCE[d]


@pytest.mark.parametrize("d", HALF)
def test_products_accumulate_in_float32_and_take_out_dtype(d):
    a = te.placeholder((4, 64), dtype=d, name="a")
    w = te.placeholder((5, 64), dtype=d, name="w")
    out16 = ops.nn.dense(a, w)
    assert out16.dtype == d and out16.op.name == "T_cast"
    assert out16.op.input_tensors[0].dtype == "float32"
    out32 = ops.nn.dense(a, w, out_dtype="float32")
    assert out32.dtype == "float32" and out32.op.name == "T_matmul_NT"
    assert out32.op.attrs["precision"] == "float32"
    rng = np.random.default_rng(5)
    A, W = host(rng.uniform(-1, 1, (4, 64)), d), host(rng.uniform(-1, 1, (5, 64)), d)
    want = as_f64(A, d) @ as_f64(W, d).T
    got32 = run_sim([a, w, out32], [A, W], "float32", default_schedule(out32))
    np.testing.assert_allclose(got32, want, rtol=1e-5, atol=1e-5)
    got16 = run_sim([a, w, out16], [A, W], d, default_schedule(out16))
    # one rounding of the float32 sum
    assert np.array_equal(as_f64(got16, d), dt.round_to(got32, d).astype(np.float64))


# ---------------------------------------------------------------------------------------
# TF32: explicit, attributed, and the same rounding on every unit


def test_tf32_is_never_the_default():
    a = te.placeholder((4, 8), name="a")
    w = te.placeholder((3, 8), name="w")
    assert ops.nn.dense(a, w).op.attrs["precision"] == "float32"
    with ops.tf32(True):
        assert ops.nn.dense(a, w).op.attrs["precision"] == "tf32"
        with ops.tf32(False):
            assert ops.nn.dense(a, w).op.attrs["precision"] == "float32"
        assert ops.nn.dense(a, w, precision="float32").op.attrs["precision"] == "float32"
    assert ops.nn.dense(a, w).op.attrs["precision"] == "float32"
    ops.allow_tf32(True)
    try:
        assert ops.nn.batch_matmul(te.placeholder((1, 4, 8)), te.placeholder((1, 3, 8))
                                   ).op.attrs["precision"] == "tf32"
    finally:
        ops.allow_tf32(False)
    assert ops.nn.dense(a, w).op.attrs["precision"] == "float32"
    h = te.placeholder((4, 8), dtype="float16", name="h")
    with pytest.raises(te.TEError, match="tf32"):
        ops.nn.dense(h, h, precision="tf32")
    with pytest.raises(te.TEError, match="precision"):
        ops.nn.dense(a, w, precision="fp8")


def _tf32_cases():
    rng = np.random.default_rng(7)
    a = te.placeholder((6, 40), name="a")
    w = te.placeholder((9, 40), name="w")
    A, W = rng.uniform(-1, 1, (6, 40)).astype(np.float32), rng.uniform(-1, 1, (9, 40)).astype(
        np.float32)
    yield ("dense", [a, w], lambda p: ops.nn.dense(a, w, precision=p), [A, W],
           lambda p: ref.dense_python(A.astype(np.float64), W.astype(np.float64), precision=p))
    x = te.placeholder((2, 5, 12), name="x")
    y = te.placeholder((2, 7, 12), name="y")
    X, Y = rng.uniform(-1, 1, (2, 5, 12)).astype(np.float32), rng.uniform(
        -1, 1, (2, 7, 12)).astype(np.float32)
    yield ("batch_matmul", [x, y], lambda p: ops.nn.batch_matmul(x, y, precision=p), [X, Y],
           lambda p: ref.batch_matmul_python(X.astype(np.float64), Y.astype(np.float64),
                                             precision=p))
    d = te.placeholder((1, 4, 6, 6), name="d")
    k = te.placeholder((5, 4, 3, 3), name="k")
    D, K = rng.uniform(-1, 1, (1, 4, 6, 6)).astype(np.float32), rng.uniform(
        -1, 1, (5, 4, 3, 3)).astype(np.float32)
    yield ("conv2d_nchw", [d, k], lambda p: ops.nn.conv2d_nchw(d, k, 1, 1, precision=p),
           [D, K], lambda p: ref.conv2d_nchw_python(D.astype(np.float64), K.astype(np.float64),
                                                    1, 1, precision=p))
    dn = te.placeholder((1, 6, 6, 4), name="dn")
    kn = te.placeholder((3, 3, 4, 5), name="kn")
    yield ("conv2d_nhwc", [dn, kn], lambda p: ops.nn.conv2d_nhwc(dn, kn, 1, 1, precision=p),
           [D.transpose(0, 2, 3, 1).copy(), K.transpose(2, 3, 1, 0).copy()],
           lambda p: ref.conv2d_nhwc_python(D.transpose(0, 2, 3, 1).astype(np.float64),
                                            K.transpose(2, 3, 1, 0).astype(np.float64), 1, 1,
                                            precision=p))


@pytest.mark.parametrize("name", ["dense", "batch_matmul", "conv2d_nchw", "conv2d_nhwc"])
def test_tf32_matches_the_tf32_reference_and_not_float32(name):
    case = next(c for c in _tf32_cases() if c[0] == name)
    _, inputs, build, arrays, reference = case
    out = build("tf32")
    assert out.op.attrs["precision"] == "tf32"
    got = run_sim(inputs + [out], arrays, "float32", default_schedule(out)).astype(np.float64)
    want_tf32, want_f32 = reference("tf32"), reference("float32")
    np.testing.assert_allclose(got, want_tf32, rtol=1e-5, atol=1e-5)
    # TF32 inputs carry 10 mantissa bits: the float32 answer is far off, beyond the
    # tolerance above (this fails if the precision were ignored)
    assert np.abs(got - want_f32).max() > 1e-4
    plain = run_sim(inputs + [build("float32")], arrays, "float32").astype(np.float64)
    np.testing.assert_allclose(plain, want_f32, rtol=1e-5, atol=1e-5)


@needs_ptxas
@pytest.mark.parametrize("sm", ["sm_80", "sm_90"])
def test_tf32_rounds_with_cvt_rna_on_cuda_cores(sm):
    a = te.placeholder((16, 32), name="a")
    w = te.placeholder((8, 32), name="w")
    out = ops.nn.dense(a, w, precision="tf32")
    module = ptxforge.lower(default_schedule(out), [a, w, out])
    ptx = "".join(compile_kernel(k, sm, cache=False).get_source("ptx")
                  for k in module.kernels())
    assert "cvt.rna.tf32.f32" in ptx


# ---------------------------------------------------------------------------------------
# paired 16-bit arithmetic


def _vectorized_elementwise(d: str, vector: int):
    n = 2048
    a = te.placeholder((n,), dtype=d, name="a")
    b = te.placeholder((n,), dtype=d, name="b")
    c = te.compute((n,), lambda i: a[i] * b[i] + a[i], name="c")
    s = te.create_schedule(c.op)
    io, ii = s[c].split(s[c].op.axis[0], factor=vector)
    bo, ti = s[c].split(io, factor=64)
    s[c].bind(bo, te.thread_axis("blockIdx.x"))
    s[c].bind(ti, te.thread_axis("threadIdx.x"))
    s[c].vectorize(ii)
    return s, [a, b, c]


@needs_ptxas
@pytest.mark.parametrize("d", HALF)
@pytest.mark.parametrize("sm", ["sm_80", "sm_90"])
def test_vectorized_half_loops_use_paired_instructions(d, sm):
    suffix = "f16x2" if d == "float16" else "bf16x2"
    for vector, load in ((2, "ld.global.nc.b32"), (8, "ld.global.nc.v4.b32")):
        s, args = _vectorized_elementwise(d, vector)
        k = compile_kernel(ptxforge.lower(s, args).kernels()[0], sm, cache=False)
        ptx = k.get_source("ptx")
        assert f"fma.rn.{suffix}" in ptx, ptx
        assert load in ptx and ("st.global.b32" in ptx or "st.global.v4.b32" in ptx)
        assert "ld.global.nc.b16" not in ptx  # every element travels in a pair


@pytest.mark.parametrize("d", HALF)
def test_vectorized_half_loop_on_the_simulator(d):
    s, args = _vectorized_elementwise(d, 4)
    rng = np.random.default_rng(9)
    A, B = host(rng.uniform(-2, 2, 2048), d), host(rng.uniform(-2, 2, 2048), d)
    got = as_f64(run_sim(args, [A, B], d, s), d)
    a64, b64 = as_f64(A, d), as_f64(B, d)
    want = dt.round_to(dt.round_to(a64 * b64, d).astype(np.float64) + a64, d)
    assert np.array_equal(got, np.asarray(want, np.float64))


def test_simulator_arrays_of_bfloat16():
    a = ptxforge.nd.array(ptxforge.nd.to_bfloat16(np.array([1.0, 2.3, -0.1])))
    assert a.dtype == "bfloat16" and a.numpy().dtype == dt.BFLOAT16_HOST
    e = ptxforge.nd.empty((3,), "bfloat16")
    assert np.isnan(ptxforge.nd.from_bfloat16(e.numpy())).all()  # poisoned like float32
    e.copyfrom(np.array([1.0, 2.3, -0.1]))  # rounds to nearest even
    assert np.array_equal(e.numpy().view(np.uint16), a.numpy().view(np.uint16))
    assert np.array_equal(ptxforge.nd.from_bfloat16(e.numpy()),
                          dt.round_to(np.array([1.0, 2.3, -0.1]), "bfloat16"))


@pytest.mark.parametrize("d", HALF)
def test_measure_checks_16bit_outputs(d):
    from ptxforge.ir.stmt import Buffer
    from ptxforge.measure.check import compare, poisoned, random_array

    b = Buffer("x", d, (64,))
    x = random_array(b, np.random.default_rng(0))
    assert x.dtype == dt.to_numpy(d) and np.isnan(ref.widen(poisoned(b), d)).all()
    # one unit in the last place passes (another summation order), a poisoned output not
    ulp = 2.0 ** (-10 if d == "float16" else -7)
    nudged = host(ref.widen(x, d) * (1 + ulp), d)
    assert compare([nudged], [x], ["x"]) == ""
    assert "differ" in compare([poisoned(b)], [x], ["x"])
    assert "differ" in compare([host(ref.widen(x, d) * 1.1, d)], [x], ["x"])


@pytest.mark.parametrize("d", HALF)
def test_constant_folding_rounds_the_literals_first(d):
    from ptxforge.ir.expr import const
    from ptxforge.ir.simplify import simplify

    folded = simplify(const(0.1, d) + const(0.2, d))
    r = np.float64(dt.round_to(np.float64(0.1), d)) + np.float64(dt.round_to(np.float64(0.2), d))
    assert folded.dtype == d and folded.value == float(dt.round_to(r, d))


REPRESENTATIVE = ("dense", "conv2d_nchw", "softmax", "sum", "avg_pool2d", "batch_norm", "erf",
                  "cast", "max_pool2d")


def _assemble_op(case, d, sm):
    w = workload(case, dtype=d, **SMALL[case][0])
    module = ptxforge.lower(default_schedule(w.output), w.tensors)
    for k in module.kernels():
        assert compile_kernel(k, sm, cache=False).cubin


@needs_ptxas
@pytest.mark.parametrize("d", HALF)
@pytest.mark.parametrize("case", REPRESENTATIVE)
def test_half_operators_assemble_for_sm80_and_sm90(case, d):
    for sm in ("sm_80", "sm_90"):
        _assemble_op(case, d, sm)


@needs_ptxas
@pytest.mark.slow
@pytest.mark.parametrize("d", HALF)
@pytest.mark.parametrize("case", [c for c in SMALL if c not in INTEGER_CASES
                                  and c not in REPRESENTATIVE])
def test_every_half_operator_assembles(case, d):
    for sm in ("sm_80", "sm_90"):
        _assemble_op(case, d, sm)


def test_promotion_of_16bit_floats():
    assert dt.promote("float16", "float32") == "float32"
    assert dt.promote("bfloat16", "float16") == "float32"
    assert dt.promote("float16", "int32") == "float16"
    a = te.placeholder((4,), dtype="float16", name="a")
    assert te.compute((4,), lambda i: a[i] + 0.5, name="b").dtype == "float16"


@pytest.mark.parametrize("d", HALF)
def test_layer_norm_in_half_precision_computes_in_float32(d):
    from ptxforge.graph.op import get_op

    x = te.placeholder((3, 40), dtype=d, name="x")
    g = te.placeholder((40,), dtype=d, name="g")
    b = te.placeholder((40,), dtype=d, name="b")
    out = get_op("nn.layer_norm").lower([x, g, b], {"axis": -1, "epsilon": 1e-5})
    assert out.dtype == d
    rng = np.random.default_rng(8)
    # a large common offset: a 16-bit mean or variance would lose the signal
    X = host(100 + rng.uniform(-1, 1, (3, 40)), d)
    G, B = host(rng.uniform(0.5, 1.5, 40), d), host(rng.uniform(-1, 1, 40), d)
    got = as_f64(run_sim([x, g, b, out], [X, G, B], d, default_schedule(out)), d)
    x64 = as_f64(X, d)
    mean = x64.mean(-1, keepdims=True)
    want = (x64 - mean) / np.sqrt(((x64 - mean) ** 2).mean(-1, keepdims=True) + 1e-5) \
        * as_f64(G, d) + as_f64(B, d)
    np.testing.assert_allclose(got, want, rtol=TOLERANCE[d], atol=TOLERANCE[d] * 3)


@pytest.mark.parametrize("d", HALF)
def test_workload_expected_rounds_a_float64_reference(d):
    w = workload("dense", dtype=d, batch=2, in_dim=300, out_dim=3)
    inputs = w.random_inputs(np.random.default_rng(1))
    want = w.expected(inputs)
    assert want.dtype == dt.to_numpy(d)
    assert np.array_equal(ref.widen(want, d),
                          np.asarray(dt.round_to(w.expected64(inputs), d), np.float64))
