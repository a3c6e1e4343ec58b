"""Helpers the operator definitions share: attribute canonicalization and type checks."""

from __future__ import annotations

from contextlib import contextmanager
from typing import NoReturn

from ..ir import GraphError, TensorType


def fail(op: str, message: str) -> NoReturn:
    raise GraphError(f"{op}: {message}")


def pair(op: str, what: str, value) -> tuple[int, int]:
    """An int or a pair of ints as a pair of positive ints."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = (value, value)
    try:
        a, b = (int(v) for v in value)
    except (TypeError, ValueError):
        fail(op, f"{what} must be an int or a pair of ints, got {value!r}")
    if a < 1 or b < 1:
        fail(op, f"{what} must be positive, got {value!r}")
    return a, b


def padding4(op: str, value) -> tuple[int, int, int, int]:
    """Padding as (top, left, bottom, right) from an int, (height, width) or a 4-tuple."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = (value,) * 4
    try:
        vals = tuple(int(v) for v in value)
    except (TypeError, ValueError):
        fail(op, f"padding must be an int, a pair or a 4-tuple of ints, got {value!r}")
    if len(vals) == 2:
        vals = (vals[0], vals[1], vals[0], vals[1])
    if len(vals) != 4 or any(v < 0 for v in vals):
        fail(op, f"padding must be non-negative (top, left, bottom, right), got {value!r}")
    return vals  # type: ignore[return-value]


def expect_rank(op: str, what: str, ty: TensorType, ndim: int, layout: str = "") -> None:
    if ty.ndim != ndim:
        desc = f" ({layout})" if layout else ""
        fail(op, f"{what} must be {ndim}-D{desc}, got {ty}")


def expect_float(op: str, what: str, ty: TensorType) -> None:
    if not ty.dtype.startswith(("float", "bfloat")):
        fail(op, f"{what} must have a float dtype, got {ty.dtype}")


@contextmanager
def as_graph_error():
    """Re-raise the ``TEError`` of a check the ops layer makes (``"<op>: <message>"``) as the
    ``GraphError`` the operator definitions raise, with the same message."""
    from ...ir.te import TEError

    try:
        yield
    except TEError as e:
        raise GraphError(str(e)) from None


def rounded_output(op: str, data: TensorType, attrs: dict) -> str:
    """The output dtype of a row normalization (softmax, layer norm) on ``data``:
    ``attrs["out_dtype"]`` when set (a float dtype no wider than the data's; the operator
    computes as before and rounds once at its output), else the data's dtype."""
    from ...ops.utils import rounded_output_dtype

    with as_graph_error():
        return rounded_output_dtype(op, data.dtype, attrs["out_dtype"])


def empty_out_dtype(attrs: dict) -> dict:
    """Attribute normalization: ``out_dtype=None`` means the default, ``""``."""
    if attrs.get("out_dtype") is None:
        attrs = {**attrs, "out_dtype": ""}
    return attrs


def same_dtype(op: str, types: list[TensorType]) -> str:
    dtypes = {t.dtype for t in types}
    if len(dtypes) != 1:
        fail(op, f"arguments have different dtypes {sorted(dtypes)}; cast them first")
    return types[0].dtype


def axis_index(op: str, axis, ndim: int) -> int:
    if isinstance(axis, bool) or not isinstance(axis, int):
        fail(op, f"axis must be an int, got {axis!r}")
    if not -ndim <= axis < ndim:
        fail(op, f"axis {axis} is out of range for a {ndim}-D tensor")
    return axis % ndim


def window_out(op: str, size: int, k: int, stride: int, dilation: int, before: int, after: int,
               what: str, ceil_mode: bool = False) -> int:
    """Output extent of a sliding window along one dimension."""
    dilated = (k - 1) * dilation + 1
    padded = size + before + after
    if dilated > padded:
        fail(op, f"the window {what} {k} (dilated to {dilated}) is larger than the padded input "
                 f"{what} {padded}")
    if ceil_mode:
        return (padded - dilated + stride - 1) // stride + 1
    return (padded - dilated) // stride + 1


def broadcast_shapes(op: str, a: tuple, b: tuple) -> tuple:
    out = []
    for k in range(1, max(len(a), len(b)) + 1):
        da = a[-k] if k <= len(a) else 1
        db = b[-k] if k <= len(b) else 1
        if da != db and 1 not in (da, db):
            fail(op, f"shapes {list(a)} and {list(b)} do not broadcast: dimension {-k} is {da} "
                     f"in one and {db} in the other")
        out.append(db if da == 1 else da)
    return tuple(reversed(out))


MATRIX_PRECISIONS = ("", "float32", "tf32")
"""Values of the ``precision`` attribute of the matrix operators ("": the process default
of :func:`ptxforge.ops.precision.default_precision`, read when the function is lowered)."""


def check_matrix_precision(op: str, attrs: dict, in_dtype: str) -> None:
    """Fail unless ``attrs["precision"]`` is known and fits inputs of ``in_dtype``."""
    p = attrs["precision"]
    if p not in MATRIX_PRECISIONS:
        fail(op, f"precision must be one of {MATRIX_PRECISIONS[1:]} (or empty), got {p!r}")
    if p == "tf32" and in_dtype != "float32":
        fail(op, f"precision 'tf32' rounds float32 inputs, but the inputs are {in_dtype}")


def precision_arg(attrs: dict) -> str | None:
    """The ``precision=`` argument of the te operator for these attributes."""
    return attrs["precision"] or None


def with_precision(ref):
    """A reference of a product whose inputs are first rounded to TF32 at ``"tf32"``."""
    def run(a, attrs):
        if attrs["precision"] == "tf32":
            from ...ops import testing

            a = testing.tf32_inputs(a[0], a[1]) + list(a[2:])
            out = ref(a, attrs)
            return out.astype(attrs["out_dtype"] or "float32")
        return ref(a, attrs)
    return run
