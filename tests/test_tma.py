"""TMA copies and tensor maps: the IR (text, verifier), the simulator's layout of a box
(zero fill, the hardware's swizzles, 2-D and 3-D), the tile copy kernel on the simulator
against numpy, its PTX (accepted by ptxas for sm_90a) and its launch slots; on a GPU
(``gpu``) the same kernels against numpy."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from ptxforge.backend_ptx.assemble import find_ptxas
from ptxforge.backend_sim.host import run
from ptxforge.ir import dtype as dt
from ptxforge.ir.attrs import FuncAttrs
from ptxforge.ir.expr import IntImm, IRError, Var
from ptxforge.ir.intrin.tma import shared_align, swizzle_bytes
from ptxforge.ir.parser import parse_module
from ptxforge.ir.stmt import Alloc, Barrier, Buffer, For, If, Launch, Module, PrimFunc, Seq, Store
from ptxforge.ir.stmt_tma import (
    FenceMbarrierInit,
    MbarrierArrive,
    MbarrierInit,
    MbarrierWait,
    TensorMap,
    TmaLoad,
)
from ptxforge.ir.verify import IRVerifyError, verify
from ptxforge.ops.schedules.tma import TmaCopy, tma_copy_module, tma_copy_reference

SM90A = "cuda -arch=sm_90a"


def _i(v: int) -> IntImm:
    return IntImm(v, "int32")


def box_dump_module(dtype: str, shape, box, swizzle: str, coords, threads: int = 128,
                    dst_elem: int = 0) -> Module:
    """One block: thread 0 copies the box at ``coords`` into shared memory, every thread
    waits, and the shared tile is stored to ``out`` as it lies (swizzled)."""
    t = TensorMap("t", dtype, shape, box, swizzle)
    n = t.box_elems
    size = dst_elem + n
    out = Buffer("out", dtype, [n])
    tile = Buffer("tile", dtype, [size], "shared")
    bar = Buffer("bar", "uint64", [1], "shared")
    tx, it = Var("tx"), Var("it")
    first = tx == _i(0)
    e = it * _i(threads) + tx
    copy_out = For(it, -(-n // threads), If(e < _i(n), Store(out, [e], tile[_i(dst_elem) + e])))
    body = For(tx, threads, Seq([
        If(first, Seq([MbarrierInit(bar, _i(0), 1), FenceMbarrierInit()])),
        Barrier(),
        If(first, Seq([MbarrierArrive(bar, _i(0), t.box_bytes),
                       TmaLoad(tile, _i(dst_elem), t, [_i(c) for c in coords], bar, _i(0))])),
        MbarrierWait(bar, _i(0), _i(0)),
        copy_out,
    ]), "thread", "threadIdx.x")
    tile_bytes = -(-size * dt.nbytes(dtype) // 16) * 16
    body = Alloc(tile, Alloc(bar, body, tile_bytes), 0)
    kernel = PrimFunc("dump_kernel0", [t, out], body, FuncAttrs.kernel(
        (1, 1, 1), (threads, 1, 1), dynamic_shared_bytes=tile_bytes + 16))
    ht, ho = Buffer("t", dtype, list(shape)), Buffer("out", dtype, [n])
    return Module([PrimFunc("main", [ht, ho], Launch(kernel.name, [ht, ho]),
                            FuncAttrs.host()), kernel])


def _host(x: np.ndarray, dtype: str) -> np.ndarray:
    return dt.to_bfloat16(x) if dtype == "bfloat16" else x.astype(dtype)


def _cutlass_swizzle(offset: np.ndarray, swizzle: str) -> np.ndarray:
    """CUTLASS's Swizzle<B, 4, 3> on byte offsets (SW32: B = 1, SW64: 2, SW128: 3)."""
    b = {"none": 0, "32B": 1, "64B": 2, "128B": 3}[swizzle]
    mask = ((1 << b) - 1) << 7
    return offset ^ ((offset & mask) >> 3)


def _dense_box(x: np.ndarray, box, coords) -> np.ndarray:
    """The box of ``x`` at ``coords`` with zeros outside ``x`` (numpy)."""
    out = np.zeros(box, x.dtype)
    src, dst = [], []
    for c, b, n in zip(coords, box, x.shape):
        lo, hi = max(c, 0), min(c + b, n)
        src.append(slice(lo, max(lo, hi)))
        dst.append(slice(lo - c, max(lo, hi) - c))
    out[tuple(dst)] = x[tuple(src)]
    return out


