"""ONNX ``RNN``, ``GRU`` and ``LSTM`` (unrolled over the sequence) against ONNX's reference
evaluator, on the reference executor and a simulator build: both directions, batch-first
layout, initial states, peepholes, GRU's linear_before_reset, non-default activations."""

from __future__ import annotations

import numpy as np
import pytest

import ptxforge
from ptxforge import graph

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

F = TensorProto.FLOAT


def _model(op, feeds, outs, **attrs):
    names = [k if k in feeds else "" for k in ("X", "W", "R", "B", "lens", "h0", "c0", "P")]
    while names and not names[-1]:
        names.pop()
    node = helper.make_node(op, names, [o for o, _ in outs], **attrs)
    g = helper.make_graph(
        [node], op, [helper.make_tensor_value_info(k, TensorProto.INT32 if k == "lens" else F,
                                                   list(v.shape)) for k, v in feeds.items()],
        [helper.make_tensor_value_info(o, F, s) for o, s in outs])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)])


def _check(model, feeds, compiled=True):
    want = ReferenceEvaluator(model).run(None, feeds)
    net, params = graph.from_onnx(model, {k: v.shape for k, v in feeds.items()})
    for got, w in zip(graph.run_graph(net, feeds, params), want):
        np.testing.assert_allclose(got, w, 1e-5, 1e-5)
    if not compiled:
        return
    lib = graph.build(net, "sim", params)
    m = graph.GraphModule(lib, ptxforge.sim())
    m.set_input(**{k: v for k, v in feeds.items() if k in lib.plan.inputs})
    m.run()
    for k, w in enumerate(want):
        np.testing.assert_allclose(m.get_output(k).numpy(), w, 1e-5, 1e-5)


def _feeds(gates, dirs, seq=3, batch=2, inp=4, hidden=5, layout=0, c0=False, peep=False):
    rng = np.random.default_rng(gates * 10 + dirs)
    x_shape = (batch, seq, inp) if layout else (seq, batch, inp)
    s_shape = (batch, dirs, hidden) if layout else (dirs, batch, hidden)
    feeds = {"X": rng.standard_normal(x_shape),
             "W": rng.standard_normal((dirs, gates * hidden, inp)) * 0.5,
             "R": rng.standard_normal((dirs, gates * hidden, hidden)) * 0.5,
             "B": rng.standard_normal((dirs, 2 * gates * hidden)) * 0.3,
             "h0": rng.standard_normal(s_shape)}
    if c0:
        feeds["c0"] = rng.standard_normal(s_shape)
    if peep:
        feeds["P"] = rng.standard_normal((dirs, 3 * hidden)) * 0.3
    return {k: v.astype(np.float32) for k, v in feeds.items()}


def test_lstm_bidirectional_batch_first_with_peepholes():
    feeds = _feeds(4, 2, layout=1, c0=True, peep=True)
    outs = [("Y", [2, 3, 2, 5]), ("Y_h", [2, 2, 5]), ("Y_c", [2, 2, 5])]
    _check(_model("LSTM", feeds, outs, hidden_size=5, direction="bidirectional", layout=1),
           feeds)


def test_gru_reverse_linear_before_reset():
    feeds = _feeds(3, 1)
    outs = [("Y", [3, 1, 2, 5]), ("Y_h", [1, 2, 5])]
    _check(_model("GRU", feeds, outs, hidden_size=5, direction="reverse",
                  linear_before_reset=1), feeds)


@pytest.mark.parametrize("act,alpha,beta,fn", [
    ("Relu", None, None, lambda v: np.maximum(v, 0)),
    ("HardSigmoid", 0.3, 0.4, lambda v: np.clip(0.3 * v + 0.4, 0, 1)),
])
def test_rnn_activations_against_the_spec(act, alpha, beta, fn):
    """Activations ONNX's reference evaluator lacks, against the spec's step
    ``H = f(X W^T + H R^T + Wb + Rb)`` in numpy."""
    feeds = _feeds(1, 1)
    attrs = {"activations": [act]}
    if alpha is not None:
        attrs.update(activation_alpha=[alpha], activation_beta=[beta])
    model = _model("RNN", feeds, [("Y", [3, 1, 2, 5]), ("Y_h", [1, 2, 5])], hidden_size=5,
                   **attrs)
    w, r, b, h = feeds["W"][0], feeds["R"][0], feeds["B"][0], feeds["h0"][0]
    ys = []
    for t in range(3):
        h = fn(feeds["X"][t] @ w.T + h @ r.T + b[:5] + b[5:])
        ys.append(h)
    want = [np.stack(ys)[:, None], h[None]]
    net, params = graph.from_onnx(model, {k: v.shape for k, v in feeds.items()})
    lib = graph.build(net, "sim", params)
    m = graph.GraphModule(lib, ptxforge.sim())
    m.set_input(**feeds)
    m.run()
    for k, wv in enumerate(want):
        np.testing.assert_allclose(graph.run_graph(net, feeds, params)[k], wv, 1e-5, 1e-5)
        np.testing.assert_allclose(m.get_output(k).numpy(), wv, 1e-5, 1e-5)


def test_shorter_sequences_are_refused():
    feeds = _feeds(1, 1)
    feeds["lens"] = np.array([3, 2], np.int32)
    model = _model("RNN", feeds, [("Y", [3, 1, 2, 5])], hidden_size=5)
    with pytest.raises(graph.GraphError, match="shorter than the sequence"):
        graph.from_onnx(model, {k: v.shape for k, v in feeds.items() if k != "lens"},
                        constants={"lens": feeds["lens"]})
