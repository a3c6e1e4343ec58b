"""Tensor cores: fragment layouts, the intrinsics registry, tensorize, the simulator's
mma.sync / ldmatrix with the PTX layouts, the verifier's fragment rules, PTX generation,
and the tensor-core GEMM schedule on the simulator (and the GPU, ``gpu`` mark)."""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest

import ptxforge
from ptxforge import te
from ptxforge.backend_ptx import compile_module
from ptxforge.backend_sim import SimMemoryError
from ptxforge.backend_sim import tensorcore as simtc
from ptxforge.backend_sim.runtime import Chunk
from ptxforge.ir.intrin import ROLES, IntrinError, get_intrin, list_intrins
from ptxforge.ir.verify import IRVerifyError, verify
from ptxforge.ops.schedules.gemm.knobs import TensorCoreConfig
from ptxforge.ops.schedules.gemm.schedule import dense_tensorcore_compute
from ptxforge.passes.errors import PassError
from ptxforge.passes.schedule.common import ScheduleError

from .tensorcore_dense import schedule_dense_tensorcore

RNG = np.random.default_rng(7)
REJECTED = (PassError, ScheduleError)  # the schedule API wraps a pass's error


def _random(shape, dtype):
    x = RNG.uniform(-1, 1, shape)
    x[x == 0] = 0.5  # never zeros: a dropped element must show
    return x.astype(dtype)


def run_gemm(M, N, K, cfg=None, in_dtype="float16", out_dtype="float32",
             acc_dtype="float32", b_layout="nk", tf32_ref=False):
    """The relative error of the scheduled product against float64 numpy (of the inputs
    rounded to TF32 first with ``tf32_ref``)."""
    t = dense_tensorcore_compute(M, N, K, in_dtype, out_dtype, acc_dtype, b_layout)
    s = schedule_dense_tensorcore(t, cfg or TensorCoreConfig())
    mod = ptxforge.build(s, t, target="sim")
    a = _random((M, K), in_dtype)
    b = _random((N, K) if b_layout == "nk" else (K, N), in_dtype)
    c = np.full((M, N), np.nan, out_dtype)
    mod(a, b, c)
    if tf32_ref:
        a, b = simtc._tf32(a), simtc._tf32(b)
    bt = b.astype(np.float64).T if b_layout == "nk" else b.astype(np.float64)
    want = a.astype(np.float64) @ bt
    return float(np.abs(c.astype(np.float64) - want).max() / np.abs(want).max())


# ---------------------------------------------------------------------------------------
# layouts and the registry


@pytest.mark.parametrize("role", sorted(ROLES))
def test_fragment_layout_covers_each_element_once(role):
    R = ROLES[role]
    rows, cols = R.element_map()
    assert rows.shape == (R.threads, R.per_lane)  # a warp, or a warpgroup (wg_c)
    flat = rows * R.cols + cols
    assert sorted(flat.ravel().tolist()) == list(range(R.rows * R.cols))


def test_fragment_layouts_follow_the_ptx_isa():
    # m16n8k16 A: a0,a1 = (g, 2t..2t+1); a2,a3 = (g+8, ...); a4,a5 = (g, 2t+8..); C likewise
    rows, cols = ROLES["a16"].element_map()
    lane = 13  # g = 3, t = 1
    assert list(zip(rows[lane], cols[lane])) == [(3, 2), (3, 3), (11, 2), (11, 3), (3, 10),
                                                 (3, 11), (11, 10), (11, 11)]
    rows, cols = ROLES["b16"].element_map()  # B [n, k]: b0,b1 = k 2t.., n g
    assert list(zip(rows[lane], cols[lane])) == [(3, 2), (3, 3), (3, 10), (3, 11)]
    rows, cols = ROLES["b16_kn"].element_map()  # the same registers, B [k, n]
    assert list(zip(rows[lane], cols[lane])) == [(2, 3), (3, 3), (10, 3), (11, 3)]
    rows, cols = ROLES["a_tf32"].element_map()  # tf32 A: (g, t), (g+8, t), (g, t+4), ...
    assert list(zip(rows[lane], cols[lane])) == [(3, 1), (11, 1), (3, 5), (11, 5)]


