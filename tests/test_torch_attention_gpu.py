"""Attention through torch.compile(backend="ptxforge") on a GPU: SDPA kept whole (the
custom operator, not the flash kernel torch would dispatch to), with and without the fused
kernel, a CUDA-only fused overload called directly, and a tiny Hugging Face BERT in fp16."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.torch_frontend]


@pytest.fixture
def cuda():
    if not torch.cuda.is_available():
        pytest.skip("PyTorch has no CUDA here")
    torch._dynamo.reset()


def _compile(fn, parts, **options):
    from ptxforge.torch_backend import ptxforge_backend

    torch._dynamo.reset()
    return torch.compile(fn, backend=ptxforge_backend, fullgraph=True,
                         options={"target": "cuda", "on_build": parts.append, **options})


def _counts(parts) -> tuple[int, int]:
    attentions = sum(c.op == "nn.attention" for p in parts for c in p.net.calls())
    fused = sum(f.pipeline_text.startswith("fused_attention")
                for p in parts for f in p.lib.functions.values())
    return attentions, fused


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("causal", [True, False])
def test_sdpa_on_the_gpu(cuda, fused, causal):
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(1, 4, 200, 64, device="cuda", generator=g, dtype=torch.float16)
               for _ in range(3))

    def fn(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    parts: list = []
    with torch.no_grad():
        got = _compile(fn, parts, fused_attention=fused)(q, k, v)
        want = F.scaled_dot_product_attention(q.float(), k.float(), v.float(),
                                              is_causal=causal)
    torch.testing.assert_close(got.float(), want, rtol=0, atol=1e-2)
    assert _counts(parts) == (1, 1 if fused else 0)


def test_flash_overload_called_directly(cuda):
    q, k, v = (torch.randn(2, 8, 128, 64, device="cuda", dtype=torch.float16)
               for _ in range(3))

    def fn(q, k, v):
        return torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, True)[0]

    parts: list = []
    with torch.no_grad():
        got = _compile(fn, parts, fused_attention=True)(q, k, v)
        want = fn(q, k, v)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-2)
    assert _counts(parts) == (1, 1)


def test_hf_bert_fp16_with_fused_attention(cuda):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.BertConfig(hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=256, attn_implementation="sdpa")
    model = transformers.BertModel(config).eval().cuda()
    ids = torch.randint(0, config.vocab_size, (2, 128), device="cuda")
    mask = torch.ones(2, 128, dtype=torch.int64, device="cuda")
    mask[1, 100:] = 0
    with torch.no_grad():
        want = model(ids, attention_mask=mask, return_dict=False)[0]
    half = model.half()
    parts: list = []
    from ptxforge.torch_backend import ptxforge_backend

    torch._dynamo.reset()
    compiled = torch.compile(half, backend=ptxforge_backend, options={
        "target": "cuda", "precision": "float16", "fused_attention": True,
        "on_build": parts.append})
    with torch.no_grad():
        got = compiled(ids, attention_mask=mask, return_dict=False)[0]
    err = float((got.float() - want).abs().max() / want.abs().max())
    assert err < 3e-2, err
    assert _counts(parts) == (2, 1)
