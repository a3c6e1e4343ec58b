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
    truncdiv,
    truncmod,
)
from .stmt import walk_exprs


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
    """An operation: a placeholder (an input) or a compute; its results are
    :meth:`output` ``(0)`` .. ``(num_outputs - 1)``."""

    name: str
    _outputs: tuple = ()

    @property
    def num_outputs(self) -> int:
        """How many tensors the operation produces (a tuple compute has several)."""
        return len(self._outputs)

    def output(self, index: int = 0) -> Tensor:
        """The ``index``-th output tensor (``value_index`` ``index``)."""
        if isinstance(index, bool) or not isinstance(index, int):
            raise TEError(f"{self.name}: output index must be an int, got {index!r}")
        if not 0 <= index < len(self._outputs):
            n = len(self._outputs)
            has = "one output" if n == 1 else f"{n} outputs (0 to {n - 1})"
            raise TEError(f"{self.name} has {has}; asked for output {index}")
        return self._outputs[index]

    @property
    def input_tensors(self) -> list:
        return []


class PlaceholderOp(Operation):
    def __init__(self, name: str, shape: tuple, dtype: str):
        self.name = name
        self.shape = shape
        self.dtype = dtype
        self.dtypes = (dtype,)
        self.tag = ""
        self.attrs: dict = {}
        self.axis: tuple = ()
        self.reduce_axis: tuple = ()
        self._outputs = (Tensor(self, 0),)

    def __repr__(self):
        return f"placeholder({self.name}, {list(self.shape)}, {self.dtype})"


class ComputeOp(Operation):
    """A compute: one body per output over the same spatial ``axis``.

    ``bodies`` holds the expression of each output (a single-output compute has one, which
    may be a reduction; a tuple compute's bodies are element-wise). ``body`` is that one
    expression for a single output and the tuple of them for several, as in TVM.
    ``dtypes`` are the outputs' dtypes (they may differ); ``dtype`` is output 0's.
    """

    def __init__(self, name, tag, attrs, axis, reduce_axis, body):
        bodies = tuple(body) if isinstance(body, (list, tuple)) else (body,)
        if not bodies:
            raise TEError(f"compute {name}: no body")
        for k, b in enumerate(bodies):
            if not isinstance(b, Expr):
                raise TEError(f"compute {name}: body {k} is not an expression: {b!r}")
        if len(bodies) > 1 and (reduce_axis or builtins.any(_has_reduce(b) for b in bodies)):
            raise TEError(f"compute {name}: a tuple compute's bodies must be element-wise "
                          "(no reduction); compute each reduction in its own stage")
        self.name = name
        self.tag = tag
        self.attrs = dict(attrs or {})
        self.axis = tuple(axis)
        self.reduce_axis = tuple(reduce_axis)
        self.bodies = bodies
        self.shape = tuple(a.extent for a in axis)
        self.dtypes = tuple(b.dtype for b in bodies)
        self.dtype = self.dtypes[0]
        self._outputs = tuple(Tensor(self, k) for k in range(len(bodies)))
        self._inputs: list | None = None

    @property
    def body(self):
        return self.bodies[0] if len(self.bodies) == 1 else self.bodies

    @property
    def input_tensors(self) -> list:
        """Tensors read by the bodies, in order of first appearance."""
        if self._inputs is None:
            seen: dict = {}
            order = []
            # depth-first, left to right, so the order matches reading the bodies as text
            def visit(e):
                if isinstance(e, TensorRead):
                    if id(e.tensor) not in seen:
                        seen[id(e.tensor)] = e.tensor
                        order.append(e.tensor)
                for c in children(e):
                    visit(c)

            for b in self.bodies:
                visit(b)
            self._inputs = order
        return self._inputs

    def __repr__(self):
        dts = self.dtype if len(self.dtypes) == 1 else f"({', '.join(self.dtypes)})"
        return f"compute({self.name}, {list(self.shape)}, {dts})"


