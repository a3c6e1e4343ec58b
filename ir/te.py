"""The tensor-expression front end: ``placeholder``, ``compute``, ``reduce_axis`` and friends.

Names follow TVM's ``te`` module so a compute declaration ports by changing imports.
Shapes are static (Python ints). Everything here only describes a computation; lowering it to
the tensor IR is :func:`ptxforge.ir.lowering.to_ir`.
"""

from __future__ import annotations

import builtins
import inspect
from collections.abc import Callable

from . import dtype as dt
from .expr import (
    Expr,
    IRError,
    Reduce,
    TensorRead,
    Var,
    as_expr,
    call,
    cast,
    children,
    const,
    emax,
    emin,
    floordiv,
    floormod,
    logical_and,
    logical_or,
    select,
)


class TEError(IRError):
    """A compute declaration that does not make sense (shape, arity, types)."""


class IterVar:
    """An axis of a compute: a var with a domain ``[0, extent)`` and a kind.

    ``kind`` is ``"spatial"`` for output axes, ``"reduce"`` for reduction axes and
    ``"thread"`` for ``te.thread_axis`` handles (which carry a ``thread_tag``).
    """

    __slots__ = ("var", "extent", "kind", "thread_tag")

    def __init__(self, var: Var, extent: int | None, kind: str, thread_tag: str = ""):
        self.var = var
        self.extent = extent
        self.kind = kind
        self.thread_tag = thread_tag

    @property
    def name(self) -> str:
        return self.var.name

    @property
    def dom(self) -> tuple[int, int]:
        return (0, self.extent)

    def as_expr(self) -> Var:
        return self.var

    # arithmetic on an IterVar acts on its var
    def __getattr__(self, item):
        if item.startswith("__"):
            raise AttributeError(item)
        return getattr(self.var, item)

    def __add__(self, o):
        return self.var + o

    def __radd__(self, o):
        return o + self.var

    def __sub__(self, o):
        return self.var - o

    def __rsub__(self, o):
        return o - self.var

    def __mul__(self, o):
        return self.var * o

    def __rmul__(self, o):
        return o * self.var

    def __floordiv__(self, o):
        return self.var // o

    def __mod__(self, o):
        return self.var % o

    def __lt__(self, o):
        return self.var < o

    def __le__(self, o):
        return self.var <= o

    def __gt__(self, o):
        return self.var > o

    def __ge__(self, o):
        return self.var >= o

    def __repr__(self):
        if self.kind == "thread":
            return f"IterVar({self.thread_tag})"
        return f"IterVar({self.var.name}, [0, {self.extent}), {self.kind})"


class Operation:
    name: str

    def output(self, index: int = 0) -> Tensor:
        if index != 0:
            raise TEError(f"{self.name} has one output; asked for output {index}")
        return self._output

    @property
    def input_tensors(self) -> list:
        return []


class PlaceholderOp(Operation):
    def __init__(self, name: str, shape: tuple, dtype: str):
        self.name = name
        self.shape = shape
        self.dtype = dtype
        self.tag = ""
        self.attrs: dict = {}
        self.axis: tuple = ()
        self.reduce_axis: tuple = ()
        self._output = Tensor(self)

    def __repr__(self):
        return f"placeholder({self.name}, {list(self.shape)}, {self.dtype})"


class ComputeOp(Operation):
    def __init__(self, name, tag, attrs, axis, reduce_axis, body):
        self.name = name
        self.tag = tag
        self.attrs = dict(attrs or {})
        self.axis = tuple(axis)
        self.reduce_axis = tuple(reduce_axis)
        self.body = body
        self.shape = tuple(a.extent for a in axis)
        self.dtype = body.dtype
        self._output = Tensor(self)
        self._inputs: list | None = None

    @property
    def input_tensors(self) -> list:
        """Tensors read by the body, in order of first appearance."""
        if self._inputs is None:
            seen: dict = {}
            stack = [self.body]
            order = []
            # depth-first, left to right, so the order matches reading the body as text
            def visit(e):
                if isinstance(e, TensorRead):
                    if id(e.tensor) not in seen:
                        seen[id(e.tensor)] = e.tensor
                        order.append(e.tensor)
                for c in children(e):
                    visit(c)

            del stack
            visit(self.body)
            self._inputs = order
        return self._inputs

    def __repr__(self):
        return f"compute({self.name}, {list(self.shape)}, {self.dtype})"


