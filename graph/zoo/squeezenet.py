"""SqueezeNet 1.0 and 1.1, as ``tvm.relay.testing.squeezenet``."""

from __future__ import annotations

from .. import opdefs as G
from ..ir import GraphError, Node
from .layers import NetBuilder


def _fire(b: NetBuilder, x: Node, name: str, squeeze: int, expand1: int, expand3: int) -> Node:
    s = G.relu(b.conv(x, f"{name}_squeeze", squeeze, 1, bias=True))
    e1 = G.relu(b.conv(s, f"{name}_expand1x1", expand1, 1, bias=True))
    e3 = G.relu(b.conv(s, f"{name}_expand3x3", expand3, 3, 1, 1, bias=True))
    return b.concat([e1, e3])


def squeezenet(version: str, batch: int, layout: str, dtype: str, image_size: int = 224,
               num_classes: int = 1000, seed: int = 0):
    """SqueezeNet ``version`` "1.0" or "1.1"; softmax output."""
    b = NetBuilder(layout, dtype, seed)
    data, shape = b.image(batch, 3, image_size)
    if version == "1.0":
        x = G.relu(b.conv(data, "conv1", 96, 7, 2, 0, bias=True))
        x = b.max_pool(x, 3, 2)
        x = _fire(b, x, "fire2", 16, 64, 64)
        x = _fire(b, x, "fire3", 16, 64, 64)
        x = _fire(b, x, "fire4", 32, 128, 128)
        x = b.max_pool(x, 3, 2)
        x = _fire(b, x, "fire5", 32, 128, 128)
        x = _fire(b, x, "fire6", 48, 192, 192)
        x = _fire(b, x, "fire7", 48, 192, 192)
        x = _fire(b, x, "fire8", 64, 256, 256)
        x = b.max_pool(x, 3, 2)
        x = _fire(b, x, "fire9", 64, 256, 256)
    elif version == "1.1":
        x = G.relu(b.conv(data, "conv1", 64, 3, 2, 0, bias=True))
        x = b.max_pool(x, 3, 2)
        x = _fire(b, x, "fire2", 16, 64, 64)
        x = _fire(b, x, "fire3", 16, 64, 64)
        x = b.max_pool(x, 3, 2)
        x = _fire(b, x, "fire4", 32, 128, 128)
        x = _fire(b, x, "fire5", 32, 128, 128)
        x = b.max_pool(x, 3, 2)
        x = _fire(b, x, "fire6", 48, 192, 192)
        x = _fire(b, x, "fire7", 48, 192, 192)
        x = _fire(b, x, "fire8", 64, 256, 256)
        x = _fire(b, x, "fire9", 64, 256, 256)
    else:
        raise GraphError(f"squeezenet version must be '1.0' or '1.1', got {version!r}")
    x = G.relu(b.conv(x, "conv_final", num_classes, 1, bias=True))
    flat = G.batch_flatten(b.global_pool(x))
    return G.softmax(flat), b.params, shape
