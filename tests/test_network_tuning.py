"""Tuning whole networks: extract_tasks, ApplyHistoryBest with graph.build (the tuned
schedules are the ones compiled, and the simulated network still matches the numpy
reference executor), the network tutorial script on the simulator, and on a GPU a short
tuning run of a small network followed by a benchmark."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import warnings

import numpy as np
import ptxforge
import pytest
from ptxforge import autosched, graph, measure
from ptxforge.autosched.state import State, state_payload
from ptxforge.passes.pipeline import Pipeline

EXAMPLE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples",
                       "tune_network_cuda.py")


def two_conv_net(size: int = 8, channels: int = 8):
    """data -> conv3x3 + bias + relu -> conv1x1 + residual add -> dense, NHWC."""
    rng = np.random.default_rng(5)
    c = channels
    x = graph.var("data", (1, size, size, 4))
    w1, b1 = graph.var("w1", (3, 3, 4, c)), graph.var("b1", (c,))
    w2 = graph.var("w2", (1, 1, c, c))
    wd = graph.var("wd", (10, size * size * c))
    y = graph.nn.relu(graph.nn.bias_add(graph.nn.conv2d(x, w1, padding=1, data_layout="NHWC"),
                                        b1, axis=3))
    z = graph.add(graph.nn.conv2d(y, w2, data_layout="NHWC"), y)
    out = graph.nn.dense(graph.nn.batch_flatten(z), wd)
    params = {"w1": rng.standard_normal((3, 3, 4, c)) * 0.3, "b1": rng.standard_normal(c) * 0.1,
              "w2": rng.standard_normal((1, 1, c, c)) * 0.3,
              "wd": rng.standard_normal((10, size * size * c)) * 0.05}
    params = {k: v.astype("float32") for k, v in params.items()}
    return graph.function(out), params, (1, size, size, 4)


def test_extract_tasks_of_resnet18_are_deduplicated_weighted_and_printable(capsys):
    net, params, _, _ = graph.get_network("resnet-18", 1, "NHWC")
    tasks, weights = autosched.extract_tasks(net, params, "cuda")
    calls = [c for c in graph.optimize(net, params).calls() if not c.op.attrs.get("view")]
    keys = [t.workload_key for t in tasks]
    assert len(set(keys)) == len(keys) == len(weights)
    assert sum(weights) == len(calls) and len(tasks) < len(calls) and max(weights) > 1
    assert all(t.desc.startswith("vm_mod_fused_") for t in tasks)
    convs = [t for t in tasks if "conv2d" in t.desc]
    assert len(convs) >= 12 and all(t.flop_ct > 1e7 for t in convs)
    for idx, task in enumerate(tasks):
        print(f"========== Task {idx}  (workload key: {task.workload_key}) ==========")
        print(task.compute_dag)
    out = capsys.readouterr().out
    head = re.findall(r"========== Task (\d+)  \(workload key: (\[.*\])\) ==========", out)
    assert [int(i) for i, _ in head] == list(range(len(tasks)))
    first = json.loads(head[1][1])
    assert re.fullmatch(r"[0-9a-f]{32}", first[0]) and first[1] == [1, 224, 224, 3]
    assert "conv2d_nhwc(nn, yy, xx, ff) += (pad_temp[nn, " in out
    # the keys are registered: a task rebuilds from its key alone (as records need)
    again = autosched.SearchTask(workload_key=convs[0].workload_key)
    assert str(again.compute_dag) == str(convs[0].compute_dag)
    # TVM's default leaves out functions without a reduction
    complex_tasks, w = autosched.extract_tasks(net, params, include_simple_tasks=False)
    assert 0 < len(complex_tasks) < len(tasks) and sum(w) < sum(weights)
    assert not any(t.desc.startswith("vm_mod_fused_multiply_add") for t in complex_tasks)


def _write_records(tasks, log, skip_last=True):
    """Two records for each task (but the last): a measured one and a faster estimated one
    (which must lose); returns the measured inputs by key."""
    chosen = {}
    for k, task in enumerate(tasks[:-1] if skip_last else tasks):
        pol = autosched.SketchPolicy(task, autosched.RandomModel(seed=k), seed=k)
        rows = pol.sample_initial_population(2)
        inputs = [measure.MeasureInput(task.task_spec, State.from_row(r, task).pipeline_text(task),
                                       state_payload(task, State.from_row(r, task)))
                  for r in rows]
        results = [measure.MeasureResult((2e-5,), 0, "", 0.1, 0.0),
                   measure.MeasureResult((1e-5,), 0, "", 0.1, 0.0, estimated=True)]
        measure.save_records(log, inputs, results)
        measure.save_records(log, inputs[1:], [measure.MeasureResult(
            (measure.ERROR_COST,), 4, "fault", 0.1, 0.0)])
        chosen[task.workload_key] = inputs[0]
    return chosen


def test_apply_history_best_compiles_the_best_records_and_matches_numpy(tmp_path):
    net, params, in_shape = two_conv_net()
    tasks, weights = autosched.extract_tasks(net, params)
    assert len(tasks) == 3 and weights == [1, 1, 1]
    log = str(tmp_path / "net.json")
    chosen = _write_records(tasks, log)
    untuned = tasks[-1].workload_key

    with autosched.ApplyHistoryBest(log) as ctx:
        with pytest.warns(graph.NoTuningRecordWarning, match="no tuning record"):
            lib = graph.build(net, "sim", params)
    assert autosched.dispatch.current() is None
    assert set(ctx.applied) == set(chosen)
    for key, inp in chosen.items():
        f = lib.functions[key]
        assert f.tuned and f.pipeline_text == Pipeline.parse(inp.pipeline_text).text
        assert ctx.applied[key] == inp.pipeline_text
    assert not lib.functions[untuned].tuned

    x = np.random.default_rng(1).standard_normal(in_shape).astype("float32")
    m = graph.GraphModule(lib, ptxforge.sim())
    m.set_input(data=x)
    m.run()
    ref = graph.evaluate(net, {"data": x}, params)
    np.testing.assert_allclose(m.get_output(0).numpy(), ref, rtol=1e-4, atol=1e-5)

    # the same schedules through an explicit schedule_fn; outside a context: none
    with pytest.warns(graph.NoTuningRecordWarning):
        lib2 = graph.build(net, "sim", params, schedule_fn=ctx.schedule_fn)
    assert {k for k, f in lib2.functions.items() if f.tuned} == set(chosen)
    with warnings.catch_warnings():
        warnings.simplefilter("error", graph.NoTuningRecordWarning)
        lib3 = graph.build(net, "sim", params)
    assert not any(f.tuned for f in lib3.functions.values())


def test_apply_history_best_contexts_nest_and_report_missing_files(tmp_path):
    net, params, _ = two_conv_net()
    tasks, _ = autosched.extract_tasks(net, params)
    log_a, log_b = str(tmp_path / "a.json"), str(tmp_path / "b.json")
    chosen = _write_records(tasks[:2], log_a, skip_last=False)
    chosen.update(_write_records(tasks[2:], log_b, skip_last=False))
    with autosched.ApplyHistoryBest(log_a), autosched.ApplyHistoryBest(log_b) as inner:
        lib = graph.build(net, "sim", params)
        assert inner.query(tasks[0].workload_key)[0].pipeline_text == \
            chosen[tasks[0].workload_key].pipeline_text
    assert all(f.tuned for f in lib.functions.values())
    with pytest.raises(FileNotFoundError, match="no record file"):
        autosched.ApplyHistoryBest(str(tmp_path / "missing.json"))
    # a record whose pipeline does not apply is reported and ignored
    inp = measure.MeasureInput(tasks[0].task_spec, "split(no_such_stage.i0, factors=[2])", None)
    stale = [(inp, measure.MeasureResult((1e-6,), 0, "", 0.1, 0.0))]
    with autosched.ApplyHistoryBest(stale) as ctx:
        with pytest.warns(RuntimeWarning, match="does not apply"), \
                pytest.warns(graph.NoTuningRecordWarning):
            lib = graph.build(net, "sim", params)
    assert not ctx.applied and not any(f.tuned for f in lib.functions.values())


def _run_example(tmp_path, *args):
    # the IR round-trip check of the test suite would slow the script's builds down 5x
    env = {**os.environ, "PTXFORGE_CHECK_ROUNDTRIP": "0"}
    proc = subprocess.run([sys.executable, EXAMPLE, "--runner", "sim", "--image-size", "16",
                           "--log", str(tmp_path / "net.json"), *args],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


def test_example_script_tunes_resumes_and_builds_on_the_simulator(tmp_path):
    out = _run_example(tmp_path, "--trials", "28", "--no-sim-check")
    n_tasks = len(re.findall(r"^========== Task \d+  \(workload key: ", out, re.M))
    assert n_tasks == 28
    assert "Begin tuning..." in out and "[ Task Scheduler ]" in out
    # printed only when every task has a successful record: name the failures otherwise
    failed = [(inp.task.name, r.error_no, str(r.error_msg)[:300])
              for inp, r in measure.load_records(tmp_path / "net.json") if int(r.error_no)]
    assert "Estimated total latency from the records:" in out, (failed, out[-2000:])
    # every time without a GPU is labelled as an estimate
    assert "* estimated by the simulator runner's model" in out
    assert "(estimated by the simulator runner, not measured)" in out
    assert "the compiled network matches the numpy reference executor" in out
    assert re.search(r"compiled in [\d.]+ s; 28 compiled functions", out)
    assert " default schedule" not in out.split("Compile...")[1]
    table = (tmp_path / "net.tasks.txt").read_text()
    assert len(re.findall(r"^\| +\d+ \| ", table, re.M)) == 28 and "Next ID: -" in table
    assert len(measure.load_records(tmp_path / "net.json")) == 28

    # --no-tune only builds from the records
    out = _run_example(tmp_path, "--no-tune")
    assert "Begin tuning" not in out
    assert "the compiled network matches the numpy reference executor" in out


def test_the_scripts_pytorch_twin_of_resnet_v1_computes_the_same_network():
    torch = pytest.importorskip("torch")
    import importlib.util

    spec = importlib.util.spec_from_file_location("tune_network_cuda", EXAMPLE)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    for name, layout in (("resnet_v1-18", "NHWC"), ("resnet_v1-50", "NCHW")):
        net, params, in_shape, _ = graph.get_network(name, 1, layout, image_size=32)
        x = np.random.default_rng(3).uniform(size=in_shape).astype("float32")
        ref = graph.evaluate(net, {"data": x}, params)
        model = script.torch_resnet_v1(torch, params, int(name.split("-")[1]), layout)
        xt = torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2) if layout == "NHWC"
                                                   else x))
        with torch.no_grad():
            got = model(xt).numpy()
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())


@pytest.mark.gpu
def test_short_tuning_of_a_small_network_then_benchmark_on_the_gpu(tmp_path, capsys):
    net, params, in_shape = two_conv_net(size=32, channels=32)
    tasks, weights = autosched.extract_tasks(net, params)
    log = str(tmp_path / "gpu.json")
    ctx = autosched.LocalRPCMeasureContext(min_repeat_ms=5)
    try:
        ts = autosched.TaskScheduler(tasks, weights, callbacks=[autosched.PrintTableInfo()])
        ts.tune(autosched.TuningOptions(num_measure_trials=16 * len(tasks),
                                        num_measures_per_round=16, runner=ctx.runner,
                                        measure_callbacks=[autosched.RecordToFile(log)]))
    finally:
        ctx.close()
    assert all(c < 1e9 for c in ts.best_costs) and not any(ts.best_estimated)
    assert "*" not in capsys.readouterr().out.split("[ Task Scheduler ]")[-1]
    with autosched.ApplyHistoryBest(log):
        lib = graph.build(net, "cuda", params)
    assert all(f.tuned for f in lib.functions.values())
    dev = ptxforge.cuda(0)
    m = graph.GraphModule(lib, dev)
    x = np.random.default_rng(2).standard_normal(in_shape).astype("float32")
    m.set_input(data=x)
    m.run()
    np.testing.assert_allclose(m.get_output(0).numpy(),
                               graph.evaluate(net, {"data": x}, params), rtol=1e-3, atol=1e-4)
    result = m.benchmark(dev, repeat=3, min_repeat_ms=50)
    print(result)
    assert 0 < result.median < 0.01 and m.uses_cuda_graph
