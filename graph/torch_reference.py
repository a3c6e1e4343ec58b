"""PyTorch twins of zoo networks, for comparing a compiled network with PyTorch on the same
weights: torchvision's ResNet (``resnet_v1-*``) built from the zoo's parameters, a CUDA-event
timer, and :func:`compare_with_torch`, which runs and times both (eager and CUDA graph).

PyTorch is not a dependency of ptxforge: every function takes the ``torch`` module (or imports
it) when called.
"""

from __future__ import annotations

import numpy as np


def torch_resnet_v1(torch, params: dict, num_layers: int, layout: str):
    """torchvision's ResNet with the zoo's ``resnet_v1-<num_layers>`` weights (eval mode)."""
    nn = torch.nn
    units = {18: [2, 2, 2, 2], 34: [3, 4, 6, 3], 50: [3, 4, 6, 3]}[num_layers]
    bottleneck = num_layers >= 50

    def tensor(a):
        return torch.from_numpy(np.ascontiguousarray(a))

    def conv(name, stride=1, padding=0):
        w = params[f"{name}_weight"]
        if layout == "NHWC":
            w = w.transpose(3, 2, 0, 1)  # HWIO -> OIHW
        m = nn.Conv2d(w.shape[1], w.shape[0], tuple(w.shape[2:]), stride, padding, bias=False)
        m.weight.data.copy_(tensor(w))
        return m

    def bn(name):
        gamma = params[f"{name}_gamma"]
        m = nn.BatchNorm2d(gamma.shape[0], eps=1e-5)
        m.weight.data.copy_(tensor(gamma))
        m.bias.data.copy_(tensor(params[f"{name}_beta"]))
        m.running_mean.copy_(tensor(params[f"{name}_moving_mean"]))
        m.running_var.copy_(tensor(params[f"{name}_moving_var"]))
        return m

    def conv_bn(name, stride=1, padding=0, relu=True):
        layers = [conv(name, stride, padding), bn(f"{name}_bn")]
        if relu:
            layers.append(nn.ReLU(inplace=True))
        return nn.Sequential(*layers)

    class Block(nn.Module):
        def __init__(self, name, stride):
            super().__init__()
            if bottleneck:
                self.body = nn.Sequential(conv_bn(f"{name}_conv1"),
                                          conv_bn(f"{name}_conv2", stride, 1),
                                          conv_bn(f"{name}_conv3", relu=False))
            else:
                self.body = nn.Sequential(conv_bn(f"{name}_conv1", stride, 1),
                                          conv_bn(f"{name}_conv2", 1, 1, relu=False))
            self.down = (conv_bn(f"{name}_downsample", stride, relu=False)
                         if f"{name}_downsample_weight" in params else None)

        def forward(self, x):
            short = x if self.down is None else self.down(x)
            return torch.relu(self.body(x) + short)

    layers = [conv_bn("conv1", 2, 3), nn.MaxPool2d(3, 2, 1)]
    for i, n in enumerate(units):
        for j in range(n):
            layers.append(Block(f"layer{i + 1}_{j}", 2 if i > 0 and j == 0 else 1))
    fc = nn.Linear(params["fc_weight"].shape[1], params["fc_weight"].shape[0])
    fc.weight.data.copy_(tensor(params["fc_weight"]))
    fc.bias.data.copy_(tensor(params["fc_bias"]))
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), fc]
    return nn.Sequential(*layers).eval()


def time_cuda(torch, fn, min_repeat_ms: float = 500.0, repeat: int = 3) -> float:
    """Median seconds per call of ``fn`` (CUDA events; ``number`` grows until one repeat
    lasts ``min_repeat_ms``)."""
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def timed(number: int) -> float:
        start.record()
        for _ in range(number):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end)

    number = 1
    while timed(number) < min_repeat_ms and number < 1 << 20:
        number *= 2
    return float(np.median([timed(number) / number for _ in range(repeat)])) / 1e3


TORCH_DTYPES = {"float32": "float32", "tf32": "float32", "float16": "float16",
                "bfloat16": "bfloat16"}
"""The torch dtype a model runs in for each precision of ``graph.build``."""


def set_torch_precision(torch, precision: str) -> None:
    """PyTorch's TF32 switches as ``precision`` asks (on for ``"tf32"`` only), and
    ``cudnn.benchmark`` on."""
    tf32 = precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cudnn.benchmark = True


def to_precision(torch, model, precision: str, channels_last: bool = False):
    """``model`` on the GPU in the dtype of ``precision`` (``channels_last`` for CNNs)."""
    model = model.to(getattr(torch, TORCH_DTYPES[precision])).cuda()
    return model.to(memory_format=torch.channels_last) if channels_last else model


def compare_with_torch(args, params, x: np.ndarray, ours: np.ndarray, ours_s: float) -> None:
    """Run the same weights in PyTorch (eager, and captured in a CUDA graph) in the
    precision ``args.dtype`` (default float32), check its output against ``ours`` and print
    both times and their ratios."""
    try:
        import torch
    except ImportError:
        print("PyTorch comparison: torch is not importable here; skipped")
        return
    if not torch.cuda.is_available():
        print("PyTorch comparison: torch sees no CUDA device; skipped")
        return
    precision = getattr(args, "dtype", "float32")
    set_torch_precision(torch, precision)
    num_layers = int(args.network.split("-")[1])
    low = precision in ("float16", "bfloat16")
    model = to_precision(torch, torch_resnet_v1(torch, params, num_layers, args.layout),
                         precision, channels_last=low)
    xt = torch.from_numpy(x.transpose(0, 3, 1, 2) if args.layout == "NHWC" else x)
    xt = xt.contiguous().cuda().to(getattr(torch, TORCH_DTYPES[precision]))
    if low:
        xt = xt.to(memory_format=torch.channels_last)
    with torch.no_grad():
        ref = model(xt).float().cpu().numpy()
        err = float(np.abs(ref - ours).max() / max(np.abs(ref).max(), 1e-30))
        eager_s = time_cuda(torch, lambda: model(xt))
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(3):
                model(xt)
        torch.cuda.current_stream().wait_stream(stream)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            model(xt)
        graph_s = time_cuda(torch, g.replay)
    print(f"PyTorch {torch.__version__} (cuDNN {torch.backends.cudnn.version()}, {precision}, "
          f"cudnn.benchmark on), torchvision's {args.network} with the same weights, "
          f"{'channels_last' if low else 'NCHW'}; "
          f"largest difference of the outputs from ptxforge's: {err:.2e} of the largest")
    print(f"  ptxforge (CUDA graph)   {ours_s * 1e3:8.4f} ms")
    for what, s in (("PyTorch eager", eager_s), ("PyTorch CUDA graph", graph_s)):
        print(f"  {what:22s}  {s * 1e3:8.4f} ms   PyTorch / ptxforge = {s / ours_s:.2f}")
