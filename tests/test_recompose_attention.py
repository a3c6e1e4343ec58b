"""``recompose_attention``: the attention ONNX exports spell out becomes one ``nn.attention``.

Small ONNX graphs are written here with ``onnx.helper`` in the node sequences PyTorch's
exporters give (copied from real exports of Hugging Face models: the dynamo exporter's
decomposed SDPA with the scale split between q and k and a NaN guard, the TorchScript
exporter's eager attention with the key transposed by ``[0, 2, 3, 1]`` and the scores
divided, Llama's grouped-query heads repeated by Expand, causal masks from Trilu), and the
real exports of ``tests/data/corpus`` (eager attention, both exporters) are reused. Each
must give one ``nn.attention`` per layer whose graph matches onnxruntime on the reference
executor and on simulator builds, decomposed (float32) and fused (float16); the forms that
are no attention (softmax on another axis, a scale that is no scalar constant, a mask after
the softmax or before the scale, transposed probabilities, a data mask of minus infinity
without a NaN guard) must be left alone.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

import ptxforge
from ptxforge import graph
from ptxforge.graph.passes import (
    EliminateCommonSubexpr,
    FoldConstant,
    GraphPassContext,
    RecomposeAttention,
    SimplifyInference,
    canonicalization_pipeline,
)

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

B, H, L, E = 2, 2, 8, 16
D = H * E
FMIN = float(np.finfo(np.float32).min)
CORPUS = Path(__file__).resolve().parent / "data" / "corpus"


# -- graphs in the exporters' forms ------------------------------------------------------------


class Net:
    """An ONNX graph under construction: nodes, initializers, fresh names."""

    def __init__(self, seed: int = 0):
        self.nodes: list = []
        self.inits: list = []
        self.rng = np.random.default_rng(seed)
        self.k = 0

    def name(self, hint: str) -> str:
        self.k += 1
        return f"{hint}_{self.k}"

    def const(self, value, hint: str = "c") -> str:
        n = self.name(hint)
        self.inits.append(numpy_helper.from_array(np.asarray(value), n))
        return n

    def op(self, op_type: str, inputs: list, **attrs) -> str:
        out = self.name(op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [out], **attrs))
        return out

    def weight(self, rows: int, cols: int) -> str:
        return self.const((self.rng.standard_normal((rows, cols)) * 0.3).astype(np.float32), "w")

    def model(self, inputs: list, out: str, out_shape: list, opset: int):
        self.nodes.append(helper.make_node("Identity", [out], ["out"]))
        g = helper.make_graph(self.nodes, "attention", inputs,
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, out_shape)],
                              self.inits)
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _heads(n: Net, x: str, heads: int, perm=(0, 2, 1, 3)) -> str:
    """A projection of ``x`` [B, L, D] split into ``heads`` and transposed by ``perm``."""
    y = n.op("MatMul", [x, n.weight(D, heads * E)])
    y = n.op("Reshape", [y, n.const(np.array([B, L, -1, E], np.int64))])
    return n.op("Transpose", [y], perm=list(perm))


def _merge(n: Net, ctx: str) -> str:
    t = n.op("Transpose", [ctx], perm=[0, 2, 1, 3])
    return n.op("Reshape", [t, n.const(np.array([B, L, D], np.int64))])


def _bool_mask(n: Net, mask: str) -> str:
    """``attention_mask`` [B, S] (int64) as bool [B, 1, 1, S]."""
    m = n.op("Cast", [mask], to=TensorProto.BOOL)
    return n.op("Reshape", [m, n.const(np.array([B, 1, 1, L], np.int64))])


def _causal_bool(n: Net) -> str:
    """The lower triangle [L, L] as the exporters compute it (Trilu of ones), bool."""
    ones = n.const(np.ones((L, L), np.float32))
    tri = n.op("Trilu", [ones], upper=0)
    return n.op("Cast", [tri], to=TensorProto.BOOL)


def sdpa_dynamo(softmax_axis: int = -1, mask_after_softmax: bool = False,
                scale_after_mask: bool = False, scale_tensor: bool = False,
                transposed_probs: bool = False, guard: bool = True,
                groups: int = 1, causal: bool = False):
    """The dynamo exporter's decomposed SDPA (opset 18): sqrt(scale) on q and on k^T,
    the bool mask as ``Where(mask, 0, -inf)``, a NaN guard; ``groups`` > 1: grouped-query
    key heads repeated by Expand (Llama); ``causal``: the causal mask instead."""
    n = Net()
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [B, L, D])
    mask = helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [B, L])
    hk = H // groups
    q = _heads(n, "x", H)
    k = _heads(n, "x", hk)
    v = _heads(n, "x", hk)
    if groups > 1:
        def repeat(t):
            t = n.op("Reshape", [t, n.const(np.array([B, hk, 1, L, E], np.int64))])
            t = n.op("Expand", [t, n.const(np.array([B, hk, groups, L, E], np.int64))])
            return n.op("Reshape", [t, n.const(np.array([B, H, L, E], np.int64))])
        k, v = repeat(k), repeat(v)
    k3 = n.op("Reshape", [k, n.const(np.array([B * H, L, E], np.int64))])
    kt = n.op("Transpose", [k3], perm=[0, 2, 1])
    kt = n.op("Reshape", [kt, n.const(np.array([B, H, E, L], np.int64))])
    half = np.float32(np.sqrt(1.0 / np.sqrt(E)))
    qs = n.op("Mul", [q, n.const(half)])
    ks = n.op("Mul", [kt, n.const(half)])
    if causal:
        add_mask = n.op("Where", [_causal_bool(n), n.const(np.float32(0)),
                                  n.const(np.float32(-np.inf))])
    else:
        add_mask = n.op("Where", [_bool_mask(n, "attention_mask"), n.const(np.float32(0)),
                                  n.const(np.float32(-np.inf))])
    s = n.op("MatMul", [q, kt] if scale_after_mask or scale_tensor else [qs, ks])
    if scale_tensor:  # one scale per head: no attention's
        per_head = (np.arange(H, dtype=np.float32) + 1).reshape(1, H, 1, 1) / np.sqrt(E)
        s = n.op("Mul", [s, n.const(per_head.astype(np.float32))])
    if not mask_after_softmax:
        s = n.op("Add", [s, add_mask])
    if scale_after_mask:
        s = n.op("Mul", [s, n.const(np.float32(1 / np.sqrt(E)))])
    p = n.op("Softmax", [s], axis=softmax_axis)
    if guard:
        p = n.op("Where", [n.op("IsNaN", [p]), n.const(np.float32(0)), p])
    if mask_after_softmax:
        p = n.op("Add", [p, add_mask])
    if transposed_probs:
        p = n.op("Transpose", [p], perm=[0, 1, 3, 2])
    out = _merge(n, n.op("MatMul", [p, v]))
    return n.model([x] if causal else [x, mask], out, [B, L, D], 18)


def eager_torchscript(layers: int = 1, causal_where: bool = False):
    """The TorchScript exporter's eager attention (opset 17): the key transposed by
    ``[0, 2, 3, 1]``, the scores divided by sqrt(E), the mask ``Where(mask, 0, finfo.min)``
    added; ``causal_where``: GPT-2's ``Where(tril, scores, finfo.min)`` instead."""
    n = Net(1)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [B, L, D])
    mask = helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [B, L])
    h = "x"
    for _ in range(layers):
        q = _heads(n, h, H)
        kt = _heads(n, h, H, perm=(0, 2, 3, 1))
        v = _heads(n, h, H)
        s = n.op("Div", [n.op("MatMul", [q, kt]), n.const(np.float32(np.sqrt(E)))])
        if causal_where:
            s = n.op("Where", [_causal_bool(n), s, n.const(np.float32(FMIN))])
        else:
            add_mask = n.op("Where", [_bool_mask(n, "attention_mask"),
                                      n.const(np.float32(0)), n.const(np.float32(FMIN))])
            s = n.op("Add", [s, add_mask])
        p = n.op("Softmax", [s], axis=-1)
        h = n.op("Add", [_merge(n, n.op("MatMul", [p, v])), h])
    return n.model([x] if causal_where else [x, mask], h, [B, L, D], 17)


