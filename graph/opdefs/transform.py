"""Layout operators: ``reshape``, ``nn.batch_flatten``, ``squeeze``, ``expand_dims``,
``transpose``, ``concatenate``, ``strided_slice``, ``nn.pad``, and the reduction
``mean``."""

from __future__ import annotations

import numpy as np

from ... import ops
from ..ir import Call, Node, TensorType
from ..op import OpDef, OpPattern, register_op
from .common import as_graph_error, axis_index, fail

VIEW_OPS = frozenset({"reshape", "nn.batch_flatten", "squeeze", "expand_dims"})
"""Operators that only reinterpret the shape: compiled networks run them as aliases of
their input's memory, with no kernel."""


def resolve_shape(op: str, in_shape: tuple, newshape) -> tuple:
    """``newshape`` with 0 (copy the input's dimension) and one -1 (inferred) resolved."""
    try:
        spec = [int(s) for s in newshape]
    except (TypeError, ValueError):
        fail(op, f"newshape must be a list of ints, got {newshape!r}")
    out = []
    for k, s in enumerate(spec):
        if s == 0:
            if k >= len(in_shape):
                fail(op, f"newshape {spec} copies dimension {k} (0) that the input "
                         f"{list(in_shape)} does not have")
            out.append(in_shape[k])
        elif s < -1:
            fail(op, f"newshape {spec} has a negative size other than -1")
        else:
            out.append(s)
    total = int(np.prod(in_shape, dtype=np.int64))
    if out.count(-1) > 1:
        fail(op, f"newshape {spec} has more than one -1")
    known = int(np.prod([s for s in out if s != -1], dtype=np.int64))
    if -1 in out:
        if known == 0 or total % known:
            fail(op, f"cannot infer the -1 in {spec} for an input of shape {list(in_shape)}")
        out[out.index(-1)] = total // known
    elif known != total:
        fail(op, f"cannot reshape {list(in_shape)} ({total} elements) into {out} "
                 f"({known} elements)")
    return tuple(out)


def _reshape_infer(types, attrs):
    return TensorType(resolve_shape("reshape", types[0].shape, attrs["newshape"]),
                      types[0].dtype)


register_op(OpDef(
    name="reshape", num_inputs=1, infer=_reshape_infer,
    lower=lambda a, attrs: ops.reshape(a[0], resolve_shape("reshape", a[0].shape,
                                                           attrs["newshape"])),
    ref=lambda a, attrs: a[0].reshape(resolve_shape("reshape", a[0].shape, attrs["newshape"])),
    pattern=OpPattern.INJECTIVE, defaults={"newshape": None},
    normalize=lambda attrs: {"newshape": tuple(int(s) for s in attrs["newshape"])},
))


def reshape(data: Node, newshape) -> Call:
    """``data`` with a new shape; 0 copies the input's dimension, one -1 is inferred."""
    return Call("reshape", [data], {"newshape": newshape})


def _flatten_infer(types, attrs):
    (data,) = types
    if data.ndim < 1:
        fail("nn.batch_flatten", "data must have at least one dimension")
    return TensorType((data.shape[0], int(np.prod(data.shape[1:], dtype=np.int64))),
                      data.dtype)


register_op(OpDef(
    name="nn.batch_flatten", num_inputs=1, infer=_flatten_infer,
    lower=lambda a, attrs: ops.nn.flatten(a[0]),
    ref=lambda a, attrs: a[0].reshape(a[0].shape[0], -1), pattern=OpPattern.INJECTIVE,
))


def batch_flatten(data: Node) -> Call:
    """``[N, d1, d2, ...]`` to ``[N, d1*d2*...]``."""
    return Call("nn.batch_flatten", [data])


def _squeeze_axes(op, shape, axis):
    if axis is None:
        return [d for d, s in enumerate(shape) if s == 1]
    axes = sorted({axis_index(op, a, len(shape)) for a in axis})
    for d in axes:
        if shape[d] != 1:
            fail(op, f"axis {d} has size {shape[d]}, not 1")
    return axes


def _squeeze_infer(types, attrs):
    shape = types[0].shape
    drop = _squeeze_axes("squeeze", shape, attrs["axis"])
    return TensorType(tuple(s for d, s in enumerate(shape) if d not in drop), types[0].dtype)


register_op(OpDef(
    name="squeeze", num_inputs=1, infer=_squeeze_infer,
    lower=lambda a, attrs: ops.squeeze(a[0], None if attrs["axis"] is None
                                       else list(attrs["axis"])),
    ref=lambda a, attrs: a[0].reshape(_squeeze_infer(
        [TensorType(a[0].shape, "float32")], attrs).shape),
    pattern=OpPattern.INJECTIVE, defaults={"axis": None},
    normalize=lambda attrs: {"axis": None if attrs["axis"] is None else tuple(
        [attrs["axis"]] if isinstance(attrs["axis"], int) else attrs["axis"])},
))


