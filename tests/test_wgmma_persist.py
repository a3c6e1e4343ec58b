"""The persistent wgmma GEMM (``WgmmaScheduleConfig.persistent``, issue 26): a grid of
``min(tiles, SMs x blocks per SM)`` blocks looping over the tiles, the next tile's first
copies issued before this tile's epilogue. On the simulator (with few SMs, so that blocks
run several tiles and the last wave is ragged) against numpy: direct and staged stores,
padded M/N, bias + GELU, split-K, a batch, no pipeline; the IR the passes make, the launch
bound, the rules' refusals, and PTX for sm_90a assembled without spills."""

from __future__ import annotations

import re

import numpy as np
import pytest

import ptxforge
from ptxforge import ops, te
from ptxforge.ir.te import ComputeOp
from ptxforge.ops.schedules.gemm.knobs import WgmmaScheduleConfig
from ptxforge.ops.schedules.gemm.schedule import schedule_gemm_wgmma
from ptxforge.passes.schedule.common import ScheduleError
from ptxforge.target import as_target

from .lowp import f64, host
from .test_wgmma_gemm import _dense, _ref

RNG = np.random.default_rng(26)
SM90A = "cuda -arch=sm_90a"


def _sim(sms: int) -> str:
    return f"sim -arch=sm_90a -num_sms={sms}"


def _schedule(y, cfg, target):
    s = te.create_schedule(y.op)
    ops_ = [op for op in s.dag.ops if isinstance(op, ComputeOp)]
    prod = next(op for op in ops_ if op.reduce_axis)
    for op in reversed(ops_):
        if op is not prod and op is not y.op:
            s[op].compute_inline()
    schedule_gemm_wgmma(s, prod, y.op if y.op is not prod else None, cfg, target)
    return s


def _kernel_attrs(mod) -> list[dict]:
    import json

    out = []
    for line in str(mod.device_module).splitlines():
        m = re.search(r'attrs (\{"kind": "kernel".*\}) \{$', line)
        if m:
            out.append(json.loads(m.group(1)))
    return out


