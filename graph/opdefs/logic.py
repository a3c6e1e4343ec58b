"""Comparisons, logic, selection and float classification: ``equal``, ``less``, ...,
``logical_and``/``or``/``xor``/``not``, ``where``, ``isnan`` and ``isinf``.

Comparisons take two numbers of one dtype (or two bools for ``equal``) and give bool;
the logical operators take and give bool; ``where`` takes a bool condition and two values
of one dtype; all broadcast as numpy does.
"""

from __future__ import annotations

import numpy as np

from ...ops import logic
from ..ir import Call, Node, TensorType
from ..op import OpDef, OpPattern, register_op
from .common import broadcast_shapes, fail
from .mapping import BOOL, FLOATS, NUMBERS, expect_dtype, register_map, to_compute

_COMPARE = {
    "equal": (logic.equal, np.equal, NUMBERS + BOOL),
    "not_equal": (logic.not_equal, np.not_equal, NUMBERS + BOOL),
    "less": (logic.less, np.less, NUMBERS),
    "less_equal": (logic.less_equal, np.less_equal, NUMBERS),
    "greater": (logic.greater, np.greater, NUMBERS),
    "greater_equal": (logic.greater_equal, np.greater_equal, NUMBERS),
}


def _exact_compare(npfn):
    # 16-bit floats compare as their exact values (bfloat16 host arrays may be bit patterns)
    return lambda a, attrs: npfn(to_compute(a[0]), to_compute(a[1]))


for _name, (_te, _np, _dtypes) in _COMPARE.items():
    register_map(_name, 2, (lambda fn: lambda a, attrs: fn(a[0], a[1]))(_te),
                 _exact_compare(_np), _dtypes, out_dtype="bool")

_LOGICAL = {
    "logical_and": (logic.logical_and_, np.logical_and),
    "logical_or": (logic.logical_or_, np.logical_or),
    "logical_xor": (logic.logical_xor, np.logical_xor),
}
for _name, (_te, _np) in _LOGICAL.items():
    register_map(_name, 2, (lambda fn: lambda a, attrs: fn(a[0], a[1]))(_te),
                 (lambda fn: lambda a, attrs: fn(a[0], a[1]))(_np), BOOL)

register_map("logical_not", 1, lambda a, attrs: logic.logical_not(a[0]),
             lambda a, attrs: np.logical_not(a[0]), BOOL)
register_map("isnan", 1, lambda a, attrs: logic.isnan(a[0]),
             lambda a, attrs: np.isnan(to_compute(a[0])), FLOATS, out_dtype="bool")


def _isinf_ref(a, attrs):
    x = to_compute(a[0])
    pos = np.isposinf(x) if attrs["detect_positive"] else np.zeros(x.shape, bool)
    neg = np.isneginf(x) if attrs["detect_negative"] else np.zeros(x.shape, bool)
    return pos | neg


register_map("isinf", 1, lambda a, attrs: logic.isinf(
    a[0], attrs["detect_positive"], attrs["detect_negative"]), _isinf_ref, FLOATS,
    out_dtype="bool", defaults={"detect_positive": True, "detect_negative": True},
    normalize=lambda at: {k: bool(v) for k, v in at.items()})


def _where_infer(types, attrs):
    cond, x, y = types
    expect_dtype("where", "the condition", cond, BOOL)
    if x.dtype != y.dtype:
        fail("where", f"the two values have different dtypes {x.dtype} and {y.dtype}; cast "
                      "one of them first")
    shape = broadcast_shapes("where", broadcast_shapes("where", cond.shape, x.shape), y.shape)
    return TensorType(shape, x.dtype)


register_op(OpDef(
    name="where", num_inputs=3, infer=_where_infer,
    lower=lambda a, attrs: logic.where(a[0], a[1], a[2]),
    ref=lambda a, attrs: np.where(a[0], a[1], a[2]).astype(np.asarray(a[1]).dtype),
    pattern=OpPattern.BROADCAST,
))


def _binary_ctor(name: str):
    def ctor(lhs: Node, rhs: Node) -> Call:
        return Call(name, [lhs, rhs])

    ctor.__name__ = name
    ctor.__doc__ = f"Element-wise ``{name}`` with numpy broadcasting."
    return ctor


equal = _binary_ctor("equal")
not_equal = _binary_ctor("not_equal")
less = _binary_ctor("less")
less_equal = _binary_ctor("less_equal")
greater = _binary_ctor("greater")
greater_equal = _binary_ctor("greater_equal")
logical_and = _binary_ctor("logical_and")
logical_or = _binary_ctor("logical_or")
logical_xor = _binary_ctor("logical_xor")


def logical_not(x: Node) -> Call:
    """Element-wise negation of a bool tensor."""
    return Call("logical_not", [x])


def where(cond: Node, x: Node, y: Node) -> Call:
    """``x`` where ``cond`` holds, else ``y`` (all three broadcast)."""
    return Call("where", [cond, x, y])


def isnan(x: Node) -> Call:
    """Element-wise: is ``x`` NaN."""
    return Call("isnan", [x])


def isinf(x: Node, detect_positive: bool = True, detect_negative: bool = True) -> Call:
    """Element-wise: is ``x`` +inf (``detect_positive``) or -inf (``detect_negative``)."""
    return Call("isinf", [x], {"detect_positive": detect_positive,
                               "detect_negative": detect_negative})
