"""Arrays shared with other libraries without copies, on the CPU: ``nd.from_dlpack`` and
``SimArray.__dlpack__`` (numpy here; torch in test_torch_exchange.py), the layout, dtype and
device checks, and a compiled network reading and writing caller-owned arrays
(``ZeroCopyGraphModule.run_bound``), with zero copies proven by pointer identity."""

from __future__ import annotations

import types

import numpy as np
import pytest
from ptxforge import graph, nd
from ptxforge.graph import nn
from ptxforge.runtime import GraphError
from ptxforge.nd import DLPackError
from ptxforge.runtime.zero_copy import ZeroCopyGraphModule

RNG = np.random.default_rng(5)


def test_from_dlpack_shares_host_memory():
    a = RNG.standard_normal((3, 4)).astype("float32")
    arr = nd.from_dlpack(a)
    assert isinstance(arr, nd.SimArray) and arr.dtype == "float32" and arr.shape == (3, 4)
    assert arr.data_ptr == a.ctypes.data
    arr.host_view[1, 2] = 7.0
    assert a[1, 2] == 7.0


def test_sim_array_exports_without_a_copy():
    arr = nd.array(np.arange(6, dtype="int64").reshape(2, 3))
    back = np.from_dlpack(arr)
    assert back.ctypes.data == arr.data_ptr and back.dtype == np.int64
    back[0, 0] = 42
    assert arr.numpy()[0, 0] == 42
    assert arr.__dlpack_device__() == (nd.KDL_CPU, 0)
    with pytest.raises(BufferError, match="without a copy"):
        arr.__dlpack__(dl_device=(nd.KDL_CUDA, 0))
    with pytest.raises(BufferError, match="without copying"):
        arr.__dlpack__(copy=True)


def test_layout_and_dtype_are_checked():
    a = np.zeros((4, 6), "float32")
    with pytest.raises(DLPackError, match=r"not contiguous.*contiguous\(\)"):
        nd.from_dlpack(a[:, ::2])
    assert nd.from_dlpack(a[1:3]).data_ptr == a[1:3].ctypes.data  # compact rows: shared
    assert nd.from_dlpack(a[None]).shape == (1, 4, 6)
    with pytest.raises(DLPackError, match="complex"):
        nd.from_dlpack(np.zeros(3, np.complex64))
    with pytest.raises(DLPackError, match="does not support DLPack"):
        nd.from_dlpack([1.0, 2.0])


def test_host_memory_for_a_gpu_device_is_refused():
    gpu_like = types.SimpleNamespace(device_id=0)  # any device that is not the simulator
    with pytest.raises(DLPackError, match=r"host memory.*GPU.*x\.cuda\(\)"):
        nd.from_dlpack(np.zeros(3, "float32"), device=gpu_like)


def _net():
    """Two outputs: a softmax of a reshape of the input (the reshape runs no kernel: its
    slot is the input's storage) and exp of the input."""
    x = graph.var("x", (2, 3, 4))
    return graph.function([nn.softmax(graph.reshape(x, (6, 4))), graph.exp(x)])


def test_network_reads_and_writes_caller_arrays():
    lib = graph.build(_net(), target="sim")
    module = ZeroCopyGraphModule(lib)
    x = RNG.standard_normal((2, 3, 4)).astype("float32")
    outs = [np.full((6, 4), -1.0, "float32"), np.full((2, 3, 4), -1.0, "float32")]
    ptrs = [o.ctypes.data for o in outs]
    module.run_bound({"x": nd.from_dlpack(x)}, [nd.from_dlpack(o) for o in outs])
    want = graph.evaluate(_net(), {"x": x})
    for o, w, p in zip(outs, want, ptrs):
        assert o.ctypes.data == p  # written in place
        np.testing.assert_allclose(o, w, rtol=1e-5, atol=1e-7)
    # the module's own input and output buffers were never touched (still the NaN poison)
    assert np.isnan(module.get_output(0).numpy()).all()
    assert np.isnan(module.get_input("x").numpy()).all()
    # ... and the ordinary interface still works next to it
    module.run(x=x)
    np.testing.assert_allclose(module.get_output(1).numpy(), want[1], rtol=1e-6)


def test_outputs_without_a_kernel_are_copied_into_the_caller_array():
    x = graph.var("x", (3, 4))
    y = graph.exp(x)
    lib = graph.build(graph.function([y, x, y]), target="sim")
    module = ZeroCopyGraphModule(lib)
    a = RNG.standard_normal((3, 4)).astype("float32")
    outs = [np.zeros((3, 4), "float32") for _ in range(3)]
    module.run_bound({"x": nd.from_dlpack(a)}, [nd.from_dlpack(o) for o in outs])
    np.testing.assert_allclose(outs[0], np.exp(a), rtol=1e-6)
    np.testing.assert_array_equal(outs[1], a)
    np.testing.assert_array_equal(outs[2], outs[0])


