"""wgmma through te: the schedule of a dense on sm_90a (warpgroup accumulators, wgmma on
128B-swizzled shared tiles, the protocol placed by ``inject_wgmma_sync``) against numpy on
the simulator, its refusals, the simulator's protocol checks, and PTX for sm_90a."""

from __future__ import annotations

import numpy as np
import pytest

import ptxforge
from ptxforge import te
from ptxforge.backend_sim.wgmma import WgmmaProtocolError
from ptxforge.driver import BuiltModule
from ptxforge.ir import dtype as dt
from ptxforge.ir.intrin.wgmma import WgmmaError
from ptxforge.ir.stmt import Module, Seq, WgmmaSync, map_stmt
from ptxforge.ir.verify import IRVerifyError
from ptxforge.ops.schedules.gemm.knobs import WgmmaScheduleConfig
from ptxforge.ops.schedules.gemm.schedule import dense_tensorcore_compute
from ptxforge.passes import Pipeline
from ptxforge.passes.errors import PassError
from ptxforge.passes.schedule.common import ScheduleError
from ptxforge.target import as_target

from .lowp import f64, host
from .tensorcore_dense import schedule_dense_wgmma

SIM = "sim -arch=sm_90a"
RNG = np.random.default_rng(90)


def _dense(M, N, K, ab="float16", out="float32", cfg=None):
    t = dense_tensorcore_compute(M, N, K, ab, out)
    return t, schedule_dense_wgmma(t, cfg or WgmmaScheduleConfig(), target=SIM)


@pytest.mark.parametrize("M,N,K,ab,out,cfg", [
    (128, 128, 192, "float16", "float32", (128, 2, 3, 0)),  # pipelined, 2 warpgroups
    (64, 128, 128, "bfloat16", "float32", (64, 1, 1, 0)),  # no pipeline, n64
    (128, 256, 128, "float16", "float16", (128, 2, 2, 0)),  # cast down, 2 blocks
    (64, 64, 256, "bfloat16", "bfloat16", (64, 1, 4, 0)),  # 4 stages
    (128, 128, 256, "float16", "float32", (128, 1, 4, 1)),  # one group in flight
    (64, 256, 192, "bfloat16", "float16", (256, 1, 3, 1)),  # n256
])
def test_te_wgmma_dense_matches_numpy(M, N, K, ab, out, cfg):
    t, s = _dense(M, N, K, ab, out, WgmmaScheduleConfig(*cfg))
    mod = ptxforge.build(s, t, target=SIM)
    a, b = host(RNG, (M, K), ab), host(RNG, (N, K), ab)
    c = np.full((M, N), np.nan, np.float32)
    c = dt.to_bfloat16(c) if out == "bfloat16" else c.astype(out)
    mod(a, b, c)
    want = f64(a, ab) @ f64(b, ab).T
    c = f64(c, out)
    tol = {"float32": 1e-6, "float16": 1e-3, "bfloat16": 8e-3}[out]
    assert np.abs(c - want).max() / np.abs(want).max() < tol


def _pipeline_text(M=128, N=128, K=128, cfg=None):
    t, s = _dense(M, N, K, cfg=cfg or WgmmaScheduleConfig(128, 2, 2, 0))
    return t, str(s.pipeline)


def _replay(t, text):
    return Pipeline.parse(text)(te.create_schedule(t[2].op).module)


def test_the_schedule_is_made_of_primitives_and_replays():
    t, text = _pipeline_text()
    for step in ('cache_write(C, "warpgroup")', "swizzle(A.shared, 3)", "async_copy(B.shared)",
                 '"wgmma_m64n128k16_f16_f32"', '"store_wg_f32"', "software_pipeline("):
        assert step in text
    with as_target(SIM):
        ptxforge.build(_replay(t, text), None, target=SIM)