class Tensor:
    """The output of an operation; index it (``A[i, j]`` or ``A(i, j)``) to read it."""

    def __init__(self, op: Operation):
        self.op = op

    @property
    def name(self) -> str:
        return self.op.name

    @property
    def shape(self) -> tuple:
        return self.op.shape

    @property
    def dtype(self) -> str:
        return self.op.dtype

    @property
    def ndim(self) -> int:
        return len(self.op.shape)

    def __call__(self, *indices) -> TensorRead:
        if len(indices) == 1 and isinstance(indices[0], (tuple, list)):
            indices = tuple(indices[0])
        if len(indices) != self.ndim:
            raise TEError(
                f"tensor {self.name} has {self.ndim} dimensions {list(self.shape)} but was "
                f"indexed with {len(indices)} indices"
            )
        idx = []
        for i in indices:
            e = as_expr(i)
            if not dt.is_int(e.dtype):
                raise TEError(f"index {e} of tensor {self.name} has dtype {e.dtype}, not an int")
            idx.append(e)
        return TensorRead(self, tuple(idx))

    def __getitem__(self, indices):
        if not isinstance(indices, tuple):
            indices = (indices,)
        return self(*indices)

    def __hash__(self):
        return id(self)

    def __eq__(self, other):
        return self is other

    def __repr__(self):
        return f"Tensor({self.name}, shape={list(self.shape)}, dtype={self.dtype})"

    # element-wise operators with broadcasting come from the operator library
    def _binop(self, other, name, reverse=False):
        if _TENSOR_OPERATOR is None:
            raise TEError(
                "tensor arithmetic needs the operator library; import ptxforge (or ptxforge.ops)"
            )
        return _TENSOR_OPERATOR(name, other, self) if reverse else _TENSOR_OPERATOR(
            name, self, other
        )

    def __add__(self, o):
        return self._binop(o, "add")

    def __radd__(self, o):
        return self._binop(o, "add", True)

    def __sub__(self, o):
        return self._binop(o, "subtract")

    def __rsub__(self, o):
        return self._binop(o, "subtract", True)

    def __mul__(self, o):
        return self._binop(o, "multiply")

    def __rmul__(self, o):
        return self._binop(o, "multiply", True)

    def __truediv__(self, o):
        return self._binop(o, "divide")

    def __rtruediv__(self, o):
        return self._binop(o, "divide", True)

    def __neg__(self):
        return self._binop(0.0, "subtract", True)


_TENSOR_OPERATOR: Callable | None = None


def register_tensor_operator(fn: Callable) -> None:
    """Install the function that implements ``Tensor + Tensor`` and friends (``ops`` does)."""
    global _TENSOR_OPERATOR
    _TENSOR_OPERATOR = fn


def _check_shape(shape, what: str) -> tuple:
    if isinstance(shape, int):
        shape = (shape,)
    try:
        shape = tuple(shape)
    except TypeError:
        raise TEError(f"{what}: shape must be a tuple of ints, got {shape!r}") from None
    out = []
    for s in shape:
        if hasattr(s, "value") and isinstance(s.value, int):
            s = s.value
        if not isinstance(s, int) or isinstance(s, bool) or s < 0:
            raise TEError(f"{what}: shape entries must be non-negative ints, got {shape!r}")
        out.append(int(s))
    return tuple(out)


def placeholder(shape, dtype: str = "float32", name: str = "placeholder") -> Tensor:
    """An input tensor."""
    shape = _check_shape(shape, f"placeholder {name}")
    return PlaceholderOp(name, shape, dt.check(dtype)).output(0)


def reduce_axis(dom, name: str = "rv") -> IterVar:
    """A reduction axis over ``range(lo, hi)``.

    ``dom`` is ``(lo, hi)`` with ``lo == 0``, or just the extent.
    """
    if isinstance(dom, int):
        lo, hi = 0, dom
    else:
        try:
            lo, hi = dom
        except (TypeError, ValueError):
            raise TEError(f"reduce_axis {name}: dom must be (lo, hi), got {dom!r}") from None
    if not (isinstance(lo, int) and isinstance(hi, int)):
        raise TEError(f"reduce_axis {name}: bounds must be ints, got {dom!r}")
    if hi <= lo:
        raise TEError(f"reduce_axis {name}: empty domain [{lo}, {hi})")
    if lo != 0:
        raise TEError(
            f"reduce_axis {name}: domains start at 0 here, got [{lo}, {hi}); "
            f"use reduce_axis(({0}, {hi - lo})) and add {lo} to the index"
        )
    return IterVar(Var(name), hi, "reduce")


def thread_axis(tag: str, name: str | None = None) -> IterVar:
    """A GPU thread axis: ``blockIdx.x/y/z``, ``threadIdx.x/y/z`` or ``vthread``."""
    valid = {"blockIdx.x", "blockIdx.y", "blockIdx.z", "threadIdx.x", "threadIdx.y",
             "threadIdx.z", "vthread", "cthread"}
    if tag not in valid:
        raise TEError(f"unknown thread tag {tag!r}; expected one of {sorted(valid)}")
    return IterVar(Var(name or tag), None, "thread", "vthread" if tag == "cthread" else tag)