def squeeze(data: Node, axis=None) -> Call:
    """Drop dimensions of size 1 (those in ``axis``, or all)."""
    return Call("squeeze", [data], {"axis": axis})


def _expand_infer(types, attrs):
    shape = types[0].shape
    n = len(shape)
    axis, num = attrs["axis"], attrs["num_newaxis"]
    if not -n - 1 <= axis <= n:
        fail("expand_dims", f"axis must be in [{-n - 1}, {n}], got {axis}")
    if num < 0:
        fail("expand_dims", f"num_newaxis must be >= 0, got {num}")
    axis %= n + 1
    return TensorType(shape[:axis] + (1,) * num + shape[axis:], types[0].dtype)


register_op(OpDef(
    name="expand_dims", num_inputs=1, infer=_expand_infer,
    lower=lambda a, attrs: ops.expand_dims(a[0], attrs["axis"], attrs["num_newaxis"]),
    ref=lambda a, attrs: a[0].reshape(_expand_infer(
        [TensorType(a[0].shape, "float32")], attrs).shape),
    pattern=OpPattern.INJECTIVE, defaults={"axis": 0, "num_newaxis": 1},
))


def expand_dims(data: Node, axis: int, num_newaxis: int = 1) -> Call:
    """Insert ``num_newaxis`` dimensions of size 1 at ``axis``."""
    return Call("expand_dims", [data], {"axis": axis, "num_newaxis": num_newaxis})


def _transpose_axes(ndim, axes):
    if axes is None:
        return tuple(reversed(range(ndim)))
    axes = tuple(axis_index("transpose", a, ndim) for a in axes)
    if sorted(axes) != list(range(ndim)):
        fail("transpose", f"axes {list(axes)} are not a permutation of {list(range(ndim))}")
    return axes


def _transpose_infer(types, attrs):
    shape = types[0].shape
    axes = _transpose_axes(len(shape), attrs["axes"])
    return TensorType(tuple(shape[a] for a in axes), types[0].dtype)


register_op(OpDef(
    name="transpose", num_inputs=1, infer=_transpose_infer,
    lower=lambda a, attrs: ops.transpose(a[0], list(_transpose_axes(a[0].ndim, attrs["axes"]))),
    ref=lambda a, attrs: np.ascontiguousarray(
        a[0].transpose(_transpose_axes(a[0].ndim, attrs["axes"]))),
    pattern=OpPattern.INJECTIVE, defaults={"axes": None},
    normalize=lambda attrs: {"axes": None if attrs["axes"] is None else tuple(
        int(a) for a in attrs["axes"])},
))


def transpose(data: Node, axes=None) -> Call:
    """Permute dimensions: output dimension ``k`` is input dimension ``axes[k]``."""
    return Call("transpose", [data], {"axes": axes})


def _concat_infer(types, attrs):
    op = "concatenate"
    first = types[0]
    if first.ndim == 0:
        fail(op, "cannot concatenate 0-D tensors")
    axis = axis_index(op, attrs["axis"], first.ndim)
    total = 0
    for k, t in enumerate(types):
        if t.ndim != first.ndim or t.dtype != first.dtype:
            fail(op, f"input {k} is {t} but input 0 is {first}")
        for d in range(first.ndim):
            if d != axis and t.shape[d] != first.shape[d]:
                fail(op, f"input {k} has shape {list(t.shape)} but input 0 has "
                         f"{list(first.shape)}; they may differ only along axis {axis}")
        total += t.shape[axis]
    shape = list(first.shape)
    shape[axis] = total
    return TensorType(tuple(shape), first.dtype)


register_op(OpDef(
    name="concatenate", num_inputs=None, infer=_concat_infer,
    lower=lambda a, attrs: ops.concatenate(list(a), attrs["axis"]),
    ref=lambda a, attrs: np.concatenate(a, axis=attrs["axis"]),
    pattern=OpPattern.INJECTIVE, defaults={"axis": 0},
))


def concatenate(data, axis: int = 0) -> Call:
    """Join a list of tensors along ``axis``."""
    return Call("concatenate", list(data), {"axis": axis})


def _slice_ranges(types, attrs):
    from ...ops.transform import slice_ranges

    with as_graph_error():
        return slice_ranges("strided_slice", types[0].shape, attrs["begin"], attrs["end"],
                            attrs["strides"], attrs["axes"])


def _slice_infer(types, attrs):
    return TensorType(tuple(c for _, _, c in _slice_ranges(types, attrs)), types[0].dtype)


