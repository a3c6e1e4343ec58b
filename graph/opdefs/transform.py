"""Layout operators: ``reshape``, ``nn.batch_flatten``, ``squeeze``, ``expand_dims``,
``transpose``, ``concatenate``, ``strided_slice``, ``reverse``, ``broadcast_to``, ``tile``,
``nn.depth_to_space``, ``nn.space_to_depth``, ``nn.pad``, ``nn.border_pad``, and the
reduction ``mean``. Importing it also registers the indexing operators of :mod:`.index`."""

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


def concatenate(data, axis: int = 0) -> Node:
    """Join a list of tensors along ``axis``. Pieces empty along ``axis`` (an empty split
    piece, as function bodies write) add nothing and are left out while one piece is not
    empty; a single piece left is returned itself."""
    data = list(data)
    if data and isinstance(axis, int) and not isinstance(axis, bool) and all(
            d.ndim == data[0].ndim and -d.ndim <= axis < d.ndim for d in data):
        kept = [d for d in data if d.shape[axis] != 0]
        if kept and len(kept) < len(data):
            if len(kept) == 1:
                return kept[0]
            data = kept
    return Call("concatenate", data, {"axis": axis})


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


def _lowered(fn):
    """A te lowering whose ops-layer errors become GraphErrors."""
    def lower(a, attrs):
        with as_graph_error():
            return fn(a, attrs)
    return lower


def _axes_normalize(attrs):
    axes = attrs["axis"]
    return {"axis": tuple([axes] if isinstance(axes, int) else (int(a) for a in axes))}


def _reverse_infer(types, attrs):
    data = types[0]
    for a in attrs["axis"]:
        axis_index("reverse", a, data.ndim)
    return data


register_op(OpDef(
    name="reverse", num_inputs=1, infer=_reverse_infer,
    lower=_lowered(lambda a, attrs: ops.transform.reverse(a[0], attrs["axis"])),
    ref=lambda a, attrs: np.ascontiguousarray(np.flip(a[0], attrs["axis"])),
    pattern=OpPattern.INJECTIVE, defaults={"axis": ()}, normalize=_axes_normalize,
))


def reverse(data: Node, axis) -> Call:
    """``data`` read backwards along ``axis`` (an int or ints), as numpy's ``flip``."""
    return Call("reverse", [data], {"axis": axis})


def _broadcast_to_infer(types, attrs):
    from .common import broadcast_shapes

    data, shape = types[0], attrs["shape"]
    if broadcast_shapes("broadcast_to", data.shape, shape) != shape:
        fail("broadcast_to", f"data {list(data.shape)} does not broadcast to {list(shape)}")
    return TensorType(shape, data.dtype)


register_op(OpDef(
    name="broadcast_to", num_inputs=1, infer=_broadcast_to_infer,
    lower=_lowered(lambda a, attrs: ops.transform.broadcast_to(a[0], attrs["shape"])),
    ref=lambda a, attrs: np.ascontiguousarray(np.broadcast_to(a[0], attrs["shape"])),
    pattern=OpPattern.BROADCAST, defaults={"shape": ()},
    normalize=lambda attrs: {"shape": tuple(int(s) for s in attrs["shape"])},
))


def broadcast_to(data: Node, shape) -> Call:
    """``data`` stretched to ``shape`` by numpy's broadcasting rules."""
    return Call("broadcast_to", [data], {"shape": shape})


def _tile_infer(types, attrs):
    data, reps = types[0], attrs["reps"]
    if len(reps) != data.ndim or any(r < 1 for r in reps):
        fail("tile", f"reps must be {data.ndim} positive ints (one per dimension), got "
                     f"{list(reps)}")
    return TensorType(tuple(s * r for s, r in zip(data.shape, reps)), data.dtype)


register_op(OpDef(
    name="tile", num_inputs=1, infer=_tile_infer,
    lower=_lowered(lambda a, attrs: ops.transform.tile(a[0], attrs["reps"])),
    ref=lambda a, attrs: np.tile(a[0], attrs["reps"]),
    pattern=OpPattern.INJECTIVE, defaults={"reps": ()},
    normalize=lambda attrs: {"reps": tuple(int(r) for r in attrs["reps"])},
))


def tile(data: Node, reps) -> Call:
    """``data`` repeated ``reps[d]`` times along each dimension ``d``."""
    return Call("tile", [data], {"reps": reps})


