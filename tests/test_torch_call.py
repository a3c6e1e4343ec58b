"""The per-call path of the backend's compiled partitions on the GPU, checked on the CPU:
the pointer binding worked out once per input order (``ZeroCopyGraphModule.pointer_binding``)
and ``torch_call.GpuCall`` (pointers checked and handed over, outputs allocated by PyTorch,
strided inputs made compact, wrong inputs refused), with the module's launch stubbed; and the
partition report (``torch_report``) of a build."""

from __future__ import annotations

import types

import pytest

torch = pytest.importorskip("torch")
from ptxforge import graph  # noqa: E402
from ptxforge.graph import nn  # noqa: E402
from ptxforge.runtime import GraphError  # noqa: E402
from ptxforge.runtime.zero_copy import ZeroCopyGraphModule  # noqa: E402
from ptxforge.torch_call import GpuCall  # noqa: E402
from ptxforge.torch_options import BackendError  # noqa: E402
from ptxforge.torch_report import COPY, DEFAULT, TUNED, function_reports  # noqa: E402


def _lib():
    """Outputs: a softmax of ``x + y`` (a kernel writes it), ``y`` itself (copied) and the
    softmax again (the same output twice: copied)."""
    x, y = graph.var("x", (3, 4)), graph.var("y", (3, 4))
    s = nn.softmax(graph.add(x, y))
    return graph.build(graph.function([s, y, s]), target="sim")


def test_pointer_binding_maps_inputs_in_the_callers_order_and_copies_what_no_kernel_writes():
    module = ZeroCopyGraphModule(_lib())
    plan = module.lib.plan
    b = module.pointer_binding(["y", "x"])
    assert b.inputs == (plan.slots[plan.inputs["y"]].storage,
                        plan.slots[plan.inputs["x"]].storage)
    assert b.outputs[0] is not None and b.outputs[1:] == (None, None)
    assert [k for k, _ in b.copies] == [1, 2]
    with pytest.raises(GraphError, match="exactly the inputs"):
        module.pointer_binding(["x"])
    with pytest.raises(GraphError, match="GPU modules"):
        module.run_pointers(b, [0, 0], [0, 0, 0])


class _Module:
    """What GpuCall uses of a GPU module, with ``run_pointers`` recorded."""

    def __init__(self, lib):
        real = ZeroCopyGraphModule(lib)
        self.lib = lib
        self.pointer_binding = real.pointer_binding
        self.device = types.SimpleNamespace(device_id=0)
        self.runs: list = []

    def run_pointers(self, binding, inputs, outputs, stream):
        self.runs.append((binding, list(inputs), list(outputs), stream))


def _call(lib, names, used, bad=None):
    module = _Module(lib)
    call = GpuCall(module, names, used, bad or (lambda tensors: None))
    # CPU tensors stand for CUDA ones: the checks and the pointers are the same
    call.device_type, call.device, call.stream = "cpu", torch.device("cpu"), lambda i: 77
    return call, module


def test_gpu_call_hands_over_the_tensors_pointers_and_pytorchs_outputs():
    lib = _lib()
    call, module = _call(lib, ["w", "x", "y"], [False, True, True])
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    outs = call([torch.zeros(1), x, y])  # the first tensor is a weight bound at the build
    (binding, ins, outp, stream), = module.runs
    assert ins == [x.data_ptr(), y.data_ptr()] and stream == 77
    assert binding == module.pointer_binding(["x", "y"])
    assert [tuple(o.shape) for o in outs] == [(3, 4)] * 3
    assert all(o.dtype == torch.float32 for o in outs)
    assert outp == [o.data_ptr() for o in outs]


def test_gpu_call_makes_a_strided_input_compact_and_refuses_wrong_ones():
    call, module = _call(_lib(), ["x", "y"], [True, True])
    x = torch.randn(4, 3).t()  # a transposed view: strided
    y = torch.randn(3, 4)
    call([x, y])
    ptr = module.runs[-1][1][0]
    assert ptr not in (x.data_ptr(), y.data_ptr())  # a compact copy of x was passed
    with pytest.raises(BackendError, match=r"input y is \[3, 5\] torch.float32, but this "
                                           r"graph was compiled for \[3, 4\] torch.float32"):
        call([x, torch.randn(3, 5)])
    with pytest.raises(BackendError, match="torch.float16"):
        call([x, y.half()])


