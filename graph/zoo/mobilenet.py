"""MobileNet v1 (as ``tvm.relay.testing.mobilenet``) and MobileNet v2 (as torchvision)."""

from __future__ import annotations

from .. import opdefs as G
from ..ir import Node
from .layers import NetBuilder


def _separable(b: NetBuilder, x: Node, name: str, dw_channels: int, pw_channels: int,
               downsample: bool) -> Node:
    stride = 2 if downsample else 1
    y = b.conv_bn(x, f"{name}_depthwise", dw_channels, 3, stride, 1, groups=dw_channels)
    return b.conv_bn(y, f"{name}_pointwise", pw_channels, 1)


def mobilenet(batch: int, layout: str, dtype: str, image_size: int = 224,
              num_classes: int = 1000, alpha: float = 1.0, seed: int = 0):
    """MobileNet v1 with width multiplier ``alpha``; softmax output."""
    b = NetBuilder(layout, dtype, seed)
    data, shape = b.image(batch, 3, image_size)

    def c(n):
        return int(n * alpha)

    x = b.conv_bn(data, "conv_block_1", c(32), 3, 2, 1)
    blocks = [(32, 64, False), (64, 128, True), (128, 128, False), (128, 256, True),
              (256, 256, False), (256, 512, True)] + [(512, 512, False)] * 5 + [
                  (512, 1024, True), (1024, 1024, False)]
    for k, (dw, pw, down) in enumerate(blocks, start=1):
        x = _separable(b, x, f"separable_conv_block_{k}", c(dw), c(pw), down)
    return b.classifier(x, num_classes, "fc"), b.params, shape


_V2_SETTINGS = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                (6, 160, 3, 2), (6, 320, 1, 1)]


def mobilenet_v2(batch: int, layout: str, dtype: str, image_size: int = 224,
                 num_classes: int = 1000, alpha: float = 1.0, seed: int = 0):
    """MobileNet v2 (inverted residuals, ReLU6, linear bottlenecks); logits output."""
    b = NetBuilder(layout, dtype, seed)
    data, shape = b.image(batch, 3, image_size)

    def c(n):
        return max(8, int(n * alpha + 4) // 8 * 8)

    x = b.conv_bn(data, "features_0", c(32), 3, 2, 1, relu="relu6")
    index = 1
    for t, ch, n, s in _V2_SETTINGS:
        out_c = c(ch)
        for k in range(n):
            stride = s if k == 0 else 1
            inp = b.channels(x)
            hidden = inp * t
            name = f"features_{index}"
            y = x
            if t != 1:
                y = b.conv_bn(y, f"{name}_expand", hidden, 1, relu="relu6")
            y = b.conv_bn(y, f"{name}_depthwise", hidden, 3, stride, 1, groups=hidden,
                          relu="relu6")
            y = b.conv_bn(y, f"{name}_project", out_c, 1, relu=None)
            x = G.add(x, y) if stride == 1 and inp == out_c else y
            index += 1
    x = b.conv_bn(x, f"features_{index}", max(1280, c(1280)), 1, relu="relu6")
    flat = G.batch_flatten(b.global_pool(x))
    return b.dense(flat, "classifier", num_classes), b.params, shape
