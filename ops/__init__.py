"""The operator library (``ptxforge.ops``): TVM TOPI's computes, as te declarations.

Operators return te tensors whose stages carry TOPI's names, axis names and tags, so a
ComputeDAG prints as it does in TVM. ``ops.nn`` holds the neural-network operators;
element-wise, broadcast, reduction and layout operators live at the top level, as in
``topi``; ``ops.attention`` is scaled dot-product attention as one op with a fused
tensor-core kernel (``docs/attention.md``); ``ops.testing`` holds numpy references;
``ops.precision`` the TF32 switch (``ops.tf32(True)`` as a context,
``ops.allow_tf32(True)`` process-wide). Importing this
package makes ``Tensor + Tensor`` (and ``-``, ``*``, ``/``) build broadcast stages.
"""

from . import broadcast, nn, precision, reduction, tag, testing, transform
from .attention import attention
from .broadcast import (
    add,
    divide,
    floor_divide,
    floor_mod,
    maximum,
    minimum,
    multiply,
    power,
    subtract,
)
from .math import abs, cast, clip, erf, exp, log, negative, rsqrt, sigmoid, sqrt, tanh
from .precision import allow_tf32, tf32
from .reduction import max, mean, min, sum
from .transform import concatenate, expand_dims, reshape, squeeze, strided_slice, transpose

__all__ = [
    "broadcast", "nn", "precision", "reduction", "tag", "testing", "transform",
    "attention",
    "allow_tf32", "tf32",
    "add", "subtract", "multiply", "divide", "floor_divide", "floor_mod", "maximum",
    "minimum", "power",
    "abs", "cast", "clip", "erf", "exp", "log", "negative", "rsqrt", "sigmoid", "sqrt", "tanh",
    "sum", "max", "min", "mean",
    "reshape", "transpose", "concatenate", "strided_slice", "squeeze", "expand_dims",
]
