"""The torch.compile backend on a GPU: CUDA tensors in and out, PyTorch's stream, the CUDA
graph replayed on later calls, and CPU tensors refused."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.gpu, pytest.mark.torch_frontend]


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),
                               torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                               torch.nn.Linear(8, 4)).eval()


@pytest.fixture
def cuda():
    if not torch.cuda.is_available():
        pytest.skip("PyTorch has no CUDA here")
    torch._dynamo.reset()


def test_cuda_tensors_in_and_out(cuda):
    from ptxforge.torch_backend import ptxforge_backend

    model = _model().cuda()
    x = torch.randn(2, 3, 16, 16, device="cuda")
    compiled = torch.compile(model, backend=ptxforge_backend, options={"target": "cuda"})
    with torch.no_grad():
        a = compiled(x)
        b = compiled(x)  # the captured CUDA graph replays
        want = model(x)
    assert a.is_cuda and a.dtype == want.dtype
    torch.testing.assert_close(a, want, rtol=1e-4, atol=1e-4)
    assert torch.equal(a, b)


def test_side_stream(cuda):
    from ptxforge.torch_backend import ptxforge_backend

    model = _model().cuda()
    compiled = torch.compile(model, backend=ptxforge_backend, options={"target": "cuda"})
    s = torch.cuda.Stream()
    with torch.no_grad(), torch.cuda.stream(s):
        x = torch.randn(2, 3, 16, 16, device="cuda")
        got = compiled(x)
    s.synchronize()
    torch.testing.assert_close(got, model(x), rtol=1e-4, atol=1e-4)


def test_float16(cuda):
    from ptxforge.torch_backend import ptxforge_backend

    model = _model().cuda().half()
    x = torch.randn(1, 3, 16, 16, device="cuda").half()
    compiled = torch.compile(model, backend=ptxforge_backend,
                             options={"target": "cuda", "precision": "float16"})
    with torch.no_grad():
        torch.testing.assert_close(compiled(x).float(), model(x).float(), rtol=2e-2, atol=2e-2)


def test_cpu_tensors_to_a_cuda_build_are_refused(cuda):
    from ptxforge.torch_backend import ptxforge_backend

    compiled = torch.compile(_model(), backend=ptxforge_backend, options={"target": "cuda"})
    with pytest.raises(Exception, match="compiled for the GPU"), torch.no_grad():
        compiled(torch.randn(1, 3, 16, 16))


def _record_bound_runs(monkeypatch) -> list:
    from ptxforge.runtime.zero_copy import ZeroCopyGraphModule

    runs: list = []
    original = ZeroCopyGraphModule.run_bound

    def record(self, inputs, outputs, stream=0):
        runs.append(({k: a.ptr for k, a in inputs.items()}, [a.ptr for a in outputs], stream,
                     self))
        return original(self, inputs, outputs, stream)

    # the first call runs through run_bound, later ones through run_pointers (bare pointers)
    original_ptrs = ZeroCopyGraphModule.run_pointers

    def record_ptrs(self, binding, inputs, outputs, stream=0):
        runs.append((dict(zip(binding.inputs, inputs)), list(outputs), stream, self))
        return original_ptrs(self, binding, inputs, outputs, stream)

    monkeypatch.setattr(ZeroCopyGraphModule, "run_bound", record)
    monkeypatch.setattr(ZeroCopyGraphModule, "run_pointers", record_ptrs)
    return runs


@pytest.mark.parametrize("cuda_graph", [True, False])
def test_zero_copy_on_the_current_stream(cuda, monkeypatch, cuda_graph):
    """Inputs are read where PyTorch holds them, outputs written into the tensors returned,
    kernels launched on PyTorch's current stream (a side stream here), and later calls
    allocate nothing but their outputs; the captured graph is re-pointed per call."""
    from ptxforge.backend_ptx import ndarray
    from ptxforge.torch_backend import ptxforge_backend

    runs = _record_bound_runs(monkeypatch)
    model = _model().cuda()
    compiled = torch.compile(model, backend=ptxforge_backend,
                             options={"target": "cuda", "cuda_graph": cuda_graph})
    xs = [torch.randn(2, 3, 16, 16, device="cuda") for _ in range(3)]
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.no_grad(), torch.cuda.stream(s):
        compiled(xs[0])  # builds, captures
        allocs = []
        original = ndarray.call  # every device allocation goes through ndarray.empty

        def counting(name, *args):
            if name == "cuMemAlloc":
                allocs.append(args)
            return original(name, *args)

        monkeypatch.setattr(ndarray, "call", counting)
        before = torch.cuda.memory_allocated()
        outs = [compiled(x) for x in xs]  # alternating tensors: the graph is re-pointed
        grown = torch.cuda.memory_allocated() - before
    s.synchronize()
    with torch.no_grad():
        for x, out in zip(xs, outs):
            torch.testing.assert_close(out, model(x), rtol=1e-4, atol=1e-4)
    assert not allocs, "no device allocation by ptxforge after the first call"
    assert grown == sum(-(-o.numel() * o.element_size() // 512) * 512 for o in outs)
    assert len(runs) == 1 + len(xs)
    for (inputs, outputs, stream, _), x, out in zip(runs[1:], xs, outs):
        assert list(inputs.values()) == [x.data_ptr()]
        assert outputs == [out.data_ptr()]
        assert stream == s.cuda_stream
    module = runs[-1][3]
    if cuda_graph:
        assert module._patched is not None, module.bound_graph_error


def test_report_says_the_cuda_graph_was_captured_and_calls_are_bit_identical(cuda):
    """The report after the first call: the CUDA graph captured (else it names why); later
    calls (the pointer path) give the same bits."""
    from ptxforge.torch_backend import ptxforge_backend

    reports = []
    model = _model().cuda().half()
    compiled = torch.compile(model, backend=ptxforge_backend, dynamic=False, options={
        "target": "cuda", "precision": "float16", "report": reports.append})
    x = torch.randn(2, 3, 16, 16, device="cuda").half()
    with torch.no_grad():
        first = compiled(x)
        again = [compiled(x) for _ in range(3)]
    torch.cuda.synchronize()
    (report,) = reports
    assert report.cuda_graph == "captured", report.cuda_graph
    assert report.launches >= report.steps >= 1
    for out in again:
        assert torch.equal(out, first)
