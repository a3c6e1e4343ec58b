"""The torch.compile backend on the CPU simulator: partitions compiled by ptxforge against
PyTorch eager, unsupported nodes left to PyTorch, fullgraph errors, options, recompiles."""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")
from ptxforge.torch_backend import (  # noqa: E402
    BackendError,
    BackendOptions,
    UnsupportedOperatorsWarning,
    ptxforge_backend,
)

pytestmark = pytest.mark.torch_frontend


class Block(torch.nn.Module):
    def __init__(self, odd_op=None):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.fc = torch.nn.Linear(4, 6)
        self.odd_op = odd_op

    def forward(self, x):
        y = torch.relu(self.conv(x)).mean((2, 3))
        if self.odd_op is not None:
            y = self.odd_op(y)
        return torch.softmax(self.fc(y), -1)


def _compile(model, **kw):
    torch._dynamo.reset()
    return torch.compile(model, backend=ptxforge_backend, options={"target": "sim"}, **kw)


def test_compiled_matches_eager_and_repeats_bit_identically():
    torch.manual_seed(0)
    model = Block().eval()
    x = torch.randn(2, 3, 6, 6)
    compiled = _compile(model)
    with torch.no_grad():
        a = compiled(x)
        b = compiled(x)
        want = model(x)
    torch.testing.assert_close(a, want, rtol=1e-5, atol=1e-5)
    assert torch.equal(a, b)


def test_unsupported_nodes_stay_with_pytorch_and_are_listed():
    torch.manual_seed(0)
    model = Block(odd_op=lambda y: torch.nonzero(y > 10).float().sum() + y).eval()
    x = torch.randn(2, 3, 6, 6)
    with warnings.catch_warnings(record=True) as seen, torch.no_grad():
        warnings.simplefilter("always")
        got = _compile(model)(x)
    torch.testing.assert_close(got, model(x), rtol=1e-5, atol=1e-5)
    text = " ".join(str(w.message) for w in seen if w.category is UnsupportedOperatorsWarning)
    assert "nonzero" in text or "aten" in text


def test_fullgraph_with_an_unsupported_operator_names_it():
    model = Block(odd_op=lambda y: torch.special.bessel_j0(y)).eval()
    with pytest.raises(Exception, match="bessel_j0"), torch.no_grad():
        _compile(model, fullgraph=True)(torch.randn(1, 3, 6, 6))


def test_new_shapes_recompile():
    torch.manual_seed(0)
    model = Block().eval()
    compiled = _compile(model)
    with torch.no_grad():
        for batch in (1, 3):
            x = torch.randn(batch, 3, 6, 6)
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-5)


def test_options_are_checked():
    assert BackendOptions.from_dict({"precision": "float16"}).precision == "float16"
    with pytest.raises(BackendError, match="unknown ptxforge option"):
        BackendOptions.from_dict({"precison": "float16"})
    with pytest.raises(BackendError, match="precision must be one of"):
        BackendOptions.from_dict({"precision": "int8"})
    with pytest.raises(BackendError, match="needs a log"):
        BackendOptions.from_dict({"trials": 10})


def test_entry_point_is_declared():
    import importlib
    import pathlib
    import re

    text = (pathlib.Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
    section = text.split("[project.entry-points.torch_dynamo_backends]", 1)[1]
    target = re.search(r'^ptxforge\s*=\s*"([^"]+)"', section, re.M).group(1)
    module, _, attr = target.partition(":")
    assert callable(getattr(importlib.import_module(module), attr))


def test_weights_are_bound_once_and_batch_norm_stays_compiled(monkeypatch):
    """Parameters and buffers are bound as weights at the first call (folded by the graph
    passes); later calls pass only the activations, and batch norm (whose saved statistics
    are empty tensors nobody reads) stays in the compiled partition."""
    from ptxforge.runtime.zero_copy import ZeroCopyGraphModule

    passed: list[str] = []
    original = ZeroCopyGraphModule.run_bound

    def record(self, inputs, outputs, stream=0):
        passed.extend(inputs)
        return original(self, inputs, outputs, stream)

    monkeypatch.setattr(ZeroCopyGraphModule, "run_bound", record)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.BatchNorm2d(4),
                                torch.nn.ReLU(), torch.nn.Flatten(),
                                torch.nn.Linear(4 * 6 * 6, 5)).eval()
    x = torch.randn(2, 3, 6, 6)
    compiled = _compile(model)
    with warnings.catch_warnings(record=True) as seen, torch.no_grad():
        warnings.simplefilter("always")
        got = compiled(x)
        compiled(x)
    torch.testing.assert_close(got, model(x), rtol=1e-5, atol=1e-5)
    assert len(passed) == 2, f"one activation per call, got {passed}"
    assert not [w for w in seen if w.category is UnsupportedOperatorsWarning]


