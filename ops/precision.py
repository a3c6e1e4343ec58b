"""Compute precision of float32 matrix products and convolutions: ``"float32"`` or ``"tf32"``.

TF32 is never chosen silently. An operator takes ``precision="tf32"`` explicitly, or the
user turns the process default on, as ``torch.backends.cuda.matmul.allow_tf32``::

    ops.allow_tf32(True)             # process-wide, until turned off again
    with ops.tf32(True):             # this block (and this thread / task) only
        y = ops.nn.dense(x, w)

The default is read when the operator is declared. The product stage records the choice in
``attrs["precision"]``; at ``"tf32"`` both inputs of every multiply are rounded to TF32
(``round_tf32``: 10-bit mantissa, round to nearest, ties away from zero, as the GPU's
``cvt.rna.tf32.f32``) and the products accumulate in float32, so CUDA cores, the simulator
and a TF32 tensor-core mma compute the same products.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

from ..ir.expr import Expr, as_expr, call
from .utils import cast_to, fail

PRECISIONS = ("float32", "tf32")

_process_default = {"precision": "float32"}
_scoped: contextvars.ContextVar[str | None] = contextvars.ContextVar("ptxforge_precision",
                                                                    default=None)


def allow_tf32(enabled: bool) -> None:
    """Make TF32 the default precision of float32 products in this process (or not)."""
    _process_default["precision"] = "tf32" if enabled else "float32"


@contextlib.contextmanager
def tf32(enabled: bool = True) -> Iterator[None]:
    """Within the block, float32 products default to TF32 (``enabled``) or to float32."""
    token = _scoped.set("tf32" if enabled else "float32")
    try:
        yield
    finally:
        _scoped.reset(token)


def default_precision() -> str:
    """The precision a float32 product gets when its operator is not told one."""
    scoped = _scoped.get()
    return scoped if scoped is not None else _process_default["precision"]


def check_precision(op: str, precision: str | None, in_dtype: str) -> str:
    """``precision`` (or the default) after checking it fits inputs of ``in_dtype``."""
    if precision is None:
        return default_precision() if in_dtype == "float32" else "float32"
    if precision not in PRECISIONS:
        fail(op, f"precision must be one of {PRECISIONS}, got {precision!r}")
    if precision == "tf32" and in_dtype != "float32":
        fail(op, f"precision 'tf32' rounds float32 inputs, but the inputs are {in_dtype}; "
                 "leave precision unset for 16-bit inputs")
    return precision


def operand(x, acc: str, precision: str) -> Expr:
    """One input of a product, cast to the accumulation dtype and at ``"tf32"`` rounded."""
    x = as_expr(x)
    if precision == "tf32":
        x = call("round_tf32", x)
    return cast_to(x, acc)
