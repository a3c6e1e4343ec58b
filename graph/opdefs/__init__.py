"""The graph operators (importing this package registers them) and their constructors."""

from . import (  # noqa: F401  (element-wise math, logic, reductions)
    activation,
    arith,
    attention,
    conv,
    elemwise,
    linear,
    logic,
    norm,
    pool,
    reduce,
    transform,
    winograd,
)
from .conv import conv2d
from .elemwise import (
    add,
    cast,
    clip,
    divide,
    erf,
    exp,
    leaky_relu,
    log,
    maximum,
    minimum,
    multiply,
    negative,
    power,
    relu,
    rsqrt,
    sigmoid,
    sqrt,
    subtract,
    tanh,
)
from .linear import batch_matmul, bias_add, dense, matmul
from .norm import batch_norm, layer_norm, softmax
from .rms_norm import rms_norm
from .pool import avg_pool2d, global_avg_pool2d, global_max_pool2d, max_pool2d
from .transform import (
    VIEW_OPS,
    batch_flatten,
    concatenate,
    expand_dims,
    mean,
    pad,
    reshape,
    squeeze,
    strided_slice,
    transpose,
)
from .winograd import conv2d_winograd, winograd_weight_transform

__all__ = [
    "VIEW_OPS", "attention", "conv", "linear", "elemwise", "norm", "pool", "transform", "winograd",
    "add", "avg_pool2d", "batch_flatten", "batch_matmul", "batch_norm", "bias_add", "cast",
    "clip",
    "concatenate", "conv2d", "conv2d_winograd", "dense", "divide", "erf", "exp", "expand_dims",
    "global_avg_pool2d", "global_max_pool2d", "layer_norm", "leaky_relu", "log", "matmul",
    "max_pool2d", "maximum", "mean", "minimum", "multiply", "negative", "pad", "power",
    "relu", "reshape", "rsqrt", "sigmoid", "softmax", "sqrt", "squeeze", "strided_slice",
    "subtract", "tanh",
    "transpose", "winograd_weight_transform",
]
__all__ += ["rms_norm"]