@pytest.mark.parametrize("dtype,shape,box,swizzle,coords", [
    ("float16", (64, 64), (64, 64), "128B", (0, 0)),
    ("float16", (100, 72), (32, 64), "128B", (80, 40)),       # past both ends: zeros
    ("bfloat16", (20, 48), (16, 32), "64B", (-3, 24)),        # before the start: zeros
    ("float32", (9, 40), (8, 8), "32B", (4, 36)),
    ("int8", (10, 64), (8, 32), "none", (5, -16)),
    ("float16", (3, 20, 40), (2, 8, 16), "32B", (2, 16, 32)),  # 3-D
    ("float32", (4, 6, 8, 16), (2, 3, 4, 16), "64B", (3, 4, 5, 0)),  # 4-D
])
def test_a_box_lands_dense_zero_filled_and_swizzled_as_the_hardware_lays_it(
        dtype, shape, box, swizzle, coords):
    m = box_dump_module(dtype, shape, box, swizzle, coords)
    verify(m)
    rng = np.random.default_rng(0)
    x = _host(rng.integers(-100, 100, size=shape).astype(np.float64), dtype)
    out = np.zeros(int(np.prod(box)), x.dtype)
    run(m, [x, out])
    esize = dt.nbytes(dtype)
    dense = _dense_box(x, box, coords).reshape(-1)
    place = _cutlass_swizzle(np.arange(dense.size) * esize, swizzle) // esize
    want = np.empty_like(dense)
    want[place] = dense
    np.testing.assert_array_equal(out, want)


def test_the_128b_swizzle_is_the_one_the_wgmma_kernels_write():
    # attention's wgmma tiles (GPU-checked) put chunk c of row r of a 64-column fp16 panel
    # at chunk c ^ (r % 8): the TMA's 128B layout of a 64 x 64 box is the same
    from ptxforge.ir.simplify import simplify
    from ptxforge.ops.schedules.attention.kernel_wgmma import swizzled

    for r in range(16):
        for c in range(0, 64, 8):
            at = simplify(swizzled(_i(r), _i(c))).value
            assert swizzle_bytes((r * 64 + c) * 2, "128B") == at * 2


@pytest.mark.parametrize("cfg", [
    TmaCopy(100, 200, "float16", (64, 64), "128B", 2),
    TmaCopy(64, 64, "float32", (16, 32), "128B", 1),
    TmaCopy(40, 96, "bfloat16", (8, 32), "64B", 3),
    TmaCopy(33, 48, "int8", (8, 16), "none", 2),
    TmaCopy(70, 24, "float16", (8, 16), "32B", 4),
], ids=lambda c: f"{c.rows}x{c.cols}-{c.dtype}-{c.swizzle}-s{c.stages}")
def test_the_tile_copy_kernel_matches_numpy_on_the_simulator(cfg):
    m = tma_copy_module(cfg)
    verify(m)
    rng = np.random.default_rng(1)
    a = _host(rng.integers(-50, 50, size=(cfg.rows, cfg.cols)).astype(np.float64),
              cfg.dtype)
    out = np.full(cfg.padded, 7, a.dtype)
    run(m, [a, out])
    np.testing.assert_array_equal(out, tma_copy_reference(a, cfg))


def test_the_kernel_text_reads_back():
    m = tma_copy_module(TmaCopy(100, 200, "float16", (64, 64), "128B", 2))
    text = str(m)
    assert "tensormap[64, 64] swizzle(128B)" in text
    for word in ("mbarrier_init(", "fence_mbarrier_init", "mbarrier_arrive_expect_tx(",
                 "tma_load(", "mbarrier_wait(", "mbarrier_arrive("):
        assert word in text, word
    again = parse_module(text)
    assert str(again) == text
    verify(again)


# -- refusals --------------------------------------------------------------------------


@pytest.mark.parametrize("args,match", [
    (("float16", (64, 64), (64, 300), "none"), "1 to 256"),
    (("float16", (64, 64), (64, 4), "none"), "multiple of 16"),
    (("float16", (64, 256), (64, 128), "128B"), "more than the 128B swizzle's span"),
    (("float16", (64, 7), (8, 8), "none"), "multiples of 16"),
    (("float16", (64, 64), (8, 64), "256B"), "unknown swizzle"),
    (("bool", (64, 64), (8, 64), "none"), "a tensor map copies"),
    (("float16", (64, 64), (8, 8, 8), "none"), "3 dimensions"),
])
def test_tensor_maps_outside_the_hardware_limits_are_refused(args, match):
    with pytest.raises(IRError, match=match):
        TensorMap("t", *args)