def _block_infer(op, types, attrs):
    data, block = types[0], attrs["block_size"]
    if data.ndim != 4:
        fail(op, f"data must be 4-D [N, C, H, W], got {data}")
    if isinstance(block, bool) or not isinstance(block, int) or block < 1:
        fail(op, f"block_size must be a positive int, got {block!r}")
    n, c, h, w = data.shape
    if attrs["mode"] not in ("DCR", "CRD"):
        fail(op, f"mode must be 'DCR' or 'CRD', got {attrs['mode']!r}")
    if op == "nn.space_to_depth":
        if h % block or w % block:
            fail(op, f"the spatial size {h}x{w} does not split into blocks of "
                     f"{block}x{block}")
        return TensorType((n, c * block * block, h // block, w // block), data.dtype)
    if c % (block * block):
        fail(op, f"{c} channels do not split into blocks of {block}x{block}")
    return TensorType((n, c // (block * block), h * block, w * block), data.dtype)


def _depth_to_space_ref(a, attrs):
    x, b = a[0], attrs["block_size"]
    n, c, h, w = x.shape
    if attrs["mode"] == "DCR":
        y = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    else:
        y = x.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    return np.ascontiguousarray(y.reshape(n, c // (b * b), h * b, w * b))


def _space_to_depth_ref(a, attrs):
    x, b = a[0], attrs["block_size"]
    n, c, h, w = x.shape
    y = x.reshape(n, c, h // b, b, w // b, b)
    y = y.transpose((0, 3, 5, 1, 2, 4) if attrs["mode"] == "DCR" else (0, 1, 3, 5, 2, 4))
    return np.ascontiguousarray(y.reshape(n, c * b * b, h // b, w // b))


register_op(OpDef(
    name="nn.depth_to_space", num_inputs=1,
    infer=lambda types, attrs: _block_infer("nn.depth_to_space", types, attrs),
    lower=_lowered(lambda a, attrs: ops.transform.depth_to_space(a[0], attrs["block_size"],
                                                                 attrs["mode"])),
    ref=_depth_to_space_ref, pattern=OpPattern.INJECTIVE,
    defaults={"block_size": None, "mode": "DCR"},
))


def depth_to_space(data: Node, block_size: int, mode: str = "DCR") -> Call:
    """``[N, C, H, W]`` to ``[N, C / b^2, H * b, W * b]`` (ONNX ``DepthToSpace``)."""
    return Call("nn.depth_to_space", [data], {"block_size": block_size, "mode": mode})


register_op(OpDef(
    name="nn.space_to_depth", num_inputs=1,
    infer=lambda types, attrs: _block_infer("nn.space_to_depth", types, attrs),
    lower=_lowered(lambda a, attrs: ops.transform.space_to_depth(a[0], attrs["block_size"],
                                                                 attrs["mode"])),
    ref=_space_to_depth_ref, pattern=OpPattern.INJECTIVE,
    defaults={"block_size": None, "mode": "DCR"},
))


def space_to_depth(data: Node, block_size: int, mode: str = "DCR") -> Call:
    """``[N, C, H, W]`` to ``[N, C * b^2, H / b, W / b]`` (ONNX ``SpaceToDepth``), the
    inverse of :func:`depth_to_space` in the same ``mode``."""
    return Call("nn.space_to_depth", [data], {"block_size": block_size, "mode": mode})


def _border_pad_infer(types, attrs):
    from ...ops.transform import BORDER_PAD_MODES

    data = types[0]
    width = attrs["pad_width"]
    if attrs["mode"] not in BORDER_PAD_MODES:
        fail("nn.border_pad", f"mode must be one of {list(BORDER_PAD_MODES)}, got "
                              f"{attrs['mode']!r}")
    if len(width) != data.ndim:
        fail("nn.border_pad", f"pad_width has {len(width)} pairs but data has {data.ndim} "
                              "dimensions")
    if attrs["mode"] != "edge" and any(
            (b or a) and s == 0 for s, (b, a) in zip(data.shape, width)):
        fail("nn.border_pad", "cannot pad an empty dimension")
    return TensorType(tuple(s + b + a for s, (b, a) in zip(data.shape, width)), data.dtype)


def _border_pad_normalize(attrs):
    out = _pad_normalize({"pad_width": attrs["pad_width"], "pad_value": 0.0})
    return {"pad_width": out["pad_width"], "mode": attrs["mode"]}


register_op(OpDef(
    name="nn.border_pad", num_inputs=1, infer=_border_pad_infer,
    lower=_lowered(lambda a, attrs: ops.transform.border_pad(
        a[0], [b for b, _ in attrs["pad_width"]], [x for _, x in attrs["pad_width"]],
        attrs["mode"])),
    ref=lambda a, attrs: np.pad(a[0], attrs["pad_width"], mode=attrs["mode"]),
    pattern=OpPattern.INJECTIVE, defaults={"pad_width": None, "mode": "reflect"},
    normalize=_border_pad_normalize,
))


def border_pad(data: Node, pad_width, mode: str = "reflect") -> Call:
    """Padding with the data's own elements: ``mode`` is ``reflect`` (mirror about the edge
    element), ``edge`` (repeat it) or ``wrap`` (continue from the other side), as numpy's
    ``pad``; ``pad_width`` is one (before, after) pair per dimension."""
    return Call("nn.border_pad", [data], {"pad_width": pad_width, "mode": mode})


# the indexing operators register with the layout ones: importing the operator package
# imports this module
from . import index as _index  # noqa: E402,F401
