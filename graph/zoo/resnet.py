"""ResNet: ``resnet-18/34/50`` as ``tvm.relay.testing.resnet`` builds it (pre-activation
residual units, a batch norm on the input, softmax at the end), and ``resnet_v1-18/34/50``
as torchvision builds it (conv, batch norm, ReLU; the residual add before the last ReLU),
the network PyTorch users benchmark."""

from __future__ import annotations

from .. import opdefs as G
from ..ir import GraphError, Node
from .layers import NetBuilder

_SPECS = {18: ([2, 2, 2, 2], False), 34: ([3, 4, 6, 3], False), 50: ([3, 4, 6, 3], True),
          101: ([3, 4, 23, 3], True), 152: ([3, 8, 36, 3], True)}


def _spec(num_layers: int):
    if num_layers not in _SPECS:
        raise GraphError(f"no resnet with {num_layers} layers; choose one of {sorted(_SPECS)}")
    units, bottleneck = _SPECS[num_layers]
    filters = [64, 256, 512, 1024, 2048] if bottleneck else [64, 64, 128, 256, 512]
    return units, bottleneck, filters


def _unit_v2(b: NetBuilder, x: Node, filters: int, stride: int, dim_match: bool, name: str,
             bottleneck: bool) -> Node:
    eps = 2e-5
    act1 = G.relu(b.batch_norm(x, f"{name}_bn1", eps))
    if bottleneck:
        c = filters // 4
        y = b.conv(act1, f"{name}_conv1", c, 1, stride)
        y = b.conv(G.relu(b.batch_norm(y, f"{name}_bn2", eps)), f"{name}_conv2", c, 3, 1, 1)
        y = b.conv(G.relu(b.batch_norm(y, f"{name}_bn3", eps)), f"{name}_conv3", filters, 1,
                   gain=0.5)
    else:
        y = b.conv(act1, f"{name}_conv1", filters, 3, stride, 1)
        y = b.conv(G.relu(b.batch_norm(y, f"{name}_bn2", eps)), f"{name}_conv2", filters, 3,
                   1, 1, gain=0.5)
    shortcut = x if dim_match else b.conv(act1, f"{name}_sc", filters, 1, stride)
    return G.add(y, shortcut)


def resnet(num_layers: int, batch: int, layout: str, dtype: str, image_size: int = 224,
           num_classes: int = 1000, seed: int = 0):
    """relay.testing's ResNet; inputs of 32x32 or smaller get the CIFAR stem (a 3x3 conv
    and no pooling), as there."""
    units, bottleneck, filters = _spec(num_layers)
    b = NetBuilder(layout, dtype, seed)
    data, shape = b.image(batch, 3, image_size)
    x = b.batch_norm(data, "bn_data", 2e-5, scale=False)
    if image_size <= 32:
        x = b.conv(x, "conv0", filters[0], 3, 1, 1)
    else:
        x = b.conv(x, "conv0", filters[0], 7, 2, 3)
        x = G.relu(b.batch_norm(x, "bn0", 2e-5))
        x = b.max_pool(x, 3, 2, 1)
    for i, n in enumerate(units):
        stride = 1 if i == 0 else 2
        x = _unit_v2(b, x, filters[i + 1], stride, False, f"stage{i + 1}_unit1", bottleneck)
        for j in range(n - 1):
            x = _unit_v2(b, x, filters[i + 1], 1, True, f"stage{i + 1}_unit{j + 2}", bottleneck)
    x = G.relu(b.batch_norm(x, "bn1", 2e-5))
    return b.classifier(x, num_classes), b.params, shape


def _block_v1(b: NetBuilder, x: Node, planes: int, stride: int, name: str,
              bottleneck: bool) -> Node:
    if bottleneck:
        out_c = planes * 4
        y = b.conv_bn(x, f"{name}_conv1", planes, 1)
        y = b.conv_bn(y, f"{name}_conv2", planes, 3, stride, 1)
        y = b.conv_bn(y, f"{name}_conv3", out_c, 1, relu=None, gain=0.5)
    else:
        out_c = planes
        y = b.conv_bn(x, f"{name}_conv1", planes, 3, stride, 1)
        y = b.conv_bn(y, f"{name}_conv2", planes, 3, 1, 1, relu=None, gain=0.5)
    shortcut = x
    if stride != 1 or b.channels(x) != out_c:
        shortcut = b.conv_bn(x, f"{name}_downsample", out_c, 1, stride, relu=None)
    return G.relu(G.add(y, shortcut))


def resnet_v1(num_layers: int, batch: int, layout: str, dtype: str, image_size: int = 224,
              num_classes: int = 1000, seed: int = 0):
    """torchvision's ResNet (logits, no softmax)."""
    units, bottleneck, _ = _spec(num_layers)
    b = NetBuilder(layout, dtype, seed)
    data, shape = b.image(batch, 3, image_size)
    x = b.conv_bn(data, "conv1", 64, 7, 2, 3)
    x = b.max_pool(x, 3, 2, 1)
    for i, n in enumerate(units):
        planes = 64 * 2**i
        for j in range(n):
            stride = 2 if i > 0 and j == 0 else 1
            x = _block_v1(b, x, planes, stride, f"layer{i + 1}_{j}", bottleneck)
    flat = G.batch_flatten(b.global_pool(x))
    return b.dense(flat, "fc", num_classes), b.params, shape