def test_bound_run_errors_name_the_problem():
    module = ZeroCopyGraphModule(graph.build(_net(), target="sim"))
    x = nd.from_dlpack(np.zeros((2, 3, 4), "float32"))
    outs = [nd.from_dlpack(np.zeros((6, 4), "float32")),
            nd.from_dlpack(np.zeros((2, 3, 4), "float32"))]
    with pytest.raises(GraphError, match=r"missing \['x'\]"):
        module.run_bound({}, outs)
    with pytest.raises(GraphError, match="needs 2 output arrays"):
        module.run_bound({"x": x}, outs[:1])
    with pytest.raises(GraphError, match=r"input 'x' must be \[2, 3, 4\] float32, got \[2, 3, 4\] "
                                         "float64"):
        module.run_bound({"x": nd.from_dlpack(np.zeros((2, 3, 4)))}, outs)
    with pytest.raises(GraphError, match=r"output 0 must be \[6, 4\]"):
        module.run_bound({"x": x}, outs[::-1])


def test_captured_graph_is_re_pointed_only_where_a_pointer_changed(monkeypatch):
    """The bookkeeping of the captured CUDA graph, with the driver replaced by a recorder:
    each kernel node that reads an input or writes an output gets the caller's pointer
    (temporaries keep theirs) before the launch on the caller's stream, and only when the
    pointer changed since the last launch."""
    pytest.importorskip("cuda.bindings.driver")
    from ptxforge.backend_ptx import cuda_driver
    from ptxforge.runtime.zero_copy import _PatchableGraph

    calls: list = []
    launched: list = []

    def fake_call(name, *args):
        calls.append((name, args))
        if name == "cuStreamGetCaptureInfo":
            return ("active", 1, "graph", [f"node{len(launched) - 1}"], [], 1)
        return None

    monkeypatch.setattr(cuda_driver, "call", fake_call)

    class Kernel:  # what a LoadedKernel offers a capture
        def __init__(self, name):
            self.name, self.function = name, 0x50 + len(name)  # a CUfunction handle
            self._grid, self._block, self._smem = (4, 1, 1), (128, 1, 1), 0

        def launch_ptrs(self, ptrs, stream=0, dependent=True):
            launched.append((self.name, list(ptrs)))

    class Step:  # a LoadedModule: a reads the input into a temporary, b writes the output
        _plan = [(Kernel("a"), [("p", 0), ("t", 0)]), (Kernel("b"), [("t", 0), ("p", 1)])]
        _temp_ptrs = [0x9000]

        def _param_ptrs(self, arrays):
            return [a.ptr for a in arrays]

    ns = types.SimpleNamespace
    own = [ns(ptr=0x100), ns(ptr=0x200)]
    plan = ns(slots=[ns(storage=0), ns(storage=1)],
              storages=[ns(kind="input"), ns(kind="output")])
    module = ns(lib=ns(plan=plan), _slots=own, _steps=[(Step(), own)], _step_slots=[[0, 1]],
                dependent_launch=False)
    graph = _PatchableGraph.capture(module)
    assert launched == [("a", [0x100, 0x9000]), ("b", [0x9000, 0x200])]
    assert [n.node for n in graph.nodes] == ["node0", "node1"]

    def launch(bound, stream):
        calls.clear()
        graph.launch(bound, stream)
        return [(args[1], args[2].gridDimX, args[2].blockDimX)
                for name, args in calls if name == "cuGraphExecKernelNodeSetParams"]

    x, y = ns(ptr=0x1000), ns(ptr=0x2000)
    patched = launch({0: x, 1: y}, 77)
    assert patched == [("node0", 4, 128), ("node1", 4, 128)]
    assert [list(n.values) for n in graph.nodes] == [[0x1000, 0x9000], [0x9000, 0x2000]]
    assert calls[-1] == ("cuGraphLaunch", (None, 77))
    assert launch({0: x, 1: y}, 77) == []  # same tensors: nothing to re-point
    patched = launch({0: ns(ptr=0x3000), 1: y}, 78)  # a new input only: its reader only
    assert [p[0] for p in patched] == ["node0"] and list(graph.nodes[0].values) == [0x3000,
                                                                                   0x9000]
    assert calls[-1] == ("cuGraphLaunch", (None, 78))


def test_a_failed_capture_is_said_once_and_the_kernels_launch_one_by_one(monkeypatch):
    from ptxforge.runtime import zero_copy

    def refuse(module):
        raise ValueError("the capture of k left 2 dependencies, expected its one kernel node")

    monkeypatch.setattr(zero_copy._PatchableGraph, "capture", classmethod(
        lambda cls, module: refuse(module)))
    module = ZeroCopyGraphModule(graph.build(_net(), target="sim"))
    with pytest.warns(zero_copy.CudaGraphFallbackWarning, match="2 dependencies"):
        module._capture_patchable()
    assert module._patched is None
    assert "2 dependencies" in module.bound_graph_error
