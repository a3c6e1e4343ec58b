"""Full-size models through ``graph.from_torch`` on the GPU, each against PyTorch eager.

The CPU suite imports the same families at small configurations (``tests/real_models.py``);
here the real sizes are built with random weights (nothing downloaded): torchvision
ResNet-50, MobileNetV3-Large, ConvNeXt-T and EfficientNet-B0 at 224x224, Hugging Face
BERT-base (with a padding mask), GPT-2 small, ViT-B/16, the T5 encoder of ``T5Config()``'s
defaults, and Llama layers of TinyLlama-1.1B's widths (hidden 2048, 32 query and 4 key/value
heads, SwiGLU 5632; 4 of its 22 layers, to keep the export quick).

Each model is built in float32 and compared with PyTorch float32 with TF32 off (1e-3 of the
largest output), and in float16 compared with PyTorch float32 (within five times PyTorch
float16's own difference, at least 1e-2), as ``bench/bench_torch_backend.py`` checks.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from .real_models import _first_output  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.torch_frontend]

SEQ = 128


def _vision(name: str):
    torchvision = pytest.importorskip("torchvision")
    model = getattr(torchvision.models, name)(weights=None)
    x = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(1))
    return model, (x,)


def _hf(cls: str, config: str, mask: bool = False, image: bool = False, **kw):
    transformers = pytest.importorskip("transformers")
    cfg = getattr(transformers, config)(**kw)
    cfg._attn_implementation = "sdpa"
    model = _first_output(getattr(transformers, cls)(cfg))
    g = torch.Generator().manual_seed(1)
    if image:
        return model, (torch.randn(1, 3, 224, 224, generator=g),)
    ids = torch.randint(0, cfg.vocab_size, (1, SEQ), generator=g)
    if not mask:
        return model, (ids,)
    attention = torch.ones(1, SEQ, dtype=torch.int64)
    attention[:, SEQ - 17:] = 0  # padding at the end of the row
    return model, (ids, attention)


MODELS = {
    "resnet50": lambda: _vision("resnet50"),
    "mobilenet_v3_large": lambda: _vision("mobilenet_v3_large"),
    "convnext_tiny": lambda: _vision("convnext_tiny"),
    "efficientnet_b0": lambda: _vision("efficientnet_b0"),
    "bert_base": lambda: _hf("BertModel", "BertConfig", mask=True),
    "gpt2_small": lambda: _hf("GPT2Model", "GPT2Config", use_cache=False),
    "vit_b16": lambda: _hf("ViTModel", "ViTConfig", image=True),
    "t5_encoder": lambda: _hf("T5EncoderModel", "T5Config", mask=True),
    "llama_1b_layers": lambda: _hf(
        "LlamaModel", "LlamaConfig", hidden_size=2048, num_attention_heads=32,
        num_key_value_heads=4, intermediate_size=5632, num_hidden_layers=4,
        vocab_size=32000, max_position_embeddings=2048, use_cache=False),
}


def _run_ours(net, params, args, precision: str) -> np.ndarray:
    import ptxforge
    from ptxforge import graph

    lib = graph.build(net, "cuda", params, precision=precision)
    module = graph.GraphModule(lib, ptxforge.cuda(0))
    module.set_input(**{p.name: a.numpy() for p, a in zip(net.params, args)})
    module.run()
    return module.get_output(0).numpy().astype(np.float32)


@pytest.fixture(autouse=True)
def _no_tf32():
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


@functools.lru_cache(maxsize=2)
def _imported(name: str):
    """``(net, params, args, PyTorch float32 output, PyTorch float16 output)``."""
    from ptxforge import graph

    torch.manual_seed(0)
    model, args = MODELS[name]()
    model = model.eval()
    net, params = graph.from_torch(model, args)
    with torch.no_grad():
        cuda_args = tuple(a.cuda() for a in args)
        ref = model.cuda()(*cuda_args).float().cpu().numpy()
        half = model.half()
        low = half(*(a.half() if a.is_floating_point() else a for a in cuda_args))
    return net, params, args, ref, low.float().cpu().numpy()


def _compare(name: str, precision: str):
    import warnings

    from ptxforge import graph

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    net, params, args, ref, low = _imported(name)
    scale = float(np.abs(ref).max())
    assert np.isfinite(ref).all() and scale > 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", graph.NoTuningRecordWarning)
        got = _run_ours(net, params, args, precision)
    return float(np.abs(got - ref).max()) / scale, float(np.abs(low - ref).max()) / scale


@pytest.mark.parametrize("name", list(MODELS))
def test_full_size_model_in_float32_matches_eager(name):
    err, _ = _compare(name, "float32")
    assert err <= 1e-3, f"{name}: float32 build differs from eager by {err:.2e}"


@pytest.mark.parametrize("name", list(MODELS))
def test_full_size_model_in_float16_matches_eager(name):
    err, torch_err = _compare(name, "float16")
    if not np.isfinite(torch_err) or torch_err >= 0.5:
        # random weights can take a network past the float16 range: PyTorch's own float16
        # output is then no reference (the float32 test above still checks the model)
        pytest.skip(f"{name}: PyTorch float16 itself differs from float32 by {torch_err:.2e}")
    assert err <= max(5 * torch_err, 1e-2), (
        f"{name}: float16 build differs from eager float32 by {err:.2e} "
        f"(PyTorch float16 by {torch_err:.2e})")
