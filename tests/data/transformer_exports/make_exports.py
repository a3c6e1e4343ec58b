"""Write the small Hugging Face exports that tests/test_canonicalize.py reads.

A BERT encoder (2 layers, hidden 32, 2 heads, intermediate 64, random weights; nothing
downloaded) over ``hidden`` [1, 16, 32], exported by PyTorch's TorchScript exporter at
opsets 14 (layer norm written out) and 17, and by the dynamo exporter at opset 18, each with
its weights inside the file. Needs torch, transformers, onnx and onnxscript::

    python3 tests/data/transformer_exports/make_exports.py
"""

from __future__ import annotations

import os

import onnx
import torch
import transformers

HERE = os.path.dirname(os.path.abspath(__file__))


class Encoder(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, hidden):
        return self.model.encoder(hidden).last_hidden_state


def bert_encoder() -> torch.nn.Module:
    cfg = transformers.BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                  intermediate_size=64, vocab_size=16,
                                  max_position_embeddings=16)
    torch.manual_seed(0)
    model = transformers.BertModel(cfg, add_pooling_layer=False).eval()
    with torch.no_grad():
        for p in model.parameters():  # random biases and norms too (not ones and zeros)
            p.normal_(0.0, 0.1)
    return Encoder(model).eval()


def main() -> None:
    model = bert_encoder()
    hidden = torch.randn(1, 16, 32)
    for name, opset, dynamo in (("bert_encoder_ts14", 14, False),
                                ("bert_encoder_ts17", 17, False),
                                ("bert_encoder_dynamo18", 18, True)):
        path = os.path.join(HERE, f"{name}.onnx")
        torch.onnx.export(model, (hidden,), path, input_names=["hidden"],
                          output_names=["out"], opset_version=opset, dynamo=dynamo)
        proto = onnx.load(path)  # external data folded back into the one file
        for extra in (path + ".data",):
            if os.path.exists(extra):
                os.remove(extra)
        onnx.save(proto, path, save_as_external_data=False)
        print(path, os.path.getsize(path), "bytes")


if __name__ == "__main__":
    main()
