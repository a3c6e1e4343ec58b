"""Scaled dot-product attention kept whole on the way into ptxforge: through
torch.compile (the Dynamo graph's SDPA calls rewritten before AOT autograd), and from the
fused kernels' overloads a graph traced on a device holds; each as one nn.attention,
against PyTorch eager, on the reference executor or the CPU simulator."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

from ptxforge import graph, torch_partition  # noqa: E402
from ptxforge.graph.frontend_torch import TorchImportError, import_graph  # noqa: E402
from ptxforge.graph.frontend_torch.sdpa_op import keep_attention_whole  # noqa: E402
from ptxforge.graph.ir import Var  # noqa: E402
from ptxforge.torch_backend import (  # noqa: E402
    BackendError,
    UnsupportedOperatorsWarning,
    ptxforge_backend,
)

pytestmark = pytest.mark.torch_frontend
aten = torch.ops.aten


@pytest.fixture
def partitions(monkeypatch) -> list:
    """The compiled partitions the backend makes, recorded as they are made."""
    made: list = []
    original = torch_partition.CompiledPartition.__init__

    def record(self, *args, **kwargs):
        original(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(torch_partition.CompiledPartition, "__init__", record)
    return made


def _attentions(parts) -> int:
    return sum(c.op == "nn.attention" for p in parts for c in p.net.calls())


def _compile(fn, options=None, **kw):
    torch._dynamo.reset()
    return torch.compile(fn, backend=ptxforge_backend,
                         options={"target": "sim", **(options or {})}, **kw)


def _qkv(hq=4, hk=4, lq=5, lk=6, e=8, ev=8, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(2, hq, lq, e, generator=g).to(dtype),
            torch.randn(2, hk, lk, e, generator=g).to(dtype),
            torch.randn(2, hk, lk, ev, generator=g).to(dtype))


@pytest.mark.parametrize("case", ["causal_gqa_scale", "bool_mask", "float_mask"])
def test_torch_compile_hands_the_backend_one_attention(case, partitions):
    q, k, v = _qkv(hk=2 if case == "causal_gqa_scale" else 4, ev=4)
    mask = None
    if case == "bool_mask":
        mask = torch.rand(5, 6, generator=torch.Generator().manual_seed(1)) > 0.3
        mask[0] = False  # a row with every key masked: zeros, as PyTorch
    elif case == "float_mask":
        mask = torch.randn(2, 1, 5, 6)

    def fn(q, k, v, mask):
        return 2 * F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=case.startswith("causal"),
            scale=0.3 if case.endswith("scale") else None, enable_gqa=case != "bool_mask")

    with torch.no_grad():
        got = _compile(fn, fullgraph=True)(q, k, v, mask)
        want = fn(q, k, v, mask)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert _attentions(partitions) == 1
    assert not any(c.op in ("nn.batch_matmul", "nn.softmax")
                   for p in partitions for c in p.net.calls()), "attention came in pieces"


def test_dynamic_shapes_keep_the_attention_per_shape(partitions):
    """A graph captured with symbolic sizes is specialized per shape at call time; the
    custom operator's fake implementation follows the symbolic sizes."""
    def fn(q):
        return 3 * F.scaled_dot_product_attention(q, q, q, is_causal=True)

    compiled = _compile(fn, dynamic=True)
    with torch.no_grad():
        for length in (5, 9):
            q = torch.randn(1, 2, length, 8)
            torch.testing.assert_close(compiled(q), fn(q), rtol=1e-5, atol=1e-5)
    assert [sum(c.op == "nn.attention" for c in p.net.calls()) for p in partitions] == [1, 1]


def test_training_graphs_keep_attention_and_their_gradients_match_eager(partitions):
    """With gradients on, the custom operator's backward (written with plain operators)
    gives eager's gradients, grouped-query heads and an additive mask included."""
    q, k, v = (t.requires_grad_() for t in _qkv(hk=2))
    mask = torch.randn(5, 6, requires_grad=True)

    def fn(q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)

    out = _compile(fn)(q, k, v, mask)
    (out * out).sum().backward()
    got = [t.grad.clone() for t in (q, k, v, mask)]
    for t in (q, k, v, mask):
        t.grad = None
    want_out = fn(q, k, v, mask)
    (want_out * want_out).sum().backward()
    torch.testing.assert_close(out, want_out, rtol=1e-5, atol=1e-5)
    for g, t in zip(got, (q, k, v, mask)):
        torch.testing.assert_close(g, t.grad, rtol=1e-4, atol=1e-5)
    assert _attentions(partitions) == 1