def feeds_for(model) -> dict:
    rng = np.random.default_rng(3)
    feeds = {"x": rng.standard_normal((B, L, D)).astype(np.float32)}
    if any(i.name == "attention_mask" for i in model.graph.input):
        m = rng.integers(0, 2, (B, L)).astype(np.int64)
        m[:, 0] = 1
        feeds["attention_mask"] = m
    return feeds


def onnxruntime_out(model, feeds: dict) -> np.ndarray:
    try:
        sess = ort.InferenceSession(model.SerializeToString(),
                                    providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001  (onnxruntime raises its own Fail)
        # an onnx newer than the onnxruntime beside it stamps a higher IR version than that
        # onnxruntime reads; the exported operators are within its opsets
        found = re.search(r"max supported IR version: (\d+)", str(e))
        if found is None or model.ir_version <= int(found.group(1)):
            raise
        older = onnx.ModelProto()
        older.CopyFrom(model)
        older.ir_version = int(found.group(1))
        sess = ort.InferenceSession(older.SerializeToString(),
                                    providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)[0]


def recomposed(net, params):
    g = graph.bind_params(net, params)
    g = (SimplifyInference() + FoldConstant() + EliminateCommonSubexpr())(g)
    return RecomposeAttention()(g)


def attentions(g) -> list:
    return [c for c in g.calls() if c.op == "nn.attention"]


def close(got, expected, tol: float) -> float:
    """The largest difference relative to the largest output; NaN and infinities (a mask
    added after the softmax) must be where onnxruntime has them."""
    got = np.asarray(got, np.float64)
    finite = np.isfinite(expected)
    assert np.array_equal(got[~finite], expected[~finite], equal_nan=True)
    if not finite.any():
        return 0.0
    err = float(np.abs(got[finite] - expected[finite]).max()) / float(
        np.abs(expected[finite]).max())
    assert err <= tol, f"differs by {err:.2e} of the largest output (tolerance {tol})"
    return err


def run_sim(net, params, feeds, **build):
    lib = graph.build(net, "sim", params, **build)
    m = graph.GraphModule(lib, ptxforge.sim())
    m.set_input(**{k: v for k, v in feeds.items() if k in lib.plan.inputs})
    m.run()
    names = [lib.functions[k].func.name for k in lib.call_keys if k is not None]
    return m.get_output(0).numpy(), names


# -- what must match -------------------------------------------------------------------------

FORMS = {
    "sdpa_dynamo": (lambda: sdpa_dynamo(), 1, False, True),
    "sdpa_dynamo_gqa_causal": (lambda: sdpa_dynamo(groups=2, causal=True), 1, True, False),
    "eager_torchscript_2_layers": (lambda: eager_torchscript(layers=2), 2, False, True),
    "eager_causal_where": (lambda: eager_torchscript(causal_where=True), 1, True, False),
}


@pytest.mark.parametrize("form", sorted(FORMS))
def test_exported_forms_become_one_attention_per_layer(form):
    make, layers, causal, masked = FORMS[form]
    model = make()
    feeds = feeds_for(model)
    expected = onnxruntime_out(model, feeds)
    net, params = graph.from_onnx(model)
    g = recomposed(net, params)
    atts = attentions(g)
    assert len(atts) == layers
    for a in atts:
        assert a.attrs["is_causal"] is causal
        assert (len(a.args) == 4) is masked
        assert a.attrs["scale"] == pytest.approx(1 / np.sqrt(E), rel=1e-6)
    assert not any(c.op in ("nn.batch_matmul", "nn.softmax") for c in g.calls())
    inputs = {k: v for k, v in feeds.items() if k in [p.name for p in g.params]}
    close(graph.run_graph(g, inputs)[0], expected, 1e-4)
    got, names = run_sim(net, params, feeds, fused_attention=False)
    close(got, expected, 1e-4)
    assert not any("attention" in n for n in names)


def test_grouped_query_heads_read_the_key_heads_once():
    net, params = graph.from_onnx(sdpa_dynamo(groups=2, causal=True))
    (att,) = attentions(recomposed(net, params))
    q, k, v = att.args[:3]
    assert q.shape == (B, H, L, E) and k.shape == (B, H // 2, L, E) == v.shape
    assert not any(c.op == "broadcast_to" for c in recomposed(net, params).calls())


@pytest.mark.parametrize("form", ["sdpa_dynamo", "eager_torchscript_2_layers"])
def test_forced_fused_build_runs_the_kernel_and_matches(form):
    make, layers, _, _ = FORMS[form]
    model = make()
    feeds = feeds_for(model)
    expected = onnxruntime_out(model, feeds)
    net, params = graph.from_onnx(model)
    got, names = run_sim(net, params, feeds, fused_attention=True, precision="float16")
    assert sum("nn_attention" in n for n in names) == layers
    assert not any("batch_matmul" in n or "softmax" in n for n in names)
    close(got, expected, 3e-2)


def test_head_transposes_fold_into_the_recomposed_attention():
    from ptxforge.graph.build_module import optimize
    from ptxforge.graph.passes.fold_attention_layout import HEADS, fold_attention_layout

    net, params = graph.from_onnx(sdpa_dynamo())
    g = fold_attention_layout(optimize(net, params, fuse=False, precision="float16",
                                       fused_attention=True))
    (att,) = attentions(g)
    assert att.attrs.get("layout") == "bshd"
    assert not any(c.op == "transpose" and tuple(c.attrs["axes"] or ()) == HEADS
                   for c in g.calls())


def test_decomposed_build_launches_no_more_kernels(monkeypatch):
    """Below the fused kernel's keys (auto), decompose_attention writes the attention back
    as products: the import launches as many kernels as without the recomposition."""
    model = eager_torchscript(layers=2)
    net, params = graph.from_onnx(model)
    feeds = feeds_for(model)
    got, names = run_sim(net, params, feeds)
    monkeypatch.setattr(RecomposeAttention, "apply", lambda self, g, ctx: g)
    before, names_before = run_sim(net, params, feeds)
    assert len(names) <= len(names_before)
    close(got, before, 1e-5)


# -- what must not match ---------------------------------------------------------------------

REFUSED = {
    "softmax over the queries": dict(softmax_axis=2),
    "mask added after the softmax": dict(mask_after_softmax=True),
    "scale after the mask": dict(scale_after_mask=True),
    "scale per head (no scalar)": dict(scale_tensor=True),
    "probabilities transposed": dict(transposed_probs=True),
    "minus infinity data mask without NaN guard": dict(guard=False),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_forms_that_are_no_attention_are_left_alone(case):
    model = sdpa_dynamo(**REFUSED[case])
    net, params = graph.from_onnx(model)
    g = recomposed(net, params)
    assert attentions(g) == []
    feeds = feeds_for(model)
    with GraphPassContext(config={"fused_attention": True}):
        g = canonicalization_pipeline()(g)
    assert attentions(g) == []
    inputs = {k: v for k, v in feeds.items() if k in [p.name for p in g.params]}
    expected = onnxruntime_out(model, feeds)
    close(graph.run_graph(g, inputs)[0], expected, 1e-4)


def test_scale_computed_from_an_input_is_no_attention_scale():
    n = Net()
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [B, L, D])
    t = helper.make_tensor_value_info("t", TensorProto.FLOAT, [1])
    q, kt, v = _heads(n, "x", H), _heads(n, "x", H, perm=(0, 2, 3, 1)), _heads(n, "x", H)
    s = n.op("Mul", [n.op("MatMul", [q, kt]), "t"])
    p = n.op("Softmax", [s], axis=-1)
    model = n.model([x, t], _merge(n, n.op("MatMul", [p, v])), [B, L, D], 17)
    net, params = graph.from_onnx(model)
    assert attentions(recomposed(net, params)) == []


# -- real exports ----------------------------------------------------------------------------

MANIFEST = json.loads((CORPUS / "manifest.json").read_text())
TRANSFORMERS = ["bert-dynamo", "bert-torchscript", "distilbert-torchscript", "gpt2-dynamo",
                "llama-dynamo", "roberta-dynamo", "t5_encoder-torchscript", "vit-torchscript",
                "whisper_encoder-dynamo"]


@pytest.mark.parametrize("key", TRANSFORMERS)
def test_real_exports_recompose_every_layer(key):
    assert MANIFEST[key]["status"] == "exported"
    data = np.load(CORPUS / f"{key}.npz")
    feeds = {n.removeprefix("input:"): data[n] for n in data.files if n.startswith("input:")}
    expected = data["output:0"]
    net, params = graph.from_onnx(str(CORPUS / f"{key}.onnx"))
    g = recomposed(net, params)
    atts = attentions(g)
    assert len(atts) == 2  # every corpus transformer has 2 layers
    assert all(a.attrs["is_causal"] is key.startswith(("gpt2", "llama")) for a in atts)
    inputs = {k: v for k, v in feeds.items() if k in [p.name for p in g.params]}
    close(graph.run_graph(g, inputs)[0], expected, 1e-4)
