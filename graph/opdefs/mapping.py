"""Registration of element-wise operators from a te function and a numpy function: the
dtype classes they accept, broadcasting type inference and references that compute 16-bit
floats in float32 and round once, as the te side does."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ...ir import dtype as dt
from ..ir import Call, Node, TensorType
from ..op import OpDef, OpPattern, register_op
from .common import as_graph_error, broadcast_shapes, fail

FLOATS = ("float16", "bfloat16", "float32", "float64")
SIGNED = ("int8", "int16", "int32", "int64")
UNSIGNED = ("uint8", "uint16", "uint32", "uint64")
INTS = SIGNED + UNSIGNED
NUMBERS = FLOATS + INTS
BOOL = ("bool",)


def expect_dtype(op: str, what: str, ty: TensorType, allowed: tuple) -> None:
    """Fail unless ``ty``'s dtype is one of ``allowed``."""
    if ty.dtype not in allowed:
        fail(op, f"{what} has dtype {ty.dtype}; {op} takes {', '.join(allowed)}")


def to_compute(x: np.ndarray) -> np.ndarray:
    """A host array as a numpy array to compute on: 16-bit floats widened to float32."""
    x = np.asarray(x)
    if x.dtype == dt.BFLOAT16_HOST:
        return dt.from_bfloat16(x).astype(np.float32)
    if x.dtype == np.float16:
        return x.astype(np.float32)
    return x


def from_compute(y, dtype: str) -> np.ndarray:
    """A computed numpy value as a host array of ``dtype`` (rounded once)."""
    y = np.asarray(y)
    if dtype == "bfloat16":
        return dt.to_bfloat16(y.astype(np.float32))
    with np.errstate(all="ignore"):
        return y.astype(dt.to_numpy(dtype))


def widened(fn: Callable) -> Callable:
    """A reference ``(arrays, attrs) -> array`` from ``fn(*arrays, **attrs)``: 16-bit floats
    computed in float32, the result in the first operand's dtype (bool results stay bool)."""
    def ref(a, attrs):
        dtype = dt.from_numpy(np.asarray(a[0]).dtype)
        with np.errstate(all="ignore"):
            out = np.asarray(fn(*(to_compute(x) for x in a), **attrs))
        return out if out.dtype == np.bool_ else from_compute(out, dtype)

    return ref


def register_map(name: str, arity: int, lower: Callable, ref: Callable, dtypes: tuple,
                 out_dtype: str | None = None, defaults: dict | None = None,
                 normalize: Callable | None = None, same_dtype: bool = True,
                 arg_dtypes: tuple | None = None) -> OpDef:
    """Register an element-wise operator over ``arity`` broadcast arguments.

    ``lower(te tensors, attrs)`` and ``ref(arrays, attrs)`` compute it; ``dtypes`` are the
    first argument's accepted dtypes (``arg_dtypes``: one tuple per argument instead);
    ``same_dtype`` requires every argument to share a dtype; the result has ``out_dtype``
    (default: the first argument's)."""
    per_arg = arg_dtypes or (dtypes,) * arity

    def infer(types, attrs):
        for k, (ty, allowed) in enumerate(zip(types, per_arg)):
            expect_dtype(name, f"argument {k}", ty, allowed)
        if same_dtype and len({t.dtype for t in types}) > 1:
            fail(name, f"argument dtypes differ: {[t.dtype for t in types]}; cast them first")
        shape = types[0].shape
        for t in types[1:]:
            shape = broadcast_shapes(name, shape, t.shape)
        return TensorType(shape, out_dtype or types[0].dtype)

    def te_lower(args, attrs):
        with as_graph_error():
            return lower(args, attrs)

    return register_op(OpDef(
        name=name, num_inputs=arity, infer=infer, lower=te_lower, ref=ref,
        pattern=OpPattern.ELEMWISE if arity == 1 else OpPattern.BROADCAST,
        defaults=dict(defaults or {}), normalize=normalize,
    ))


def call(name: str, *args: Node, **attrs) -> Call:
    """A call of operator ``name``."""
    return Call(name, list(args), attrs)
