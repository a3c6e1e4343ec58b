"""Stage tags, as TVM's TOPI writes them.

A tag tells later passes (operator fusion, the auto-scheduler's sketch rules) what kind of
stage a compute is without looking at its body. The pattern tags are ordered from the most
restrictive (``elemwise``) to the least (``injective``); compound tags such as
``"injective,pad"`` start with their pattern.
"""

from __future__ import annotations

ELEMWISE = "elemwise"
"""Each output element reads the same index of every input."""

BROADCAST = "broadcast"
"""Like elemwise, but some inputs are read with dimensions dropped or fixed at 0."""

INJECTIVE = "injective"
"""Each output element reads one element of each input, at an arbitrary index."""

COMM_REDUCE = "comm_reduce"
"""A commutative reduction over some axes (sum, max, min)."""

COMM_REDUCE_IDX = "comm_reduce_idx"
"""A reduction that returns indices (argmax, argmin)."""

PAD = INJECTIVE + ",pad"
"""A constant-padding stage."""

CONV2D_NCHW = "conv2d_nchw"
CONV2D_NHWC = "conv2d_nhwc"
DEPTHWISE_CONV2D_NCHW = "depthwise_conv2d_nchw"
DEPTHWISE_CONV2D_NHWC = "depthwise_conv2d_nhwc"
DENSE = "dense"
MATMUL = "matmul"
BATCH_MATMUL = "batch_matmul"
POOL_MAX = "pool_max"
POOL_SUM = "pool_sum"
ADAPTIVE_POOL_MAX = "adaptive_pool_max"
ADAPTIVE_POOL_SUM = "adaptive_pool_sum"
SOFTMAX = "softmax_output"

_PATTERN_ORDER = (ELEMWISE, BROADCAST, INJECTIVE)


def is_elemwise(tag: str) -> bool:
    """True for element-wise stages."""
    return tag.split(",")[0] == ELEMWISE


def is_broadcast(tag: str) -> bool:
    """True for element-wise and broadcast stages."""
    return tag.split(",")[0] in (ELEMWISE, BROADCAST)


def is_injective(tag: str) -> bool:
    """True for every stage that reads one element of each input per output element."""
    return tag.split(",")[0] in _PATTERN_ORDER


def is_pad(tag: str) -> bool:
    """True for the padding stages the convolutions and pools create."""
    return "pad" in tag.split(",")[1:]