@pytest.mark.parametrize("M,N,K,bias,act,cast,cfg,sms,grid", [
    # direct stores (the cast only), 16 tiles on 3 blocks: 6 waves, the last ragged
    (256, 256, 256, False, None, "float16", (64, 1, 3, 1), 3, 3),
    # padded M and N, bias + GELU over the C tile, two blocks an SM, ragged
    (200, 200, 192, True, "gelu", "float16", (64, 1, 3, 1), 3, 6),
    # the staged epilogue, two warpgroups, grouped block order, no group in flight
    (512, 256, 256, False, None, "float16", (128, 2, 2, 0, 1, 2, True), 2, 2),
    # float32 out straight from the fragments, one K step: the prologue is the whole K
    (192, 384, 64, False, None, "float32", (128, 1, 1, 0), 2, 2),
    # 4 stages, K steps fewer than the tiles, bias
    (320, 128, 320, True, None, "float16", (64, 1, 4, 1), 2, 4),
    # as many blocks as tiles: one tile each, the tile loop gone
    (128, 256, 256, False, None, "float16", (64, 1, 3, 1), 8, 8),
])
def test_persistent_kernels_compute_the_product(M, N, K, bias, act, cast, cfg, sms, grid):
    cfg = WgmmaScheduleConfig(*cfg)
    per_sm = 2 if grid == 2 * sms else 1
    cfg = WgmmaScheduleConfig(**{**cfg.__dict__, "persistent": per_sm})
    y, args = _dense(M, N, K, bias=bias, act=act, cast=cast)
    s = _schedule(y, cfg, _sim(sms))
    mod = ptxforge.build(s, args + [y], target=_sim(sms))
    vals = [host(RNG, a.shape, a.dtype) for a in args]
    out = np.full(y.shape, np.nan, y.dtype)
    mod(*vals, out)
    want = _ref([f64(v, a.dtype) for v, a in zip(vals, args)], bias, act, False)
    np.testing.assert_allclose(f64(out, y.dtype), want, rtol=0,
                               atol=2e-2 * np.abs(want).max())
    (attrs,) = _kernel_attrs(mod)
    assert attrs["grid"] == [grid, 1, 1]
    assert attrs["min_blocks_per_sm"] == per_sm
    tiles = -(-M // cfg.block_m) * -(-N // cfg.block_n)
    assert ("persistent_tiles" in str(mod.device_module)) == (tiles > grid)


def test_split_k_and_a_batch_fold_blockidx_z_into_the_tiles():
    # split-K: the partial sums' kernel is persistent over (column, row, part) tiles
    y, args = _dense(128, 192, 512, cast="float16")
    cfg = WgmmaScheduleConfig(64, 1, 2, 0, 2, persistent=1)
    s = _schedule(y, cfg, _sim(5))
    mod = ptxforge.build(s, args + [y], target=_sim(5))
    vals = [host(RNG, a.shape, a.dtype) for a in args]
    out = np.full(y.shape, np.nan, y.dtype)
    mod(*vals, out)
    want = _ref([f64(v, a.dtype) for v, a in zip(vals, args)], False, None, False)
    np.testing.assert_allclose(f64(out, y.dtype), want, rtol=0, atol=2e-2 * np.abs(want).max())
    first, second = _kernel_attrs(mod)
    assert first["grid"] == [5, 1, 1]  # 2 x 3 tiles x 2 parts on 5 blocks
    assert second["grid"][0] > 5 and "min_blocks_per_sm" not in second  # the sum: as before
    # a batch on blockIdx.z
    a = te.placeholder((3, 128, 64), "float16", name="a")
    b = te.placeholder((3, 128, 64), "float16", name="b")
    c = ops.nn.batch_matmul(a, b, out_dtype="float16")
    s = _schedule(c, WgmmaScheduleConfig(64, 1, 1, 0, persistent=1), _sim(4))
    mod = ptxforge.build(s, [a, b, c], target=_sim(4))
    av, bv = host(RNG, a.shape, a.dtype), host(RNG, b.shape, b.dtype)
    out = np.full(c.shape, np.nan, c.dtype)
    mod(av, bv, out)
    want = np.matmul(f64(av, "float16"), f64(bv, "float16").transpose(0, 2, 1))
    np.testing.assert_allclose(f64(out, c.dtype), want, rtol=0, atol=4e-3 * np.abs(want).max())
    assert _kernel_attrs(mod)[0]["grid"] == [4, 1, 1]  # 3 x 2 x 2 tiles


def test_the_next_tiles_prologue_is_issued_before_this_tiles_epilogue():
    y, args = _dense(256, 128, 256, bias=True, cast="float16")
    cfg = WgmmaScheduleConfig(64, 1, 3, 1, persistent=1)
    s = _schedule(y, cfg, _sim(3))
    text = str(ptxforge.build(s, args + [y], target=_sim(3)).device_module)
    lines = [x.strip() for x in text.splitlines()]
    tile = lines.index(next(x for x in lines if '"persistent_tiles": 8' in x))
    first = lines.index("if (persistent.tile == 0) {")
    loop = next(i for i, x in enumerate(lines) if x.startswith("for k.outer in 4"))
    # 8 tiles on 3 blocks: the next tile exists while b + 3 (w + 1) < 8
    ahead = lines.index("if ((persistent.block + (persistent.tile * 3)) < 5) {")
    epilogue = next(i for i, x in enumerate(lines) if x.startswith("T_cast["))
    c_tile = next(i for i, x in enumerate(lines) if x.startswith(
        "T_matmul_NT.warpgroup.shared[") and i > loop)
    assert tile < first < loop < ahead < c_tile < epilogue
    between = lines[loop:ahead]
    assert "wgmma_wait(0)" in between and "async_wait(0)" in between and "barrier" in between
    assert lines[ahead + 1:].index("async_commit") < lines[ahead + 1:].index(
        "T_matmul_NT.warpgroup.shared[" + lines[c_tile].split("[", 1)[1])
    # the C tile keeps bytes of its own: the stages fill during the epilogue
    size = {"float16": 2, "float32": 4}
    spans = sorted((int(o), int(o) + size[t] * int(n)) for t, n, o in re.findall(
        r"alloc \S+: (\w+)\[(\d+)\] shared dynamic\((\d+)\)", text))
    assert len(spans) == 3 and all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), spans