def test_the_verifier_wants_destinations_on_the_swizzle_period():
    # 64 fp16 elements are 128 bytes: enough without a swizzle, not for 128B (1024)
    verify(box_dump_module("float16", (64, 64), (8, 64), "none", (0, 0), dst_elem=64))
    assert shared_align("128B") == 1024
    with pytest.raises(IRVerifyError, match="multiple of 1024 bytes"):
        verify(box_dump_module("float16", (64, 64), (8, 64), "128B", (0, 0), dst_elem=64))


def test_the_verifier_refuses_plain_reads_of_a_tensor_map_and_odd_mbarriers():
    m = box_dump_module("float16", (64, 64), (8, 64), "none", (0, 0))
    k = m.kernels()[0]
    t, out = k.params
    bad = k.replace(body=For(Var("tx"), 1, Store(out, [_i(0)], t[_i(0), _i(0)]), "thread",
                             "threadIdx.x"))
    with pytest.raises(IRVerifyError, match="a tensor map"):
        verify(bad)
    tile = Buffer("tile", "float16", [512], "shared")
    fbar = Buffer("bar", "float32", [2], "shared")
    body = Alloc(tile, Alloc(fbar, TmaLoad(tile, _i(0), t, [_i(0), _i(0)], fbar, _i(0))))
    with pytest.raises(IRVerifyError, match="flat shared uint64 buffer"):
        verify(k.replace(body=body))


def test_codegen_refuses_tma_before_sm90():
    from ptxforge.backend_ptx.codegen import codegen_kernel
    from ptxforge.backend_ptx.exprgen import CodegenError

    k = tma_copy_module(TmaCopy(64, 64)).kernels()[0]
    with pytest.raises(CodegenError, match="sm_90"):
        codegen_kernel(k, "cuda -arch=sm_80")


# -- PTX -------------------------------------------------------------------------------


def test_the_ptx_takes_the_map_by_value_and_copies_with_the_bulk_tensor_instruction():
    from ptxforge.backend_ptx.compile import compile_kernel

    k = tma_copy_module(TmaCopy(100, 200, "float16", (64, 64), "128B", 2)).kernels()[0]
    ptx = compile_kernel(k, SM90A, stop_after="ptx").get_source("ptx")
    assert ".param .align 64 .b8 tma_copy_kernel0_param_0[128]" in ptx
    assert "cvta.param.u64" in ptx  # the map's address stays in the parameter space
    assert ".extern .shared .align 1024" in ptx
    for ins in ("mbarrier.init.shared::cta.b64", "fence.mbarrier_init.release.cluster",
                "mbarrier.arrive.expect_tx.shared::cta.b64", "mbarrier.arrive.shared::cta.b64",
                "mbarrier.try_wait.parity.shared::cta.b64",
                "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::"
                "bytes"):
        assert ins in ptx, ins
    assert ".local" not in ptx


@pytest.mark.skipif(find_ptxas() is None, reason="ptxas is not installed")
@pytest.mark.parametrize("mod", [
    lambda: tma_copy_module(TmaCopy(100, 200, "float16", (64, 64), "128B", 2)),
    lambda: box_dump_module("float16", (3, 20, 40), (2, 8, 16), "32B", (2, 16, 32)),
], ids=["copy-2d", "box-3d"])
def test_ptxas_accepts_the_tma_kernels(mod):
    from ptxforge.backend_ptx.compile import compile_kernel

    ck = compile_kernel(mod().kernels()[0], SM90A, stop_after="cubin", assembler="ptxas")
    assert ck.cubin and not ck.resources.spills


def test_a_loaded_kernel_points_its_map_parameter_at_an_aligned_128_byte_slot():
    from ptxforge.backend_ptx.compile import compile_kernel
    from ptxforge.backend_ptx.tensor_map import (
        TensorMapSlots,
        ptx_tensor_map_params,
        tensor_map_params,
    )

    k = tma_copy_module(TmaCopy(100, 200)).kernels()[0]
    ck = compile_kernel(k, SM90A, stop_after="ptx")
    assert ptx_tensor_map_params(ck.get_source("ptx"), ck.launch.symbol) == [0]
    slots = (ctypes.c_void_p * 2)(0, 0)
    maps = TensorMapSlots(ck, tensor_map_params(k), slots)
    assert list(maps.maps) == [0] and slots[0] % 64 == 0 and slots[1] is None
    with pytest.raises(ValueError, match="no TensorMap parameter describes them"):
        TensorMapSlots(ck, {}, slots)