def test_tensorize_refuses_tiles_not_in_the_wgmma_layout():
    t, text = _pipeline_text()
    # no swizzle: the descriptors would read another layout than the copies wrote
    bad = text.replace("swizzle(A.shared, 3),", "")
    with pytest.raises(PassError, match="A.shared with no swizzle; the wgmma descriptors"):
        _replay(t, bad)
    with pytest.raises(PassError, match="B.shared with swizzle bits=2"):
        _replay(t, text.replace("swizzle(B.shared, 3)", "swizzle(B.shared, 2)"))
    # K tiles of 32 elements: 64-byte rows
    bad = text.replace("split(C.warpgroup.k, factors=[64])", "split(C.warpgroup.k, factors=[32])")
    with as_target(SIM), pytest.raises(IRVerifyError, match="rows of A.shared are 32 elements "
                                                            r"\(64 bytes\) apart"):
        ptxforge.build(_replay(t, bad), None, target=SIM)
    # padded rows: refused by tensorize, and by the verifier where the padding comes after
    bad = text.replace("swizzle(A.shared, 3),", "storage_align(A.shared, 0, 72, 0),\n"
                       "swizzle(A.shared, 3),")
    with pytest.raises(PassError, match="A.shared, whose rows are padded"):
        _replay(t, bad)
    bad = text.rstrip().rstrip(",") + ",\nstorage_align(B.shared, 0, 72, 0)"
    with as_target(SIM), pytest.raises(IRVerifyError, match="storage_align padding is not a "
                                                            "wgmma layout"):
        ptxforge.build(_replay(t, bad), None, target=SIM)


def test_warpgroup_intrinsics_need_128_threads_on_x():
    t, text = _pipeline_text()
    bad = text.replace("factors=[128]),\nsplit(A.shared.ax0.ax1.fused.outer.outer",
                       "factors=[64]),\nsplit(A.shared.ax0.ax1.fused.outer.outer")
    bad = bad.replace("factors=[128]),\nsplit(B.shared.ax0.ax1.fused.outer.outer",
                      "factors=[64]),\nsplit(B.shared.ax0.ax1.fused.outer.outer")
    assert bad != text
    with as_target(SIM), pytest.raises(IRVerifyError, match="blockDim.x to be exactly 128"):
        ptxforge.build(_replay(t, bad), None, target=SIM)


def test_wgmma_needs_sm_90a_and_a_fitting_config():
    t = dense_tensorcore_compute(128, 128, 128, "float16", "float32")
    for target in ("cuda -arch=sm_80", "cuda -arch=sm_90", "sim"):
        with pytest.raises(WgmmaError, match="wgmma needs sm_90a"):
            schedule_dense_wgmma(t, target=target)
    # the sm_90a schedule built for sm_90: the verifier refuses the wgmma nests
    t90, s = _dense(128, 128, 128)
    with pytest.raises(IRVerifyError, match="wgmma needs sm_90a; the target is sm_90"):
        ptxforge.build(s, t90, target="sim")
    for cfg, rule in (((96, 2, 2, 0), "need block_n in"), ((128, 3, 2, 0), "need warpgroups"),
                      ((128, 2, 6, 0), "need stages 1 to 5"),
                      ((128, 2, 2, 1), "3 stages or more for in_flight=1"),
                      ((256, 2, 2, 0), "block_n 256 to divide N 128")):
        with pytest.raises(ScheduleError, match=rule):
            schedule_dense_wgmma(t, WgmmaScheduleConfig(*cfg), target=SIM)
    with pytest.raises(ScheduleError, match="float16 or bfloat16 inputs"):
        schedule_dense_wgmma(dense_tensorcore_compute(128, 128, 64, "float32", "float32"),
                             target=SIM)


def _device(cfg=None, K=192):
    t, s = _dense(128, 128, K, cfg=cfg or WgmmaScheduleConfig(128, 2, 3, 0))
    with as_target(SIM):
        return t, ptxforge.lower(s, t)


def _run(t, dev):
    mod = BuiltModule(dev, SIM)
    a = RNG.uniform(-1, 1, (128, t[0].shape[1])).astype(np.float16)
    b = RNG.uniform(-1, 1, (128, t[0].shape[1])).astype(np.float16)
    c = np.zeros((128, 128), np.float32)
    mod(a, b, c)
    return float(np.abs(c - a.astype(np.float64) @ b.astype(np.float64).T).max())


def _edit(dev, f):
    """``dev`` with each wgmma sync step ``x`` replaced by ``f(x)`` (a list of steps)."""
    def fs(x):
        if isinstance(x, Seq) and any(isinstance(y, WgmmaSync) for y in x.stmts):
            out = []
            for y in x.stmts:
                out += f(y) if isinstance(y, WgmmaSync) else [y]
            return Seq(out)
        return None

    funcs = [f.replace(body=map_stmt(f.body, fstmt=fs)) if f.name != "main" else f
             for f in dev.functions.values()]
    return Module(funcs, dev.attrs)


@pytest.mark.parametrize("drop,error", [
    ("fence", "no wgmma.fence"),
    ("fence_proxy_async", "no fence.proxy.async"),
    ("commit", "issued but not committed"),
])
def test_the_simulator_checks_the_protocol(drop, error):
    t, dev = _device()
    assert _run(t, dev) < 1e-3
    bad = _edit(dev, lambda x: [] if x.op == drop else [x])
    with pytest.raises(WgmmaProtocolError, match=error):
        _run(t, bad)


