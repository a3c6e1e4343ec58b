"""Building and running networks on the simulator: the model zoo, fused-function
extraction, the memory plan, the schedule hook and the GraphModule interface.

The ResNet-18 check uses 64x64 inputs (the ImageNet stem, four stages at 16, 8, 4 and 2
pixels) so the simulator runs the whole network in seconds; the GPU tests run 224x224.
"""

from __future__ import annotations

import warnings

import numpy as np
import ptxforge
import pytest
from ptxforge import graph
from ptxforge.graph import nn
from ptxforge.graph.zoo.bert import bert_layer

RNG = np.random.default_rng(11)


def rand(*shape):
    return RNG.standard_normal(shape).astype("float32")


def run_sim(lib, inputs: dict) -> np.ndarray:
    m = graph.GraphModule(lib, ptxforge.sim())
    m.set_input(**inputs)
    m.run()
    return m.get_output(0).numpy()


@pytest.mark.parametrize("name", graph.list_networks())
def test_zoo_networks_have_the_advertised_shapes(name):
    for layout in ("NHWC", "NCHW"):
        net, params, in_shape, out_shape = graph.get_network(name, 2, layout)
        assert net.params[0].name == "data" and net.params[0].shape == in_shape
        assert net.outputs[0].shape == out_shape
        assert set(params) == {p.name for p in net.params[1:]}
        if name == "bert":
            break
    again, params2, _, _ = graph.get_network(name, 2, "NHWC")
    first = sorted(params)[0]
    np.testing.assert_array_equal(params[first], params2[first])  # seeded


def test_resnet18_nhwc_on_the_simulator_matches_the_reference_executor():
    net, params, in_shape, _ = graph.get_network("resnet-18", 1, "NHWC", image_size=64)
    lib = graph.build(net, target="sim", params=params)
    x = rand(*in_shape)
    ref = graph.evaluate(net, {"data": x}, params)
    got = run_sim(lib, {"data": x})
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-6)
    assert got.argmax() == ref.argmax()
    # intermediates share storages: far fewer storages than steps
    temps = [s for s in lib.plan.storages if s.kind == "temp"]
    assert len(temps) <= 4 < len(lib.plan.steps)
    print(lib.summary())


def test_extracted_functions_are_deduplicated_with_counts():
    net, params, _, _ = graph.get_network("resnet-18", 1, "NHWC")
    fused = graph.optimize(net, params)
    calls = [c for c in fused.calls() if not c.op.attrs.get("view")]
    for winograd in (False, True):
        funcs = graph.extract_fused_functions(net, params, winograd=winograd)
        print(f"resnet-18 NHWC, winograd={winograd}: {len(funcs)} distinct fused functions")
        for f in funcs:
            print(f"  x{f.count} {f.name} {f.workload_key}")
        keys = [f.workload_key for f in funcs]
        names = [f.name for f in funcs]
        assert len(set(keys)) == len(keys) and len(set(names)) == len(names)
        assert sum(f.count for f in funcs) == len(calls)
        assert len(funcs) < len(calls)
        assert any(f.count > 1 for f in funcs)
        assert all(n.startswith("vm_mod_fused_") for n in names)
    conv_relu = next(f for f in funcs if f.name.startswith("vm_mod_fused_nn_conv2d_add_nn_relu"))
    tensors = conv_relu.build_tensors()
    assert [t.name for t in tensors[:-1]] == [f"p{k}" for k in range(len(tensors) - 1)]
    assert conv_relu.workload_key.startswith('["') and conv_relu.flop_count() > 0
    # the key is a property of the computation: rebuilding gives the same key
    again = graph.extract_fused_functions(net, params, winograd=True)
    assert [f.workload_key for f in again] == keys


def _chain_net():
    x = graph.var("x", (4, 16))
    y = x
    for _ in range(6):
        y = nn.softmax(graph.exp(y))  # softmax is opaque: every step is its own function
    return graph.function(y)


def test_memory_plan_reuses_storages_whose_lifetimes_do_not_overlap():
    lib = graph.build(_chain_net(), target="sim")
    plan = lib.plan
    temps = [k for k, s in enumerate(plan.storages) if s.kind == "temp"]
    temp_slots = [t for t in plan.slots if t.kind == "temp"]
    assert len(temp_slots) == 11 and len(temps) == 2
    # no step writes a storage that holds a value still to be read
    last_use = {}
    for i, step in enumerate(plan.steps):
        for a in step.args:
            last_use[a] = i
    live: dict[int, int] = {}
    for i, step in enumerate(plan.steps):
        for a in step.args:
            assert live.get(plan.slots[a].storage, a) == a
        st = plan.slots[step.out].storage
        holder = live.get(st)
        assert holder is None or last_use.get(holder, -1) <= i
        live[st] = step.out
    x = rand(4, 16)
    np.testing.assert_allclose(run_sim(lib, {"x": x}), graph.evaluate(_chain_net(), {"x": x}),
                               rtol=1e-5)


def test_reshape_only_steps_alias_their_input():
    x = graph.var("x", (2, 3, 4))
    y = nn.softmax(graph.reshape(nn.softmax(x), (6, 4)))
    net = graph.function(y)
    lib = graph.build(net, target="sim")
    views = [s for s in lib.plan.steps if s.view]
    assert len(views) == 1
    view = views[0]
    assert lib.plan.slots[view.out].storage == lib.plan.slots[view.args[0]].storage
    assert lib.call_keys.count(None) == 1
    a = rand(2, 3, 4)
    np.testing.assert_allclose(run_sim(lib, {"x": a}), graph.evaluate(net, {"x": a}), rtol=1e-5)