def test_calls_with_dropout_stay_as_they_are():
    def fn(q, k, v):
        a = F.scaled_dot_product_attention(q, k, v, dropout_p=0.1)
        return a + F.scaled_dot_product_attention(q, k, v, is_causal=True)

    gm = torch.fx.symbolic_trace(fn)
    assert keep_attention_whole(gm) == 1
    targets = [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
    assert "ptxforge.scaled_dot_product_attention.default" in targets
    assert sum("scaled_dot_product_attention" in t for t in targets) == 2
    q, k, v = _qkv()
    torch.manual_seed(0)
    a = gm(q, k, v)
    torch.manual_seed(0)
    torch.testing.assert_close(a, fn(q, k, v))


def _fused_cases():
    q, k, v = _qkv(hk=2, ev=4)
    bias = torch.randn(2, 4, 5, 6)
    keep = torch.rand(5, 6, generator=torch.Generator().manual_seed(2)) > 0.2
    keep[:, 0] = True
    return [
        ("flash", lambda q, k, v: aten._scaled_dot_product_flash_attention(
            q, k, v, 0.0, True, scale=0.25)[0], (q, k, v),
         dict(is_causal=True, scale=0.25, enable_gqa=True)),
        ("flash_for_cpu", lambda q, k, v, m: aten._scaled_dot_product_flash_attention_for_cpu(
            q, k, v, attn_mask=m)[0], (q, k, v, keep), dict(attn_mask=keep, enable_gqa=True)),
        ("efficient", lambda q, k, v, b: aten._scaled_dot_product_efficient_attention(
            q, k, v, b, True, is_causal=False)[0], (q, k, v, bias),
         dict(attn_mask=bias, enable_gqa=True)),
        ("cudnn", lambda q, k, v, b: aten._scaled_dot_product_cudnn_attention(
            q, k, v, b, False, scale=0.5)[0], (q, k, v, bias),
         dict(attn_mask=bias, scale=0.5, enable_gqa=True)),
        ("overrideable", lambda q, k, v, b: aten._scaled_dot_product_fused_attention_overrideable(
            q, k, v, b)[0], (q, k, v, bias), dict(attn_mask=bias, enable_gqa=True)),
    ]


def _traced(fn, args):
    """``fn`` traced with fake tensors (the fused kernels' shapes need no kernel: CUDA-only
    overloads trace on a CPU)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    return make_fx(fn, tracing_mode="fake")(*args)


def _import(gm, args):
    places = [n for n in gm.graph.nodes if n.op == "placeholder"]
    from ptxforge.graph.frontend_torch import graph_dtype

    return import_graph(gm.graph, {n.name: Var(n.name, tuple(a.shape), graph_dtype(a.dtype))
                                   for n, a in zip(places, args)})


@pytest.mark.parametrize("k", range(5))
def test_fused_kernel_overloads_become_one_attention(k):
    name, fn, args, sdpa = _fused_cases()[k]
    net = _import(_traced(fn, args), args)
    assert [c.op for c in net.calls()].count("nn.attention") == 1, name
    got = graph.run_graph(net, {p.name: a.numpy() for p, a in zip(net.params, args)})[0]
    want = F.scaled_dot_product_attention(*args[:3], **sdpa)
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-5)


def test_reading_the_logsumexp_is_refused_clearly(partitions):
    q, k, v = _qkv()

    def both(q, k, v):
        out, lse = aten._scaled_dot_product_flash_attention_for_cpu(q, k, v)
        return out, lse

    with pytest.raises(TorchImportError, match="logsumexp.*only training uses"):
        _import(_traced(both, (q, k, v)), (q, k, v))
    # Dynamo wraps the backend's BackendError in its own exception
    with pytest.raises(Exception, match=r"BackendError.*reads its logsumexp, which ptxforge "
                                        r"does not compute"), torch.no_grad():
        _compile(both, fullgraph=True)(q, k, v)
    # without fullgraph the node stays with PyTorch, and the result is still eager's
    with warnings.catch_warnings(record=True) as seen, torch.no_grad():
        warnings.simplefilter("always")
        got = _compile(both)(q, k, v)
    want = both(q, k, v)
    torch.testing.assert_close(got[0], want[0])
    torch.testing.assert_close(got[1], want[1])
    assert any("_scaled_dot_product_flash_attention_for_cpu" in str(w.message)
               for w in seen if w.category is UnsupportedOperatorsWarning)


def test_the_cpu_fused_overload_through_torch_compile(partitions):
    q, k, v = _qkv(hk=2)

    def fn(q, k, v):
        return aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, is_causal=True)[0] + 1

    with torch.no_grad():
        got = _compile(fn, fullgraph=True)(q, k, v)
    torch.testing.assert_close(got, F.scaled_dot_product_attention(
        q, k, v, is_causal=True, enable_gqa=True) + 1, rtol=1e-5, atol=1e-5)
    assert _attentions(partitions) == 1


def _fused_functions(parts) -> list[str]:
    return [name for p in parts for name, f in p.lib.functions.items()
            if f.pipeline_text.startswith("fused_attention")]


@pytest.mark.parametrize("fused", [True, False])
def test_fused_attention_option_reaches_the_build(fused, partitions):
    """``options={"fused_attention": True}`` compiles the attention as the fused
    tensor-core kernel (run by the simulator for sm_80); False decomposes it."""
    q, k, v = _qkv(hq=2, hk=2, lq=20, lk=20, e=16, ev=16, dtype=torch.float16)

    def fn(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    with torch.no_grad():
        got = _compile(fn, {"target": "sim -arch=sm_80", "fused_attention": fused},
                       fullgraph=True)(q, k, v)
    want = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True)
    assert got.dtype == torch.float16
    torch.testing.assert_close(got.float(), want, rtol=0, atol=2e-2)
    assert len(_fused_functions(partitions)) == (1 if fused else 0)


def test_fused_attention_option_is_checked():
    from ptxforge.torch_backend import BackendOptions

    assert BackendOptions.from_dict({}).fused_attention is None
    assert BackendOptions.from_dict({"fused_attention": True}).fused_attention is True
    with pytest.raises(BackendError, match="fused_attention must be True, False or None"):
        BackendOptions.from_dict({"fused_attention": "yes"})


# -- Hugging Face models through torch.compile --------------------------------------------

def _hf_compiled(model, args, kwargs, partitions):
    with torch.no_grad():
        want = model(*args, **kwargs)[0]
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="ptxforge", options={"target": "sim"})
    with warnings.catch_warnings(record=True) as seen, torch.no_grad():
        warnings.simplefilter("always")
        got = compiled(*args, **kwargs)[0]
    assert not [str(w.message) for w in seen if w.category is UnsupportedOperatorsWarning]
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=0,
                               atol=2e-5 * max(1.0, float(want.abs().max())))
    return _attentions(partitions)


def test_hf_bert_with_a_padding_mask_gets_one_attention_per_layer(partitions):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=64, vocab_size=96,
                                     max_position_embeddings=64, attn_implementation="sdpa")
    model = transformers.BertModel(config).eval()
    ids = torch.from_numpy(np.random.default_rng(3).integers(0, 96, (2, 8)))
    mask = torch.ones(2, 8, dtype=torch.int64)
    mask[1, 5:] = 0
    assert _hf_compiled(model, (ids,), {"attention_mask": mask, "return_dict": False},
                        partitions) == 2


def test_hf_gpt2_gets_one_causal_attention_per_layer(partitions):
    """With the key/value cache on (the default), whose first concatenation is onto an
    empty tensor: that input is dropped, so the graph stays whole."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=96,
                                     n_positions=64, attn_implementation="sdpa",
                                     bos_token_id=0, eos_token_id=0)
    model = transformers.GPT2Model(config).eval()
    ids = torch.from_numpy(np.random.default_rng(4).integers(0, 96, (2, 8)))
    assert _hf_compiled(model, (ids,), {"return_dict": False}, partitions) == 2
    assert len(partitions) == 1
    calls = [c for p in partitions for c in p.net.calls() if c.op == "nn.attention"]
    assert all(c.attrs["is_causal"] or len(c.args) == 4 for c in calls)


def test_tuning_with_fused_attention_extracts_the_attention_as_one_task():
    from ptxforge.graph.frontend_torch import from_torch
    from ptxforge.torch_tuning import _extract

    class Attend(torch.nn.Module):
        def forward(self, q, k, v):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    args = _qkv(hq=2, hk=2, lq=16, lk=16, e=16, ev=16, dtype=torch.float16)
    net, params = from_torch(Attend(), args)
    on = [t.desc for t in _extract(net, params, "float16", True)[0]]
    off = [t.desc for t in _extract(net, params, "float16", False)[0]]
    assert sum("attention" in d for d in on) == 1, on
    assert not any("attention" in d for d in off), off
