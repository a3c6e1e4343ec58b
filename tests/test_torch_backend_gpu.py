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