def test_fullgraph_error_says_why_a_node_cannot_run():
    """An operator on complex tensors is named with the reason (the dtype), not only the
    operator."""
    with pytest.raises(Exception, match=r"complex tensors are not supported: complex64"), \
            torch.no_grad():
        _compile(lambda x: torch.view_as_real(x * 2) + 1, fullgraph=True)(
            torch.ones(3, dtype=torch.complex64))


def test_cpu_tensors_given_to_a_cuda_build_are_refused_before_any_launch():
    """The check a CUDA build makes on every call, run without a GPU: the partition's
    module is never reached."""
    from ptxforge import graph
    from ptxforge.torch_partition import CompiledPartition

    net = graph.function(graph.exp(graph.var("x", (3,))))
    part = CompiledPartition(net, "cuda", BackendOptions(target="cuda"))
    part.module = object()  # as if built; a launch would fail on it
    part.used, part.out_types = [True], [net.outputs[0].ty]
    with pytest.raises(BackendError, match=r"input x is on cpu, but this graph was compiled "
                                           r"for the GPU.*x\.cuda\(\)"):
        part(torch.zeros(3))


def test_float8_tensors_are_named_as_the_cause():
    with pytest.raises(Exception, match=r"float8 tensors are not supported yet: "
                                        r"float8_e4m3fn"), torch.no_grad():
        _compile(lambda x: x.to(torch.float32) * 2, fullgraph=True)(
            torch.ones(3).to(torch.float8_e4m3fn))


def test_cpu_tensors_given_to_a_cuda_build_through_torch_compile():
    """options={'target': 'cuda'} with CPU tensors: refused at the first call, before the
    build (so without a GPU too), naming the tensor and what to do."""
    torch._dynamo.reset()
    compiled = torch.compile(Block().eval(), backend=ptxforge_backend,
                             options={"target": "cuda"})
    with pytest.raises(BackendError, match=r"is on cpu, but this graph was compiled for the "
                                           r"GPU \(cuda\); move the model and its inputs to "
                                           r"CUDA"), torch.no_grad():
        compiled(torch.randn(1, 3, 6, 6))


def test_tuning_a_model_torch_export_cannot_trace_is_a_clear_error(tmp_path):
    from ptxforge.graph.frontend_torch import TorchImportError
    from ptxforge.torch_backend import tune_torch

    class DataDependent(torch.nn.Module):
        def forward(self, x):
            return x if x.sum() > 0 else -x  # control flow on a value

    with pytest.raises(TorchImportError, match=r"torch.export cannot trace DataDependent"):
        tune_torch(DataDependent(), (torch.ones(3),), trials=1, log=str(tmp_path / "l.json"),
                   target="sim")
    assert not (tmp_path / "l.json").exists()


def test_report_option_prints_what_each_partition_built(capsys):
    """``report=True`` prints, after a partition's first call, its functions tuned k of n
    (no log here: every task falls back to the default schedule, each named), launches per
    run and the CUDA graph state; later calls print nothing."""
    torch.manual_seed(0)
    model = Block().eval()
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=ptxforge_backend,
                             options={"target": "sim", "report": True})
    x = torch.randn(2, 3, 6, 6)
    with torch.no_grad():
        compiled(x)
        first = capsys.readouterr().out
        compiled(x)
        assert capsys.readouterr().out == ""
    assert "ptxforge partition" in first and "CUDA graph: simulator" in first
    assert " 0 of " in first and "default schedule (no record): vm_mod_fused" in first
    with pytest.raises(BackendError, match="report must be"):
        BackendOptions.from_dict({"report": "yes"})
