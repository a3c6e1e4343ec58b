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


def cuda_graph(torch, fn):
    """``fn`` captured in a CUDA graph (after warm-up on a side stream); returns replay."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g.replay


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


def _sym_padding(torch, x, padding: tuple, value: float = 0.0):
    """(x, (pad_h, pad_w)) for torch's symmetric padding argument; asymmetric padding is
    applied to ``x`` first."""
    top, left, bottom, right = padding
    if top == bottom and left == right:
        return x, (top, left)
    return torch.nn.functional.pad(x, (left, right, top, bottom), value=value), (0, 0)


def torch_twin(torch, net, params: dict | None = None):
    """A ``torch.nn.Module`` that computes the graph ``net`` (NCHW convolutions and pools,
    before fusion) op by op with PyTorch's functional operators (cuDNN convolutions,
    cuBLAS products), its weights (``params`` and the graph's constants) as buffers, so
    ``.half()``, ``.to(memory_format=...)`` and ``torch.compile`` apply as to any model.
    The forward takes the graph's inputs positionally."""
    from .ir import Call, Constant, Var

    F = torch.nn.functional
    params = params or {}
    nodes = net.nodes()
    inputs = [p for p in net.params if p.name not in params]

    class Twin(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.slots: dict[int, str | float] = {}
            for k, n in enumerate(nodes):
                value = None
                if isinstance(n, Var) and n.name in params:
                    value = np.asarray(params[n.name])
                elif isinstance(n, Constant):
                    if n.value.size == 1:
                        self.slots[id(n)] = float(n.value.reshape(()))
                        continue
                    value = n.value
                if value is not None:
                    name = f"w{k}"
                    self.register_buffer(name, torch.from_numpy(
                        np.ascontiguousarray(value, dtype=np.float32)))
                    self.slots[id(n)] = name

        def forward(self, *xs):
            env: dict[int, object] = {id(p): x for p, x in zip(inputs, xs)}
            for n in nodes:
                if id(n) in env:
                    continue
                if id(n) in self.slots:
                    s = self.slots[id(n)]
                    env[id(n)] = getattr(self, s) if isinstance(s, str) else s
                    continue
                if isinstance(n, Call):
                    env[id(n)] = _torch_op(torch, F, n, [env[id(a)] for a in n.args])
            outs = [env[id(o)] for o in net.outputs]
            return outs[0] if len(outs) == 1 else tuple(outs)

    return Twin().eval()


def _to_out_dtype(torch, x, attrs):
    """``x`` rounded to the operator's ``out_dtype`` (softmax, layer norm), if it has one."""
    out = attrs.get("out_dtype")
    return x.to(getattr(torch, out)) if out else x


def _torch_op(torch, F, call, a):
    op, at = call.op, call.attrs
    if op == "nn.conv2d":
        if at["data_layout"] != "NCHW":
            raise ValueError("torch_twin takes NCHW networks (build ours with layout='NHWC')")
        x, pad = _sym_padding(torch, a[0], at["padding"])
        return F.conv2d(x, a[1], None, at["strides"], pad, at["dilation"], at["groups"])
    if op == "nn.batch_norm":
        if at["axis"] % call.ndim != 1:
            raise ValueError("torch_twin: batch norm along the channel axis 1 only")
        gamma = a[1] if at["scale"] else None
        beta = a[2] if at["center"] else None
        return F.batch_norm(a[0], a[3], a[4], gamma, beta, False, 0.0, at["epsilon"])
    if op in ("nn.max_pool2d", "nn.avg_pool2d"):
        x, pad = _sym_padding(torch, a[0], at["padding"],
                              float("-inf") if op == "nn.max_pool2d" else 0.0)
        if op == "nn.max_pool2d":
            return F.max_pool2d(x, at["pool_size"], at["strides"], pad, at["dilation"],
                                ceil_mode=at["ceil_mode"])
        return F.avg_pool2d(x, at["pool_size"], at["strides"], pad, ceil_mode=at["ceil_mode"],
                            count_include_pad=at["count_include_pad"])
    if op == "nn.global_avg_pool2d":
        return F.adaptive_avg_pool2d(a[0], 1)
    if op == "nn.global_max_pool2d":
        return F.adaptive_max_pool2d(a[0], 1)
    if op == "nn.dense":
        return F.linear(a[0], a[1])
    if op == "nn.bias_add":
        shape = [1] * call.ndim
        shape[at["axis"] % call.ndim] = -1
        return a[0] + a[1].reshape(shape)
    if op == "nn.batch_matmul":
        x = a[0].transpose(1, 2) if at["transpose_a"] else a[0]
        y = a[1].transpose(1, 2) if at["transpose_b"] else a[1]
        return torch.bmm(x, y)
    if op == "nn.matmul":
        x = a[0].t() if at["transpose_a"] else a[0]
        y = a[1].t() if at["transpose_b"] else a[1]
        return x @ y
    if op == "nn.softmax":
        return _to_out_dtype(torch, torch.softmax(a[0], at["axis"]), at)
    if op == "nn.layer_norm":
        if at["axis"] % call.ndim != call.ndim - 1:
            raise ValueError("torch_twin: layer norm over the last axis only")
        return _to_out_dtype(torch, F.layer_norm(a[0], (call.shape[-1],), a[1], a[2],
                                                 at["epsilon"]), at)
    simple = {
        "add": lambda: a[0] + a[1], "subtract": lambda: a[0] - a[1],
        "multiply": lambda: a[0] * a[1], "divide": lambda: a[0] / a[1],
        "maximum": lambda: torch.maximum(a[0], torch.as_tensor(a[1]).to(a[0])),
        "minimum": lambda: torch.minimum(a[0], torch.as_tensor(a[1]).to(a[0])),
        "nn.relu": lambda: F.relu(a[0]), "clip": lambda: a[0].clamp(at["a_min"], at["a_max"]),
        "erf": lambda: torch.erf(a[0]), "tanh": lambda: torch.tanh(a[0]),
        "sigmoid": lambda: torch.sigmoid(a[0]), "exp": lambda: torch.exp(a[0]),
        "sqrt": lambda: torch.sqrt(a[0]), "rsqrt": lambda: torch.rsqrt(a[0]),
        "negative": lambda: -a[0], "nn.leaky_relu": lambda: F.leaky_relu(a[0], at["alpha"]),
        "reshape": lambda: a[0].reshape(call.shape),
        "nn.batch_flatten": lambda: a[0].reshape(call.shape),
        "squeeze": lambda: a[0].reshape(call.shape),
        "expand_dims": lambda: a[0].reshape(call.shape),
        "transpose": lambda: a[0].permute(*(at["axes"] or range(call.ndim - 1, -1, -1))),
        "concatenate": lambda: torch.cat(a, at["axis"]),
    }
    if op not in simple:
        raise ValueError(f"torch_twin has no PyTorch form of {op}")
    return simple[op]()