def test_schedule_hook_and_warnings_for_functions_without_records():
    x = graph.var("x", (1, 8, 8, 4))
    y = nn.relu(nn.conv2d(x, graph.const(rand(3, 3, 4, 4)), padding=1, data_layout="NHWC"))
    net = graph.function(nn.softmax(nn.batch_flatten(y)))
    seen = []

    def schedule_fn(func):
        seen.append(func.name)
        if "conv2d" in func.name:
            return graph.default_schedule_for(func)
        return None

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lib = graph.build(net, target="sim", schedule_fn=schedule_fn)
    missing = [w for w in caught if issubclass(w.category, graph.NoTuningRecordWarning)]
    untuned = [f for f in lib.functions.values() if not f.tuned]
    assert len(missing) == len(untuned) >= 1
    assert all("no tuning record for vm_mod_fused" in str(w.message) for w in missing)
    assert [f.tuned for f in lib.functions.values()].count(True) == 1
    assert len(seen) == len(lib.functions)
    a = rand(1, 8, 8, 4)
    np.testing.assert_allclose(run_sim(lib, {"x": a}), graph.evaluate(net, {"x": a}),
                               rtol=1e-5, atol=1e-7)


def test_a_schedule_that_does_not_lower_is_reported():
    x = graph.var("x", (64, 64))
    net = graph.function(graph.exp(x))

    def bad(func):
        from ptxforge import te

        tensors = func.build_tensors()
        s = te.create_schedule(tensors[-1].op)
        out = s[tensors[-1]]
        fused = out.fuse(*out.op.axis)
        out.bind(fused, te.thread_axis("threadIdx.x"))  # 4096 threads in one block
        return s, tensors

    with pytest.raises(graph.GraphError, match="the schedule from schedule_fn does not lower"):
        graph.build(net, target="sim", schedule_fn=bad)


def test_simple_schedule_is_valid_for_any_function():
    net, params, in_shape, _ = graph.get_network("squeezenet_v1.1", 1, "NCHW", image_size=32)
    funcs = graph.extract_fused_functions(net, params)

    def simple(func):
        tensors = func.build_tensors()
        return graph.simple_schedule(tensors[-1]), tensors

    lib = graph.build(net, target="sim", params=params, schedule_fn=simple)
    assert len(lib.functions) == len(funcs)
    x = rand(*in_shape)
    np.testing.assert_allclose(run_sim(lib, {"data": x}), graph.evaluate(net, {"data": x}, params),
                               rtol=1e-4, atol=1e-7)


def test_bert_layer_and_winograd_networks_on_the_simulator():
    out, params, shape = bert_layer(2, "float32", seq_len=8, hidden=32, heads=4, intermediate=64)
    net = graph.function(out)
    x = rand(*shape)
    np.testing.assert_allclose(run_sim(graph.build(net, "sim", params), {"data": x}),
                               graph.evaluate(net, {"data": x}, params), rtol=1e-4, atol=1e-5)
    net, params, in_shape, _ = graph.get_network("resnet_v1-18", 1, "NHWC", image_size=32)
    x = rand(*in_shape)
    lib = graph.build(net, "sim", params, winograd=True)
    assert any("winograd" in f.func.name for f in lib.functions.values())
    ref = graph.evaluate(net, {"data": x}, params)
    np.testing.assert_allclose(run_sim(lib, {"data": x}), ref, rtol=1e-3,
                               atol=1e-4 * np.abs(ref).max())


def test_nchw_network_converted_to_nhwc_runs_the_same():
    net, params, in_shape, _ = graph.get_network("mobilenet", 1, "NCHW", image_size=32,
                                                 width=0.25)
    lib = graph.build(net, "sim", params, layout="NHWC")
    convs = [c for f in lib.functions.values() for c in f.func.func.calls()
             if c.op == "nn.conv2d"]
    assert convs and all(c.attrs["data_layout"] == "NHWC" for c in convs)
    x = rand(*in_shape)
    np.testing.assert_allclose(run_sim(lib, {"data": x}), graph.evaluate(net, {"data": x}, params),
                               rtol=1e-4, atol=1e-7)


def test_graph_module_interface():
    net = _chain_net()
    lib = graph.build(net, target="cuda")  # PTX is generated without a GPU
    assert ".entry" in lib.get_source("ptx")
    m = graph.GraphModule(lib, ptxforge.sim())
    with pytest.raises(graph.GraphError, match="no input 'y'"):
        m.set_input("y", rand(4, 16))
    with pytest.raises(graph.GraphError, match="expected an array of shape"):
        m.set_input("x", rand(4, 15))
    with pytest.raises(graph.GraphError, match="output 1 does not exist"):
        m.get_output(1)
    m.set_input("x", rand(4, 16))
    result = m.benchmark(number=1, repeat=2)
    assert len(result.results) == 2 and result.mean > 0
    text = str(result)
    assert "mean (ms)" in text and "median (ms)" in text and "std (ms)" in text
    assert m.get_num_outputs() == 1


def test_registered_workload_keys_rebuild_the_tensors():
    registry = pytest.importorskip("ptxforge.autosched.workload_registry")
    net, params, _, _ = graph.get_network("mobilenet", 1, "NHWC", image_size=32, width=0.25)
    func = graph.extract_fused_functions(net, params)[1]
    key = func.register_workload()
    tensors = registry.workload_tensors(key)
    assert [t.shape for t in tensors] == [t.shape for t in func.tensors]
    from ptxforge.ir.compute_dag import ComputeDAG

    assert ComputeDAG(tensors).structural_hash() == func.compute_dag.structural_hash()
