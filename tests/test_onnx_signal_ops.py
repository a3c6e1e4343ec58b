"""ONNX ``DFT`` and ``STFT`` (products with constant cosine and sine matrices) against numpy's
FFT and ONNX's reference evaluator, on the reference executor and a simulator build:
real and complex inputs, truncating and zero-padding ``dft_length``, one-sided, inverse and
inverse one-sided (irfft) transforms, windows."""

from __future__ import annotations

import numpy as np
import pytest

import ptxforge
from ptxforge import graph

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

F = TensorProto.FLOAT


def _run(model, feeds):
    net, params = graph.from_onnx(model, {k: v.shape for k, v in feeds.items()})
    ref = graph.run_graph(net, feeds, params)[0]
    lib = graph.build(net, "sim", params)
    m = graph.GraphModule(lib, ptxforge.sim())
    m.set_input(**feeds)
    m.run()
    return ref, m.get_output(0).numpy(), net


def _dft_model(shape, out_shape, n=None, **attrs):
    inits = [helper.make_tensor("n", TensorProto.INT64, [], [n])] if n else []
    node = helper.make_node("DFT", ["x", "n" if n else ""], ["y"], **attrs)
    g = helper.make_graph([node], "dft", [helper.make_tensor_value_info("x", F, shape)],
                          [helper.make_tensor_value_info("y", F, out_shape)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])


def _complex(y: np.ndarray) -> np.ndarray:
    return y[..., 0] + 1j * y[..., 1]


@pytest.mark.parametrize("n,onesided", [(None, False), (5, False), (11, True)])
def test_forward_dft_of_a_real_signal(n, onesided):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 8, 3, 1)).astype(np.float32)
    size = n or 8
    out = size // 2 + 1 if onesided else size
    model = _dft_model([2, 8, 3, 1], [2, out, 3, 2], n, axis=1, onesided=int(onesided))
    want = np.fft.fft(x[..., 0].astype(np.float64), n=size, axis=1)[:, :out]
    for got in _run(model, {"x": x})[:2]:
        np.testing.assert_allclose(_complex(got), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("n", [6, 7])
def test_inverse_dfts_of_a_complex_signal(n):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 6, 2)).astype(np.float32)
    z = _complex(x.astype(np.float64))
    model = _dft_model([3, 6, 2], [3, n, 2], n, axis=1, inverse=1)
    want = np.fft.ifft(z, n=n, axis=1)
    for got in _run(model, {"x": x})[:2]:
        np.testing.assert_allclose(_complex(got), want, rtol=1e-5, atol=1e-6)
    # irfft: n // 2 + 1 frequencies in (more are dropped), n real values out
    model = _dft_model([3, 6, 2], [3, n, 1], n, axis=1, inverse=1, onesided=1)
    want = np.fft.irfft(z, n=n, axis=1)
    for got in _run(model, {"x": x})[:2]:
        np.testing.assert_allclose(got[..., 0], want, rtol=1e-5, atol=1e-6)


def test_stft_with_a_window_matches_onnx():
    rng = np.random.default_rng(2)
    signal = rng.standard_normal((2, 40, 1)).astype(np.float32)
    window = np.hanning(16).astype(np.float32)
    inits = [helper.make_tensor("step", TensorProto.INT64, [], [6]),
             helper.make_tensor("w", F, [16], window.tolist())]
    node = helper.make_node("STFT", ["x", "step", "w"], ["y"])
    frames = (40 - 16) // 6 + 1
    g = helper.make_graph([node], "stft", [helper.make_tensor_value_info("x", F, [2, 40, 1])],
                          [helper.make_tensor_value_info("y", F, [2, frames, 9, 2])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    (want,) = ReferenceEvaluator(model).run(None, {"x": signal})
    ref, got, net = _run(model, {"x": signal})
    for y in (ref, got):
        np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)
    ptx = graph.build(net, "cuda -arch=sm_80").get_source("ptx")
    assert ".f64" in ptx  # the products run in float64
