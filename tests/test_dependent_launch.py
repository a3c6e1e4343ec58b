"""Programmatic dependent launch: kernels for sm_90 and later wait for their grid
dependencies in their first instruction, and the runtime launches them so that each starts
while the kernel before it finishes, with the same results as plain launches."""

from __future__ import annotations

import re

import numpy as np
import ptxforge
import pytest
from ptxforge import graph
from ptxforge.backend_ptx import launch as launch_info
from ptxforge.graph import nn
from ptxforge.target import Target

RNG = np.random.default_rng(11)


def chain(n: int = 6, shape=(64, 96)):
    """``n`` softmaxes (opaque: a kernel each) with element-wise work between them."""
    x = graph.var("x", shape)
    y = x
    for k in range(n):
        y = nn.softmax(graph.add(graph.multiply(y, 3.0 + k), 0.5), axis=-1 if k % 2 else 0)
    return graph.function(y)


def kernel_bodies(ptx: str) -> list[list[str]]:
    """The instructions of each ``.entry`` of a PTX text, in order (no declarations)."""
    bodies = []
    for m in re.finditer(r"\.entry\s+\w+\s*\([^)]*\)[^{]*\{(.*?)\n\}", ptx, re.S):
        lines = [ln.strip() for ln in m.group(1).splitlines()]
        bodies.append([ln for ln in lines if ln and not ln.startswith((".", "//", "$", "{", "}"))])
    return bodies


def test_kernels_for_sm90_wait_for_their_grid_dependencies_before_anything_else():
    lib = graph.build(chain(3), "cuda -arch=sm_90")
    bodies = kernel_bodies(lib.get_source("ptx"))
    assert len(bodies) >= 3
    for body in bodies:
        # only parameter loads come before the wait, then the launch of the dependents
        wait = body.index(launch_info.GRID_DEPENDENCY_WAIT)
        assert all(ln.startswith("ld.param.") for ln in body[:wait])
        rest = [ln for ln in body[wait + 1:] if not ln.startswith("ld.param.")]
        assert rest[0] == launch_info.GRID_DEPENDENTS_LAUNCH
        assert any(ln.startswith("ld.global") for ln in rest)
        assert sum(launch_info.GRID_DEPENDENCY_WAIT in ln for ln in body) == 1


def test_kernels_for_sm80_have_no_grid_dependency_control():
    lib = graph.build(chain(2), "cuda -arch=sm_80")
    ptx = lib.get_source("ptx")
    assert kernel_bodies(ptx) and "griddepcontrol" not in ptx
    assert not Target("cuda -arch=sm_80").has_dependent_launch
    assert Target("cuda -arch=sm_90a").has_dependent_launch


@pytest.mark.gpu
@pytest.mark.parametrize("use_cuda_graph", [True, False], ids=["graph", "eager"])
def test_dependent_launches_give_the_bits_of_plain_launches(use_cuda_graph):
    net = chain(12, (256, 512))
    dev = ptxforge.cuda(0)
    lib = graph.build(net, "cuda")
    runs = {}
    for dependent in (True, False):
        m = graph.GraphModule(lib, dev, use_cuda_graph=use_cuda_graph,
                              dependent_launch=dependent)
        outs = []
        for _ in range(3):  # fresh inputs; a replayed graph too
            x = RNG.standard_normal((256, 512)).astype("float32") * 2
            m.set_input(x=x)
            m.run()
            outs.append((x, m.get_output(0).numpy()))
        assert m.uses_cuda_graph == use_cuda_graph, m.capture_error
        loaded = [lk for fn in m._loaded.values() for lk in fn.kernels.values()]
        assert loaded and all(lk.dependent_launch == (dev.compute_capability >= (9, 0))
                              for lk in loaded)
        runs[dependent] = outs
    for (x, dep), (x2, plain) in zip(runs[True], runs[False]):
        ref = graph.evaluate(net, {"x": x})
        np.testing.assert_allclose(dep, ref, rtol=1e-4, atol=1e-6)
        plain_ref = graph.evaluate(net, {"x": x2})
        np.testing.assert_allclose(plain, plain_ref, rtol=1e-4, atol=1e-6)
    # the same input through both: the same bits
    x = RNG.standard_normal((256, 512)).astype("float32")
    got = []
    for dependent in (True, False):
        m = graph.GraphModule(lib, dev, use_cuda_graph=use_cuda_graph,
                              dependent_launch=dependent)
        m.set_input(x=x)
        m.run()
        got.append(m.get_output(0).numpy().tobytes())
    assert got[0] == got[1]