def test_the_pass_option_keeps_each_tiles_prologue_in_the_tile():
    from ptxforge.passes import PassContext
    from ptxforge.passes.lower.inject_software_pipeline import CROSS_TILE_OPTION

    y, args = _dense(320, 192, 256, bias=True, act="gelu", cast="float16")
    s = _schedule(y, WgmmaScheduleConfig(64, 2, 3, 1, persistent=1), _sim(2))
    mod = ptxforge.build(s, args + [y], target=_sim(2),
                         ctx=PassContext(config={CROSS_TILE_OPTION: False}))
    text = str(mod.device_module)
    assert "persistent_tiles" in text and "persistent.tile == 0" not in text
    vals = [host(RNG, a.shape, a.dtype) for a in args]
    out = np.full(y.shape, np.nan, y.dtype)
    mod(*vals, out)
    want = _ref([f64(v, a.dtype) for v, a in zip(vals, args)], True, "gelu", False)
    np.testing.assert_allclose(f64(out, y.dtype), want, rtol=0, atol=2e-2 * np.abs(want).max())


@pytest.mark.parametrize("cfg", [(64, 2, 3, 1), (64, 1, 3, 1, 1, 1, True)])
def test_the_simulator_catches_the_next_prologue_without_its_barrier(cfg, monkeypatch):
    # the barrier after this tile's last wgmma wait is what frees the stages for the next
    # tile's copies: without it another warpgroup (or thread) may still read them
    from ptxforge.backend_sim import SimRaceError
    from ptxforge.ir.stmt import Barrier
    from ptxforge.passes.lower import cross_tile_prologue, inject_software_pipeline

    def without_barrier(prologue, loop, tail, t):
        out = cross_tile_prologue.across_tiles(prologue, loop, tail, t)
        return [x for x in out if not isinstance(x, Barrier)]

    monkeypatch.setattr(inject_software_pipeline, "across_tiles", without_barrier)
    y, args = _dense(512, 128, 256, cast="float16")
    cfg = WgmmaScheduleConfig(*cfg, persistent=1)
    mod = ptxforge.build(_schedule(y, cfg, _sim(2)), args + [y], target=_sim(2))
    vals = [host(RNG, a.shape, a.dtype) for a in args]
    with pytest.raises(SimRaceError, match="issues a cp.async to w.shared"):
        mod(*vals, np.zeros(y.shape, y.dtype))


def test_a_launch_bound_from_the_schedule_reaches_the_ptx():
    from ptxforge.passes.schedule.launch_bounds import LaunchBounds

    y, args = _dense(256, 256, 128, cast="float16")
    s = _schedule(y, WgmmaScheduleConfig(128, 2, 2, 0), SM90A)
    o = s[y.op]
    s.apply(LaunchBounds(o._ref(o.op.axis[0].var.name + ".outer"), 2), touches=(o.block,))
    mod = ptxforge.build(s, args + [y], target=SM90A)
    assert _kernel_attrs(mod)[0]["min_blocks_per_sm"] == 2
    assert ".minnctapersm 2" in mod.get_source("ptx")
    assert "persistent_tiles" not in str(mod.device_module)  # a bound alone: the grid stays


