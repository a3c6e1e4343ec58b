"""Cheaper builds with the same kernels: a kernel whose LLVM IR was compiled before in the
process takes that compilation's PTX and cubin, and an assembler run of PTX assembled
before is taken from the assembly cache; both only when the caller keeps a kernel cache."""

from __future__ import annotations

import dataclasses

import ptxforge
import pytest
from ptxforge import te
from ptxforge.backend_ptx import assemble as asm_mod
from ptxforge.backend_ptx import compile as backend
from ptxforge.backend_ptx.cache import KernelCache
from ptxforge.backend_ptx.compile import compile_kernels
from ptxforge.target import Target

SM = "sm_90a"


def _kernels(scale: float = 2.0, n: int = 4096):
    """The device IR kernels of ``y = x * scale + 1`` in float16, 128 threads a block."""
    x = te.placeholder((n,), "float16", name="x")
    y = te.compute((n,), lambda i: x[i] * scale + x[i], name="y")
    s = te.create_schedule(y.op)
    b, t = s[y].split(y.op.axis[0], factor=128)
    s[y].bind(b, te.thread_axis("blockIdx.x"))
    s[y].bind(t, te.thread_axis("threadIdx.x"))
    with Target(f"cuda -arch={SM}"):
        return list(ptxforge.lower(s, [x, y]).kernels())


def _fake_ptxas(calls: list):
    """A stand-in for ptxas that records its inputs and reports every kernel it is given
    (the build then needs no CUDA toolkit)."""

    def run(ptxs, sm, flags=(), *args, **kwargs):
        ptxs = [ptxs] if isinstance(ptxs, str) else list(ptxs)
        calls.append(len(ptxs))
        names = [p.split(".entry", 1)[1].split("(", 1)[0].strip() for p in ptxs]
        log = "".join(f"ptxas info    : Function properties for {n}\n"
                      "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
                      "ptxas info    : Used 12 registers\n" for n in names)
        return b"CUBIN:" + "|".join(names).encode() + b":" + str(hash(tuple(ptxs))).encode(), log

    return run


@pytest.fixture
def fake_ptxas(monkeypatch):
    calls: list = []
    run = _fake_ptxas(calls)
    monkeypatch.setattr(backend, "run_ptxas", run)
    monkeypatch.setattr(backend, "run_ptxas_many", run)
    monkeypatch.setattr(backend, "choose_assembler", lambda a: "ptxas")
    backend.forget_compiled()
    yield calls
    backend.forget_compiled()


def test_same_llvm_ir_is_optimized_and_assembled_once(fake_ptxas):
    (func,) = _kernels()
    first = compile_kernels([func], SM, cache=KernelCache())[func.name]
    assert not first.cache_hit and fake_ptxas == [1]
    # a second kernel cache: the device IR is not found, the LLVM IR is
    again = compile_kernels([func], SM, cache=KernelCache())[func.name]
    assert again.cache_hit and fake_ptxas == [1]
    assert again.get_source("ptx") == first.get_source("ptx")
    assert again.cubin == first.cubin and again.resources == first.resources
    assert again.launch == first.launch
    assert "opt" not in again.stage_seconds and "llvm_ir" in again.stage_seconds


def test_other_llvm_ir_is_compiled(fake_ptxas):
    (a,) = _kernels(2.0)
    (b,) = _kernels(3.0)
    ka = compile_kernels([a], SM, cache=KernelCache())[a.name]
    kb = compile_kernels([b], SM, cache=KernelCache())[b.name]
    assert not kb.cache_hit and fake_ptxas == [1, 1]
    assert ka.get_source("ptx") != kb.get_source("ptx")


def test_a_hit_by_llvm_ir_keeps_its_own_launch(fake_ptxas):
    (func,) = _kernels()
    first = compile_kernels([func], SM, cache=KernelCache())[func.name]
    # the grid is not in the LLVM IR: a kernel of the same IR launched otherwise keeps its
    # own launch
    other = dataclasses.replace(first.launch, grid=(first.launch.grid[0] * 2, 1, 1))
    real = backend.codegen_kernel

    def codegen(f, target, prefetch=()):
        text, _ = real(f, target, prefetch)
        return text, other

    try:
        backend.codegen_kernel = codegen
        again = compile_kernels([func], SM, cache=KernelCache())[func.name]
    finally:
        backend.codegen_kernel = real
    assert again.cache_hit and again.launch == other and again.cubin == first.cubin