def _axis_names(fcompute, ndim: int) -> list[str]:
    try:
        sig = inspect.signature(fcompute)
    except (TypeError, ValueError):
        return [f"i{i}" for i in range(ndim)]
    params = list(sig.parameters.values())
    if builtins.any(p.kind == p.VAR_POSITIONAL for p in params):
        return [f"i{i}" for i in range(ndim)]
    if len(params) != ndim:
        raise TEError(
            f"compute: the shape has {ndim} dimensions but fcompute takes {len(params)} "
            f"arguments ({', '.join(p.name for p in params)})"
        )
    return [p.name for p in params]


def compute(shape, fcompute: Callable, name: str = "compute", tag: str = "", attrs=None) -> Tensor:
    """A tensor whose element at each index is ``fcompute(*index)``."""
    shape = _check_shape(shape, f"compute {name}")
    names = _axis_names(fcompute, len(shape))
    axis = tuple(IterVar(Var(n), e, "spatial") for n, e in zip(names, shape))
    body = fcompute(*[a.var for a in axis])
    if isinstance(body, (list, tuple)):
        if len(body) != 1:
            raise TEError(f"compute {name}: multiple outputs are not supported; return one expr")
        body = body[0]
    body = as_expr(body)
    reduce_axes: tuple = ()
    if isinstance(body, Reduce):
        reduce_axes = body.axis
        _check_no_nested_reduce(body.source, name)
    else:
        _check_no_nested_reduce(body, name)
    return ComputeOp(name, tag, attrs, axis, reduce_axes, body).output(0)


def _check_no_nested_reduce(e: Expr, name: str) -> None:
    stack = [e]
    while stack:
        x = stack.pop()
        if isinstance(x, Reduce):
            raise TEError(
                f"compute {name}: a reduction must be the whole body (te.sum(...)), not nested "
                "inside another expression; compute it in its own stage"
            )
        stack.extend(children(x))


def _reducer(combiner: str):
    def reduce(expr, axis, where=None, init=None):
        if init is not None:
            raise TEError(f"te.{combiner}: init= is not supported; add the init value after")
        axes = axis if isinstance(axis, (list, tuple)) else [axis]
        for a in axes:
            if not isinstance(a, IterVar) or a.kind != "reduce":
                raise TEError(f"te.{combiner}: axis must be te.reduce_axis values, got {a!r}")
        src = as_expr(expr)
        w = None if where is None else as_expr(where)
        return Reduce(combiner, src, tuple(axes), w)

    reduce.__name__ = combiner
    reduce.__doc__ = f"``{combiner}`` reduction of ``expr`` over ``axis`` (reduce IterVars)."
    return reduce


sum = _reducer("sum")  # noqa: A001 - the name users know
max_reduce = _reducer("max")
min_reduce = _reducer("min")


def max(*args, **kwargs):  # noqa: A001
    """``te.max(a, b)`` is the element-wise maximum; ``te.max(expr, axis=...)`` reduces."""
    if "axis" in kwargs or (len(args) == 2 and _is_axis_list(args[1])):
        return max_reduce(*args, **kwargs)
    return emax(*args)


def min(*args, **kwargs):  # noqa: A001
    """``te.min(a, b)`` is the element-wise minimum; ``te.min(expr, axis=...)`` reduces."""
    if "axis" in kwargs or (len(args) == 2 and _is_axis_list(args[1])):
        return min_reduce(*args, **kwargs)
    return emin(*args)


def _is_axis_list(x) -> bool:
    if isinstance(x, IterVar):
        return x.kind == "reduce"
    return isinstance(x, (list, tuple)) and bool(x) and builtins.all(
        isinstance(a, IterVar) for a in x)


def if_then_else(cond, t, f) -> Expr:
    return select(cond, t, f)


def all(*conds) -> Expr:  # noqa: A001
    if not conds:
        return const(True)
    out = as_expr(conds[0])
    for c in conds[1:]:
        out = logical_and(out, c)
    return out


def any(*conds) -> Expr:  # noqa: A001
    if not conds:
        return const(False)
    out = as_expr(conds[0])
    for c in conds[1:]:
        out = logical_or(out, c)
    return out


def exp(x):
    return call("exp", x)


def log(x):
    return call("log", x)


def sqrt(x):
    return call("sqrt", x)


def rsqrt(x):
    return call("rsqrt", x)


def tanh(x):
    return call("tanh", x)


def sigmoid(x):
    return call("sigmoid", x)


def erf(x):
    return call("erf", x)


def abs(x):  # noqa: A001
    x = as_expr(x)
    return call("fabs" if dt.is_float(x.dtype) else "abs", x)


def power(x, y):
    return call("pow", x, y)


__all__ = [
    "IterVar", "Tensor", "PlaceholderOp", "ComputeOp", "Operation", "TEError",
    "placeholder", "compute", "reduce_axis", "thread_axis", "sum", "max", "min",
    "if_then_else", "const", "cast", "floordiv", "floormod", "all", "any", "exp", "log",
    "sqrt", "rsqrt", "tanh", "sigmoid", "erf", "abs", "power", "register_tensor_operator",
    "Var",
]
