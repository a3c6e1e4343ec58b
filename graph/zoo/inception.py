"""Inception v3 (torchvision's layers, without the auxiliary classifier); 299x299 inputs."""

from __future__ import annotations

from ..ir import Node
from .layers import NetBuilder

_EPS = 1e-3


def _conv(b: NetBuilder, x: Node, name: str, channels: int, kernel, strides=1, padding=0):
    return b.conv_bn(x, name, channels, kernel, strides, padding, epsilon=_EPS)


def _pool_branch(b, x, name, channels):
    return _conv(b, b.avg_pool(x, 3, 1, 1, count_include_pad=True), name, channels, 1)


def _inception_a(b, x, name, pool_features):
    b1 = _conv(b, x, f"{name}_branch1x1", 64, 1)
    b5 = _conv(b, _conv(b, x, f"{name}_branch5x5_1", 48, 1), f"{name}_branch5x5_2", 64, 5, 1, 2)
    b3 = _conv(b, x, f"{name}_branch3x3dbl_1", 64, 1)
    b3 = _conv(b, b3, f"{name}_branch3x3dbl_2", 96, 3, 1, 1)
    b3 = _conv(b, b3, f"{name}_branch3x3dbl_3", 96, 3, 1, 1)
    return b.concat([b1, b5, b3, _pool_branch(b, x, f"{name}_branch_pool", pool_features)])


def _inception_b(b, x, name):
    b3 = _conv(b, x, f"{name}_branch3x3", 384, 3, 2)
    bd = _conv(b, x, f"{name}_branch3x3dbl_1", 64, 1)
    bd = _conv(b, bd, f"{name}_branch3x3dbl_2", 96, 3, 1, 1)
    bd = _conv(b, bd, f"{name}_branch3x3dbl_3", 96, 3, 2)
    return b.concat([b3, bd, b.max_pool(x, 3, 2)])


def _inception_c(b, x, name, c7):
    b1 = _conv(b, x, f"{name}_branch1x1", 192, 1)
    b7 = _conv(b, x, f"{name}_branch7x7_1", c7, 1)
    b7 = _conv(b, b7, f"{name}_branch7x7_2", c7, (1, 7), 1, (0, 3))
    b7 = _conv(b, b7, f"{name}_branch7x7_3", 192, (7, 1), 1, (3, 0))
    bd = _conv(b, x, f"{name}_branch7x7dbl_1", c7, 1)
    bd = _conv(b, bd, f"{name}_branch7x7dbl_2", c7, (7, 1), 1, (3, 0))
    bd = _conv(b, bd, f"{name}_branch7x7dbl_3", c7, (1, 7), 1, (0, 3))
    bd = _conv(b, bd, f"{name}_branch7x7dbl_4", c7, (7, 1), 1, (3, 0))
    bd = _conv(b, bd, f"{name}_branch7x7dbl_5", 192, (1, 7), 1, (0, 3))
    return b.concat([b1, b7, bd, _pool_branch(b, x, f"{name}_branch_pool", 192)])


def _inception_d(b, x, name):
    b3 = _conv(b, _conv(b, x, f"{name}_branch3x3_1", 192, 1), f"{name}_branch3x3_2", 320, 3, 2)
    b7 = _conv(b, x, f"{name}_branch7x7x3_1", 192, 1)
    b7 = _conv(b, b7, f"{name}_branch7x7x3_2", 192, (1, 7), 1, (0, 3))
    b7 = _conv(b, b7, f"{name}_branch7x7x3_3", 192, (7, 1), 1, (3, 0))
    b7 = _conv(b, b7, f"{name}_branch7x7x3_4", 192, 3, 2)
    return b.concat([b3, b7, b.max_pool(x, 3, 2)])


def _inception_e(b, x, name):
    b1 = _conv(b, x, f"{name}_branch1x1", 320, 1)
    b3 = _conv(b, x, f"{name}_branch3x3_1", 384, 1)
    b3 = b.concat([_conv(b, b3, f"{name}_branch3x3_2a", 384, (1, 3), 1, (0, 1)),
                   _conv(b, b3, f"{name}_branch3x3_2b", 384, (3, 1), 1, (1, 0))])
    bd = _conv(b, x, f"{name}_branch3x3dbl_1", 448, 1)
    bd = _conv(b, bd, f"{name}_branch3x3dbl_2", 384, 3, 1, 1)
    bd = b.concat([_conv(b, bd, f"{name}_branch3x3dbl_3a", 384, (1, 3), 1, (0, 1)),
                   _conv(b, bd, f"{name}_branch3x3dbl_3b", 384, (3, 1), 1, (1, 0))])
    return b.concat([b1, b3, bd, _pool_branch(b, x, f"{name}_branch_pool", 192)])


def inception_v3(batch: int, layout: str, dtype: str, image_size: int = 299,
                 num_classes: int = 1000, seed: int = 0):
    """Inception v3; logits output."""
    b = NetBuilder(layout, dtype, seed)
    data, shape = b.image(batch, 3, image_size)
    x = _conv(b, data, "Conv2d_1a_3x3", 32, 3, 2)
    x = _conv(b, x, "Conv2d_2a_3x3", 32, 3)
    x = _conv(b, x, "Conv2d_2b_3x3", 64, 3, 1, 1)
    x = b.max_pool(x, 3, 2)
    x = _conv(b, x, "Conv2d_3b_1x1", 80, 1)
    x = _conv(b, x, "Conv2d_4a_3x3", 192, 3)
    x = b.max_pool(x, 3, 2)
    x = _inception_a(b, x, "Mixed_5b", 32)
    x = _inception_a(b, x, "Mixed_5c", 64)
    x = _inception_a(b, x, "Mixed_5d", 64)
    x = _inception_b(b, x, "Mixed_6a")
    for name, c7 in (("Mixed_6b", 128), ("Mixed_6c", 160), ("Mixed_6d", 160), ("Mixed_6e", 192)):
        x = _inception_c(b, x, name, c7)
    x = _inception_d(b, x, "Mixed_7a")
    x = _inception_e(b, x, "Mixed_7b")
    x = _inception_e(b, x, "Mixed_7c")
    from .. import opdefs as G

    flat = G.batch_flatten(b.global_pool(x))
    return b.dense(flat, "fc", num_classes), b.params, shape
