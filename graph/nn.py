"""Neural-network operator constructors (``graph.nn.conv2d`` and friends), as
``relay.nn``."""

from .opdefs import (
    avg_pool2d,
    batch_flatten,
    batch_matmul,
    batch_norm,
    bias_add,
    conv2d,
    conv2d_winograd,
    dense,
    global_avg_pool2d,
    global_max_pool2d,
    layer_norm,
    leaky_relu,
    matmul,
    max_pool2d,
    pad,
    relu,
    softmax,
    winograd_weight_transform,
)

__all__ = [
    "avg_pool2d", "batch_flatten", "batch_matmul", "batch_norm", "bias_add", "conv2d",
    "conv2d_winograd", "dense", "global_avg_pool2d", "global_max_pool2d", "layer_norm",
    "leaky_relu", "matmul", "max_pool2d", "pad", "relu", "softmax", "winograd_weight_transform",
]