def test_registry_declares_every_intrinsic():
    names = list_intrins()
    for n in ("mma_m16n8k16_f16_f32", "mma_m16n8k16_f16_f16", "mma_m16n8k16_bf16_f32",
              "mma_m16n8k8_tf32_f32", "ldmatrix_a_x4_f16", "ldmatrix_b_x1_f16",
              "ldmatrix_b_x2_f16", "ldmatrix_b_x4_trans_f16", "load_a_f16", "store_c_f32",
              "store_c_f32_f16", "fill_m16n8_f32", "ldmatrix_a_x4_tf32",
              "ldmatrix_b_x2_tf32", "ldmatrix_b_x4_tf32"):
        assert n in names
    for n in names:
        decl = get_intrin(n).declaration
        assert decl.op.name == get_intrin(n).operands[0]
    body = str(get_intrin("mma_m16n8k16_f16_f32").declaration.op.body)
    assert body == "reduce_sum((float32(A[i, k])*float32(B[j, k])), axis=[k])"
    with pytest.raises(IntrinError, match="did you mean mma_m16n8k16_f16_f32"):
        get_intrin("mma_m16n8k16_f16_f33")


# ---------------------------------------------------------------------------------------
# each intrinsic on the simulator against numpy, in the hardware's register terms


def _chunk(warps=1):
    return Chunk("k", (1, 1, 1), (32 * warps, 1, 1), 0, 1, False)


def _scatter(tile, role, frag, slot):
    rows, cols = ROLES[role].element_map()
    frag[slot + np.arange(ROLES[role].per_lane)[None, :], np.arange(32)[:, None]] = \
        tile[rows, cols]


def _gather(frag, role, slot):
    R = ROLES[role]
    rows, cols = R.element_map()
    out = np.full((R.rows, R.cols), np.nan, frag.dtype)
    out[rows, cols] = frag[slot + np.arange(R.per_lane)[None, :], np.arange(32)[:, None]]
    return out


@pytest.mark.parametrize("name", ["mma_m16n8k16_f16_f32", "mma_m16n8k16_f16_f16",
                                  "mma_m16n8k16_f16_f32_kn", "mma_m16n8k8_tf32_f32"])
def test_sim_mma_matches_numpy(name):
    spec = get_intrin(name)
    ch = _chunk()
    tiles, frags = {}, {}
    for op in ("A", "B", "C"):
        R = spec.role(op)
        tiles[op] = _random((R.rows, R.cols), spec.dtypes[op])
        frags[op] = np.full((R.per_lane + 4, 32), np.nan, spec.dtypes[op])
        _scatter(tiles[op], R.name, frags[op], 4)
    simtc.mma(ch, None, spec, frags["C"], 4, frags["A"], 4, frags["B"], 4)
    a, b, c = (tiles[k].astype(np.float64) for k in "ABC")
    if spec.dtypes["A"] == "float32":  # TF32 keeps 10 mantissa bits
        a, b = (simtc._tf32(x.astype(np.float32)).astype(np.float64) for x in (a, b))
    want = a @ (b if name.endswith("_kn") else b.T) + c
    got = _gather(frags["C"], spec.roles["C"], 4).astype(np.float64)
    tol = 2e-3 * np.abs(want).max() if spec.dtypes["C"] == "float16" else 1e-5
    assert np.abs(got - want).max() <= tol
    assert np.isnan(frags["C"][:4]).all()  # the other slots are untouched


@pytest.mark.parametrize("name", [n for n in list_intrins()
                                  if n.startswith("ldmatrix") and n.endswith("_f16")])
