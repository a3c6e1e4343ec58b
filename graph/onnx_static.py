"""Import-time evaluation for the ONNX importer: the values of nodes whose inputs are all
known while importing (constants, initializers, and shapes, which are static here).

What exporters compute from shapes (``Shape -> Gather -> Unsqueeze -> Concat -> Reshape``,
``Range`` over a sequence length, masks built with ``Where`` / ``Equal``) becomes numbers
here, so the graph holds a reshape to a fixed shape rather than a chain of shape ops. The
common shape operators have small numpy evaluators below; any other ONNX operator is
evaluated with ONNX's reference implementation (``onnx.reference``), so its semantics are
ONNX's own.

Evaluation is capped by the size of the result (:data:`MAX_ELEMENTS`): a value larger than
that (an ``Add`` of a ``[30000, 1]`` and a ``[1, 30000]`` initializer) is left to the graph,
where it is computed by the compiled network, or never if nothing uses it.
"""

from __future__ import annotations

import numpy as np

MAX_ELEMENTS = 1 << 16
"""The largest value (in elements) computed while importing; larger ones are graph ops."""


NEVER_EVALUATED = frozenset({
    "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Bernoulli",
    "Multinomial", "Dropout", "If", "Loop", "Scan"})
"""Operators never computed while importing: random ones (a fixed draw would pass for a
result), and control flow (its bodies are subgraphs)."""


def estimated_size(op_type: str, inputs: list, attrs: dict) -> int:
    """An upper bound of the number of elements of the output of ``op_type`` on the numpy
    ``inputs`` (None for a missing optional input), before computing it."""
    sizes = [int(np.size(v)) for v in inputs if v is not None]
    try:
        if op_type in _GROWS_BY_BROADCAST:
            shapes = [np.shape(v) for v in inputs if v is not None]
            if op_type == "Expand":
                shapes = [np.shape(inputs[0]), tuple(int(d) for d in inputs[1])]
            return int(np.prod(np.broadcast_shapes(*shapes), dtype=np.int64))
        if op_type == "ConstantOfShape":
            return int(np.prod([int(d) for d in inputs[0]], dtype=np.int64))
        if op_type == "Tile":
            return int(np.size(inputs[0]) * np.prod(inputs[1], dtype=np.int64))
        if op_type == "Range":
            start, limit, delta = (float(np.asarray(v).reshape(())) for v in inputs[:3])
            return max(int(np.ceil((limit - start) / delta)), 0) if delta else 1 << 62
        if op_type in ("OneHot", "EyeLike", "Trilu", "MatMul", "Gemm", "Einsum", "Resize",
                       "Upsample", "Pad", "Col2Im", "DFT", "STFT", "MelWeightMatrix"):
            return 1 << 62 if op_type in ("OneHot", "MelWeightMatrix") else (
                max(sizes, default=1) ** 2)
    except (TypeError, ValueError, OverflowError, IndexError):
        return 1 << 62  # inputs that do not even describe a shape: do not evaluate
    return sum(sizes)


_GROWS_BY_BROADCAST = frozenset({
    "Add", "Sub", "Mul", "Div", "Pow", "Mod", "Max", "Min", "Sum", "Mean", "Where", "Equal",
    "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "And", "Or", "Xor", "BitShift",
    "BitwiseAnd", "BitwiseOr", "BitwiseXor", "PRelu", "Expand"})


def evaluate(node, inputs: list, attrs: dict, opset: int) -> list:
    """The output arrays of ONNX ``node`` on the numpy ``inputs`` (None for a missing
    optional input): numpy for the shape operators, ONNX's reference implementation for the
    others."""
    fn = _NUMPY.get(node.op_type)
    if fn is not None:
        return [np.asarray(v) for v in fn(inputs, attrs, opset)]
    return _reference(node, inputs, opset)