@pytest.mark.gpu
def test_auto_launch_times_both_graphs_and_keeps_the_faster_with_the_same_bits():
    net = chain(12, (256, 512))
    dev = ptxforge.cuda(0)
    lib = graph.build(net, "cuda")
    x = RNG.standard_normal((256, 512)).astype("float32")
    auto = graph.GraphModule(lib, dev)  # "auto" is the default
    assert auto.launch_choice is None  # nothing is chosen before the first run
    auto.set_input(x=x)
    auto.run()
    choice = auto.launch_choice
    assert choice is not None and auto.uses_cuda_graph, auto.capture_error
    assert choice.chosen in ("dependent", "plain")
    assert choice.dependent_seconds > 0 and choice.plain_seconds > 0
    faster = "dependent" if choice.dependent_seconds <= choice.plain_seconds else "plain"
    assert choice.chosen == faster
    assert auto.dependent_launch == (choice.chosen == "dependent")
    got = auto.get_output(0).numpy().tobytes()
    for dependent in (True, False):
        m = graph.GraphModule(lib, dev, dependent_launch=dependent)
        m.set_input(x=x)
        m.run()
        assert m.launch_choice is None  # an explicit choice is not measured
        assert m.get_output(0).numpy().tobytes() == got
    x2 = RNG.standard_normal((256, 512)).astype("float32")  # the kept graph runs new inputs
    auto.set_input(x=x2)
    auto.run()
    np.testing.assert_allclose(auto.get_output(0).numpy(), graph.evaluate(net, {"x": x2}),
                               rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("bad", ["yes", 1.5, None])
def test_dependent_launch_takes_true_false_or_auto(bad):
    lib = graph.build(chain(2, (8, 16)), "sim")
    with pytest.raises(graph.GraphError, match="dependent_launch must be True, False or 'auto'"):
        graph.GraphModule(lib, ptxforge.sim(), dependent_launch=bad)


def test_auto_launch_on_the_simulator_runs_and_chooses_nothing():
    net = chain(2, (8, 16))
    lib = graph.build(net, "sim")
    m = graph.GraphModule(lib, ptxforge.sim())
    x = RNG.standard_normal((8, 16)).astype("float32")
    m.set_input(x=x)
    m.run()
    assert m.launch_choice is None
    np.testing.assert_allclose(m.get_output(0).numpy(), graph.evaluate(net, {"x": x}),
                               rtol=1e-4, atol=1e-6)


def test_ptx_that_touches_memory_before_the_wait_is_refused():
    from ptxforge.backend_ptx.compile import check_grid_dependency_wait
    from ptxforge.backend_ptx.kernel import CompileError

    ok = ("\n.visible .entry k(\n.param .u64 p\n)\n{\n\tld.param.b64 %rd1, [p];\n"
          "\tgriddepcontrol.wait;\n\tld.global.nc.b32 %r1, [%rd1];\n}\n")
    check_grid_dependency_wait(ok, "k")
    check_grid_dependency_wait(ok.replace("griddepcontrol.wait;", ""), "k")  # no wait: plain
    bad = ok.replace("\tgriddepcontrol.wait;\n\tld.global.nc.b32 %r1, [%rd1];",
                     "\tld.global.nc.b32 %r1, [%rd1];\n\tgriddepcontrol.wait;")
    with pytest.raises(CompileError, match="before griddepcontrol.wait"):
        check_grid_dependency_wait(bad, "k")


def weighted_chain():
    """Two dense layers with weights (constants) around a softmax."""
    x = graph.var("x", (64, 256))
    w1 = graph.const(RNG.standard_normal((512, 256)).astype("float32") * 0.05, "w1")
    w2 = graph.const(RNG.standard_normal((128, 512)).astype("float32") * 0.05, "w2")
    h = nn.softmax(nn.dense(x, w1), axis=-1)
    return graph.function(nn.dense(h, w2))


def test_kernels_prefetch_the_weights_they_read_into_l2_before_the_wait():
    lib = graph.build(weighted_chain(), "cuda -arch=sm_90a", precision="float16")
    checked = 0
    for f in lib.functions.values():
        ptx = f.ptx.kernels[next(iter(f.ptx.kernels))].get_source("ptx")
        wait = ptx.index(launch_info.GRID_DEPENDENCY_WAIT)
        before = ptx[:wait]
        n = before.count("cp.async.bulk.prefetch.L2.global")
        assert "cp.async.bulk.prefetch" not in ptx[wait:]
        if "dense" in f.func.name:
            assert n >= 1  # the weight (and the bias, if any)
            checked += 1
        else:
            assert n == 0  # the softmax reads only what the kernel before it wrote
    assert checked == 2
    for arch in ("sm_80", "sm_90"):  # sm_90's PTX 7.8 has no bulk prefetch
        ptx = graph.build(weighted_chain(), f"cuda -arch={arch}",
                          precision="float16").get_source("ptx")
        assert "cp.async.bulk.prefetch" not in ptx
        assert ("griddepcontrol.wait" in ptx) == (arch == "sm_90")


def test_kernel_params_of_follows_the_host_launches():
    from ptxforge.backend_ptx.module import kernel_params_of
    from ptxforge.driver import lower
    from ptxforge.graph.build_module import default_schedule_for
    from ptxforge.graph.fused import distinct_functions

    fused = graph.optimize(weighted_chain(), precision="float16")
    funcs, _ = distinct_functions(fused)
    dense = next(f for f in funcs if "dense" in f.name)
    s, args = default_schedule_for(dense)
    mod = lower(s, list(args))
    names = [p.name for p in mod.host.params]
    got = kernel_params_of(mod, (names[1],))
    assert got and all(len(v) == 1 for v in got.values())
    assert kernel_params_of(mod, ()) == {}
    assert kernel_params_of(mod, ("no_such_param",)) == {}


def _softmax_kernel():
    from ptxforge import ops, te
    from ptxforge.ops.schedules import default_schedule

    x = te.placeholder((32, 64), name="x")
    y = ops.nn.softmax(x, axis=-1)
    with ptxforge.target.Target("cuda -arch=sm_90a"):
        mod = ptxforge.lower(default_schedule(y), [x, y])
    return mod.kernels()[0]


def test_the_launch_records_the_wait_the_code_generator_emits(tmp_path):
    from ptxforge.backend_ptx import compile_kernel
    from ptxforge.backend_ptx.cache import KernelCache

    kernel = _softmax_kernel()
    for arch, waits in (("sm_90a", True), ("sm_80", False)):
        ck = compile_kernel(kernel, arch, stop_after="ptx", cache=False)
        assert ck.launch.dependent_launch is waits
        assert (launch_info.GRID_DEPENDENCY_WAIT in ck.get_source("ptx")) is waits
        assert ck.summary()["dependent_launch"] is waits
    # the attribute survives the kernel cache's disk form
    cache = KernelCache(str(tmp_path))
    compile_kernel(kernel, "sm_90a", stop_after="ptx", cache=cache)
    again = compile_kernel(kernel, "sm_90a", stop_after="ptx", cache=KernelCache(str(tmp_path)))
    assert again.cache_hit and again.launch.dependent_launch


def test_a_replacement_ptx_without_the_wait_is_launched_plainly():
    from ptxforge.backend_ptx import compile_kernel

    kernel = _softmax_kernel()
    ptx = compile_kernel(kernel, "sm_90a", stop_after="ptx", cache=False).get_source("ptx")
    kept = compile_kernel(kernel, "sm_90a", replace={"ptx": ptx}, stop_after="ptx",
                          cache=False)
    assert kept.launch.dependent_launch
    lines = [ln for ln in ptx.splitlines() if "griddepcontrol" not in ln]
    plain = compile_kernel(kernel, "sm_90a", replace={"ptx": "\n".join(lines) + "\n"},
                           stop_after="ptx", cache=False)
    assert not plain.launch.dependent_launch


def test_one_ptxas_process_assembles_every_kernel_of_a_module(monkeypatch):
    from ptxforge.backend_ptx import assemble as asm_mod
    from ptxforge.backend_ptx import compile_kernel, compile_module, find_ptxas

    if find_ptxas() is None:
        pytest.skip("ptxas is not installed")
    calls = []
    real = asm_mod.run_ptxas_many

    def counted(ptxs, *args, **kwargs):
        calls.append(len(ptxs))
        return real(ptxs, *args, **kwargs)

    monkeypatch.setattr("ptxforge.backend_ptx.compile.run_ptxas_many", counted)
    from ptxforge import ops, te
    from ptxforge.ops.schedules import default_schedule

    x = te.placeholder((32, 64), name="x")
    y = ops.nn.softmax(x, axis=-1)  # three kernels
    with Target("cuda -arch=sm_90a"):
        dev = ptxforge.lower(default_schedule(y), [x, y])
    mod = compile_module(dev, "sm_90a", assembler="ptxas", cache=False)
    assert len(mod.kernels) == 3 and calls == [3]
    for f in dev.kernels():
        alone = compile_kernel(f, "sm_90a", assembler="ptxas", cache=False)
        k = mod.kernels[f.name]
        assert k.resources == alone.resources
        assert k.symbol.encode() in k.cubin