def test_no_kernel_cache_means_no_reuse(fake_ptxas):
    (func,) = _kernels()
    compile_kernels([func], SM, cache=False)
    compile_kernels([func], SM, cache=False)
    assert fake_ptxas == [1, 1]
    assert len(asm_mod.assembly_cache()) == 0


def test_the_assembly_cache_counts_hits_and_misses(fake_ptxas):
    (func,) = _kernels()
    k = compile_kernels([func], SM, stop_after="ptx", cache=False)[func.name]
    cache = asm_mod.assembly_cache()
    copies = [dataclasses.replace(k, sources=dict(k.sources)) for _ in range(3)]
    for c in copies:
        backend.assemble(c, "ptxas", reuse=True)
    assert fake_ptxas == [1] and (cache.hits, cache.misses) == (2, 1)
    assert len({c.cubin for c in copies}) == 1
    backend.assemble(copies[0], "ptxas", flags=("-maxrregcount=32",), reuse=True)
    assert fake_ptxas == [1, 1] and cache.misses == 2  # other flags: another run


def test_the_assembly_cache_is_bounded():
    cache = asm_mod.AssemblyCache(max_entries=2)
    for i in range(3):
        cache.put(str(i), (bytes([i]), ""))
    assert len(cache) == 2 and cache.get("0") is None and cache.get("2") == (b"\x02", "")
    assert (cache.hits, cache.misses) == (1, 1)
    key = asm_mod.AssemblyCache.key
    assert key("ptxas", SM, (), ["a", "b"]) != key("ptxas", SM, (), ["ab"])
    assert key("ptxas", SM, (), ["a"]) != key("ptxas", "sm_80", (), ["a"])


def test_reused_cubins_are_what_ptxas_makes():
    if asm_mod.find_ptxas() is None:
        pytest.skip("ptxas is not installed")
    backend.forget_compiled()
    try:
        (func,) = _kernels()
        fresh = compile_kernels([func], SM, assembler="ptxas", cache=False)[func.name]
        first = compile_kernels([func], SM, assembler="ptxas", cache=KernelCache())[func.name]
        again = compile_kernels([func], SM, assembler="ptxas", cache=KernelCache())[func.name]
        assert again.cache_hit and not first.cache_hit
        assert fresh.cubin == first.cubin == again.cubin
        assert fresh.resources == again.resources
    finally:
        backend.forget_compiled()


def _ptx_with(func, loop_vectorize: bool) -> str:
    llvm = backend.llvm_binding()
    ir = compile_kernels([func], SM, stop_after="llvm_ir", cache=False)[func.name]
    text = ir.get_source("llvm_ir")
    module = backend.parse_llvm(text, func.name)
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pto.loop_unrolling = True
    pto.slp_vectorization = bool(backend._HALF_TYPES.search(text))
    pto.loop_vectorization = pto.loop_interleaving = loop_vectorize
    pb = llvm.create_pass_builder(backend.target_machine(SM), pto)
    pb.getModulePassManager().run(module, pb)
    return backend.emit_ptx(module, SM)


def _twice_plus(dtype: str):
    x = te.placeholder((128 * 64,), dtype, name="x")
    return x, te.compute(x.shape, lambda i: x[i] * 2 + x[i], name="y")


def test_the_loop_vectorizer_stays_for_serial_16_bit_loops():
    # why builders keep O3 whole: without the loop vectorizer, a loop each thread runs over
    # 64 float16 elements compiles to other PTX (no paired half loads and arithmetic),
    # while float32 loops, which it cannot pair, compile the same
    for dtype, differs in (("float16", True), ("float32", False)):
        x, y = _twice_plus(dtype)
        s = te.create_schedule(y.op)
        b, r = s[y].split(y.op.axis[0], factor=64 * 32)
        t, _ = s[y].split(r, factor=64)
        s[y].bind(b, te.thread_axis("blockIdx.x"))
        s[y].bind(t, te.thread_axis("threadIdx.x"))
        with Target(f"cuda -arch={SM}"):
            (func,) = ptxforge.lower(s, [x, y]).kernels()
        with_lv = _ptx_with(func, True)
        assert with_lv == compile_kernels([func], SM, stop_after="ptx",
                                          cache=False)[func.name].get_source("ptx")
        assert (with_lv != _ptx_with(func, False)) == differs, dtype
