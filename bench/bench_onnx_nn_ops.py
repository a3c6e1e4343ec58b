"""The ONNX importer's convolution, pooling, normalization and resizing layers at the shapes
real models run them, ours (the PyTorch layer exported to ONNX, imported, built with the
default schedules) against PyTorch (cuDNN) on the same GPU. Needs a GPU and torch with CUDA.

Each layer is exported with ``torch.onnx.export`` (the TorchScript exporter), imported with
``graph.from_onnx``, built for ``cuda`` and checked against PyTorch; both sides are timed
as CUDA graphs (ours: ``GraphModule.benchmark``, one run per launch of the network's graph;
PyTorch: ``torch.cuda.CUDAGraph`` replays), median per run.

    python3 bench/bench_onnx_nn_ops.py [--dtype float32|float16] [--only NAME] [--json out.json]
"""

from __future__ import annotations

import argparse
import io
import json
import time
import warnings

import numpy as np
import ptxforge
from ptxforge import graph
from ptxforge.cli.bench import graph_time_torch


def layers(torch):
    nn = torch.nn
    return {
        # Whisper-base's audio encoder stem: 80 mel bins over 3000 frames
        "conv1d_whisper": (nn.Conv1d(80, 512, 3, padding=1), (1, 80, 3000)),
        "conv1d_whisper_s2": (nn.Conv1d(512, 512, 3, stride=2, padding=1), (1, 512, 3000)),
        # a video ResNet's 3-D block
        "conv3d_r3d": (nn.Conv3d(64, 64, 3, padding=1), (1, 64, 8, 56, 56)),
        # UNet and DCGAN upsampling
        "convT2d_unet": (nn.ConvTranspose2d(256, 128, 2, stride=2), (1, 256, 32, 32)),
        "convT2d_dcgan": (nn.ConvTranspose2d(128, 64, 4, stride=2, padding=1), (8, 128, 16, 16)),
        "convT1d_vocoder": (nn.ConvTranspose1d(256, 128, 16, stride=8, padding=4), (1, 256, 200)),
        "maxpool3d": (nn.MaxPool3d(3, stride=2, padding=1), (1, 64, 8, 56, 56)),
        "maxpool2d_ceil": (nn.MaxPool2d(3, stride=2, ceil_mode=True), (1, 96, 111, 111)),
        "instance_norm_style": (nn.InstanceNorm2d(64, affine=True), (1, 64, 128, 128)),
        "group_norm_vae": (nn.GroupNorm(32, 128), (1, 128, 64, 64)),
        "upsample_bilinear": (nn.Upsample(scale_factor=2, mode="bilinear"), (1, 64, 128, 128)),
        "upsample_nearest": (nn.Upsample(scale_factor=2, mode="nearest"), (1, 256, 40, 40)),
    }


def run(torch, name, module, shape, args) -> dict:
    tdtype = getattr(torch, args.dtype)
    module = module.eval().cuda().to(tdtype)
    x = torch.randn(*shape, device="cuda", dtype=tdtype)
    buf = io.BytesIO()
    torch.onnx.export(module, (x,), buf, opset_version=17, dynamo=False, input_names=["x"])
    import onnx

    model = onnx.load_from_string(buf.getvalue())
    t0 = time.perf_counter()
    net, params = graph.from_onnx(model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", graph.NoTuningRecordWarning)
        lib = graph.build(net, "cuda", params)
    build_s = time.perf_counter() - t0
    dev = ptxforge.cuda(0)
    m = graph.GraphModule(lib, dev)
    m.set_input(x=x.cpu().numpy())
    m.run()
    with torch.no_grad():
        want = module(x).float().cpu().numpy()
        got = m.get_output(0).numpy().astype(np.float32)
        err = float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-6))
        ours = m.benchmark(dev, number=args.number, repeat=args.repeat).median
        theirs = graph_time_torch(torch, lambda: module(x), args.number, args.repeat) / 1e3
    return {"layer": name, "shape": list(shape), "dtype": args.dtype, "ours_us": ours * 1e6,
            "torch_us": theirs * 1e6, "ratio": theirs / ours, "rel_err": err,
            "kernels": len(lib.functions), "build_s": build_s}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dtype", default="float32", choices=["float32", "float16"])
    p.add_argument("--only", action="append", help="run only these layers (repeatable)")
    p.add_argument("--number", type=int, default=20)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--json")
    args = p.parse_args()
    import torch

    torch.backends.cudnn.benchmark = True
    print(f"device: {torch.cuda.get_device_name(0)}; {args.dtype}")
    print(f"{'layer':22} {'ours us':>10} {'torch us':>10} {'torch/ours':>10} {'rel err':>9} "
          f"{'kernels':>7}")
    rows = []
    for name, (module, shape) in layers(torch).items():
        if args.only and name not in args.only:
            continue
        try:
            row = run(torch, name, module, shape, args)
        except Exception as e:  # noqa: BLE001 - report the layer and go on with the others
            print(f"{name:22} failed: {type(e).__name__}: {str(e)[:160]}")
            rows.append({"layer": name, "error": f"{type(e).__name__}: {e}"})
            continue
        rows.append(row)
        print(f"{name:22} {row['ours_us']:10.1f} {row['torch_us']:10.1f} {row['ratio']:10.2f} "
              f"{row['rel_err']:9.1e} {row['kernels']:7d}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
