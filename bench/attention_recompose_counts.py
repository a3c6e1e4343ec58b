"""Attention ops and kernel launches of small transformer exports with and without
``recompose_attention`` (no GPU needed: the builds target the simulator's sm_80).

For Hugging Face BERT and GPT-2 (the installed transformers, eager and SDPA attention, with
an ``attention_mask``) and the transformers 4 forms of ``tests/recompose_legacy_models.py``,
exported by both of PyTorch's exporters (hidden 64, 4 heads, 2 layers, batch 1), it prints
the ``nn.attention`` ops after the canonicalization passes and the kernel launches of a
float16 build, without the pass, with it (``fused_attention`` auto: the products below
256 keys) and with it and the fused kernel forced::

    python3 bench/attention_recompose_counts.py [--seq 128] [--models bert,gpt2,...]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
import tempfile
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__)))))

MODELS = ("bert-eager", "bert-sdpa", "gpt2-eager", "gpt2-sdpa", "bert-legacy", "gpt2-legacy")


def _module(name: str, seq: int):
    import torch
    import transformers as tf
    from ptxforge.tests import recompose_legacy_models as legacy

    rng = np.random.default_rng(0)
    ids = rng.integers(0, 96, (1, seq)).astype(np.int64)
    mask = np.ones((1, seq), np.int64)
    mask[0, -seq // 4:] = 0
    feeds = {"input_ids": ids, "attention_mask": mask}
    torch.manual_seed(0)
    family, impl = name.split("-")
    if impl == "legacy":
        if family == "bert":
            return legacy.LegacyBert(), feeds
        return legacy.LegacyGpt2(positions=max(64, seq)), feeds
    if family == "bert":
        inner = tf.BertModel(tf.BertConfig(
            hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
            vocab_size=96, max_position_embeddings=max(64, seq), attn_implementation=impl),
            add_pooling_layer=False)
    else:
        inner = tf.GPT2Model(tf.GPT2Config(n_embd=64, n_layer=2, n_head=4,
                                           n_positions=max(64, seq), vocab_size=96,
                                           attn_implementation=impl))

    class Wrapped(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = inner

        def forward(self, input_ids, attention_mask):
            kw = {"use_cache": False} if family == "gpt2" else {}
            return self.m(input_ids=input_ids, attention_mask=attention_mask,
                          **kw).last_hidden_state

    return Wrapped(), feeds


def _export(module, feeds, path: str, dynamo: bool):
    import onnx
    import torch

    module.eval()
    # the exporters' progress lines would break the table
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        torch.onnx.export(module, tuple(torch.from_numpy(v) for v in feeds.values()), path,
                          input_names=list(feeds), output_names=["out"],
                          opset_version=18 if dynamo else 17, dynamo=dynamo)
    return onnx.load(path)


def _counts(net, params, recompose: bool, fused) -> tuple[int, int, int]:
    """``(nn.attention ops after canonicalization, function calls, kernel launches)`` of
    a float16 build."""
    from ptxforge import graph
    from ptxforge.graph.build_module import optimize
    from ptxforge.graph.passes import RecomposeAttention

    saved = RecomposeAttention.apply
    if not recompose:
        RecomposeAttention.apply = lambda self, g, ctx: g
    try:
        g = optimize(net, params, fuse=False, precision="float16", fused_attention=fused)
        atts = sum(1 for c in g.calls() if c.op == "nn.attention")
        lib = graph.build(net, "sim -arch=sm_80", params, precision="float16",
                          fused_attention=fused)
        calls = [k for k in lib.call_keys if k is not None]
        launches = sum(len(list(lib.functions[k].device_module.kernels())) for k in calls)
    finally:
        RecomposeAttention.apply = saved
    return atts, len(calls), launches


def main(argv=None) -> None:
    from ptxforge import graph

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--exporters", default="torchscript,dynamo")
    args = ap.parse_args(argv)
    print(f"hidden 64, 4 heads, 2 layers, batch 1, seq {args.seq}, float16 builds for sim "
          "-arch=sm_80; cells: nn.attention ops / function calls / kernel launches")
    print(f"{'model':<14} {'exporter':<12} {'without pass':>16} {'with (auto)':>16} "
          f"{'with (fused)':>16}")
    for name in args.models.split(","):
        for exporter in args.exporters.split(","):
            module, feeds = _module(name, args.seq)
            with tempfile.TemporaryDirectory() as tmp:
                model = _export(module, feeds, os.path.join(tmp, "m.onnx"),
                                exporter == "dynamo")
            net, params = graph.from_onnx(model)
            cells = [_counts(net, params, False, None), _counts(net, params, True, None),
                     _counts(net, params, True, True)]
            print(f"{name:<14} {exporter:<12} " + " ".join(
                f"{a:>4} / {c:>3} / {n:<3}" for a, c, n in cells), flush=True)


if __name__ == "__main__":
    main()
