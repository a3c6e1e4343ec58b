"""PyTorch tensors shared with ptxforge without copies, on the CPU: DLPack both ways, the
data_ptr path the torch.compile backend takes (dtype, layout, gradient and device checks),
and the backend itself reading its inputs and writing its outputs in place (pointer
identity) on the simulator."""

from __future__ import annotations

import types

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from ptxforge import nd  # noqa: E402
from ptxforge.nd import DLPackError, wrap_tensor  # noqa: E402
from ptxforge.runtime.zero_copy import ZeroCopyGraphModule  # noqa: E402
from ptxforge.torch_backend import ptxforge_backend  # noqa: E402

pytestmark = pytest.mark.torch_frontend


def test_dlpack_both_ways_shares_memory():
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    arr = nd.from_dlpack(t)
    assert isinstance(arr, nd.SimArray) and arr.data_ptr == t.data_ptr()
    arr.host_view[0, 0] = -5.0
    assert t[0, 0].item() == -5.0
    back = torch.from_dlpack(nd.array(np.ones((2, 2), "int32")))
    assert back.dtype == torch.int32 and back.sum().item() == 4
    src = nd.array(np.zeros(3, "float32"))
    torch.from_dlpack(src).fill_(2.0)
    np.testing.assert_array_equal(src.numpy(), [2.0, 2.0, 2.0])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int64,
                                   torch.bool])
def test_wrap_tensor_is_zero_copy(dtype):
    t = torch.zeros(2, 3, dtype=dtype)
    arr = wrap_tensor(t)
    assert arr.dtype == str(dtype).removeprefix("torch.") and arr.shape == (2, 3)
    assert arr.data_ptr == t.data_ptr()
    assert arr.host_view.nbytes == t.numel() * t.element_size()


def test_wrap_tensor_checks():
    with pytest.raises(DLPackError, match=r"not contiguous.*contiguous\(\)"):
        wrap_tensor(torch.zeros(4, 6).t())
    with pytest.raises(DLPackError, match="complex"):
        wrap_tensor(torch.zeros(3, dtype=torch.complex64))
    with pytest.raises(DLPackError, match="float8"):
        wrap_tensor(torch.zeros(3).to(torch.float8_e4m3fn))
    with pytest.raises(DLPackError, match=r"requires grad.*detach"):
        wrap_tensor(torch.zeros(3, requires_grad=True))
    gpu_like = types.SimpleNamespace(device_id=0)
    with pytest.raises(DLPackError, match=r"input x is in host memory.*x\.cuda\(\)"):
        wrap_tensor(torch.zeros(3), gpu_like, "input x")
    with pytest.raises(DLPackError, match="in GPU memory"):
        wrap_tensor(types.SimpleNamespace(requires_grad=False, dtype=torch.float32, shape=(3,),
                                          stride=lambda: (1,),
                                          device=torch.device("cuda", 0)), nd.sim())


def _record_bound_runs(monkeypatch) -> list:
    runs: list = []
    original = ZeroCopyGraphModule.run_bound

    def record(self, inputs, outputs, stream=0):
        runs.append(({k: a.data_ptr for k, a in inputs.items()},
                     [a.data_ptr for a in outputs]))
        return original(self, inputs, outputs, stream)

    monkeypatch.setattr(ZeroCopyGraphModule, "run_bound", record)
    return runs


def test_backend_reads_inputs_and_writes_outputs_in_place(monkeypatch):
    runs = _record_bound_runs(monkeypatch)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(),
                                torch.nn.Linear(16, 4)).eval()
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=ptxforge_backend, options={"target": "sim"})
    x = torch.randn(3, 8)
    with torch.no_grad():
        got = compiled(x)
        again = compiled(x)
    torch.testing.assert_close(got, model(x), rtol=1e-5, atol=1e-5)
    assert torch.equal(got, again)
    assert len(runs) == 2
    (inputs, outputs) = runs[0]
    assert list(inputs.values()) == [x.data_ptr()]  # the caller's tensor itself
    assert outputs == [got.data_ptr()]  # the returned tensor is what the kernel wrote
    assert runs[1][1] == [again.data_ptr()] and again.data_ptr() != got.data_ptr()


def test_backend_makes_strided_inputs_compact(monkeypatch):
    """A transposed input cannot be shared as it is: it is made contiguous once (by
    PyTorch) and the result is still right."""
    runs = _record_bound_runs(monkeypatch)
    torch._dynamo.reset()
    compiled = torch.compile(lambda a: torch.relu(a) * 2, backend=ptxforge_backend,
                             options={"target": "sim"})
    x = torch.randn(5, 3).t()
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), torch.relu(x) * 2)
    assert runs and x.data_ptr() not in runs[-1][0].values()