def test_the_simulator_checks_pending_groups():
    # no wait after the batch: the epilogue reads accumulators still in flight, and the
    # next copies overwrite tiles a pending wgmma reads
    t, dev = _device()
    bad = _edit(dev, lambda x: [] if x.op == "wait" else [x])
    with pytest.raises(WgmmaProtocolError, match="not yet waited for|in flight"):
        _run(t, bad)
    # one group left in flight while the pipeline refills its slot (stages - 1 ahead)
    t, dev = _device(K=256)
    bad = _edit(dev, lambda x: [WgmmaSync("wait", 1)] if x.op == "wait" else [x])
    with pytest.raises(WgmmaProtocolError, match="a cp.async writes [AB].shared while a "
                                                 "wgmma not yet waited"):
        _run(t, bad)


def test_the_sync_pass_places_fences_commits_and_waits():
    t, dev = _device(WgmmaScheduleConfig(128, 2, 3, 1))
    text = str(dev)
    assert text.count("wgmma_fence") == 1 and text.count("wgmma_commit") == 1
    assert "wgmma_wait(1)" in text and text.count("wgmma_wait(0)") == 1
    # the proxy fence sits after the cp.async wait and before the barrier publishing tiles
    assert "async_wait(0)\n" in text
    lines = [x.strip() for x in text.splitlines()]
    k = lines.index("fence_proxy_async")
    assert lines[k - 1].startswith("async_wait(") and lines[k + 1] == "barrier"


@pytest.mark.parametrize("ab,bn,wgs,stages,in_flight", [("float16", 256, 2, 4, 1),
                                                        ("bfloat16", 128, 1, 3, 0)])
def test_te_wgmma_ptx_for_sm_90a(ab, bn, wgs, stages, in_flight):
    from ptxforge.backend_ptx.assemble import find_ptxas, run_ptxas
    from ptxforge.ir.intrin.wgmma import get_wgmma

    t = dense_tensorcore_compute(512, 512, 512, ab, ab)
    s = schedule_dense_wgmma(t, WgmmaScheduleConfig(bn, wgs, stages, in_flight))
    ptx = ptxforge.build(s, t, target="cuda -arch=sm_90a").get_source("ptx")
    assert get_wgmma(bn, ab).ptx in ptx
    for step in ("wgmma.fence.sync.aligned", "wgmma.commit_group.sync.aligned",
                 f"wgmma.wait_group.sync.aligned \t{in_flight};",
                 "fence.proxy.async.shared::cta", "cp.async.cg.shared.global"):
        assert step in ptx
    assert ".align 1024" in ptx  # the swizzled tiles start on a 1024-byte boundary
    if find_ptxas() is not None:
        _, log = run_ptxas(ptx, "sm_90a")
        assert "0 bytes spill stores" in log and "serialized" not in log


def test_dense_wgmma_template_tunes_and_dispatches(tmp_path):
    from ptxforge import autotvm
    from ptxforge.autotvm import tensorcore_wgmma as tw
    from ptxforge.autotvm.space import InstantiationError
    from ptxforge.autotvm.tuner import GridSearchTuner
    from ptxforge.measure import LocalBuilder

    with pytest.raises(WgmmaError, match="wgmma needs sm_90a"):
        autotvm.task.create(tw.NAME, args=(128, 128, 256, "float16"), target="cuda -arch=sm_80")
    task = autotvm.task.create(tw.NAME, args=(128, 128, 256, "bfloat16"), target=SIM)
    space = task.config_space
    assert list(space.space_map) == list(tw.KNOBS)
    # block_n 64 / 128 (up to N), 1-2 warpgroups, 1-4 stages (K / 64), 0-1 in flight,
    # 1 / 2 / 4 split-K parts
    assert space.dims == [2, 2, 4, 2, 3] and task.flop == 2 * 128 * 128 * 256
    bad = space.get(space.knob2point([0, 0, 1, 1, 0]))  # n64, 1 wg, 2 stages, 1 in flight
    with pytest.raises(InstantiationError, match="need 3 stages or more for in_flight=1"):
        task.instantiate(bad)
    assert tw.default_wgmma_config(4096, 4096, 4096, "cuda -arch=sm_90a") == \
        WgmmaScheduleConfig(256, 2, 4, 1)
    log = str(tmp_path / "wgmma.json")
    option = autotvm.measure_option(builder=LocalBuilder(n_parallel=1, compile_to="ir"),
                                    runner=autotvm.SimRunner(max_sim_seconds=0.5))
    tuner = GridSearchTuner(task)
    tuner.tune(n_trial=4, measure_option=option, callbacks=[autotvm.callback.log_to_file(log)])
    assert tuner.best_config is not None
    with as_target(SIM), autotvm.apply_history_best(log):
        s, tensors = tw.dense_wgmma(128, 128, 256, "bfloat16")
    assert "wgmma_m64n" in str(s.pipeline)
    mod = ptxforge.build(s, tensors, target=SIM)
    a, b = host(RNG, (128, 256), "bfloat16"), host(RNG, (128, 256), "bfloat16")
    c = dt.to_bfloat16(np.full((128, 128), np.nan, np.float32))
    mod(a, b, c)
    want = f64(a, "bfloat16") @ f64(b, "bfloat16").T
    assert np.abs(f64(c, "bfloat16") - want).max() / np.abs(want).max() < 8e-3