def _reference(node, inputs: list, opset: int) -> list:
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    names = [f"in{k}" if v is not None else "" for k, v in enumerate(inputs)]
    outs = [f"out{k}" if o else "" for k, o in enumerate(node.output)]
    single = helper.make_node(node.op_type, names, outs, domain=node.domain)
    single.attribute.extend(node.attribute)
    ev = ReferenceEvaluator(single, opsets={node.domain or "": opset})
    feeds = {n: v for n, v in zip(names, inputs) if n}
    results = ev.run(None, feeds)
    if not all(isinstance(r, np.ndarray | np.generic) for r in results):
        from .onnx_model import OnnxImportError

        raise OnnxImportError("only tensor values are supported (not sequences, maps or "
                              "optionals)")
    return [np.asarray(r) for r in results]


# -- numpy evaluators of the shape operators: (inputs, attrs, opset) -> outputs --------------


def _ints(v) -> list[int]:
    return [int(x) for x in np.asarray(v).reshape(-1)]


def shape_of(shape: tuple, attrs: dict) -> np.ndarray:
    """``Shape``'s output for an input of ``shape``: dims ``start`` to ``end`` (both
    optional, negative counting from the back, clamped as ONNX says)."""
    n = len(shape)
    start = int(attrs.get("start", 0))
    end = int(attrs.get("end", n))
    start = min(max(start + n if start < 0 else start, 0), n)
    end = min(max(end + n if end < 0 else end, 0), n)
    return np.array(shape[start:end] if end > start else (), dtype=np.int64)


def _unsqueeze(inputs, a, opset):
    x = inputs[0]
    axes = _ints(a["axes"]) if "axes" in a else _ints(inputs[1])
    n = x.ndim + len(axes)
    for ax in sorted(ax % n for ax in axes):
        x = np.expand_dims(x, ax)
    return [x]


def _squeeze(inputs, a, opset):
    x = inputs[0]
    if "axes" in a:
        axes = _ints(a["axes"])
    elif len(inputs) > 1 and inputs[1] is not None:
        axes = _ints(inputs[1])
    else:
        axes = None
    return [np.squeeze(x, axis=None if axes is None else tuple(ax % x.ndim for ax in axes))]


def _slice(inputs, a, opset):
    x = inputs[0]
    if opset < 10:
        starts, ends = _ints(a["starts"]), _ints(a["ends"])
        axes = _ints(a["axes"]) if "axes" in a else list(range(len(starts)))
        steps = [1] * len(starts)
    else:
        starts, ends = _ints(inputs[1]), _ints(inputs[2])
        axes = (_ints(inputs[3]) if len(inputs) > 3 and inputs[3] is not None
                else list(range(len(starts))))
        steps = (_ints(inputs[4]) if len(inputs) > 4 and inputs[4] is not None
                 else [1] * len(starts))
    index = [slice(None)] * x.ndim
    for s, e, ax, st in zip(starts, ends, axes, steps):
        index[ax % x.ndim] = slice(s, e, st)
    return [x[tuple(index)]]


def _reshape(inputs, a, opset):
    x = inputs[0]
    target = _ints(a["shape"]) if opset < 5 else _ints(inputs[1])
    if not a.get("allowzero", 0):
        target = [x.shape[k] if s == 0 else s for k, s in enumerate(target)]
    return [x.reshape(target)]


def _gather(inputs, a, opset):
    x, idx = inputs[0], np.asarray(inputs[1])
    axis = int(a.get("axis", 0))
    idx = np.where(idx < 0, idx + x.shape[axis], idx)
    return [np.take(x, idx, axis=axis)]


def _gather_elements(inputs, a, opset):
    # onnx.reference's GatherElements fails on a [1, 64] x [1, 8] gather (what BERT's
    # exports write for token type ids); numpy's take_along_axis is the same operation
    x, idx = inputs[0], np.asarray(inputs[1])
    axis = int(a.get("axis", 0)) % x.ndim
    idx = np.where(idx < 0, idx + x.shape[axis], idx)
    return [np.take_along_axis(x, idx, axis=axis)]


def _cast(inputs, a, opset):
    from onnx import helper

    from .onnx_float8 import FLOAT8, static_cast

    to = int(a["to"])
    if to in FLOAT8:  # ONNX's saturation rules (numpy's astype never saturates)
        return [static_cast(inputs[0], FLOAT8[to], bool(a.get("saturate", 1)))]
    return [inputs[0].astype(helper.tensor_dtype_to_np_dtype(to))]


