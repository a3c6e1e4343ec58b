"""A corpus of real models at small configurations: Hugging Face transformers (BERT, RoBERTa,
DistilBERT, GPT-2, Llama, T5 encoder, ViT, Whisper encoder) built from their config classes,
and torchvision's convolutional networks (ResNet-18, ConvNeXt, EfficientNet, MobileNetV3, a
small UNet) built from the mirrored blocks of ``tests/vision_blocks.py``.

Everything is deterministic: weights come from a seeded generator (no hub downloads), batch
norm statistics are randomised from the same seed (so the folds are exercised), and inputs
come from :meth:`RealModel.inputs` with a fixed seed. Each model runs in eval mode and
returns one tensor, so it exports and compares the same way through ONNX, ``torch.export``
and eager PyTorch::

    from tests.real_models import MODELS
    spec = MODELS["bert"]
    model = spec.build()                # torch.nn.Module, eval mode
    feeds = spec.inputs()               # {"input_ids": int64 array, ...}
    out = model(*spec.torch_inputs(feeds))

Needs torch; the transformer models need ``transformers``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

SEED = 0
SEQ = 8
VOCAB = 96


@dataclass(frozen=True)
class InputSpec:
    """One model input: name, shape, numpy dtype name, and for integer inputs the range of
    values ``[low, high)`` (token ids below the vocabulary size, a mask of 0 / 1)."""

    name: str
    shape: tuple
    dtype: str = "float32"
    low: int = 0
    high: int = 2


@dataclass(frozen=True)
class RealModel:
    """A corpus entry: ``make()`` returns the module (weights not yet seeded; use
    :meth:`build`), ``inputs_spec`` its inputs in call order."""

    name: str
    family: str  # "transformers" or "vision"
    make: Callable
    inputs_spec: tuple
    description: str = ""

    def build(self):
        """The module in eval mode with deterministic weights."""
        import torch

        torch.manual_seed(SEED)
        model = self.make()
        _randomize_norm_statistics(model)
        return model.eval()

    def inputs(self, seed: int = 1) -> dict:
        """Fixed random inputs by name (numpy arrays)."""
        rng = np.random.default_rng(seed)
        feeds = {}
        for s in self.inputs_spec:
            if np.dtype(s.dtype).kind in "iub":
                v = rng.integers(s.low, s.high, s.shape).astype(s.dtype)
                if s.name == "attention_mask":
                    v[..., 0] = 1  # at least one position attended per row
            else:
                v = rng.standard_normal(s.shape).astype(s.dtype)
            feeds[s.name] = v
        return feeds

    def torch_inputs(self, feeds: dict) -> tuple:
        """``feeds`` as torch tensors in call order."""
        import torch

        return tuple(torch.from_numpy(feeds[s.name]) for s in self.inputs_spec)


def _randomize_norm_statistics(model) -> None:
    import torch

    g = torch.Generator().manual_seed(SEED + 1)
    for m in model.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and m.running_mean is not None:
            with torch.no_grad():
                m.running_mean.copy_(torch.randn(m.running_mean.shape, generator=g) * 0.1)
                m.running_var.copy_(torch.rand(m.running_var.shape, generator=g) + 0.5)
                m.weight.copy_(torch.rand(m.weight.shape, generator=g) + 0.5)
                m.bias.copy_(torch.randn(m.bias.shape, generator=g) * 0.1)


# -- transformers ----------------------------------------------------------------------------


def _first_output(model):
    """A module returning the first output (last hidden state) of a transformers model as
    one tensor: exporters and comparisons then see a plain tensor."""
    import torch

    class FirstOutput(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, *args):
            out = self.inner(*args, return_dict=False)
            return out[0]

    return FirstOutput(model)


_SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
              intermediate_size=64, vocab_size=VOCAB, max_position_embeddings=64)


def _hf(cls_name: str, config_name: str, **config):
    def make():
        import transformers

        cfg = getattr(transformers, config_name)(**config)
        cfg._attn_implementation = "eager"  # the attention written out, as most exports see it
        return _first_output(getattr(transformers, cls_name)(cfg))

    return make


def _whisper_encoder():
    import transformers
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    cfg = transformers.WhisperConfig(d_model=32, encoder_layers=2, encoder_attention_heads=2,
                                     encoder_ffn_dim=64, num_mel_bins=16,
                                     max_source_positions=16, vocab_size=VOCAB,
                                     decoder_layers=1, decoder_attention_heads=2,
                                     decoder_ffn_dim=64, pad_token_id=0, bos_token_id=1,
                                     eos_token_id=2, decoder_start_token_id=3)
    cfg._attn_implementation = "eager"
    return _first_output(WhisperEncoder(cfg))


def _text_inputs(mask: bool = True) -> tuple:
    ids = InputSpec("input_ids", (1, SEQ), "int64", 0, VOCAB)
    if not mask:
        return (ids,)
    return ids, InputSpec("attention_mask", (1, SEQ), "int64", 0, 2)


def _image(size: int = 32) -> tuple:
    return (InputSpec("pixel_values", (1, 3, size, size)),)


def _vision(cls_name: str, **kwargs):
    def make():
        from . import vision_blocks

        return getattr(vision_blocks, cls_name)(**kwargs)

    return make


_ENTRIES = [
    RealModel("bert", "transformers", _hf("BertModel", "BertConfig", **_SMALL),
              _text_inputs(), "BERT encoder, 2 layers, hidden 32"),
    RealModel("roberta", "transformers",
              _hf("RobertaModel", "RobertaConfig", pad_token_id=1, **_SMALL),
              # RoBERTa counts positions from pad_token_id + 1: ids avoid the pad id
              (InputSpec("input_ids", (1, SEQ), "int64", 2, VOCAB),
               InputSpec("attention_mask", (1, SEQ), "int64", 0, 2)),
              "RoBERTa encoder, 2 layers, hidden 32"),
    RealModel("distilbert", "transformers",
              _hf("DistilBertModel", "DistilBertConfig", dim=32, n_layers=2, n_heads=2,
                  hidden_dim=64, vocab_size=VOCAB, max_position_embeddings=64),
              _text_inputs(), "DistilBERT, 2 layers, dim 32"),
    RealModel("gpt2", "transformers",
              _hf("GPT2Model", "GPT2Config", n_embd=32, n_layer=2, n_head=2,
                  n_positions=64, vocab_size=VOCAB, use_cache=False, bos_token_id=0,
                  eos_token_id=0),
              _text_inputs(mask=False), "GPT-2 decoder stack (causal), 2 layers, width 32"),
    RealModel("llama", "transformers",
              _hf("LlamaModel", "LlamaConfig", hidden_size=32, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, intermediate_size=64,
                  vocab_size=VOCAB, max_position_embeddings=64, use_cache=False),
              _text_inputs(mask=False),
              "Llama: RMS norm, rotary positions, SwiGLU, grouped-query attention"),
    RealModel("t5_encoder", "transformers",
              _hf("T5EncoderModel", "T5Config", d_model=32, d_kv=16, d_ff=64, num_layers=2,
                  num_heads=2, vocab_size=VOCAB, relative_attention_num_buckets=8,
                  relative_attention_max_distance=16, feed_forward_proj="relu"),
              _text_inputs(), "T5 encoder: relative position buckets, RMS-style layer norm"),
    RealModel("vit", "transformers",
              _hf("ViTModel", "ViTConfig", hidden_size=32, num_hidden_layers=2,
                  num_attention_heads=2, intermediate_size=64, image_size=32, patch_size=8,
                  num_channels=3),
              _image(32), "ViT: 8x8 patches of a 32x32 image, 2 layers"),
    RealModel("whisper_encoder", "transformers", _whisper_encoder,
              (InputSpec("input_features", (1, 16, 32)),),
              "Whisper encoder: two 1-D convolutions, 2 layers, 16 mel bins"),
    RealModel("resnet18", "vision", _vision("ResNet18", width=4), _image(32),
              "torchvision ResNet-18 layout, widths 4-32"),
    RealModel("convnext", "vision", _vision("ConvNeXt"), _image(32),
              "torchvision ConvNeXt layout, dims 8-64"),
    RealModel("efficientnet", "vision", _vision("EfficientNet"), _image(32),
              "torchvision EfficientNet-B0 layout, fewer and narrower blocks"),
    RealModel("mobilenet_v3", "vision", _vision("MobileNetV3"), _image(32),
              "torchvision MobileNetV3-small layout, fewer blocks"),
    RealModel("unet", "vision", _vision("SmallUNet"), _image(16),
              "a two-level UNet of Conv2dNormActivation blocks"),
]

MODELS: dict[str, RealModel] = {m.name: m for m in _ENTRIES}
"""The corpus by name."""