@pytest.mark.parametrize("cfg,rule", [
    ((64, 1, 3, 1, 1, 1, False, 3), "need persistent in (0, 1, 2)"),
    ((192, 2, 2, 0, 1, 1, False, 2), "persistent blocks of 256 threads to fit one SM's "
                                     "registers"),
    ((128, 2, 4, 1, 1, 1, True, 2), "persistent blocks of 198656 bytes"),
])
def test_refusals_name_the_rule(cfg, rule):
    y, _ = _dense(1024, 768, 768, cast="float16")
    with pytest.raises(ScheduleError, match=re.escape(rule)):
        _schedule(y, WgmmaScheduleConfig(*cfg), SM90A)


def test_the_c_tile_never_goes_over_the_stages_of_a_persistent_block():
    from ptxforge.ops.schedules.gemm.forms import gemm_form
    from ptxforge.ops.schedules.gemm.rules import C_TILE_ALIASED, first_broken, wgmma_rules

    y, _ = _dense(4096, 768, 768, cast="float16")
    prod = next(op for op in te.create_schedule(y.op).dag.ops
                if isinstance(op, ComputeOp) and op.reduce_axis)
    form = gemm_form(prod, SM90A)
    cfg = WgmmaScheduleConfig(192, 2, 4, 1, 1, 1, True)
    # 160 KB of stages and a 98 KB C tile fit a block only with the tile over the stages
    assert first_broken(wgmma_rules(cfg, form, SM90A, C_TILE_ALIASED)) is None
    why = first_broken(wgmma_rules(WgmmaScheduleConfig(**{**cfg.__dict__, "persistent": 1}),
                                   form, SM90A, C_TILE_ALIASED))
    assert why.startswith("need the C tile beside the operand stages"), why


def test_a_convolution_refuses_a_persistent_grid():
    from ptxforge.ops.schedules.gemm.schedule import schedule_conv2d_nhwc_wgmma

    from .test_tensorcore_conv import conv_layer, inlined_schedule

    tensors, _, _ = conv_layer(1, 7, 7, 128, 64, 1, 1, 0, "float16", "bias_relu")
    s, conv = inlined_schedule(tensors[-1])
    with pytest.raises(ScheduleError, match="need persistent 0 on a convolution"):
        schedule_conv2d_nhwc_wgmma(s, conv, tensors[-1].op, _sim(2),
                                   WgmmaScheduleConfig(64, 1, 1, 0, persistent=1))