def test_gpu_call_refuses_tensors_on_another_device_before_any_launch():
    seen = []

    def bad(tensors):
        seen.append(len(tensors))
        raise BackendError("input x is on cpu, but this graph was compiled for the GPU")

    module = _Module(_lib())
    call = GpuCall(module, ["x", "y"], [True, True], bad)
    with pytest.raises(BackendError, match="compiled for the GPU"):
        call([torch.randn(3, 4), torch.randn(3, 4)])
    assert seen == [2] and not module.runs


def test_function_reports_tell_tuned_default_and_copies_apart():
    """A function with a record is tuned, one without is a fallback to the default
    schedule, and a reshape the plan runs as a copy (an output of a reshape of an input) is
    neither: tuning makes no task of it."""
    from ptxforge.graph.build_module import default_schedule_for

    x = graph.var("x", (2, 3, 4))
    net = graph.function([nn.softmax(x), graph.exp(x), graph.reshape(x, (6, 4))])

    def schedule_fn(func):  # a record for the softmax only
        return default_schedule_for(func) if "softmax" in func.name else None

    with pytest.warns(graph.NoTuningRecordWarning):
        lib = graph.build(net, target="sim", schedule_fn=schedule_fn)
    kinds = {r.name: r.schedule for r in function_reports(lib)}
    assert sorted(kinds.values()) == [COPY, DEFAULT, TUNED], kinds
    assert kinds[next(n for n in kinds if "softmax" in n)] == TUNED
    assert kinds[next(n for n in kinds if "exp" in n)] == DEFAULT
    reports = function_reports(lib)
    assert all(r.calls == 1 and r.kernels >= 1 for r in reports)


def _gpu_like(lib, patched):
    """A ZeroCopyGraphModule as on a GPU, its device and launches recorded (no driver)."""
    module = ZeroCopyGraphModule(lib)  # the simulator's buffers stand for the GPU's
    module.is_sim = False
    module.device = types.SimpleNamespace(activate=lambda: None)
    module.use_cuda_graph = patched is not None
    module._patched = patched
    return module


def test_run_pointers_re_points_the_captured_graph_and_copies_what_no_kernel_writes(
        monkeypatch):
    from ptxforge.backend_ptx import cuda_driver

    copies = []
    monkeypatch.setattr(cuda_driver, "call", lambda name, *args: copies.append((name, args)))
    launched = []
    patched = types.SimpleNamespace(launch_pointers=lambda ptr_of, stream: launched.append(
        (dict(ptr_of), stream)))
    module = _gpu_like(_lib(), patched)
    b = module.pointer_binding(["x", "y"])
    module.run_pointers(b, [0x1000, 0x2000], [0x3000, 0x4000, 0x5000], stream=9)
    (ptr_of, stream), = launched
    assert stream == 9
    assert ptr_of == {b.inputs[0]: 0x1000, b.inputs[1]: 0x2000, b.outputs[0]: 0x3000}
    plan = module.lib.plan
    nbytes = plan.slots[plan.outputs[1]].ty.nbytes
    # after the run, on the same stream: output 1 (y itself) from the caller's y, output 2
    # (the softmax again) from the caller's output 0, which the kernel wrote
    assert copies == [("cuMemcpyDtoDAsync", (0x4000, 0x2000, nbytes, 9)),
                      ("cuMemcpyDtoDAsync", (0x5000, 0x3000, nbytes, 9))]


def test_run_pointers_without_a_graph_launches_each_step_on_the_callers_memory(monkeypatch):
    from ptxforge.backend_ptx import cuda_driver

    monkeypatch.setattr(cuda_driver, "call", lambda name, *args: None)  # the output copies
    launched = []

    class Step:
        def __call__(self, *arrays, stream=0, dependent=True):
            launched.append(([getattr(a, "ptr", None) for a in arrays], stream))

    module = _gpu_like(_lib(), None)
    module._steps = [(Step(), arrays) for _, arrays in module._steps]
    plan = module.lib.plan

    def slot_array(k, bound):  # GPU arrays need the driver: the bound pointer, or none
        ext = bound.get(plan.slots[k].storage)
        return types.SimpleNamespace(ptr=None if ext is None else ext.ptr)

    module._slot_array = slot_array
    b = module.pointer_binding(["x", "y"])
    module.run_pointers(b, [0x1000, 0x2000], [0x3000, 0x4000, 0x5000], stream=4)
    assert launched and all(stream == 4 for _, stream in launched)
    ptrs = {p for arrays, _ in launched for p in arrays}
    assert {0x1000, 0x2000, 0x3000} <= ptrs  # read and written where the caller holds them
    assert not ptrs & {0x4000, 0x5000}  # copied outputs are no kernel's arguments