def _slice_ref(a, attrs):
    ranges = _slice_ranges([TensorType(a[0].shape, "float32")], attrs)
    return np.ascontiguousarray(a[0][tuple(slice(b, b + st * (c - 1) + 1, st)
                                           for b, st, c in ranges)])


def _slice_normalize(attrs):
    def ints(v):
        return None if v is None else tuple(int(x) for x in v)

    return {k: ints(attrs[k]) for k in ("begin", "end", "strides", "axes")}


register_op(OpDef(
    name="strided_slice", num_inputs=1, infer=_slice_infer,
    lower=lambda a, attrs: ops.strided_slice(a[0], attrs["begin"], attrs["end"],
                                             attrs["strides"], attrs["axes"]),
    ref=_slice_ref, pattern=OpPattern.INJECTIVE,
    defaults={"begin": None, "end": None, "strides": None, "axes": None},
    normalize=_slice_normalize,
))


def strided_slice(data: Node, begin, end, strides=None, axes=None) -> Call:
    """``data[begin:end:strides]`` along ``axes`` (default: the leading dimensions), as
    Relay's ``strided_slice``: negative bounds count from the end, strides are positive."""
    return Call("strided_slice", [data], {"begin": begin, "end": end, "strides": strides,
                                          "axes": axes})


def _pad_normalize(attrs):
    try:
        width = tuple((int(b), int(a)) for b, a in attrs["pad_width"])
    except (TypeError, ValueError):
        fail("nn.pad", f"pad_width must be a list of (before, after) pairs, got "
                       f"{attrs['pad_width']!r}")
    if any(b < 0 or a < 0 for b, a in width):
        fail("nn.pad", f"pad_width entries must be non-negative, got {list(width)}")
    value = attrs["pad_value"]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        fail("nn.pad", f"pad_value must be a number, got {value!r}")
    return {"pad_width": width, "pad_value": float(value)}


def _pad_infer(types, attrs):
    data = types[0]
    width = attrs["pad_width"]
    if len(width) != data.ndim:
        fail("nn.pad", f"pad_width has {len(width)} pairs but data has {data.ndim} dimensions")
    return TensorType(tuple(s + b + a for s, (b, a) in zip(data.shape, width)), data.dtype)


register_op(OpDef(
    name="nn.pad", num_inputs=1, infer=_pad_infer,
    lower=lambda a, attrs: ops.nn.pad(a[0], [b for b, _ in attrs["pad_width"]],
                                      [x for _, x in attrs["pad_width"]], attrs["pad_value"]),
    ref=lambda a, attrs: np.pad(a[0], attrs["pad_width"], constant_values=attrs["pad_value"]),
    pattern=OpPattern.INJECTIVE, defaults={"pad_width": None, "pad_value": 0.0},
    normalize=_pad_normalize,
))


def pad(data: Node, pad_width, pad_value: float = 0.0) -> Call:
    """Constant padding: ``pad_width`` is one (before, after) pair per dimension."""
    return Call("nn.pad", [data], {"pad_width": pad_width, "pad_value": pad_value})


def _mean_axes(ndim, axis):
    if axis is None:
        return tuple(range(ndim))
    return tuple(sorted({axis_index("mean", a, ndim) for a in axis}))


def _mean_infer(types, attrs):
    data = types[0]
    axes = _mean_axes(data.ndim, attrs["axis"])
    if attrs["keepdims"]:
        shape = tuple(1 if d in axes else s for d, s in enumerate(data.shape))
    else:
        shape = tuple(s for d, s in enumerate(data.shape) if d not in axes)
    return TensorType(shape, data.dtype)


register_op(OpDef(
    name="mean", num_inputs=1, infer=_mean_infer,
    lower=lambda a, attrs: ops.mean(a[0], list(_mean_axes(a[0].ndim, attrs["axis"])),
                                    attrs["keepdims"]),
    ref=lambda a, attrs: a[0].mean(axis=_mean_axes(a[0].ndim, attrs["axis"]),
                                   keepdims=attrs["keepdims"], dtype=a[0].dtype),
    pattern=OpPattern.COMM_REDUCE, defaults={"axis": None, "keepdims": False},
    normalize=lambda attrs: {"axis": None if attrs["axis"] is None else tuple(
        [attrs["axis"]] if isinstance(attrs["axis"], int) else attrs["axis"]),
        "keepdims": bool(attrs["keepdims"])},
))


def mean(data: Node, axis=None, keepdims: bool = False) -> Call:
    """Arithmetic mean over ``axis`` (an int, ints, or None for all)."""
    return Call("mean", [data], {"axis": axis, "keepdims": keepdims})