@pytest.mark.parametrize("shape,cfg,regs", [
    ((4096, 2304, 768), (128, 2, 4, 1, 1, 1, False, 1), 168),   # 576 tiles on 132 blocks
    ((4096, 768, 3072), (128, 2, 3, 0, 1, 1, False, 2), 128),   # two blocks an SM
    ((1024, 50257, 768), (128, 2, 4, 1, 1, 8, False, 1), 168),  # the lm head, padded N
])
def test_persistent_kernels_assemble_for_sm_90a_without_spills(shape, cfg, regs):
    from ptxforge.backend_ptx.assemble import find_ptxas, run_ptxas

    M, N, K = shape
    out = "float32" if N == 50257 else "float16"
    y, args = _dense(M, N, K, cast=out)
    s = _schedule(y, WgmmaScheduleConfig(*cfg), SM90A)
    mod = ptxforge.build(s, args + [y], target=SM90A)
    ptx = mod.get_source("ptx")
    assert f".minnctapersm {cfg[7]}" in ptx and "%ctaid.y" not in ptx
    assert "cp.async" in ptx and "st.local" not in ptx
    (attrs,) = _kernel_attrs(mod)
    tiles = -(-M // 128) * -(-N // cfg[0])
    assert attrs["grid"] == [min(tiles, 132 * cfg[7]), 1, 1]
    if find_ptxas() is not None:
        _, log = run_ptxas(ptx, "sm_90a")
        assert "0 bytes spill stores" in log, log
        used = int(re.search(r"Used (\d+) registers", log).group(1))
        assert used <= regs, log


GPU_CASES = [
    (1024, 768, 768, None, (128, 2, 4, 1, 1, 1, False, 1)),        # 48 tiles: one each
    (4096, 2304, 768, None, (128, 2, 4, 1, 1, 1, False, 1)),       # 576 tiles on 132
    (4096, 2304, 768, "gelu", (192, 2, 3, 1, 1, 1, True, 1)),      # bias + GELU, staged
    (4096, 768, 3072, None, (128, 2, 3, 0, 1, 1, False, 2)),       # two blocks an SM
    (1000, 1000, 520, "gelu", (128, 1, 5, 1, 1, 1, False, 1)),     # padded M, N and K
    (1024, 1000, 768, None, (128, 2, 4, 1, 1, 8, False, 1)),       # grouped order
]


@pytest.mark.parametrize("M,N,K,epi,cfg", GPU_CASES)
def test_the_gpu_cases_pass_the_rules(M, N, K, epi, cfg):
    """Every configuration the GPU test runs is one the rules take (a case they refuse
    would fail only on a GPU machine)."""
    y, args = _dense(M, N, K, bias=epi is not None, act=epi, cast="float16")
    target = as_target(SM90A)
    with target:
        ptxforge.lower(_schedule(y, WgmmaScheduleConfig(*cfg), target), args + [y])


@pytest.mark.gpu
@pytest.mark.parametrize("M,N,K,epi,cfg", GPU_CASES)
def test_persistent_kernels_on_the_gpu(M, N, K, epi, cfg):
    """The persistent kernels built for an H100 against float64 numpy."""
    from ptxforge.backend_ptx import array, compile_module, cuda, empty

    dev = cuda(0)
    if dev.sm != "sm_90":
        pytest.skip(f"wgmma needs an sm_90 GPU; this one is {dev.sm}")
    rng = np.random.default_rng(7)
    bias = epi is not None
    y, args = _dense(M, N, K, bias=bias, act=epi, cast="float16")
    target = as_target(SM90A)
    with target:
        s = _schedule(y, WgmmaScheduleConfig(*cfg), target)
        loaded = compile_module(ptxforge.lower(s, args + [y]), target).load(dev)
    vals = [host(rng, a.shape, a.dtype) for a in args]
    out = empty((M, N), y.dtype, dev)
    loaded(*[array(h, dev, a.dtype) for h, a in zip(vals, args)], out)
    want = _ref([f64(h, a.dtype) for h, a in zip(vals, args)], bias, epi, False)
    np.testing.assert_allclose(f64(out.numpy(), y.dtype), want, rtol=0,
                               atol=3e-3 * np.abs(want).max())


def test_any_kernel_with_its_block_loops_outermost_can_be_persistent():
    from ptxforge.passes.errors import PassError
    from ptxforge.passes.lower.common import LoweringError
    from ptxforge.passes.schedule.persistent import Persistent

    a = te.placeholder((1000,), "float32", name="a")
    b = te.compute((1000,), lambda i: a[i] * 2.0 + 1.0, name="b")

    def schedule(persistent_on_block: bool):
        s = te.create_schedule(b.op)
        bo, bi = s[b].split(b.op.axis[0], factor=64)
        s[b].bind(bo, "blockIdx.x")
        s[b].bind(bi, "threadIdx.x")
        st = s[b]
        st.schedule.apply(Persistent(st._ref(bo if persistent_on_block else bi), 1),
                          touches=(st.block,))
        return s

    # 16 blocks of 64 (the last one partly outside) on 3: 6 rounds, the last ragged
    mod = ptxforge.build(schedule(True), [a, b], target="sim -num_sms=3")
    assert _kernel_attrs(mod)[0]["grid"] == [3, 1, 1]
    av = RNG.standard_normal(1000).astype(np.float32)
    out = np.full(1000, np.nan, np.float32)
    mod(av, out)
    np.testing.assert_allclose(out, av * 2 + 1, rtol=1e-6)
    with pytest.raises(PassError, match="not one of the kernel's outermost block loops") as e:
        ptxforge.build(schedule(False), [a, b], target="sim -num_sms=3")
    assert isinstance(e.value.__cause__, LoweringError)
