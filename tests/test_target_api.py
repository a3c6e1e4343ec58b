"""Every entry point takes a target string or a Target: build, SearchTask, AutoTVM tasks,
the network builder and task extraction; records keep naming the target "cuda"."""

from __future__ import annotations

import ptxforge
import pytest
from ptxforge import autosched, autotvm, graph, te
from ptxforge.graph import nn
from ptxforge.measure import BuildOptions, MeasureInput, TaskSpec, build_candidate
from ptxforge.target import Target, TargetError

def _matmul(n: int = 32):
    a = te.placeholder((n, n), name="A")
    b = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    return a, b, c


def _scheduled():
    a, b, c = _matmul()
    s = te.create_schedule(c.op)
    i, j = s[c].op.axis
    s[c].bind(i, te.thread_axis("blockIdx.x"))
    s[c].bind(j, te.thread_axis("threadIdx.x"))
    return s, [a, b, c]


@pytest.mark.parametrize("target, arch", [("cuda -arch=sm_80", "sm_80"),
                                          (Target("cuda -arch=sm_90a"), "sm_90a")])
def test_build_compiles_for_the_targets_architecture(target, arch):
    s, args = _scheduled()
    f = ptxforge.build(s, args, target=target)
    assert f.target.arch == arch
    assert f".target {arch}\n" in f.get_source("ptx")


def test_build_for_the_simulator_and_bad_targets():
    s, args = _scheduled()
    f = ptxforge.build(s, args, target="sim")
    assert f.target.is_sim and f._ptx is None  # lowered only
    with pytest.raises(TargetError, match="unknown target kind 'opencl'"):
        ptxforge.build(s, args, target="opencl")


@autosched.register_workload
def target_api_matmul(n):
    return list(_matmul(n))


def test_search_task_takes_a_target():
    task = autosched.SearchTask(func=target_api_matmul, args=(32,), target="cuda -arch=sm_80")
    assert task.target == Target("cuda -arch=sm_80")
    assert task.hardware_params.max_shared_memory_per_sm == 164 * 1024
    assert task.hardware_params.fma_per_sm_per_clock == 64
    assert task.task_spec.target == "cuda -arch=sm_80"
    sim = autosched.SearchTask(func=target_api_matmul, args=(32,), target="sim")
    assert sim.target.is_sim and sim.task_spec.target == "cuda"  # old logs say "cuda"
    from ptxforge.autosched.task_scheduler import _record_target

    assert _record_target(sim) == "cuda"
    assert "target='cuda -arch=sm_80'" in repr(task)
    with pytest.raises(TargetError, match="unknown architecture"):
        autosched.SearchTask(func=target_api_matmul, args=(32,), target="cuda -arch=sm_52")


@autotvm.template("test_target_api/matmul")
def matmul_template(n):
    a, b, c = _matmul(n)
    s = te.create_schedule(c.op)
    i, j = s[c].op.axis
    cfg = autotvm.get_config()
    cfg.define_knob("threads", [16, 32])
    jo, ji = s[c].split(j, factor=cfg["threads"].val)
    s[c].bind(i, te.thread_axis("blockIdx.y"))
    s[c].bind(jo, te.thread_axis("blockIdx.x"))
    s[c].bind(ji, te.thread_axis("threadIdx.x"))
    return s, [a, b, c]


def test_autotvm_task_takes_a_target_and_dispatch_keys_by_kind():
    from ptxforge.autotvm.dispatch import _target_name

    task = autotvm.task.create("test_target_api/matmul", args=(32,),
                               target=Target("cuda -arch=sm_80"))
    assert task.target == task.spec.target == "cuda -arch=sm_80"
    assert autotvm.task.create("test_target_api/matmul", args=(32,), target="sim").target \
        == "cuda"
    assert {_target_name(t) for t in ("cuda", "sim", "cuda -arch=sm_90a",
                                      Target("cuda -arch=sm_80"), None)} == {"cuda"}


def test_the_builder_compiles_for_the_task_target():
    a, b, c = _matmul()
    inp = MeasureInput(TaskSpec.from_tensors([a, b, c], "target_api_mm",
                                             target="cuda -arch=sm_80"),
                       'bind(C.i, "blockIdx.x"), bind(C.j, "threadIdx.x")')
    res = build_candidate(inp, BuildOptions(compile_to="ptx", keep_sources=True))
    assert res.error_no == 0 and res.artifact.target_sm == "sm_80"
    (k,) = res.artifact.kernels.values()
    assert ".target sm_80\n" in k.get_source("ptx")
    forced = build_candidate(inp, BuildOptions(target_sm="sm_90a", compile_to="ptx"))
    assert forced.artifact.target_sm == "sm_90a"
    with pytest.raises(TargetError):
        BuildOptions(target_sm="sm_61")


def _net():
    x = graph.var("x", (4, 16))
    return graph.function(nn.softmax(graph.exp(x)))


def test_graph_build_and_task_extraction_take_a_target():
    lib = graph.build(_net(), target="cuda -arch=sm_80")
    assert lib.target.arch == "sm_80" and ".target sm_80\n" in lib.get_source("ptx")
    sim = graph.build(_net(), target=Target("sim"))
    assert sim.target.is_sim
    with pytest.raises(graph.GraphError, match="unknown target kind"):
        graph.build(_net(), target="rocm")
    tasks, weights = autosched.extract_tasks(_net(), target="cuda -arch=sm_86")
    assert tasks and all(t.target.arch == "sm_86" for t in tasks)
    assert all(t.task_spec.target == "cuda -arch=sm_86" for t in tasks)


def test_records_written_for_cuda_match_cuda_and_sim_targets(tmp_path):
    from ptxforge.measure import MeasureResult, save_records

    a, b, c = _matmul()
    log = tmp_path / "old.json"
    inputs = [MeasureInput(TaskSpec.from_tensors([a, b, c], "mm", target=t), "")
              for t in ("cuda", "cuda -arch=sm_80")]
    results = [MeasureResult((2e-3,), 0, "", 0.0, 0.0), MeasureResult((1e-3,), 0, "", 0.0, 0.0)]
    save_records(log, inputs, results)
    for target in ("cuda", "sim", Target("sim")):
        inp, _ = autosched.load_best_record(str(log), "mm", target)
        assert inp.task.target == "cuda"
    inp, _ = autosched.load_best_record(str(log), "mm", "sm_80")
    assert inp.task.target == "cuda -arch=sm_80"
