"""Neural-network operators (``ptxforge.ops.nn``), named as in TVM's ``topi.nn``."""

from .batch_matmul import batch_matmul
from .batch_norm import batch_norm
from .bias_add import bias_add
from .conv2d import conv2d, conv2d_nchw, conv2d_nhwc
from .dense import dense, matmul
from .depthwise_conv2d import depthwise_conv2d_nchw, depthwise_conv2d_nhwc
from .elemwise import leaky_relu, relu
from .flatten import batch_flatten, flatten
from .pad import pad
from .pooling import (
    avg_pool2d,
    global_avg_pool2d,
    global_max_pool2d,
    global_pool2d,
    max_pool2d,
    pool2d,
)
from .softmax import softmax
from .utils import get_pad_tuple

__all__ = [
    "avg_pool2d", "batch_flatten", "batch_matmul", "batch_norm", "bias_add", "conv2d",
    "conv2d_nchw", "conv2d_nhwc", "dense", "depthwise_conv2d_nchw", "depthwise_conv2d_nhwc",
    "flatten", "get_pad_tuple", "global_avg_pool2d", "global_max_pool2d", "global_pool2d",
    "leaky_relu", "matmul", "max_pool2d", "pad", "pool2d", "relu", "softmax",
]