class Tensor:
    """The output of an operation; index it (``A[i, j]`` or ``A(i, j)``) to read it."""

    def __init__(self, op: Operation, value_index: int = 0):
        self.op = op
        self.value_index = value_index

    @property
    def name(self) -> str:
        """The op's name; ``<op>.v<k>`` for output ``k`` of a tuple compute (as in TVM)."""
        if self.op.num_outputs == 1:
            return self.op.name
        return f"{self.op.name}.v{self.value_index}"

    @property
    def shape(self) -> tuple:
        return self.op.shape

    @property
    def dtype(self) -> str:
        return self.op.dtypes[self.value_index]

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


def compute(shape, fcompute: Callable, name: str = "compute", tag: str = "", attrs=None):
    """A tensor whose element at each index is ``fcompute(*index)``.

    When ``fcompute`` returns a tuple (or list) of several expressions, the compute has one
    output per expression over the same axes (a tuple compute, one stage that writes them
    all) and the list of its output tensors is returned; their dtypes may differ. A tuple
    compute's bodies must be element-wise: a reduction goes in its own stage.
    """
    shape = _check_shape(shape, f"compute {name}")
    names = _axis_names(fcompute, len(shape))
    axis = tuple(IterVar(Var(n), e, "spatial") for n, e in zip(names, shape))
    body = fcompute(*[a.var for a in axis])
    if isinstance(body, (list, tuple)):
        if not body:
            raise TEError(f"compute {name}: fcompute returned an empty {type(body).__name__}; "
                          "return an expression, or a tuple of them for several outputs")
        if len(body) > 1:
            bodies = []
            for k, b in enumerate(body):
                try:
                    b = as_expr(b)
                except Exception as e:
                    raise TEError(f"compute {name}: output {k} of the tuple is not an "
                                  f"expression ({b!r}): {e}") from None
                if _has_reduce(b):
                    raise TEError(
                        f"compute {name}: output {k} of the tuple is a reduction; the bodies "
                        "of a tuple compute must be element-wise (no te.sum/te.max/te.min: "
                        "ptxforge has no te.comm_reducer for tuple reductions). Compute each "
                        "reduction in its own stage and combine them in the tuple compute")
                bodies.append(b)
            op = ComputeOp(name, tag, attrs, axis, (), tuple(bodies))
            return [op.output(k) for k in range(op.num_outputs)]
        body = body[0]
    body = as_expr(body)
    reduce_axes: tuple = ()
    if isinstance(body, Reduce):
        reduce_axes = body.axis
        _check_no_nested_reduce(body.source, name)
    else:
        _check_no_nested_reduce(body, name)
    return ComputeOp(name, tag, attrs, axis, reduce_axes, body).output(0)


def _has_reduce(e: Expr) -> bool:
    return builtins.any(isinstance(x, Reduce) for x in walk_exprs(e))


def _check_no_nested_reduce(e: Expr, name: str) -> None:
    if _has_reduce(e):
        raise TEError(
            f"compute {name}: a reduction must be the whole body (te.sum(...)), not nested "
            "inside another expression; compute it in its own stage"
        )


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


def normalize_index(value, extent: int) -> Expr:
    """An index read from data (``ids[i]``) as an index into a dimension of ``extent``:
    a negative value counts from the end, as in Python, numpy and ONNX ``Gather``
    (``-1`` is ``extent - 1``). Use it as ``table[te.normalize_index(ids[i], n), j]``.

    Values still outside ``[0, extent)`` are clamped to the nearest edge when the read is
    compiled (see :func:`ptxforge.ir.to_ir.clamp_data_index`), so they never touch memory
    outside the buffer; their result is unspecified, as in PyTorch and ONNX runtimes.
    """
    v = as_expr(value)
    if not dt.is_int(v.dtype):
        raise TEError(f"normalize_index needs an integer value, got {v} of dtype {v.dtype}")
    if isinstance(extent, bool) or not isinstance(extent, int) or extent < 1:
        raise TEError(f"normalize_index needs a positive int extent, got {extent!r}")
    if dt.bits(v.dtype) < 32:
        v = cast("int32", v)  # extent may not fit an int8 index
    if dt.is_uint(v.dtype):
        return v
    return select(v < 0, v + extent, v)


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
    "if_then_else", "const", "cast", "floordiv", "floormod", "truncdiv", "truncmod",
    "normalize_index", "all",
    "any", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "erf", "abs", "power",
    "register_tensor_operator", "Var",
]