def test_a_kernel_kept_without_its_sources_loads_by_its_device_ir():
    """A builder drops the sources of the kernels it assembled (the runner gets the cubin
    alone): the slots then follow the device IR, with or without tensor maps."""
    import dataclasses

    from ptxforge.backend_ptx.compile import compile_kernel
    from ptxforge.backend_ptx.tensor_map import TensorMapSlots, tensor_map_params

    k = tma_copy_module(TmaCopy(100, 200)).kernels()[0]
    ck = dataclasses.replace(compile_kernel(k, SM90A, stop_after="ptx"), sources={})
    slots = (ctypes.c_void_p * 2)(0, 0)
    assert list(TensorMapSlots(ck, tensor_map_params(k), slots).maps) == [0]
    slots = (ctypes.c_void_p * 2)(0, 0)
    assert TensorMapSlots(ck, {}, slots).maps == {} and slots[0] is None


# -- on a GPU ----------------------------------------------------------------------------


def _hopper():
    from ptxforge.backend_ptx import cuda

    dev = cuda(0)
    if not dev.target.has_tma:
        pytest.skip(f"TMA needs sm_90 or later, this GPU is {dev.sm}")
    return dev


@pytest.mark.gpu
@pytest.mark.sanitize
@pytest.mark.parametrize("cfg", [
    TmaCopy(100, 200, "float16", (64, 64), "128B", 2),
    TmaCopy(1000, 1000, "bfloat16", (128, 64), "128B", 4),
    TmaCopy(64, 64, "float32", (16, 32), "128B", 1),
    TmaCopy(40, 96, "bfloat16", (8, 32), "64B", 3),
    TmaCopy(33, 48, "int8", (8, 16), "none", 2),
    TmaCopy(70, 24, "float16", (8, 16), "32B", 4),
], ids=lambda c: f"{c.rows}x{c.cols}-{c.dtype}-{c.swizzle}-s{c.stages}")
def test_the_tile_copy_kernel_on_the_gpu(cfg):
    from ptxforge.backend_ptx import array, compile_module, empty

    dev = _hopper()
    loaded = compile_module(tma_copy_module(cfg), SM90A).load(dev)
    rng = np.random.default_rng(2)
    a = _host(rng.integers(-50, 50, size=(cfg.rows, cfg.cols)).astype(np.float64),
              cfg.dtype)
    out = empty(cfg.padded, cfg.dtype, dev)
    loaded(array(a, dev, cfg.dtype), out)
    np.testing.assert_array_equal(out.numpy(), tma_copy_reference(a, cfg))


@pytest.mark.gpu
@pytest.mark.sanitize
@pytest.mark.parametrize("dtype,shape,box,swizzle,coords", [
    ("float16", (100, 72), (32, 64), "128B", (80, 40)),
    ("bfloat16", (20, 48), (16, 32), "64B", (-3, 24)),
    ("float32", (9, 40), (8, 8), "32B", (4, 36)),
    ("float16", (3, 20, 40), (2, 8, 16), "32B", (2, 16, 32)),
])
def test_the_simulated_box_layout_is_the_gpus(dtype, shape, box, swizzle, coords):
    from ptxforge.backend_ptx import array, compile_module, empty

    dev = _hopper()
    m = box_dump_module(dtype, shape, box, swizzle, coords)
    rng = np.random.default_rng(3)
    x = _host(rng.integers(-100, 100, size=shape).astype(np.float64), dtype)
    want = np.zeros(int(np.prod(box)), x.dtype)
    run(m, [x, want])
    out = empty(want.shape, dtype, dev)
    compile_module(m, SM90A).load(dev)(array(x, dev, dtype), out)
    np.testing.assert_array_equal(out.numpy(), want)


def test_the_parser_names_what_is_wrong_in_tma_text():
    from ptxforge.ir.parser import IRParseError

    text = str(tma_copy_module(TmaCopy(100, 200, "float16", (64, 64), "128B", 2)))
    with pytest.raises(IRParseError, match="unknown swizzle"):
        parse_module(text.replace("swizzle(128B)", "swizzle(256B)"))
    with pytest.raises(IRParseError, match="must be a buffer element"):
        parse_module(text.replace("mbarrier_arrive(empty[", "mbarrier_arrive((1 + empty["))
