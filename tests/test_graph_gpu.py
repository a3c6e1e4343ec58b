"""Networks on a GPU: ResNet-18 (NHWC, batch 1, 224x224) against the reference executor,
a PyTorch ResNet-18 exported to ONNX against PyTorch, and GraphModule.benchmark."""

from __future__ import annotations

import inspect

import numpy as np
import ptxforge
import pytest
from ptxforge import graph

pytestmark = pytest.mark.gpu

RNG = np.random.default_rng(2024)


@pytest.fixture(scope="module")
def resnet18():
    net, params, in_shape, _ = graph.get_network("resnet-18", 1, "NHWC")
    return net, params, in_shape


@pytest.fixture(scope="module")
def resnet18_lib(resnet18):
    net, params, _ = resnet18
    return graph.build(net, "cuda", params)


def test_resnet18_nhwc_on_the_gpu_matches_the_reference(resnet18, resnet18_lib):
    net, params, in_shape = resnet18
    dev = ptxforge.cuda(0)
    m = graph.GraphModule(resnet18_lib, dev)
    for _ in range(2):  # the second run replays the captured graph on new input data
        x = RNG.standard_normal(in_shape).astype("float32")
        m.set_input("data", x)
        m.run()
        got = m.get_output(0).numpy()
        ref = graph.evaluate(net, {"data": x}, params)
        np.testing.assert_allclose(got, ref, rtol=1e-3, atol=1e-5)
        assert got.argmax() == ref.argmax()
    assert m.uses_cuda_graph, m.capture_error
    assert m.capture_streams > 1  # the downsampling convolutions beside the main path
    plain = graph.GraphModule(resnet18_lib, dev, use_cuda_graph=False)
    plain.set_input("data", x)
    plain.run()
    np.testing.assert_allclose(plain.get_output(0).numpy(), got, rtol=1e-5, atol=1e-7)


def test_benchmark_prints_the_summary(resnet18_lib, resnet18):
    dev = ptxforge.cuda(0)
    m = graph.GraphModule(resnet18_lib, dev)
    m.set_input("data", RNG.standard_normal(resnet18[2]).astype("float32"))
    result = m.benchmark(dev, repeat=3, min_repeat_ms=100)
    print(result)
    assert len(result.results) == 3 and 0 < result.min <= result.mean <= result.max
    assert "mean (ms)" in str(result)


def test_resnet18_with_winograd_on_the_gpu(resnet18):
    net, params, in_shape = resnet18
    dev = ptxforge.cuda(0)
    lib = graph.build(net, "cuda", params, winograd=True)
    m = graph.GraphModule(lib, dev)
    x = RNG.standard_normal(in_shape).astype("float32")
    m.set_input("data", x)
    m.run()
    ref = graph.evaluate(net, {"data": x}, params)
    np.testing.assert_allclose(m.get_output(0).numpy(), ref, rtol=2e-3, atol=2e-5)
    print("winograd:", m.benchmark(dev, repeat=3, min_repeat_ms=100))


def test_bert_layer_on_the_gpu():
    net, params, shape, _ = graph.get_network("bert", 1)
    dev = ptxforge.cuda(0)
    m = graph.GraphModule(graph.build(net, "cuda", params), dev)
    x = RNG.standard_normal(shape).astype("float32")
    m.set_input("data", x)
    m.run()
    ref = graph.evaluate(net, {"data": x}, params)
    np.testing.assert_allclose(m.get_output(0).numpy(), ref, rtol=1e-3, atol=1e-4)
    assert m.uses_cuda_graph and m.capture_streams > 1  # q, k and v side by side


def _torch_resnet18(torch):
    nn = torch.nn

    class BasicBlock(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.relu = nn.ReLU(inplace=True)
            self.downsample = None
            if stride != 1 or cin != cout:
                self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                                nn.BatchNorm2d(cout))

        def forward(self, x):
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            identity = x if self.downsample is None else self.downsample(x)
            return self.relu(out + identity)

    class ResNet18(nn.Module):
        def __init__(self, num_classes=1000):
            super().__init__()
            self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
            self.bn1 = nn.BatchNorm2d(64)
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(3, 2, 1)
            layers, cin = [], 64
            for i, cout in enumerate((64, 128, 256, 512)):
                stride = 1 if i == 0 else 2
                layers.append(nn.Sequential(BasicBlock(cin, cout, stride),
                                            BasicBlock(cout, cout, 1)))
                cin = cout
            self.layers = nn.Sequential(*layers)
            self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
            self.fc = nn.Linear(512, num_classes)

        def forward(self, x):
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.avgpool(self.layers(x))
            return self.fc(torch.flatten(x, 1))

    torch.manual_seed(0)
    model = ResNet18()
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):  # non-trivial inference statistics
            m.running_mean.uniform_(-0.1, 0.1)
            m.running_var.uniform_(0.8, 1.2)
            m.weight.data.uniform_(0.8, 1.2)
            m.bias.data.uniform_(-0.1, 0.1)
    return model.eval()


def test_pytorch_resnet18_through_onnx_matches_pytorch(tmp_path):
    torch = pytest.importorskip("torch")
    pytest.importorskip("onnx")
    model = _torch_resnet18(torch)
    x = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        expected = model(x).numpy()
    path = tmp_path / "resnet18.onnx"
    kwargs = {"opset_version": 13, "input_names": ["data"], "output_names": ["logits"]}
    if "dynamo" in inspect.signature(torch.onnx.export).parameters:
        kwargs["dynamo"] = False
    torch.onnx.export(model, (x,), str(path), **kwargs)
    net, params = graph.from_onnx(str(path), {"data": (1, 3, 224, 224)})
    dev = ptxforge.cuda(0)
    for layout in ("NHWC", None):
        lib = graph.build(net, "cuda", params, layout=layout)
        m = graph.GraphModule(lib, dev)
        m.set_input("data", x.numpy())
        m.run()
        got = m.get_output(0).numpy()
        scale = np.abs(expected).max()
        np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-3 * scale)
        assert got.argmax() == expected.argmax()


@pytest.mark.parametrize("precision,tol", [("float16", 1e-2), ("bfloat16", 4e-2),
                                           ("tf32", 5e-3)])
def test_resnet18_in_each_precision_on_the_gpu_matches_float32(resnet18, precision, tol):
    net, params, in_shape = resnet18
    lib = graph.build(net, "cuda", params, precision=precision)
    module = graph.GraphModule(lib, ptxforge.cuda(0))
    x = np.random.default_rng(15).standard_normal(in_shape).astype("float32")
    module.set_input("data", x)
    module.run()
    out = module.get_output(0).numpy()
    ref = graph.evaluate(net, {"data": x}, params)
    assert out.dtype == np.float32
    assert np.abs(out - ref).max() <= tol * np.abs(ref).max()
    assert (out.argmax(-1) == ref.argmax(-1)).all()