def test_sim_ldmatrix_delivers_the_tile(name):
    spec = get_intrin(name)
    rows, cols = spec.shapes["S"]
    ld = cols + 8
    mem = _random((rows + 3) * ld, "float16")
    base = 2 * ld + 8
    role = spec.role("F")
    ntiles = max(1, spec.num // len(role.blocks))
    frag = np.full((role.per_lane * ntiles + 2, 32), np.nan, np.float16)
    slots = [2 + k * role.per_lane for k in range(ntiles)]
    simtc.ldmatrix(_chunk(), None, spec, frag, slots,
                   simtc.Mem(mem, None, None, mem.size, "S", "shared"), base, ld)
    tile = mem[base:base + rows * ld].reshape(rows, ld)[:, :cols]
    dr, dc = spec.tile_step
    for k, slot in enumerate(slots):
        got = _gather(frag, role.name, slot)
        want = tile[k * dr:k * dr + role.rows, k * dc:k * dc + role.cols]
        np.testing.assert_array_equal(got, want)


def test_sim_ldmatrix_rejects_misaligned_rows():
    spec = get_intrin("ldmatrix_a_x4_f16")
    mem = _random(40 * 20, "float16")
    frag = np.zeros((8, 32), np.float16)
    m = simtc.Mem(mem, None, None, mem.size, "A.shared", "shared")
    with pytest.raises(simtc.SimTensorCoreError, match="not 16-byte aligned"):
        simtc.ldmatrix(_chunk(), None, spec, frag, [0], m, 4, 40)  # 8-byte offset
    with pytest.raises(simtc.SimTensorCoreError, match="not 16-byte aligned"):
        simtc.ldmatrix(_chunk(), None, spec, frag, [0], m, 0, 36)  # rows 72 bytes apart


@pytest.mark.parametrize("name", ["ldmatrix_a_x4_tf32", "ldmatrix_b_x2_tf32",
                                  "ldmatrix_b_x4_tf32"])
def test_sim_ldmatrix_tf32_delivers_the_role_layout(name):
    # 16-byte rows of 4 fp32 values: lane l gets row l / 4, column l % 4 of each matrix,
    # which is the role's element map (A: a0..a3; B [n, k]: b0, b1, per n8 tile)
    spec = get_intrin(name)
    rows, cols = spec.shapes["S"]
    assert spec.dtypes == {"F": "float32", "S": "float32"}
    assert spec.ptx == f"ldmatrix.sync.aligned.m8n8.x{spec.num}.shared.b16"
    ld = cols + 4  # 48-byte rows: still 16-byte aligned, not the tile's width
    mem = _random((rows + 3) * ld, "float32")
    base = 2 * ld + 4
    role = spec.role("F")
    ntiles = max(1, spec.num // len(role.blocks))
    assert ntiles * role.rows == rows and role.cols == cols
    frag = np.full((role.per_lane * ntiles + 3, 32), np.nan, np.float32)
    slots = [3 + k * role.per_lane for k in range(ntiles)]
    simtc.ldmatrix(_chunk(), None, spec, frag, slots,
                   simtc.Mem(mem, None, None, mem.size, "S", "shared"), base, ld)
    tile = mem[base:base + rows * ld].reshape(rows, ld)[:, :cols]
    r, c = role.element_map()
    for k, slot in enumerate(slots):
        want = tile[k * role.rows:(k + 1) * role.rows]
        got = frag[slot:slot + role.per_lane].T  # (lane, element)
        np.testing.assert_array_equal(got, want[r, c])  # the exact bits, no rounding
    assert np.isnan(frag[:3]).all()  # the other slots are untouched
    lane = 13  # g = 3, t = 1
    if name.startswith("ldmatrix_a"):
        assert frag[3:7, lane].tolist() == [tile[3, 1], tile[11, 1], tile[3, 5], tile[11, 5]]
    else:
        assert frag[3:5, lane].tolist() == [tile[3, 1], tile[3, 5]]


def test_sim_ldmatrix_tf32_rejects_misaligned_rows():
    spec = get_intrin("ldmatrix_a_x4_tf32")
    mem = _random(40 * 20, "float32")
    frag = np.zeros((4, 32), np.float32)
    m = simtc.Mem(mem, None, None, mem.size, "A.shared", "shared")
    with pytest.raises(simtc.SimTensorCoreError, match="byte 8.*not 16-byte aligned.*4 "
                                                       "elements"):
        simtc.ldmatrix(_chunk(), None, spec, frag, [0], m, 2, 12)  # 8-byte offset
    with pytest.raises(simtc.SimTensorCoreError, match="not 16-byte aligned"):
        simtc.ldmatrix(_chunk(), None, spec, frag, [0], m, 0, 10)  # rows 40 bytes apart
    # 4 fp32 elements are 16 bytes: an offset of 4 elements and rows of 12 are aligned
    simtc.ldmatrix(_chunk(), None, spec, frag, [0], m, 4, 12)
    assert frag[0, 0] == mem[4] and frag[1, 0] == mem[4 + 8 * 12]


def test_misaligned_tf32_shared_rows_are_refused_before_running():
    # shared rows of 18 fp32 (72 bytes): every other ldmatrix row address would be
    # misaligned; the nest's match (the verifier's, after each lowering pass) refuses it
    from ptxforge.passes import Pipeline

    t = dense_tensorcore_compute(32, 32, 16, "float32", "float32")
    cfg = TensorCoreConfig(32, 32, 16, 2, 2, vec=2, pad=4, tf32=True)
    text = str(schedule_dense_tensorcore(t, cfg).pipeline)
    assert text.count(", 20, 0)") == 2  # rows of 16 + 4 fp32 for A and B
    bad = text.replace("storage_align(A.shared, 0, 20, 0)", "storage_align(A.shared, 0, 18, 0)")
    module = Pipeline.parse(bad)(te.create_schedule(t[2].op).module)
    with pytest.raises(IRVerifyError, match=r"ldmatrix_a_x4_tf32: ldmatrix reads rows of 16 "
                                            r"bytes.*A\.shared are 18 elements of 4 bytes"):
        ptxforge.build(module, None, target="sim")
    # the aligned rows of the schedule itself build
    good = Pipeline.parse(text)(te.create_schedule(t[2].op).module)
    ptxforge.build(good, None, target="sim")
    with pytest.raises(ScheduleError, match="pad 2 is a multiple of 4 elements of 4 bytes"):
        schedule_dense_tensorcore(t, TensorCoreConfig(32, 32, 16, 2, 2, vec=2, pad=2,
                                                      tf32=True))


def test_sim_rejects_partial_warps_non_uniform_operands_and_bad_slots():
    spec = get_intrin("fill_m16n8_f32")
    frag = np.zeros((8, 64), np.float32)
    ch = _chunk(2)
    mask = np.ones(64, bool)
    mask[5] = False
    with pytest.raises(simtc.SimTensorCoreError, match="only some lanes of a warp"):
        simtc.fill(ch, mask, spec, frag, 0)
    slot = np.zeros(64, np.int32)
    slot[40] = 4
    with pytest.raises(simtc.SimTensorCoreError, match="differs between the lanes"):
        simtc.fill(ch, None, spec, frag, slot)
    with pytest.raises(SimMemoryError, match="illegal fragment access"):
        simtc.fill(ch, None, spec, frag, 6)
    simtc.fill(ch, mask.reshape(2, 32).all(axis=1).repeat(32), spec, frag, 4)
    assert (frag[4:, 32:] == 0).all()


# ---------------------------------------------------------------------------------------
# the GEMM schedule on the simulator


@pytest.mark.parametrize("M,N,K,out", [(64, 64, 64, "float32"), (128, 64, 32, "float32"),
                                       (64, 64, 64, "float16"), (128, 64, 32, "float16")])
def test_gemm_on_the_simulator(M, N, K, out):
    err = run_gemm(M, N, K, TensorCoreConfig(64, 64, 32, 2, 2), out_dtype=out)
    assert err < (2e-3 if out == "float16" else 1e-6)


@pytest.mark.parametrize("b_layout,frag_load,acc,out", [
    (lay, load, acc, out)
    for lay, load, (acc, out) in itertools.product(
        ("nk", "kn"), ("ldmatrix", "load"),
        (("float32", "float32"), ("float32", "float16"), ("float16", "float16")))])
def test_gemm_variants_on_the_simulator(b_layout, frag_load, acc, out):
    # warp tiles 32x16 (ldmatrix .x4 of B) and 16x8 (.x2)
    for cfg in (TensorCoreConfig(64, 32, 32, 2, 2, frag_load=frag_load),
                TensorCoreConfig(32, 16, 16, 2, 2, vec=2, frag_load=frag_load)):
        err = run_gemm(64, 32, 32, cfg, out_dtype=out, acc_dtype=acc, b_layout=b_layout)
        assert err < (2e-3 if out == "float16" else 1e-6), (cfg, err)


def test_tensor_core_tf32_rounds_like_the_cuda_core_path():
    from ptxforge.ir.dtype import round_to

    # 1 + 2^-11 + 2^-12 lies above the midpoint of two TF32 values: truncation would drop it
    x = np.array([1 + 2**-11 + 2**-12, -(1 + 2**-11), 3.0, 1 + 2**-10], np.float32)
    np.testing.assert_array_equal(simtc._tf32(x), round_to(x, "tf32"))
    assert simtc._tf32(x)[0] == np.float32(1 + 2**-10)
    assert simtc._tf32(x)[1] == np.float32(-(1 + 2**-10))  # a tie: away from zero


@pytest.mark.parametrize("frag_load", ["ldmatrix", "load"])
def test_tf32_dense_fragment_loads_on_the_simulator(frag_load):
    # warp tiles 32x16 (ldmatrix .x4 of B: two n8 tiles) and 16x8 (.x2)
    for cfg, b_intrin in ((TensorCoreConfig(64, 32, 32, 2, 2, vec=4, tf32=True,
                                            frag_load=frag_load), "ldmatrix_b_x4_tf32"),
                          (TensorCoreConfig(32, 16, 16, 2, 2, vec=2, pad=0, tf32=True,
                                            frag_load=frag_load), "ldmatrix_b_x2_tf32")):
        t = dense_tensorcore_compute(64, 32, 32, "float32", "float32")
        dev = ptxforge.lower(schedule_dense_tensorcore(t, cfg), t)
        used = set(_intrins_all(dev))
        if frag_load == "ldmatrix":
            assert {"ldmatrix_a_x4_tf32", b_intrin} <= used
            assert not used & {"load_a_tf32", "load_b_tf32"}
            ptx = compile_module(dev, "sm_80").get_source("ptx")
            assert get_intrin(b_intrin).ptx in ptx and "ld.shared" not in ptx
        else:
            assert {"load_a_tf32", "load_b_tf32"} <= used
        err = run_gemm(64, 32, 32, cfg, in_dtype="float32", tf32_ref=True)
        assert err < 1e-6, (cfg, err)


def test_tf32_b_as_k_n_has_no_ldmatrix():
    t = dense_tensorcore_compute(32, 32, 16, "float32", "float32", b_layout="kn")
    with pytest.raises(ScheduleError, match=r"TF32 takes B as \[N, K\]"):
        schedule_dense_tensorcore(t, TensorCoreConfig(32, 32, 16, 2, 2, vec=2, tf32=True))


def test_tf32_is_explicit():
    t = dense_tensorcore_compute(32, 32, 16, "float32", "float32")
    with pytest.raises(ScheduleError, match="TF32"):
        schedule_dense_tensorcore(t, TensorCoreConfig(32, 32, 16, 2, 2))
    err = run_gemm(32, 32, 16, TensorCoreConfig(32, 32, 16, 2, 2, vec=2, tf32=True),
                   in_dtype="float32")
    assert err < 2e-3


# ---------------------------------------------------------------------------------------
# tensorize's checks and the verifier


def test_tensorize_rejects_mismatches():
    t = dense_tensorcore_compute(64, 64, 64)
    s = te.create_schedule(t[2].op)
    cf = s.cache_write(t[2], "warp")
    i, j = s[cf].op.axis
    with pytest.raises(REJECTED, match="did you mean"):
        s[cf].tensorize(i, "mma_m16n8k16_f16_f33")
    with pytest.raises(REJECTED, match="loop i has extent 64, axis i 16"):
        s[cf].tensorize(i, "mma_m16n8k16_f16_f32")
    io, ii = s[cf].split(i, factor=16)
    jo, ji = s[cf].split(j, factor=8)
    (k,) = s[cf].op.reduce_axis
    ko, ki = s[cf].split(k, factor=16)
    s[cf].reorder(io, jo, ko, ii, ji, ki)
    with pytest.raises(REJECTED, match="operand A is A in global memory; it is a "
                                            "fragment"):
        s[cf].tensorize(ii, "mma_m16n8k16_f16_f32")
    with pytest.raises(REJECTED, match="computation differs"):
        s[cf].tensorize(ii, "mma_m16n8k16_f16_f16")
    with pytest.raises(REJECTED, match="the nest has 3 loops .* the intrinsic has 2 axes"):
        s[cf].tensorize(ii, "ldmatrix_a_x4_f16")
    # the copy out of the fragment writes float32, not float16
    c = s[t[2]]
    ci, cj = c.op.axis
    cio, cii = c.split(ci, factor=16)
    cjo, cji = c.split(cj, factor=8)
    c.reorder(cio, cjo, cii, cji)
    with pytest.raises(REJECTED, match="computation differs .* expected a cast to float16"):
        c.tensorize(cii, "store_c_f32_f16")
    c.tensorize(cii, "store_c_f32")


def test_tensorize_rejects_a_non_contiguous_fragment_access():
    t = dense_tensorcore_compute(64, 64, 64)
    s = te.create_schedule(t[2].op)
    s.cache_write(t[2], "warp")
    c = s[t[2]]
    i, j = c.op.axis
    io, ii = c.split(i, factor=16)
    jo, ji = c.split(j, factor=8)  # jo: 8 columns, 8 apart
    c.reorder(io, ji, ii, jo)
    with pytest.raises(REJECTED, match="not contiguous along loop"):
        c.tensorize(ii, "store_c_f32")


def _lowered_gemm():
    t = dense_tensorcore_compute(64, 64, 32)
    s = schedule_dense_tensorcore(t, TensorCoreConfig(64, 64, 32, 2, 2))
    return ptxforge.lower(s, t)


def test_verifier_rejects_plain_fragment_access_and_partial_warps():
    from ptxforge.ir.intrin import ANNOTATION
    from ptxforge.ir.stmt import For, map_stmt

    mod = _lowered_gemm()
    kernel = mod.kernels()[0]

    def strip(x):
        if isinstance(x, For) and x.annotations.get(ANNOTATION, "").startswith("store_c"):
            return x.replace(annotations={})
        return None

    bad = kernel.replace(body=map_stmt(kernel.body, strip))
    with pytest.raises(IRVerifyError, match="load from fragment C.warp outside a tensorized"):
        verify(bad)
    odd = kernel.replace(attrs=kernel.attrs.with_launch(block=(16, 2, 2)))
    with pytest.raises(IRVerifyError, match="multiple of 32|above the launch extent"):
        verify(odd)


# ---------------------------------------------------------------------------------------
# PTX


@pytest.mark.parametrize("variant", [
    dict(), dict(out_dtype="float16"), dict(b_layout="kn"), dict(acc_dtype="float16",
                                                               out_dtype="float16"),
    dict(in_dtype="bfloat16"), dict(in_dtype="float32", tf32=True)])
def test_ptx_has_mma_and_ldmatrix_and_assembles(variant):
    variant = dict(variant)
    tf32 = variant.pop("tf32", False)
    t = dense_tensorcore_compute(128, 128, 64, **variant)
    cfg = TensorCoreConfig(64, 64, 32, 2, 2, vec=4 if tf32 else 8, tf32=tf32)
    s = schedule_dense_tensorcore(t, cfg)
    dev = ptxforge.lower(s, t)
    for sm in ("sm_80", "sm_90"):
        mod = compile_module(dev, sm)  # assembles with ptxas (or nvJitLink)
        ptx = mod.get_source("ptx")
        mma = get_intrin(next(v for k, v in _intrins(dev).items() if k == "mma")).ptx
        assert mma in ptx
        if tf32:  # rounded to nearest as the CUDA-core path's TF32, never truncated
            assert "cvt.rna.tf32.f32" in ptx
            # fragments from ldmatrix (16-byte rows of 4 fp32), no scalar shared loads
            assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in ptx
            assert "ld.shared" not in ptx
        if not tf32:
            assert re.search(r"ldmatrix\.sync\.aligned\.m8n8\.x[124](\.trans)?\.shared\.b16",
                             ptx)
            if variant.get("b_layout") == "kn":
                assert "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16" in ptx
        assert "ld.local" not in ptx and "st.local" not in ptx  # fragments in registers


def _intrins_all(module) -> list:
    from ptxforge.ir.intrin import ANNOTATION
    from ptxforge.ir.stmt import For, walk

    return [s.annotations[ANNOTATION] for k in module.kernels() for s in walk(k.body)
            if isinstance(s, For) and ANNOTATION in s.annotations]


def _intrins(module) -> dict:
    from ptxforge.ir.intrin import ANNOTATION
    from ptxforge.ir.stmt import For, walk

    out = {}
    for k in module.kernels():
        for s in walk(k.body):
            if isinstance(s, For) and ANNOTATION in s.annotations:
                name = s.annotations[ANNOTATION]
                out.setdefault(get_intrin(name).kind, name)
    return out


# ---------------------------------------------------------------------------------------
# the GPU


@pytest.mark.gpu
@pytest.mark.parametrize("variant", [dict(), dict(out_dtype="float16"),
                                     dict(b_layout="kn"), dict(in_dtype="float32")])
def test_gemm_on_the_gpu(variant):
    from ptxforge.backend_ptx import array, cuda, empty

    tf32 = variant.get("in_dtype") == "float32"
    M, N, K = 256, 128, 128
    t = dense_tensorcore_compute(M, N, K, **variant)
    s = schedule_dense_tensorcore(t, TensorCoreConfig(128, 64, 32, 2, 2, vec=4 if tf32 else 8,
                                                      tf32=tf32))
    dev = cuda(0)
    mod = compile_module(ptxforge.lower(s, t)).load(dev)
    a = _random((M, K), t[0].dtype)
    b = _random(t[1].shape, t[1].dtype)
    c = empty((M, N), t[2].dtype, dev)
    mod(array(a, dev), array(b, dev), c)
    bt = b.astype(np.float64) if variant.get("b_layout") == "kn" else b.astype(np.float64).T
    want = a.astype(np.float64) @ bt
    err = np.abs(c.numpy().astype(np.float64) - want).max() / np.abs(want).max()
    assert err < (2e-3 if t[2].dtype == "float16" or tf32 else 1e-5)


def test_bf16_gemm_on_the_simulator():
    from ptxforge.ir import dtype as dt

    M, N, K = 64, 32, 32
    t = dense_tensorcore_compute(M, N, K, "bfloat16", "bfloat16")
    s = schedule_dense_tensorcore(t, TensorCoreConfig(64, 32, 32, 2, 2))
    mod = ptxforge.build(s, t, target="sim")
    a = dt.to_bfloat16(_random((M, K), "float32"))
    b = dt.to_bfloat16(_random((N, K), "float32"))
    c = dt.to_bfloat16(np.zeros((M, N), np.float32))
    mod(a, b, c)
    want = (dt.from_bfloat16(a).astype(np.float64) @ dt.from_bfloat16(b).astype(np.float64).T)
    err = np.abs(dt.from_bfloat16(c) - want).max() / np.abs(want).max()
    assert 0 < err < 8e-3  # bfloat16 output rounding (8 mantissa bits)


def test_verifier_names_an_unknown_intrinsic():
    from ptxforge.ir.intrin import ANNOTATION
    from ptxforge.ir.stmt import For, map_stmt

    kernel = _lowered_gemm().kernels()[0]

    def rename(x):
        if isinstance(x, For) and ANNOTATION in x.annotations:
            return x.replace(annotations={ANNOTATION: "mma_m16n8k32_f16_f32"})
        return None

    with pytest.raises(IRVerifyError, match="unknown tensor intrinsic 'mma_m16n8k32_f16_f32'"):
        verify(kernel.replace(body=map_stmt(kernel.body, rename)))


def test_schedule_text_replays_and_bf16_output_assembles():
    from ptxforge.ir.to_ir import to_ir
    from ptxforge.passes import Pipeline

    t = dense_tensorcore_compute(64, 64, 32, "bfloat16", "bfloat16")
    s = schedule_dense_tensorcore(t, TensorCoreConfig(64, 64, 32, 2, 2, async_copy=True,
                                                      stages=2))
    text = str(s.pipeline)
    assert 'tensorize(' in text and '"mma_m16n8k16_bf16_f32")' in text
    replayed = Pipeline.parse(text)(to_ir(t))
    assert str(replayed) == str(s.module)
    ptx = compile_module(ptxforge.lower(s, t), "sm_80").get_source("ptx")
    assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in ptx
    assert "cp.async" in ptx


def test_swizzled_shared_tiles_are_rejected_not_miscompiled():
    # ldmatrix addresses rows of a padded (affine) layout; an XOR swizzle is refused
    t = dense_tensorcore_compute(64, 64, 32)
    s = schedule_dense_tensorcore(t, TensorCoreConfig(64, 64, 32, 2, 2, pad=0))
    s.apply("swizzle(A.shared, 2)")
    with pytest.raises(IRVerifyError, match="ldmatrix_a_x4_f16: the access A.shared.* is not "
                                            "affine"):
        ptxforge.lower(s, t)