def _binary(fn):
    def f(inputs, a, opset):
        out = inputs[0]
        for v in inputs[1:]:
            out = fn(out, v)
        return [np.asarray(out).astype(np.result_type(inputs[0]), copy=False)]

    return f


def _div(x, y):
    if np.asarray(x).dtype.kind in "iu":
        # ONNX's integer division truncates toward zero, as C does
        q = np.abs(x) // np.abs(y)
        return np.where((np.asarray(x) < 0) != (np.asarray(y) < 0), -q, q)
    return np.true_divide(x, y)


def _constant_of_shape(inputs, a, opset):
    from onnx import numpy_helper

    value = numpy_helper.to_array(a["value"]) if "value" in a else np.zeros(1, np.float32)
    return [np.full(_ints(inputs[0]), value.reshape(-1)[0], dtype=value.dtype)]


def _range(inputs, a, opset):
    start, limit, delta = (np.asarray(v).reshape(()) for v in inputs[:3])
    return [np.arange(start, limit, delta).astype(start.dtype)]


_NUMPY = {
    "Identity": lambda i, a, o: [i[0]],
    "Unsqueeze": _unsqueeze,
    "Squeeze": _squeeze,
    "Concat": lambda i, a, o: [np.concatenate([v for v in i if v is not None],
                                              axis=int(a["axis"]))],
    "Slice": _slice,
    "Reshape": _reshape,
    "Gather": _gather,
    "GatherElements": _gather_elements,
    "Cast": _cast,
    "Add": _binary(np.add),
    "Sub": _binary(np.subtract),
    "Mul": _binary(np.multiply),
    "Div": _binary(_div),
    "Max": _binary(np.maximum),
    "Min": _binary(np.minimum),
    "Neg": lambda i, a, o: [np.negative(i[0])],
    "Equal": lambda i, a, o: [np.equal(i[0], i[1])],
    "Less": lambda i, a, o: [np.less(i[0], i[1])],
    "Greater": lambda i, a, o: [np.greater(i[0], i[1])],
    "Not": lambda i, a, o: [np.logical_not(i[0])],
    "Where": lambda i, a, o: [np.where(i[0], i[1], i[2])],
    "ConstantOfShape": _constant_of_shape,
    "Range": _range,
    "Expand": lambda i, a, o: [np.broadcast_to(
        i[0], np.broadcast_shapes(np.shape(i[0]), tuple(_ints(i[1])))).copy()],
    "Transpose": lambda i, a, o: [np.transpose(i[0], _ints(a["perm"]) if "perm" in a
                                               else None)],
    "Size": lambda i, a, o: [np.array(np.size(i[0]), dtype=np.int64)],
}


def constant_value(attrs: dict) -> np.ndarray:
    """The value of a ``Constant`` node from whichever of its attributes it has: ``value``
    (a tensor), ``sparse_value``, ``value_float(s)``, ``value_int(s)``; strings are not
    tensors here and are refused."""
    from onnx import numpy_helper

    if "value" in attrs:
        return numpy_helper.to_array(attrs["value"])
    if "sparse_value" in attrs:
        sp = attrs["sparse_value"]
        values = numpy_helper.to_array(sp.values)
        dense = np.zeros(tuple(sp.dims), dtype=values.dtype)
        idx = numpy_helper.to_array(sp.indices).astype(np.int64)
        if idx.ndim == 2:  # [nnz, rank] coordinates
            dense[tuple(idx.T)] = values
        else:  # flat positions
            dense.reshape(-1)[idx] = values
        return dense
    for key, dtype in (("value_float", np.float32), ("value_int", np.int64)):
        if key in attrs:
            return np.array(attrs[key], dtype=dtype)
    for key, dtype in (("value_floats", np.float32), ("value_ints", np.int64)):
        if key in attrs:
            return np.array(list(attrs[key]), dtype=dtype)
    from .onnx_model import OnnxImportError

    if "value_string" in attrs or "value_strings" in attrs:
        raise OnnxImportError("string constants are not supported (tensors of numbers only)")
    raise OnnxImportError(f"Constant without a value attribute (has: {sorted(attrs)})")