def test_wgmma_kernels_round_trip_through_text():
    from ptxforge.ir.parser import parse_module

    _, dev = _device(WgmmaScheduleConfig(128, 2, 3, 1))
    text = str(dev)
    assert "wgmma_wait(1)" in text and "warpgroup" in text
    assert str(parse_module(text)) == text


def test_warpgroup_nests_stay_outside_threadidx_x():
    t, text = _pipeline_text()
    bad = text.replace('bind(C.ax0.inner.outer, "threadIdx.y")',
                       'bind(C.ax0.inner.outer, "threadIdx.x")')
    assert bad != text
    with pytest.raises(PassError, match="a warpgroup intrinsic is run by the 128 threads"):
        _replay(t, bad)


def test_a_tile_off_the_swizzle_atom_is_refused():
    from ptxforge.ir.parser import parse_module
    from ptxforge.ir.verify import verify

    _, dev = _device()
    text = str(dev)
    at = text.index("float32(A.shared[") + len("float32(A.shared[")  # the wgmma's read
    bad = text[:at] + "64 + " + text[at:]  # one row (128 bytes) down: not an atom's start
    with pytest.raises(IRVerifyError, match="not on a row that is a multiple of 8"):
        verify(parse_module(bad), target=SIM)
    verify(parse_module(text), target=SIM)


@pytest.mark.gpu
@pytest.mark.parametrize("ab,out,cfg", [("float16", "float16", (256, 2, 4, 1)),
                                        ("bfloat16", "float32", (128, 1, 3, 0)),
                                        ("float16", "bfloat16", (64, 2, 2, 0))])
def test_te_wgmma_dense_on_the_gpu(ab, out, cfg):
    from ptxforge.backend_ptx import array, compile_module, cuda, empty

    dev = cuda(0)
    if dev.sm != "sm_90":
        pytest.skip(f"wgmma needs an sm_90 GPU (sm_90a code); this one is {dev.sm}")
    M, N, K = 512, 768, 1024
    t = dense_tensorcore_compute(M, N, K, ab, out)
    target = as_target("cuda -arch=sm_90a")
    with target:
        s = schedule_dense_wgmma(t, WgmmaScheduleConfig(*cfg), target)
        loaded = compile_module(ptxforge.lower(s, t), target).load(dev)
    a, b = host(RNG, (M, K), ab), host(RNG, (N, K), ab)
    c = empty((M, N), out, dev)
    loaded(array(a, dev, ab), array(b, dev, ab), c)
    want = f64(a, ab) @ f64(b, ab).T
    tol = {"float32": 1e-5, "float16": 1e-3, "bfloat16": 8e-3}[out]
    assert np.abs(f64(c.numpy(), out) - want).max() / np.abs(want).max() < tol


def test_a_proxy_fence_before_the_copies_land_is_too_early():
    from ptxforge.ir.stmt import AsyncWait

    t, dev = _device()

    def early(x):
        if isinstance(x, Seq) and any(isinstance(y, WgmmaSync) and y.op == "fence_proxy_async"
                                      for y in x.stmts):
            out = []
            for y in x.stmts:
                if isinstance(y, AsyncWait):
                    out.append(WgmmaSync("fence_proxy_async"))
                if not (isinstance(y, WgmmaSync) and y.op == "fence_proxy_async"):
                    out.append(y)
            return Seq(out)
        return None

    funcs = [f.replace(body=map_stmt(f.body, fstmt=early)) if f.name != "main" else f
             for f in dev.functions.values()]
    with pytest.raises(WgmmaProtocolError, match="no fence.proxy.async"):
        _run(t, Module(funcs, dev.attrs))
