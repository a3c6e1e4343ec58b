"""Small pieces the converters share: operands of a dtype, axes, broadcasting."""

from __future__ import annotations

import numpy as np

from ..ir import Constant, Node


def is_node(x) -> bool:
    return isinstance(x, Node)


def operand(cx, x, dtype: str) -> Node:
    """``x`` (a graph node or a Python number) as a node of ``dtype``."""
    if isinstance(x, Node):
        return x if x.dtype == dtype else cx.call("cast", [x], {"dtype": dtype})
    if isinstance(x, (bool, int, float)):
        return cx.const(x, dtype)
    cx.fail(f"expected a tensor or a number, got {type(x).__name__} {x!r}")


def promoted(cx) -> str:
    """The dtype the node computes in: its output dtype (torch's type promotion)."""
    return cx.out_dtype()


def axes_of(dim, ndim: int) -> tuple[int, ...]:
    """``dim`` (an int, ints, or None/[] for all) as sorted non-negative axes."""
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return tuple(range(ndim))
    dims = [dim] if isinstance(dim, int) else list(dim)
    return tuple(sorted({d % ndim if ndim else 0 for d in dims}))


def numel(shape) -> int:
    return int(np.prod(shape, dtype=np.int64))


def reshape(cx, x: Node, shape) -> Node:
    shape = tuple(int(s) for s in shape)
    if tuple(x.shape) == shape:
        return x
    return cx.call("reshape", [x], {"newshape": shape})


def broadcast_to(cx, x: Node, shape) -> Node:
    """``x`` broadcast to ``shape`` (numpy rules)."""
    shape = tuple(int(s) for s in shape)
    if tuple(x.shape) == shape:
        return x
    if "broadcast_to" in cx.registered:
        return cx.call("broadcast_to", [x], {"shape": shape})
    lead = len(shape) - x.ndim
    if lead:
        x = reshape(cx, x, (1,) * lead + tuple(x.shape))
    ones_shape = []
    for have, want in zip(x.shape, shape):
        if have != want and have != 1:
            cx.fail(f"cannot broadcast {list(x.shape)} to {list(shape)}")
        ones_shape.append(want if have == 1 else 1)
    # a product with ones of the broadcast extents: exact (signed zeros and NaNs kept), and
    # a broadcast op that fuses into its readers
    if x.dtype == "bool":
        wide = cx.call("cast", [x], {"dtype": "int8"})
        out = cx.call("multiply", [wide, cx.const(np.ones(ones_shape), "int8")])
        return cx.call("cast", [out], {"dtype": "bool"})
    return cx.call("multiply", [x, cx.const(np.ones(ones_shape), x.dtype)])


def const_like(cx, value: np.ndarray, name: str = "") -> Constant:
    return Constant(np.asarray(value), name)
